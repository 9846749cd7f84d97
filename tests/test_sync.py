"""`mirror sync` end to end, against real registries started by the fixtures."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.sample import MiB, SampleImage, push_multiarch, push_single
from tests.support import (
    blob_exists,
    cdn_server,
    manifest_bytes,
    manifest_digest,
    requests_since,
    with_client,
    write_config,
    writes,
)

VERSION = "v2.10.0"
SHARED = random.Random(7).randbytes(MiB)  # one layer in every platform of both images


def seed_release(source: LocalRegistry) -> tuple[SampleImage, SampleImage]:
    """hami: an OCI index with attestations; certgen: a Docker manifest list. They share a layer."""
    hami = with_client(
        source,
        lambda c: push_multiarch(c, "projecthami/hami", VERSION, shared_layers=(SHARED,), layer_sizes=(MiB,), seed=1),
    )
    certgen = with_client(
        source,
        lambda c: push_multiarch(
            c, "liangjw/kube-webhook-certgen", "v1.1.1", shared_layers=(SHARED,), docker=True, seed=2
        ),
    )
    return hami, certgen


def assert_byte_exact(source: LocalRegistry, target: LocalRegistry, image: SampleImage, repository: str) -> None:
    assert manifest_digest(target, repository, image.tag) == image.digest
    for digest, raw in image.manifests.items():
        assert manifest_bytes(target, repository, digest) == raw
    for digest in image.blobs:
        assert blob_exists(target, repository, digest), digest


def test_copies_index_with_attestations_and_manifest_list_byte_for_byte(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    hami, certgen = seed_release(source)
    assert len(hami.manifests) == 5  # index + 2 images + 2 attestation manifests
    config = write_config(tmp_path / "mirror.yaml", source, [target])

    assert main(["sync", VERSION, "--config", str(config), "--json"]) == 0

    report = json.loads(capsys.readouterr().out)
    assert report["version"] == VERSION and report["ok"] is True
    assert [(i["name"], i["source_digest"]) for i in report["images"]] == [
        ("hami", hami.digest),
        ("kube-webhook-certgen", certgen.digest),
    ]
    for image in report["images"]:
        (result,) = image["targets"]
        assert result["verified"] is True and result["digest"] == image["source_digest"]
        assert result["reference"].startswith(f"{target.host}/mirrored/")
    assert_byte_exact(source, target, hami, "mirrored/hami")
    assert_byte_exact(source, target, certgen, "mirrored/kube-webhook-certgen")
    assert report["values"] == [
        {
            "target": "t0",
            "chart_name": "hami",
            "chart_version": "2.10.0",
            "path": str(tmp_path / "out" / "t0" / "hami-ack-values.yaml"),
            "helm": f"helm install hami hami-charts/hami -n kube-system --version 2.10.0 -f "
            f"{tmp_path / 'out' / 't0' / 'hami-ack-values.yaml'}",
            "rbac": str(tmp_path / "out" / "t0" / "hami-scheduler-dra-rbac.yaml"),
            "pull_secret": None,  # the test registry lets anyone pull
            "kubectl": None,
            "chart": "hami-charts/hami",  # no chart: configured: the repository name of the guide
        }
    ]
    assert all(t["anonymous_pull"] is True for i in report["images"] for t in i["targets"])
    values = yaml.safe_load((tmp_path / "out" / "t0" / "hami-ack-values.yaml").read_text())
    assert values["scheduler"]["extender"]["image"] == {"registry": target.host, "repository": "mirrored/hami"}
    assert (tmp_path / "out" / "t0" / VERSION / "hami-ack-values.yaml").is_file()


def test_single_platform_manifest(tmp_path: Path, source: LocalRegistry, target: LocalRegistry) -> None:
    image = with_client(source, lambda c: push_single(c, "library/busybox", "1.36", layer_sizes=(MiB, MiB)))
    busybox = {"name": "busybox", "source": "library/busybox", "tag": "1.36"}
    config = write_config(tmp_path / "mirror.yaml", source, [target], images=[busybox])
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    assert_byte_exact(source, target, image, "mirrored/busybox")


def test_shared_blobs_are_uploaded_once_per_target_and_mounted_elsewhere(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    hami, certgen = seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    mark = len(target.access_log())

    assert main(["sync", VERSION, "--config", str(config)]) == 0

    requests = requests_since(target, mark)
    uploads = [r for r in requests if r.method == "PUT" and "/blobs/uploads/" in r.path]
    mounts = [r for r in requests if r.method == "POST" and "mount=" in r.path and r.status == 201]
    distinct = set(hami.blobs) | set(certgen.blobs)
    assert len(uploads) + len(mounts) == len(set(hami.blobs)) + len(set(certgen.blobs))
    assert len(uploads) == len(distinct)  # the shared layer crossed the wire once
    shared_digest = next(iter(set(hami.blobs) & set(certgen.blobs)))
    assert any(shared_digest in m.path for m in mounts)
    fetched = [r for r in requests_since(source, 0) if r.method == "GET" and "/blobs/" in r.path]
    assert len(fetched) == len(distinct)


def test_rerun_sends_only_heads_to_the_source(tmp_path: Path, source: LocalRegistry, target: LocalRegistry) -> None:
    images = seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    source_mark, target_mark = len(source.access_log()), len(target.access_log())
    entries = [m for i in images for m in json.loads(i.manifests[i.digest])["manifests"]]
    attestations = [m["digest"] for m in entries if m["platform"]["os"] == "unknown"]
    digests = [i.digest for i in images] + [m["digest"] for m in entries if m["digest"] not in attestations]
    assert len(attestations) == 2 and len(digests) == 6

    assert main(["sync", VERSION, "--config", str(config)]) == 0

    source_requests = requests_since(source, source_mark)
    # per image: the tag's HEAD and HEADs of the referrers' tags (the fallback index and cosign's
    # .sig/.att/.sbom) for the index and each platform's image, not for its attestation manifests (nothing signs
    # those); the referrers listing is not asked again (this registry lacks the API, as the first run found):
    # no GET at all
    assert [r.path for r in source_requests if r.method != "HEAD"] == []
    tags = sorted(r.path.rsplit("/", 1)[1] for r in source_requests if r.method == "HEAD")
    assert "v1.1.1" in tags and "v2.10.0" in tags
    referrer_tags = [t for t in tags if not t.startswith("v")]
    assert len(tags) == 2 + len(referrer_tags) and len(referrer_tags) == 4 * len(digests)
    assert {t.split(".")[0] for t in referrer_tags} == {"sha256-" + d.removeprefix("sha256:") for d in digests}
    assert writes(requests_since(target, target_mark)) == []


def test_blob_in_another_target_repository_is_mounted(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    seed_release(source)
    only_certgen = [{"name": "kube-webhook-certgen", "source": "liangjw/kube-webhook-certgen", "tag": "v1.1.1"}]
    first = write_config(tmp_path / "first.yaml", source, [target], images=only_certgen)
    assert main(["sync", VERSION, "--config", str(first)]) == 0
    assert blob_exists(target, "mirrored/kube-webhook-certgen", _sha(SHARED))
    mark = len(target.access_log())

    both = write_config(tmp_path / "both.yaml", source, [target])
    assert main(["sync", VERSION, "--config", str(both)]) == 0

    requests = requests_since(target, mark)
    mounted = [r for r in requests if r.method == "POST" and _sha(SHARED) in r.path]
    assert mounted and mounted[0].status == 201 and "from=mirrored/kube-webhook-certgen" in mounted[0].path
    assert not any(r.method == "PUT" and _sha(SHARED) in r.path for r in requests)
    assert blob_exists(target, "mirrored/hami", _sha(SHARED))


def test_blob_redirects_are_followed(tmp_path: Path) -> None:
    storage_root = tmp_path / "source"
    with cdn_server(storage_root / "data") as cdn:
        source = start_registry(storage_root, redirect_to=cdn.url)
        target = start_registry(tmp_path / "target")
        try:
            hami, _ = seed_release(source)
            config = write_config(tmp_path / "mirror.yaml", source, [target])
            assert main(["sync", VERSION, "--config", str(config)]) == 0
            assert cdn.requests >= len(hami.blobs)
            assert_byte_exact(source, target, hami, "mirrored/hami")
        finally:
            source.stop()
            target.stop()


def test_corrupt_source_blob_is_never_committed(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    hami, _ = seed_release(source)
    victim = max(hami.blobs, key=lambda d: hami.blobs[d])
    data = source.blob_path(victim).read_bytes()
    source.blob_path(victim).write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])  # same size, other bytes
    config = write_config(tmp_path / "mirror.yaml", source, [target])

    assert main(["sync", VERSION, "--config", str(config)]) == 1

    err = capsys.readouterr().err
    assert f"blob {victim}" in err and "Traceback" not in err
    assert not blob_exists(target, "mirrored/hami", victim)
    assert manifest_digest(target, "mirrored/hami", VERSION) is None
    assert not (tmp_path / "out" / "t0" / "hami-ack-values.yaml").exists()


def test_refused_push_fails_with_one_line_and_no_tag(
    tmp_path: Path, source: LocalRegistry, acr_like: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [acr_like], target_options={"attestations": "keep"})

    assert main(["sync", VERSION, "--config", str(config)]) == 1

    said = capsys.readouterr()
    failures = [line for line in said.err.splitlines() if line.startswith("mirror: ")]
    assert len(failures) == 1 and "unknown manifest class" in failures[0] and "hami -> t0" in failures[0]
    assert "use auto or drop for this target" in failures[0]
    # the report says which values the failure kept back, and for want of what
    withheld = f"hami values for t0 not written: 1 of its images not verified there ({source.host}/projecthami/hami:"
    assert withheld in said.out, said.out
    assert manifest_digest(acr_like, "mirrored/hami", VERSION) is None
    assert manifest_digest(acr_like, "mirrored/kube-webhook-certgen", "v1.1.1") is not None  # a manifest list
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.yaml"))


def test_values_only_for_targets_where_everything_verified(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, acr_like: LocalRegistry
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target, acr_like], target_options={"attestations": "keep"})
    assert main(["sync", VERSION, "--config", str(config)]) == 1
    assert (tmp_path / "out" / "t0" / "hami-ack-values.yaml").is_file()
    assert not (tmp_path / "out" / "t1").exists()


def test_unreachable_target_is_one_clear_line(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    target.stop()
    assert main(["sync", VERSION, "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "registry unreachable" in err and "Traceback" not in err


def test_a_registry_speaking_plain_http_asked_in_https_says_so(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target], registries={source.host: {"plain_http": True}})
    assert main(["sync", VERSION, "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert f"resolve {target.host}/mirrored/hami:{VERSION}: registry unreachable: " in err
    assert "(it answers in plain HTTP, not HTTPS: is it a registry with plain_http on?)" in err


def test_unknown_tag_is_one_clear_line(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    assert main(["sync", "v9.9.9", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "projecthami/hami:v9.9.9: tag not found at the source" in err and "Traceback" not in err
    assert "repository" not in err  # the repository is known: asked once, after the tag's 404


def test_dry_run_plans_and_writes_nothing(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    hami, _ = seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    mark = len(target.access_log())

    assert main(["sync", VERSION, "--config", str(config), "--dry-run", "--json"]) == 0

    report = json.loads(capsys.readouterr().out)
    plans = [t["plan"] for i in report["images"] for t in i["targets"]]
    hami_bytes = sum(hami.blobs.values())
    assert plans[0] == (
        f"push {len(hami.manifests)} manifest(s) (0 present), copy or mount {len(hami.blobs)} blob(s) "
        f"({hami_bytes / 1e6:.1f} MB), skip 0 present blob(s)"
    )
    assert {t["action"] for i in report["images"] for t in i["targets"]} == {"planned"}
    assert report["values"] == []
    assert {r.method for r in requests_since(target, mark)} <= {"HEAD", "GET"}
    assert not (tmp_path / "out").exists()


def test_drift_is_reported_and_left_alone_unless_forced(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    other = with_client(target, lambda c: push_single(c, "mirrored/hami", VERSION, seed=9))
    config = write_config(tmp_path / "mirror.yaml", source, [target])

    assert main(["sync", VERSION, "--config", str(config)]) == 1
    out, err = capsys.readouterr()
    assert "drift" in err
    # the summary on stdout says why under the target's line, as it does for an image not copied
    shown = out.splitlines()
    at = shown.index("    -> t0: failed, FAILED")
    assert shown[at + 1].startswith(f"       drift: {target.host}/mirrored/hami:{VERSION} points at {other.digest}")
    assert manifest_digest(target, "mirrored/hami", VERSION) == other.digest

    assert main(["sync", VERSION, "--config", str(config), "--force"]) == 0
    assert manifest_digest(target, "mirrored/hami", VERSION) == manifest_digest(source, "projecthami/hami", VERSION)


def test_deep_verify_rereads_target_blobs(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    hami, _ = seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    victim = max(hami.blobs, key=lambda d: hami.blobs[d])
    data = target.blob_path(victim).read_bytes()
    target.blob_path(victim).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    capsys.readouterr()

    assert main(["sync", VERSION, "--config", str(config)]) == 0  # sizes still match: a shallow check passes
    assert main(["sync", VERSION, "--config", str(config), "--deep"]) == 1
    assert f"blob {victim}" in capsys.readouterr().err


def _sha(data: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_a_target_named_twice_is_synced_once(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    assert main(["sync", VERSION, "--config", str(config), "--target", "t0", "--target", "t0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [[t["target"] for t in image["targets"]] for image in report["images"]] == [["t0"], ["t0"]]
    assert [v["target"] for v in report["values"]] == ["t0"]
    pushed = [e.path for e in target.access_log() if e.method == "PUT" and "/manifests/" in e.path]
    assert len(pushed) == len(set(pushed))


def test_a_registries_entry_no_source_or_target_uses_is_warned_of(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    """Settings under a misspelt host are never applied (a login never sent: the 401 would name no config key)."""
    seed_release(source)
    misspelt = "registry.cn-hangzhou.aliyuncs.co"
    registries = {source.host: {"plain_http": True}, target.host: {"plain_http": True}, misspelt: {"http2": True}}
    config = write_config(tmp_path / "mirror.yaml", source, [target], registries=registries)
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("registries:")]
    assert len(warned) == 1 and f"registries: {misspelt} is a host no source, target or chart uses" in warned[0]
