"""Zero waste, counted from the registries' own access logs: in one run no registry is asked the same thing
twice (cold or no-op, with platforms, images and targets sharing blobs), and a no-op re-run sends the source no
GET at all, signatures and attestations included."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mirror.cli import main
from mirror.demo.localregistry import AccessEntry, LocalRegistry, start_registry
from mirror.demo.sample import MiB, SampleImage, push_multiarch
from mirror.engine.statecache import MAX_TAGS_KEPT, NOTES_TTL, LastDigests, ManifestCache, RegistryNotes
from mirror.oci import Manifest
from tests.faultproxy import Fault, fault_proxy
from tests.support import blob_exists, manifest_bytes, requests_since, with_client, write_config
from tests.test_referrers import signed_release
from tests.test_sync import SHARED, VERSION, assert_byte_exact, seed_release

TAGS = ("/v2/mirrored/hami/manifests/v2.10.0", "/v2/mirrored/kube-webhook-certgen/manifests/v1.1.1")


def asked_twice(entries: list[AccessEntry], tags_pushed: bool = False) -> dict[str, int]:
    """Reads repeated in one run: a manifest or blob GET or HEAD by the same path (a 401 is a challenge, not an
    answer). A tag pushed by the run is asked twice: before the push (404) and after it (the verification)."""
    reads = Counter(
        f"{e.method} {e.path}" for e in entries if e.method in ("GET", "HEAD") and e.status != 401 and e.path != "/v2/"
    )
    allowed = {f"HEAD {tag}": 2 for tag in TAGS} if tags_pushed else {}
    return {request: n for request, n in reads.items() if n > allowed.get(request, 1)}


def seed_two_releases(source: LocalRegistry) -> tuple[SampleImage, SampleImage]:
    """The release's images, and hami's index tagged v2.9.0 too: two releases of one run that share certgen."""
    images = seed_release(source)
    index = Manifest.parse(manifest_bytes(source, "projecthami/hami", VERSION))
    with_client(source, lambda c: c.put_manifest("projecthami/hami", "v2.9.0", index))
    return images


def actions_by_release(capsys: pytest.CaptureFixture[str]) -> list[dict[str, str]]:
    """Per release of a `--json` run's report, each image's action at its (one) target."""
    return [
        {i["name"]: i["targets"][0]["action"] for i in release["images"] if i["targets"]}
        for release in json.loads(capsys.readouterr().out)
    ]


@pytest.fixture
def regions(tmp_path: Path) -> Iterator[list[LocalRegistry]]:
    started = [start_registry(tmp_path / f"region{i}") for i in range(2)]
    yield started
    for registry in started:
        registry.stop()


def test_one_run_asks_no_registry_the_same_thing_twice_and_a_no_op_sends_the_source_no_get(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, regions: list[LocalRegistry]
) -> None:
    signed_release(source)  # two images sharing a layer; hami signed, with .sig/.att/.sbom and a fallback index
    registries = [source, target, *regions]
    config = write_config(tmp_path / "mirror.yaml", source, [target, *regions])

    marks = [len(r.access_log()) for r in registries]
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    for registry, mark in zip(registries, marks, strict=True):
        cold = requests_since(registry, mark)
        assert cold, registry.host
        assert asked_twice(cold, tags_pushed=registry is not source) == {}, registry.host

    marks = [len(r.access_log()) for r in registries]
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    for registry, mark in zip(registries, marks, strict=True):
        assert asked_twice(requests_since(registry, mark)) == {}, registry.host
    at_source = requests_since(source, marks[0])
    assert [f"{e.method} {e.path}" for e in at_source if e.method != "HEAD"] == []


def test_a_copy_damaged_at_the_target_is_found_from_known_manifests_and_repaired(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    hami, _ = seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    assert any((tmp_path / "state" / "manifests" / "sha256").iterdir())  # the manifests kept by digest
    children = [m["digest"] for m in json.loads(hami.manifests[hami.digest])["manifests"]]
    lost_child = children[0]
    lost_blob = next(b["digest"] for b in json.loads(hami.manifests[children[1]])["layers"])
    with httpx.Client(base_url=f"http://{target.host}") as http:
        assert http.delete(f"/v2/mirrored/hami/manifests/{lost_child}").status_code == 202
        assert http.delete(f"/v2/mirrored/hami/blobs/{lost_blob}").status_code == 202
    mark = len(target.access_log())

    assert main(["sync", VERSION, "--config", str(config)]) == 0

    # the known child was asked with a HEAD (not read again) and found missing, as was the blob; both repaired
    asked = [f"{e.method} {e.path}" for e in requests_since(target, mark)]
    assert f"HEAD /v2/mirrored/hami/manifests/{lost_child}" in asked
    assert f"GET /v2/mirrored/hami/manifests/{lost_child}" not in asked
    assert f"HEAD /v2/mirrored/hami/blobs/{lost_blob}" in asked
    assert_byte_exact(source, target, hami, "mirrored/hami")


def test_a_blob_lost_under_a_present_manifest_is_copied_again_and_the_repair_verified_in_full(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every manifest still there, one layer gone: the re-copy plans the blobs of every image, not only of the
    missing manifests (none), and its verification reads the whole tree again, not only the tag. It said
    "copied, verified" with the blob still missing, run after run, and nodes could not pull."""
    hami, _ = seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    child = json.loads(hami.manifests[hami.digest])["manifests"][0]["digest"]
    lost = json.loads(hami.manifests[child])["layers"][-1]["digest"]
    with httpx.Client(base_url=f"http://{target.host}") as http:
        assert http.delete(f"/v2/mirrored/hami/blobs/{lost}").status_code == 202
    assert not blob_exists(target, "mirrored/hami", lost)
    capsys.readouterr()

    mark = len(target.access_log())
    assert main(["sync", VERSION, "--config", str(config), "--json"]) == 0
    (image,) = [i for i in json.loads(capsys.readouterr().out)["images"] if i["name"] == "hami"]
    assert image["targets"][0]["action"] == "copied" and image["targets"][0]["blobs"]["uploaded"] >= 1
    assert blob_exists(target, "mirrored/hami", lost)
    assert_byte_exact(source, target, hami, "mirrored/hami")
    heads = [e.path for e in requests_since(target, mark) if e.method == "HEAD" and e.path.endswith(lost)]
    assert len(heads) >= 2  # found missing, then found again by the verification after the repair

    assert main(["sync", VERSION, "--config", str(config), "--json"]) == 0
    (image,) = [i for i in json.loads(capsys.readouterr().out)["images"] if i["name"] == "hami"]
    assert image["targets"][0]["action"] == "up-to-date"


