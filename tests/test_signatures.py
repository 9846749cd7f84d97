"""The signature policy, checked with sigstore-python before anything is copied, against real registries and a
Sigstore instance of the tests' own (tests/sigstore_instance.py: Fulcio, CT and Rekor keys made here, and the
trusted root naming them). Signatures are made as cosign v3 makes them (a sigstore bundle as an OCI 1.1
referrer, listed in the `sha256-<hex>` fallback index) and as its older layout does (`sha256-<hex>.sig`,
whose Rekor inclusion proof is looked up by log index)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sigstore.models import Bundle, TrustedRoot
from sigstore.verify import Verifier
from sigstore.verify.policy import Identity

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import SampleBuilder
from mirror.engine.referrers import fallback_tag
from mirror.oci import OCI_INDEX, OCI_MANIFEST
from mirror.registry import RegistryClient
from tests.faultproxy import Fault, fault_proxy
from tests.sigstore_instance import GITHUB_ISSUER, HAMI_IDENTITY, RekorServer, SigstoreInstance, push_signature
from tests.support import (
    blob_bytes,
    manifest_bytes,
    manifest_digest,
    requests_since,
    sync_json,
    with_client,
    write_config,
    writes,
)
from tests.test_sync import VERSION, seed_release

BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"
HAMI_RULE = {
    "repositories": ["projecthami/*"],
    "identity_regexp": r"^https://github\.com/Project-HAMi/HAMi/\.github/workflows/",
    "issuer": GITHUB_ISSUER,
}
STRANGER = "https://github.com/someone-else/HAMi/.github/workflows/release.yaml@refs/heads/main"


@pytest.fixture
def sigstore(tmp_path: Path) -> Iterator[SigstoreInstance]:
    instance = SigstoreInstance()
    rekor = RekorServer(instance)
    (tmp_path / "trusted_root.json").write_text(json.dumps(instance.trusted_root()))
    yield instance
    rekor.close()


async def push_legacy(
    client: RegistryClient, repository: str, digest: str, *signatures: tuple[bytes, dict[str, str]]
) -> str:
    """cosign's `.sig` image: one simple-signing layer per signature."""
    builder = SampleBuilder(client, repository, seed=8)
    layers = []
    for payload, notes in signatures:
        layer = await builder.blob(payload, SIMPLE_SIGNING)
        layer["annotations"] = notes
        layers.append(layer)
    config = await builder.blob(json.dumps({"architecture": "", "os": "", "rootfs": {}}).encode(), IMAGE_CONFIG)
    doc = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": layers}
    return str((await builder.manifest(doc, fallback_tag(digest) + ".sig"))["digest"])


def hami_subject(source: LocalRegistry) -> dict[str, Any]:
    hami, _ = seed_release(source)
    return {"mediaType": OCI_INDEX, "digest": hami.digest, "size": len(hami.manifests[hami.digest])}


def config(tmp_path: Path, source: LocalRegistry, target: LocalRegistry, rule: dict[str, Any] | None = None) -> Path:
    signatures = {"trusted_root": str(tmp_path / "trusted_root.json"), "require": [rule or HAMI_RULE]}
    return write_config(tmp_path / "mirror.yaml", source, [target], signatures=signatures)


