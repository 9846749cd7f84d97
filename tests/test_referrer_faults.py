"""What refers to an image, where some of it cannot be carried, against real registries: a referrer the source
cannot serve (a stale entry of its fallback index; a manifest mirror cannot read) is left out, logged and
reported, and the image and the rest go across; what was added at the target (another tool's entry in its
fallback index, a signature `cosign sign` appended to its `.sig`) stays there."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import SampleBuilder
from mirror.engine.referrers import fallback_tag, find_referrers
from mirror.oci import OCI_EMPTY, OCI_INDEX, OCI_MANIFEST, sha256_digest
from mirror.registry import RegistryClient
from mirror.settings import load_settings
from tests.referrersfront import ReferrersFront
from tests.support import manifest_bytes, manifest_digest, requests_since, sync_json, with_client, write_config, writes
from tests.test_referrers import BUNDLE, IMAGE_CONFIG, Signed, hami_target, signed_release, sync_through
from tests.test_sync import VERSION

NOTATION = "application/vnd.cncf.notary.signature"


async def push_referrer(client: RegistryClient, repository: str, subject: str, seed: int, kind: str = BUNDLE) -> Any:
    """An artifact whose `subject` is the image index: a signature of some kind, as its tool pushes it."""
    builder = SampleBuilder(client, repository, seed=seed)
    index = await client.head_manifest(repository, subject)
    assert index is not None
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": kind,
        "config": await builder.blob(b"{}", OCI_EMPTY),
        "layers": [await builder.blob(json.dumps({"seed": seed}).encode(), kind)],
        "subject": {"mediaType": index.media_type, "digest": index.digest, "size": index.size},
    }
    return {**await builder.manifest(doc), "artifactType": kind}


def fallback_entries(registry: LocalRegistry, repository: str, subject: str) -> list[dict[str, Any]]:
    return list(json.loads(manifest_bytes(registry, repository, fallback_tag(subject)))["manifests"])


def put_fallback_index(registry: LocalRegistry, repository: str, subject: str, entries: list[dict[str, Any]]) -> None:
    """As a signing tool rewrites the index: its own bytes, pushed at the tag."""
    raw = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}).encode()
    put_manifest(registry, repository, fallback_tag(subject), raw, OCI_INDEX)


def put_manifest(registry: LocalRegistry, repository: str, ref: str, raw: bytes, media_type: str) -> None:
    url = f"{registry.url}/v2/{repository}/manifests/{ref}"
    assert httpx.put(url, content=raw, headers={"Content-Type": media_type}).status_code == 201


def delete_manifest(registry: LocalRegistry, repository: str, digest: str) -> None:
    assert httpx.delete(f"{registry.url}/v2/{repository}/manifests/{digest}").status_code == 202


def carried_digests(report: dict[str, Any]) -> list[str]:
    return sorted(c["digest"] for c in hami_target(report)["referrers"]["carried"])


def all_of(signed: Signed) -> list[str]:
    return sorted([signed.bundle, *signed.legacy.values()])


def test_a_stale_entry_of_the_source_fallback_index_is_left_out_and_the_image_and_the_rest_carried(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The index still lists a signature deleted since (the tool deleting it did not update the index)."""
    signed = signed_release(source)
    stale = with_client(source, lambda c: push_referrer(c, "projecthami/hami", signed.subject, seed=11))
    listed = fallback_entries(source, "projecthami/hami", signed.subject)
    put_fallback_index(source, "projecthami/hami", signed.subject, [stale, *listed])
    delete_manifest(source, "projecthami/hami", stale["digest"])
    config = write_config(tmp_path / "mirror.yaml", source, [target])

    with caplog.at_level(logging.WARNING, logger="mirror"):
        code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    hami = hami_target(report)
    assert hami["verified"] and hami["digest"] == signed.subject
    (left_out,) = hami["referrers"]["left_out"]
    assert left_out["digest"] == stale["digest"]
    assert "not read at the source" in left_out["reason"] and "404" in left_out["reason"]
    assert any(stale["digest"] in r.getMessage() and "404" in r.getMessage() for r in caplog.records)
    assert carried_digests(report) == all_of(signed)
    assert (tmp_path / "out" / "t0" / VERSION / "hami-ack-values.yaml").exists()
    # the target's fallback index lists what it holds, and only that
    at_target = fallback_entries(target, "mirrored/hami", signed.subject)
    assert [e["digest"] for e in at_target] == [signed.bundle]
    assert at_target == listed  # each entry as the source listed it

    mark = len(target.access_log())
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert [e["digest"] for e in hami_target(report)["referrers"]["left_out"]] == [stale["digest"]]
    assert writes(requests_since(target, mark)) == []
    assert main(["sync", VERSION, "--config", str(config)]) == 0  # the summary says so too, not only --json
    printed = capsys.readouterr().out
    assert any(stale["digest"] in line and "left out: not read at the source" in line for line in printed.splitlines())