def test_a_kept_manifest_that_does_not_hash_to_its_name_is_not_used(tmp_path: Path) -> None:
    raw = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}'
    manifest = Manifest.parse(raw)
    ManifestCache(tmp_path).put(manifest)
    assert ManifestCache(tmp_path).get(manifest.digest) == manifest
    kept = tmp_path / "manifests" / "sha256" / manifest.digest.removeprefix("sha256:")
    kept.write_bytes(kept.read_bytes().replace(b"[]", b"[ ]"))
    assert ManifestCache(tmp_path).get(manifest.digest) is None
    assert ManifestCache(None).get(manifest.digest) is None


def test_a_temporary_a_killed_write_left_in_the_state_is_cleared_by_a_later_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`.tmp-*` files a SIGKILL left among the kept manifests are removed by a later run's first write there,
    once untouched for LEFTOVER_SECONDS; files of other names stay."""
    from mirror import leftovers
    from mirror.engine import statecache

    kept = tmp_path / "manifests" / "sha256"
    kept.mkdir(parents=True)
    (kept / ".tmp-abcd1234").write_bytes(b"cut short")
    (kept / "README").write_text("not ours")
    monkeypatch.setattr(statecache, "_SWEPT", {})  # a new process
    monkeypatch.setattr(leftovers, "LEFTOVER_SECONDS", 0.0)
    ManifestCache(tmp_path).put(Manifest.parse(b'{"schemaVersion":2,"manifests":[]}'))
    assert sorted(p.name for p in kept.iterdir() if not p.name.isalnum()) == []
    assert (kept / "README").exists()


def test_a_long_running_service_sweeps_the_state_again_once_an_hour(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mirror serve` is one process for months: a leftover too young at its first write after a restart (within
    the hour, as a rule) is removed by a write an hour later, not never."""
    import time as real_time
    from types import SimpleNamespace

    from mirror import leftovers
    from mirror.engine import statecache

    clock = SimpleNamespace(now=1000.0)
    fake_time = SimpleNamespace(time=real_time.time, monotonic=lambda: clock.now)
    monkeypatch.setattr(statecache, "time", fake_time)
    monkeypatch.setattr(statecache, "_SWEPT", {})
    kept = tmp_path / "manifests" / "sha256"
    kept.mkdir(parents=True)
    (kept / ".tmp-abcd1234").write_bytes(b"cut short")
    cache = ManifestCache(tmp_path)

    def kept_a_manifest(n: int) -> bool:
        cache.put(Manifest.parse(b'{"schemaVersion":2,"manifests":[],"annotations":{"n":"%d"}}' % n))
        return (kept / ".tmp-abcd1234").exists()

    assert kept_a_manifest(1)  # swept, and too young to go
    monkeypatch.setattr(leftovers, "LEFTOVER_SECONDS", 0.0)  # it has aged
    clock.now += 60
    assert kept_a_manifest(2)  # not swept again within the hour
    clock.now += 3600
    assert not kept_a_manifest(3)


