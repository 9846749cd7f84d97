"""sigstore-python's verification, over the bundles `bundles` assembles. Synchronous and CPU-bound: the engine
runs it in a worker thread."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from sigstore.errors import Error as SigstoreError
from sigstore.models import Bundle, ClientTrustConfig, TrustedRoot
from sigstore.verify import Verifier

from mirror.signing.bundles import IN_TOTO, EvidenceError, simple_signing_names, statement_names
from mirror.signing.policy import SignerPolicy, certificate_identities


class NotVerified(Exception):
    """A signature that does not hold: bad material, a failed check, or another signer."""


@dataclass(frozen=True)
class Trust:
    """A Sigstore instance's trusted root: Fulcio's CAs, the CT and Rekor logs' keys, and where Rekor is."""

    verifier: Verifier
    rekor_url: str

    @classmethod
    def load(cls, trusted_root: Path | None) -> Trust:
        """From a trusted_root.json, or Sigstore's public-good instance (a TUF refresh over the network)."""
        try:
            root = (
                TrustedRoot.from_file(str(trusted_root))
                if trusted_root
                else ClientTrustConfig.production().trusted_root
            )
            tlogs = root._inner.tlogs  # the public API exposes keys, not the log's address
            return cls(Verifier(trusted_root=root), tlogs[0].base_url if tlogs else "")
        except (SigstoreError, OSError, ValueError) as exc:
            where = trusted_root or "Sigstore's public-good trusted root"
            raise NotVerified(f"cannot load {where}: {exc}") from None


def verify_bundle(trust: Trust, raw: bytes, digest: str, policy: SignerPolicy) -> str:
    """A cosign v3 signature (sigstore bundle v0.3, DSSE over an in-toto statement) of `digest`, signed as the
    policy says. Returns the signer's identity."""
    try:
        bundle = Bundle.from_json(raw)
        payload_type, payload = trust.verifier.verify_dsse(bundle, policy)
        if payload_type != IN_TOTO:
            raise EvidenceError(f"a DSSE payload of type {payload_type!r}, not an in-toto statement")
        statement_names(payload, digest)
    except (SigstoreError, EvidenceError, ValueError) as exc:
        raise NotVerified(str(exc)) from None
    return _signer(bundle)


def verify_legacy(trust: Trust, payload: bytes, raw_bundle: bytes, digest: str, policy: SignerPolicy) -> str:
    """A cosign `.sig` signature over its simple-signing payload, naming `digest`."""
    try:
        bundle = Bundle.from_json(raw_bundle)
        trust.verifier.verify_artifact(payload, bundle, policy)
        simple_signing_names(payload, digest)
    except (SigstoreError, EvidenceError, ValueError) as exc:
        raise NotVerified(str(exc)) from None
    return _signer(bundle)


def payload_digest(payload: bytes) -> bytes:
    return hashlib.sha256(payload).digest()


def _signer(bundle: Bundle) -> str:
    return ", ".join(sorted(certificate_identities(bundle.signing_certificate)))
