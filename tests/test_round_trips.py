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
from mirror.engine.statecache import NOTES_TTL, ManifestCache, RegistryNotes
from mirror.oci import Manifest
from tests.support import requests_since, write_config
from tests.test_referrers import signed_release
from tests.test_sync import VERSION, assert_byte_exact, seed_release

TAGS = ("/v2/mirrored/hami/manifests/v2.10.0", "/v2/mirrored/kube-webhook-certgen/manifests/v1.1.1")


def asked_twice(entries: list[AccessEntry], tags_pushed: bool = False) -> dict[str, int]:
    """Reads repeated in one run: a manifest or blob GET or HEAD by the same path (a 401 is a challenge, not an
    answer). A tag pushed by the run is asked twice: before the push (404) and after it (the verification)."""
    reads = Counter(
        f"{e.method} {e.path}" for e in entries if e.method in ("GET", "HEAD") and e.status != 401 and e.path != "/v2/"
    )
    allowed = {f"HEAD {tag}": 2 for tag in TAGS} if tags_pushed else {}
    return {request: n for request, n in reads.items() if n > allowed.get(request, 1)}


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


def test_a_kept_manifest_that_does_not_hash_to_its_name_is_not_used(tmp_path: Path) -> None:
    raw = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}'
    manifest = Manifest.parse(raw)
    ManifestCache(tmp_path).put(manifest)
    assert ManifestCache(tmp_path).get(manifest.digest) == manifest
    kept = tmp_path / "manifests" / "sha256" / manifest.digest.removeprefix("sha256:")
    kept.write_bytes(kept.read_bytes().replace(b"[]", b"[ ]"))
    assert ManifestCache(tmp_path).get(manifest.digest) is None
    assert ManifestCache(None).get(manifest.digest) is None


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