def test_a_registry_without_the_referrers_api_is_asked_again_after_a_day(tmp_path: Path) -> None:
    now = 1_800_000_000.0
    notes = RegistryNotes(tmp_path, clock=now)
    notes.note_referrers_api("registry-1.docker.io", answered=False)
    notes.save()
    assert RegistryNotes(tmp_path, clock=now + NOTES_TTL - 60).lacks_referrers_api("registry-1.docker.io")
    assert not RegistryNotes(tmp_path, clock=now + NOTES_TTL + 60).lacks_referrers_api("registry-1.docker.io")
    assert not RegistryNotes(tmp_path, clock=now).lacks_referrers_api("quay.io")
    later = RegistryNotes(tmp_path, clock=now + 60)
    later.note_referrers_api("registry-1.docker.io", answered=True)  # it has the API now
    later.save()
    assert not RegistryNotes(tmp_path, clock=now + 120).lacks_referrers_api("registry-1.docker.io")
    (tmp_path / "registries.json").write_text("[not notes")
    assert not RegistryNotes(tmp_path, clock=now).lacks_referrers_api("registry-1.docker.io")


def test_a_no_op_asks_the_target_for_the_whole_tree_while_the_source_tag_is_still_unanswered(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """The tag's digest from the last run names a tree kept by digest: every child manifest and blob the target
    holds is asked in the same wave as the tag itself, not once the source has answered."""
    hami, _ = seed_release(source)
    with fault_proxy(source.port) as proxy:
        config = write_config(tmp_path / "mirror.yaml", proxy, [target])
        assert main(["sync", VERSION, "--config", str(config)]) == 0
        held = [f"/v2/mirrored/hami/blobs/{d}" for d in hami.blobs if blob_exists(target, "mirrored/hami", d)]
        held += [f"/v2/mirrored/hami/manifests/{d}" for d in hami.manifests if d != hami.digest]
        assert len(held) > 4
        mark = len(target.access_log())

        def target_asked_for_all() -> bool:
            asked = {e.path for e in requests_since(target, mark) if e.method == "HEAD"}
            return asked.issuperset(held)

        hold = Fault(
            "stall", "HEAD", rf"/projecthami/hami/manifests/{VERSION}$", seconds=60, until=target_asked_for_all
        )
        proxy.add(hold)
        assert main(["sync", VERSION, "--config", str(config)]) == 0
    assert hold.applied == 1 and hold.released == 1  # let go by the target's log, not by the clock
    assert asked_twice(requests_since(target, mark)) == {}


def test_last_digests_are_kept_across_runs_newest_last_and_bounded(tmp_path: Path) -> None:
    digests = LastDigests(tmp_path)
    digests.put("registry-1.docker.io", "projecthami/hami", "v2.10.0", "sha256:" + "a" * 64)
    digests.save()
    assert LastDigests(tmp_path).get("registry-1.docker.io", "projecthami/hami", "v2.10.0") == "sha256:" + "a" * 64
    assert LastDigests(tmp_path).get("registry-1.docker.io", "projecthami/hami", "v2.9.0") is None
    assert LastDigests(None).get("registry-1.docker.io", "projecthami/hami", "v2.10.0") is None
    many = LastDigests(tmp_path)
    for n in range(MAX_TAGS_KEPT + 10):
        many.put("quay.io", "org/app", f"v{n}", f"sha256:{n:064x}")
    many.save()
    kept = LastDigests(tmp_path)
    assert kept.get("registry-1.docker.io", "projecthami/hami", "v2.10.0") is None  # the oldest went first
    assert kept.get("quay.io", "org/app", "v9") is None and kept.get("quay.io", "org/app", "v10") is not None
    assert kept.get("quay.io", "org/app", f"v{MAX_TAGS_KEPT + 9}") == f"sha256:{MAX_TAGS_KEPT + 9:064x}"
    (tmp_path / "tags.json").write_text("[not tags")
    assert LastDigests(tmp_path).get("quay.io", "org/app", "v10") is None


def test_a_tag_moved_since_the_last_run_is_copied_anew_from_its_own_answer_and_remembered(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """The last digest is only a guess: the source's answer decides, the old tree's look-ups cost nothing twice."""
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    moved = with_client(
        source,
        lambda c: push_multiarch(c, "projecthami/hami", VERSION, shared_layers=(SHARED,), layer_sizes=(MiB,), seed=5),
    )
    mark = len(target.access_log())

    assert main(["sync", VERSION, "--config", str(config), "--force"]) == 0
    assert asked_twice(requests_since(target, mark), tags_pushed=True) == {}  # before the checks below ask
    assert_byte_exact(source, target, moved, "mirrored/hami")
    assert LastDigests(tmp_path / "state").get(source.host, "projecthami/hami", VERSION) == moved.digest


def test_releases_of_one_run_sharing_an_image_ask_for_it_once(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two releases in one run (`mirror sync v2.9.0 v2.10.0`, discovery's `newest: 2`) use one certgen tag: the
    source and the target are asked for it once in the run, cold or no-op (the target twice cold: before its push
    and after), and the later release reports it up to date, not copied again."""
    seed_two_releases(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    certgen = "/manifests/v1.1.1"

    for run in ("cold", "no-op"):
        marks = [len(source.access_log()), len(target.access_log())]
        assert main(["sync", "v2.9.0", VERSION, "--config", str(config), "--json"]) == 0
        at_source, at_target = requests_since(source, marks[0]), requests_since(target, marks[1])
        assert asked_twice(at_source) == {}, run
        assert [e.method for e in at_source if e.path.endswith(f"/liangjw/kube-webhook-certgen{certgen}")] == ["HEAD"]
        pushed = {f"HEAD /v2/mirrored/hami/manifests/{v}" for v in ("v2.9.0", VERSION)} | {
            f"HEAD /v2/mirrored/kube-webhook-certgen{certgen}"
        }
        reads = Counter(f"{e.method} {e.path}" for e in at_target if e.method in ("GET", "HEAD") and e.status != 401)
        most = {r: 2 if run == "cold" and r in pushed else 1 for r in reads}
        assert {r: n for r, n in reads.items() if n > most[r] and r != "GET /v2/"} == {}, run
        actions = actions_by_release(capsys)
        copied = "copied" if run == "cold" else "up-to-date"
        assert actions == [
            {"hami": copied, "kube-webhook-certgen": copied},
            {"hami": copied, "kube-webhook-certgen": "up-to-date"},
        ]


def test_a_later_release_tries_again_an_image_whose_copy_failed_in_an_earlier_one(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy that failed for a passing reason (the target answered 500 for the retries' whole budget) is not
    the later release's answer: it copies the image again, where it took the failure as its own."""
    seed_two_releases(source)
    with fault_proxy(target.port) as proxy:
        refused = Fault("status", method="PUT", path=r"/kube-webhook-certgen/manifests/v1\.1\.1", status=500, count=2)
        proxy.add(refused)
        retry = {"attempts": 2, "base_delay": 0.01, "max_delay": 0.01}
        config = write_config(tmp_path / "mirror.yaml", source, [proxy], retry=retry)
        assert main(["sync", "v2.9.0", VERSION, "--config", str(config), "--json"]) == 1

    actions = actions_by_release(capsys)
    assert refused.applied == 2
    assert [a["kube-webhook-certgen"] for a in actions] == ["failed", "copied"]


def test_releases_of_one_run_sharing_a_missing_tag_ask_the_source_about_it_once(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tag the source does not have fails each release that names it, from one HEAD and one look at the
    repository's tag list in the run (the look that tells a misspelt repository from a missing tag)."""
    seed_two_releases(source)
    images = [
        {"name": "hami", "source": "projecthami/hami", "tag": "{version}", "values_keys": ["devicePlugin.image"]},
        {"name": "certgen", "source": "liangjw/kube-webhook-certgen", "tag": "v1.1.9", "values_keys": ["x.image"]},
    ]
    config = write_config(tmp_path / "mirror.yaml", source, [target], images=images)

    mark = len(source.access_log())
    assert main(["sync", "v2.9.0", VERSION, "--config", str(config), "--json"]) == 1
    at_source = requests_since(source, mark)
    assert asked_twice(at_source) == {}
    asked = [f"{e.method} {e.path}" for e in at_source if "kube-webhook-certgen" in e.path and e.status != 401]
    assert sorted(asked) == [
        "GET /v2/liangjw/kube-webhook-certgen/tags/list?n=1",
        "HEAD /v2/liangjw/kube-webhook-certgen/manifests/v1.1.9",
    ]
    reasons = [i.get("error") or "" for r in json.loads(capsys.readouterr().out) for i in r["images"]]
    assert sum("v1.1.9: tag not found at the source" in reason for reason in reasons) == 2


def test_a_later_release_fetches_again_a_blob_whose_transfer_failed_in_an_earlier_one(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's memo of blob transfers kept the failure: the later release failed the image at once, without a
    request, where the source had answered again by then."""
    hami, certgen = seed_two_releases(source)
    own = [digest for digest in certgen.blobs if digest not in hami.blobs]
    with fault_proxy(source.port) as proxy:
        # as many refusals as the first release's attempts (two per step, the step twice)
        refused = Fault("status", method="GET", path=f"/blobs/{own[0]}", status=500, count=4)
        proxy.add(refused)
        retry = {"attempts": 2, "base_delay": 0.01, "max_delay": 0.01}
        config = write_config(tmp_path / "mirror.yaml", proxy, [target], retry=retry)
        assert main(["sync", "v2.9.0", VERSION, "--config", str(config), "--json"]) == 1

    actions = actions_by_release(capsys)
    assert refused.applied == 4 and refused.seen == 5  # the later release asked again, and was answered
    assert [a["kube-webhook-certgen"] for a in actions] == ["failed", "copied"]
    assert blob_exists(target, "mirrored/kube-webhook-certgen", own[0])