async def push_nested_index(client: RegistryClient, repository: str, subject: str) -> Any:
    """A referrer that is an index of an index: mirror copies one level of children."""
    index = await client.head_manifest(repository, subject)
    assert index is not None
    descriptor = {"mediaType": index.media_type, "digest": index.digest, "size": index.size}
    doc = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [descriptor], "subject": descriptor}
    return await SampleBuilder(client, repository).manifest(doc)


def test_a_referrer_mirror_cannot_read_is_left_out_and_the_image_and_the_rest_carried(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two the source serves but mirror cannot read: an index nesting an index, listed in the fallback index,
    and a `.sig` manifest nesting its JSON deeper than Python's parser recurses (3 KB; refused as malformed)."""
    signed = signed_release(source)
    nested = with_client(source, lambda c: push_nested_index(c, "projecthami/hami", signed.subject))
    listed = fallback_entries(source, "projecthami/hami", signed.subject)
    put_fallback_index(source, "projecthami/hami", signed.subject, [*listed, nested])
    sig_tag = fallback_tag(signed.subject) + ".sig"
    sig = json.loads(manifest_bytes(source, "projecthami/hami", sig_tag))
    deep = json.dumps({**sig, "x": "HOLE"}).replace('"HOLE"', "[" * 1100 + "]" * 1100).encode()
    put_manifest(source, "projecthami/hami", sig_tag, deep, OCI_MANIFEST)

    code, report, err = sync_json(write_config(tmp_path / "mirror.yaml", source, [target]), capsys, VERSION)
    assert code == 0, err
    left_out = {e["digest"]: e["reason"] for e in hami_target(report)["referrers"]["left_out"]}
    assert "nested indexes are not supported" in left_out.pop(nested["digest"])
    assert "nested too deeply" in left_out.pop(sha256_digest(deep))
    assert left_out == {}
    assert carried_digests(report) == sorted(d for d in all_of(signed) if d != signed.legacy[sig_tag])
    assert manifest_digest(target, "mirrored/hami", sig_tag) is None
    assert [e["digest"] for e in fallback_entries(target, "mirrored/hami", signed.subject)] == [signed.bundle]
    assert (tmp_path / "out" / "t0" / VERSION / "hami-ack-values.yaml").exists()


def test_an_oci_1_1_rc_artifact_manifest_a_source_lists_is_left_out(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """An OCI 1.1 release candidate's artifact manifest (`blobs`, no config): a registry that took it lists it
    among the referrers (distribution 2.8 refuses to store one, so the API in front of it serves it)."""
    signed = signed_release(source)
    size = len(manifest_bytes(source, "projecthami/hami", signed.subject))
    artifact = json.dumps(
        {
            "mediaType": "application/vnd.oci.artifact.manifest.v1+json",
            "artifactType": "application/vnd.dev.cosign.artifact.sig.v1+json",
            "blobs": [{"mediaType": OCI_EMPTY, "digest": sha256_digest(b"{}"), "size": 2}],
            "subject": {"mediaType": OCI_INDEX, "digest": signed.subject, "size": size},
        }
    ).encode()
    front = ReferrersFront(source, hidden_tags=[fallback_tag(signed.subject)], planted=[artifact])
    result = sync_through(load_settings(write_config(tmp_path / "mirror.yaml", source, [target])), [front])
    hami = next(i for i in result.images if i.name == "hami").targets[0]
    assert hami.verified and hami.referrers is not None
    (left_out,) = hami.referrers.left_out
    assert left_out["digest"] == sha256_digest(artifact) and "media type" in left_out["reason"]
    assert sorted(c["digest"] for c in hami.referrers.carried) == all_of(signed)
    assert [e["digest"] for e in fallback_entries(target, "mirrored/hami", signed.subject)] == [signed.bundle]


def test_what_another_tool_listed_in_the_target_fallback_index_stays_listed(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """The target has no referrers API: a Notation signature made there is listed in its fallback index next to
    what mirror carried. A re-run leaves that index alone; a signature new at the source is added to it."""
    signed = signed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    code, _, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    theirs = with_client(target, lambda c: push_referrer(c, "mirrored/hami", signed.subject, seed=21, kind=NOTATION))
    ours = fallback_entries(target, "mirrored/hami", signed.subject)
    put_fallback_index(target, "mirrored/hami", signed.subject, [*ours, theirs])
    index_now = manifest_digest(target, "mirrored/hami", fallback_tag(signed.subject))

    mark = len(target.access_log())
    code, _, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert writes(requests_since(target, mark)) == []
    assert manifest_digest(target, "mirrored/hami", fallback_tag(signed.subject)) == index_now

    new = with_client(source, lambda c: push_referrer(c, "projecthami/hami", signed.subject, seed=22))
    listed = fallback_entries(source, "projecthami/hami", signed.subject)
    put_fallback_index(source, "projecthami/hami", signed.subject, [*listed, new])
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert new["digest"] in carried_digests(report)
    at_target = fallback_entries(target, "mirrored/hami", signed.subject)
    assert [e["digest"] for e in at_target] == [signed.bundle, theirs["digest"], new["digest"]]
    for entry in at_target:  # none it lists is missing
        assert manifest_digest(target, "mirrored/hami", entry["digest"]) == entry["digest"]


def sig_layers(registry: LocalRegistry, repository: str, tag: str) -> list[dict[str, Any]]:
    return list(json.loads(manifest_bytes(registry, repository, tag))["layers"])


async def append_signature(client: RegistryClient, repository: str, tag: str, signature: str) -> None:
    """As `cosign sign` adds a signature to the `.sig` image: one more layer, the same payload, another
    signature annotation (and a config naming the layers)."""
    manifest = await client.get_manifest(repository, tag)
    doc = json.loads(manifest.raw)
    layer = {**doc["layers"][0], "annotations": {"dev.cosignproject.cosign/signature": signature}}
    builder = SampleBuilder(client, repository, seed=len(doc["layers"]) + 30)
    config = {"architecture": "", "os": "", "rootfs": {"type": "layers", "diff_ids": [signature]}}
    doc["config"] = await builder.blob(json.dumps(config).encode(), IMAGE_CONFIG)
    doc["layers"] = [*doc["layers"], layer]
    await builder.manifest(doc, tag)


def test_a_signature_added_to_the_target_sig_tag_is_not_dropped(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`cosign sign` at the target appends a layer to its copy of the `.sig` image: the copy holds the source's
    signature and one more, and is left alone. Where the source's then gains a signature the target's lacks,
    neither holds the other's: the target's is still kept, and the report says why the source's is not carried.
    A target's `.sig` holding only what the source's holds is an older copy, and is replaced."""
    signed = signed_release(source)
    sig_tag = fallback_tag(signed.subject) + ".sig"
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    assert sync_json(config, capsys, VERSION)[0] == 0
    with_client(target, lambda c: append_signature(c, "mirrored/hami", sig_tag, "MEUCIQ-theirs"))
    theirs = manifest_digest(target, "mirrored/hami", sig_tag)

    mark = len(target.access_log())
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert manifest_digest(target, "mirrored/hami", sig_tag) == theirs
    assert writes(requests_since(target, mark)) == []
    assert carried_digests(report) == all_of(signed)  # the source's signature is there

    with_client(source, lambda c: append_signature(c, "projecthami/hami", sig_tag, "MEUCIQ-hami-again"))
    with caplog.at_level(logging.WARNING, logger="mirror"):
        code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert manifest_digest(target, "mirrored/hami", sig_tag) == theirs
    (left_out,) = hami_target(report)["referrers"]["left_out"]
    assert left_out["via"] == sig_tag and "holds layers the source's lacks" in left_out["reason"]
    assert any(sig_tag in r.getMessage() for r in caplog.records)

    # the target's own signature removed there: its `.sig` is the older copy, and the source's replaces it
    first_copy = manifest_bytes(target, "mirrored/hami", signed.legacy[sig_tag])
    put_manifest(target, "mirrored/hami", sig_tag, first_copy, OCI_MANIFEST)
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert manifest_digest(target, "mirrored/hami", sig_tag) == manifest_digest(source, "projecthami/hami", sig_tag)
    assert hami_target(report)["referrers"]["left_out"] == []
    assert [layer["annotations"] for layer in sig_layers(target, "mirrored/hami", sig_tag)][-1] == {
        "dev.cosignproject.cosign/signature": "MEUCIQ-hami-again"
    }


@pytest.mark.parametrize("annotations", [["dev.sigstore.bundle.predicateType"], "cosign", 7])
async def test_a_listed_referrer_whose_annotations_are_no_mapping_is_read_as_having_none(
    annotations: object,
) -> None:
    """A referrers listing is the source's word: an entry whose annotations are not a mapping raised
    AttributeError out of the run. Read as none, it is told by its artifact type like any other. (A mock
    transport: distribution refuses to store such a manifest, so no registry here can list one.)"""
    subject, signature = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    entry = {"mediaType": OCI_MANIFEST, "digest": signature, "size": 100, "artifactType": BUNDLE}
    listing = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [{**entry, "annotations": annotations}]}

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == f"/v2/ns/r/referrers/{subject}":
            return httpx.Response(200, headers={"Content-Type": OCI_INDEX}, content=json.dumps(listing).encode())
        return httpx.Response(404)  # the fallback tag, and cosign's older tags

    http = httpx.AsyncClient(base_url="https://registry.test", transport=httpx.MockTransport(answer))
    found = await find_referrers(RegistryClient("registry.test", http), "ns/r", subject)
    assert [(referrer.digest, referrer.kind) for referrer in found.referrers] == [(signature, "signature")]
