"""What a registry holds for a signature, as sigstore bundles.

cosign v3 (`--new-bundle-format`, its default) pushes an OCI 1.1 referrer whose one layer is a sigstore bundle
v0.3: a DSSE envelope over an in-toto statement (predicate `https://sigstore.dev/cosign/sign/v1`) naming the
image digest, with the certificate, the Rekor entry, its inclusion proof and checkpoint. Fully offline.

cosign's older layout (tag `sha256-<hex>.sig`) keeps a simple-signing payload as a layer and the signature,
certificate and Rekor SET in its annotations: no inclusion proof, which sigstore-python requires, so the entry
is looked up in Rekor by its log index (`rekor_lookup_url`) and the bundle v0.1 is assembled from both.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509 import load_pem_x509_certificate

from mirror.untrusted import load_json

SIGSTORE_BUNDLE_TYPES = (
    "application/vnd.dev.sigstore.bundle.v0.3+json",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
)
SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
CERTIFICATE_ANNOTATION = "dev.sigstore.cosign/certificate"
REKOR_BUNDLE_ANNOTATION = "dev.sigstore.cosign/bundle"
SIGN_PREDICATE = "https://sigstore.dev/cosign/sign/v1"
IN_TOTO = "application/vnd.in-toto+json"


class EvidenceError(ValueError):
    """A signature artifact that cannot be read as one."""


@dataclass(frozen=True, slots=True)
class LegacySignature:
    """What a `.sig` layer carries: the payload's signature, the signing certificate, and the Rekor entry."""

    signature: str  # base64
    certificate_pem: str
    log_index: int
    integrated_time: int
    log_id: str  # hex
    body: str  # base64 canonicalized entry
    signed_entry_timestamp: str  # base64

    @classmethod
    def from_annotations(cls, annotations: dict[str, str]) -> LegacySignature:
        try:
            rekor = load_json(annotations[REKOR_BUNDLE_ANNOTATION])
            payload = rekor["Payload"]
            return cls(
                signature=annotations[SIGNATURE_ANNOTATION],
                certificate_pem=annotations[CERTIFICATE_ANNOTATION],
                log_index=int(payload["logIndex"]),
                integrated_time=int(payload["integratedTime"]),
                log_id=str(payload["logID"]),
                body=str(payload["body"]),
                signed_entry_timestamp=str(rekor["SignedEntryTimestamp"]),
            )
        except KeyError as exc:
            raise EvidenceError(f"a .sig layer without {exc.args[0]}") from None
        except (TypeError, ValueError) as exc:
            raise EvidenceError(f"a .sig layer with an unreadable Rekor bundle: {exc}") from None


def rekor_lookup_url(base_url: str, log_index: int) -> str:
    return f"{base_url.rstrip('/')}/api/v1/log/entries?logIndex={log_index}"


def legacy_bundle(sig: LegacySignature, payload_digest: bytes, rekor_answer: dict[str, Any]) -> bytes:
    """A sigstore bundle v0.1 for a `.sig` layer, its inclusion proof from Rekor's answer. The entry Rekor
    returns must be the one the layer names (same body, time and SET), or the answer is not used."""
    if len(rekor_answer) != 1:
        raise EvidenceError("Rekor answered with more or fewer than one entry")
    (entry,) = rekor_answer.values()
    try:
        proof = entry["verification"]["inclusionProof"]
        same = (
            entry["body"] == sig.body
            and int(entry["integratedTime"]) == sig.integrated_time
            and int(entry["logIndex"]) == sig.log_index
            and entry["verification"]["signedEntryTimestamp"] == sig.signed_entry_timestamp
        )
        if not same:
            raise EvidenceError(f"Rekor's entry {sig.log_index} is not the one the signature names")
        certificate = load_pem_x509_certificate(sig.certificate_pem.encode())
        bundle = {
            "mediaType": "application/vnd.dev.sigstore.bundle+json;version=0.1",
            "verificationMaterial": {
                "x509CertificateChain": {"certificates": [{"rawBytes": _b64(certificate.public_bytes(Encoding.DER))}]},
                "tlogEntries": [
                    {
                        "logIndex": str(sig.log_index),
                        "logId": {"keyId": _b64(bytes.fromhex(sig.log_id))},
                        "kindVersion": {"kind": "hashedrekord", "version": "0.0.1"},
                        "integratedTime": str(sig.integrated_time),
                        "inclusionPromise": {"signedEntryTimestamp": sig.signed_entry_timestamp},
                        "inclusionProof": {
                            "logIndex": str(proof["logIndex"]),
                            "rootHash": _b64(bytes.fromhex(proof["rootHash"])),
                            "treeSize": str(proof["treeSize"]),
                            "hashes": [_b64(bytes.fromhex(h)) for h in proof["hashes"]],
                            "checkpoint": {"envelope": proof["checkpoint"]},
                        },
                        "canonicalizedBody": sig.body,
                    }
                ],
            },
            "messageSignature": {
                "messageDigest": {"algorithm": "SHA2_256", "digest": _b64(payload_digest)},
                "signature": sig.signature,
            },
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise EvidenceError(f"Rekor's entry {sig.log_index} cannot be read: {exc!r}") from None
    return json.dumps(bundle).encode()


def statement_names(payload: bytes, digest: str) -> None:
    """The in-toto statement a cosign v3 signature carries must be cosign's signing predicate over `digest`."""
    try:
        statement = load_json(payload)
        subjects = [s.get("digest", {}) for s in statement.get("subject", [])]
        predicate = statement.get("predicateType")
    except (ValueError, AttributeError) as exc:
        raise EvidenceError(f"the signed statement cannot be read: {exc}") from None
    if predicate != SIGN_PREDICATE:
        raise EvidenceError(f"a statement of type {predicate!r}, not an image signature")
    algorithm, _, hexpart = digest.partition(":")
    if not any(isinstance(s, dict) and s.get(algorithm) == hexpart for s in subjects):
        raise EvidenceError(f"the signed statement names another digest, not {digest}")


def simple_signing_names(payload: bytes, digest: str) -> None:
    """The payload of a `.sig` layer must name `digest` as the signed image."""
    try:
        named = load_json(payload)["critical"]["image"]["docker-manifest-digest"]
    except (ValueError, KeyError, TypeError) as exc:
        raise EvidenceError(f"the signed payload cannot be read: {exc!r}") from None
    if named != digest:
        raise EvidenceError(f"the signed payload names {named}, not {digest}")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