def image(report: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(next(i for i in report["images"] if i["name"] == name))


def test_an_image_signed_by_the_named_identity_is_mirrored_and_its_signature_verifies_at_the_target(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    sigstore: SigstoreInstance,
    capsys: pytest.CaptureFixture[str],
) -> None:
    subject = hami_subject(source)
    referrer = with_client(
        source, lambda c: push_signature(c, "projecthami/hami", subject, sigstore.sign_image(subject["digest"]))
    )
    code, report, err = sync_json(config(tmp_path, source, target), capsys, VERSION)
    assert code == 0, err
    hami = image(report, "hami")
    assert hami["signature"]["signer"] == HAMI_IDENTITY and hami["signature"]["via"] == "referrers"
    assert "signature" not in image(report, "kube-webhook-certgen")  # no rule names it: copied as before
    assert manifest_digest(target, "mirrored/hami", VERSION) == subject["digest"]
    assert manifest_bytes(target, "mirrored/hami", referrer) == manifest_bytes(source, "projecthami/hami", referrer)
    assert (tmp_path / "out" / "t0" / VERSION / "hami-ack-values.yaml").exists()

    # what arrived verifies on its own, as `cosign verify` would check it: the bundle read back from the target
    index = json.loads(manifest_bytes(target, "mirrored/hami", fallback_tag(subject["digest"])))
    assert [m["digest"] for m in index["manifests"]] == [referrer]
    layer = json.loads(manifest_bytes(target, "mirrored/hami", referrer))["layers"][0]
    raw = blob_bytes(target, "mirrored/hami", layer["digest"])
    verifier = Verifier(trusted_root=TrustedRoot.from_file(str(tmp_path / "trusted_root.json")))
    _, statement = verifier.verify_dsse(Bundle.from_json(raw), Identity(identity=HAMI_IDENTITY, issuer=GITHUB_ISSUER))
    assert json.loads(statement)["subject"][0]["digest"]["sha256"] == subject["digest"].removeprefix("sha256:")

    # a re-run checks the copy the target holds: the source gets HEADs only (it lacks the referrers API, as the
    # first run found, and the fallback index is known by its digest)
    mark = len(source.access_log())
    code, report, err = sync_json(config(tmp_path, source, target), capsys, VERSION)
    assert code == 0, err
    assert image(report, "hami")["signature"]["via"] == "referrers at t0"
    assert [e.path for e in requests_since(source, mark) if e.method != "HEAD"] == []
    assert main(["sync", VERSION, "--config", str(config(tmp_path, source, target))]) == 0
    assert f"signature: signed by {HAMI_IDENTITY} (referrers at t0)" in capsys.readouterr().out


def test_a_target_copy_that_cannot_be_read_sends_the_check_to_the_source(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    sigstore: SigstoreInstance,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A re-run checks the signatures a target's copy holds; where that target refuses the look-up (a 403 to
    its referrers listing), the source is checked instead, where the image was refused as not checked."""
    subject = hami_subject(source)
    with_client(
        source, lambda c: push_signature(c, "projecthami/hami", subject, sigstore.sign_image(subject["digest"]))
    )
    with fault_proxy(target.port) as proxy:
        code, _, err = sync_json(config(tmp_path, source, proxy), capsys, VERSION)  # type: ignore[arg-type]
        assert code == 0, err
        # the first listing at the target is the gate's: later ones, carrying the signatures, are answered
        refusal = Fault("status", method="GET", path=r"/referrers/", status=403, code="DENIED", count=1)
        proxy.add(refusal)
        mark = len(source.access_log())
        code, report, err = sync_json(config(tmp_path, source, proxy), capsys, VERSION)  # type: ignore[arg-type]
    assert code == 0, err
    assert refusal.applied == 1
    assert image(report, "hami")["signature"]["via"] == "referrers"  # at the source, not "referrers at t0"
    fallback = f"/v2/projecthami/hami/manifests/{fallback_tag(subject['digest'])}"
    assert fallback in [e.path for e in requests_since(source, mark)]  # looked up there


@pytest.mark.parametrize(
    "signing",
    ["another identity", "another issuer", "another Sigstore", "another image", "unsigned"],
)
def test_an_image_not_signed_as_the_rule_says_is_not_mirrored_and_the_run_says_why(
    signing: str,
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    sigstore: SigstoreInstance,
    capsys: pytest.CaptureFixture[str],
) -> None:
    subject = hami_subject(source)
    signers: dict[str, Callable[[], bytes | None]] = {
        "another identity": lambda: sigstore.sign_image(subject["digest"], identity=STRANGER),
        "another issuer": lambda: sigstore.sign_image(subject["digest"], issuer="https://accounts.example.test"),
        "another Sigstore": lambda: SigstoreInstance().sign_image(subject["digest"]),
        "another image": lambda: sigstore.sign_image("sha256:" + "0" * 64),
        "unsigned": lambda: None,
    }
    bundle = signers[signing]()
    if bundle is not None:
        with_client(source, lambda c: push_signature(c, "projecthami/hami", subject, bundle))
    code, report, err = sync_json(config(tmp_path, source, target), capsys, VERSION)
    assert code != 0
    hami = image(report, "hami")
    assert "not mirrored" in hami["error"] and subject["digest"] in hami["error"]
    reason = {
        "another identity": f"signed by {STRANGER}, not matching",
        "another issuer": "signed through issuer 'https://accounts.example.test'",
        "another Sigstore": "certificate chain",
        "another image": "names another digest",
        "unsigned": "unsigned: no signature at the source refers to",
    }[signing]
    assert reason in hami["signature"]["refused"], hami["signature"]
    assert reason in err
    assert main(["sync", VERSION, "--config", str(config(tmp_path, source, target))]) == 1
    summary = capsys.readouterr().out
    assert "NOT COPIED" in summary and reason in summary
    # nothing of the image reached the target, and no values were written for the release
    assert [e.path for e in writes(target.access_log()) if "/mirrored/hami/" in e.path] == []
    assert manifest_digest(target, "mirrored/hami", VERSION) is None
    assert image(report, "kube-webhook-certgen")["targets"][0]["verified"]
    assert not (tmp_path / "out" / "t0" / VERSION / "hami-ack-values.yaml").exists()


def test_a_rule_added_later_refuses_a_copy_made_before_it(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    sigstore: SigstoreInstance,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The target holds the image and a stranger's signature, copied before any rule: with the rule, neither
    the target's copy nor the source's signature holds, so the release gets no values."""
    subject = hami_subject(source)
    stranger = sigstore.sign_image(subject["digest"], identity=STRANGER)
    with_client(source, lambda c: push_signature(c, "projecthami/hami", subject, stranger))
    (tmp_path / "before").mkdir()  # its own output directory
    assert main(["sync", VERSION, "--config", str(write_config(tmp_path / "before" / "m.yaml", source, [target]))]) == 0
    capsys.readouterr()
    mark = len(target.access_log())
    code, report, _ = sync_json(config(tmp_path, source, target), capsys, VERSION)
    assert code != 0
    assert f"signed by {STRANGER}" in image(report, "hami")["signature"]["refused"]
    assert not (tmp_path / "out" / "t0" / VERSION / "hami-ack-values.yaml").exists()
    assert writes(requests_since(target, mark)) == []


def test_the_older_sig_layout_is_verified_with_its_inclusion_proof_from_rekor(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    sigstore: SigstoreInstance,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two signatures in the one `.sig` image, as cosign appends them: a stranger's first, then HAMi's."""
    subject = hami_subject(source)
    sigstore.sign_image("sha256:" + "1" * 64)  # the log holds others: a real Merkle path
    stranger = sigstore.sign_image_legacy(subject["digest"], identity=STRANGER)
    hami = sigstore.sign_image_legacy(subject["digest"])
    sigstore.sign_image("sha256:" + "2" * 64)
    sig = with_client(source, lambda c: push_legacy(c, "projecthami/hami", subject["digest"], stranger, hami))
    code, report, err = sync_json(config(tmp_path, source, target), capsys, VERSION)
    assert code == 0, err
    signature = image(report, "hami")["signature"]
    assert signature["via"] == fallback_tag(subject["digest"]) + ".sig" and signature["signer"] == HAMI_IDENTITY
    assert sigstore.lookups == ["/api/v1/log/entries?logIndex=1", "/api/v1/log/entries?logIndex=2"]
    assert manifest_digest(target, "mirrored/hami", fallback_tag(subject["digest"]) + ".sig") == sig


def test_an_older_sig_whose_rekor_entry_does_not_match_is_refused(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    sigstore: SigstoreInstance,
    capsys: pytest.CaptureFixture[str],
) -> None:
    subject = hami_subject(source)
    payload, annotations = sigstore.sign_image_legacy(subject["digest"])
    _, other = sigstore.sign_image_legacy(subject["digest"])
    annotations["dev.sigstore.cosign/bundle"] = other["dev.sigstore.cosign/bundle"]  # someone else's log entry
    with_client(source, lambda c: push_legacy(c, "projecthami/hami", subject["digest"], (payload, annotations)))
    code, report, _ = sync_json(config(tmp_path, source, target), capsys, VERSION)
    assert code != 0
    assert "inconsistent" in image(report, "hami")["signature"]["refused"]
    assert [e.path for e in writes(target.access_log()) if "/mirrored/hami/" in e.path] == []


def test_an_attestation_bundle_is_not_taken_for_a_signature(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    sigstore: SigstoreInstance,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A provenance bundle signed by the right identity still is no signature of the image: the rule wants
    cosign's signing predicate."""
    subject = hami_subject(source)
    bundle = sigstore.sign_image(subject["digest"], predicate="https://slsa.dev/provenance/v1")
    with_client(source, lambda c: push_signature(c, "projecthami/hami", subject, bundle))
    code, report, _ = sync_json(config(tmp_path, source, target), capsys, VERSION)
    assert code != 0
    assert "not an image signature" in image(report, "hami")["signature"]["refused"]


def test_a_signature_that_cannot_be_read_is_passed_over_for_the_next(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    sigstore: SigstoreInstance,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The source's fallback index lists first a signature deleted since (a stale entry: the tool that deleted
    it did not update the index), then HAMi's: the first counts as not verifying, the second holds."""
    subject = hami_subject(source)
    stale_bundle = sigstore.sign_image(subject["digest"])
    stale = with_client(source, lambda c: push_signature(c, "projecthami/hami", subject, stale_bundle))
    good = with_client(
        source, lambda c: push_signature(c, "projecthami/hami", subject, sigstore.sign_image(subject["digest"]))
    )
    sizes = {digest: len(manifest_bytes(source, "projecthami/hami", digest)) for digest in (stale, good)}
    entries = [{"mediaType": OCI_MANIFEST, "digest": d, "size": n, "artifactType": BUNDLE} for d, n in sizes.items()]
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}).encode()
    url = f"{source.url}/v2/projecthami/hami/manifests/"
    put = httpx.put(url + fallback_tag(subject["digest"]), content=index, headers={"Content-Type": OCI_INDEX})
    assert put.status_code == 201
    assert httpx.delete(url + stale).status_code == 202

    code, report, err = sync_json(config(tmp_path, source, target), capsys, VERSION)
    assert code == 0, err
    hami = image(report, "hami")
    assert hami["signature"]["signer"] == HAMI_IDENTITY
    assert manifest_digest(target, "mirrored/hami", VERSION) == subject["digest"]
    (left_out,) = hami["targets"][0]["referrers"]["left_out"]
    assert left_out["digest"] == stale


def test_a_corrupt_signature_at_the_target_sends_the_check_to_the_source(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    sigstore: SigstoreInstance,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A re-run checks the target's copy of the signature: where its bundle's bytes there no longer hash to
    their digest (a disk's fault, a truncated write), the source's are checked instead."""
    subject = hami_subject(source)
    referrer = with_client(
        source, lambda c: push_signature(c, "projecthami/hami", subject, sigstore.sign_image(subject["digest"]))
    )
    code, _, err = sync_json(config(tmp_path, source, target), capsys, VERSION)
    assert code == 0, err
    layer = json.loads(manifest_bytes(target, "mirrored/hami", referrer))["layers"][0]
    stored = target.blob_path(layer["digest"])
    stored.write_bytes(stored.read_bytes()[: layer["size"] // 2].ljust(layer["size"], b" "))

    mark = len(source.access_log())
    code, report, err = sync_json(config(tmp_path, source, target), capsys, VERSION)
    assert code == 0, err
    assert image(report, "hami")["signature"]["via"] == "referrers"  # at the source, not "referrers at t0"
    assert f"/v2/projecthami/hami/blobs/{layer['digest']}" in [e.path for e in requests_since(source, mark)]
