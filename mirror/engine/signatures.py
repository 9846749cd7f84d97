"""The signature gate: before an image is copied, its digest must carry a signature by the identity its rule
names, verified with sigstore-python. A copy made earlier holds the signatures byte for byte, so where a target
already has the digest its copies are checked first and the source is not read (a re-run costs the source
nothing more); otherwise, or if none holds there, the signatures the source lists (the same look-up that
carries them to the targets). Nothing of an image that fails is copied; the run says why."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from mirror.engine.referrers import Found, Referrer, find_referrers
from mirror.errors import Kind, MirrorError
from mirror.fetch import http_client
from mirror.oci import Descriptor
from mirror.registry import RegistryClient
from mirror.registry.retry import RetryPolicy
from mirror.settings import SignatureRule
from mirror.signing.bundles import (
    SIGNATURE_ANNOTATION,
    SIGSTORE_BUNDLE_TYPES,
    SIMPLE_SIGNING,
    EvidenceError,
    LegacySignature,
    legacy_bundle,
)
from mirror.signing.policy import Expected, SignerPolicy
from mirror.signing.rekor import fetch_entry
from mirror.signing.verify import NotVerified, Trust, payload_digest, verify_bundle, verify_legacy

log = logging.getLogger("mirror")


@dataclass(frozen=True, slots=True)
class SignatureCheck:
    policy: str
    signer: str | None = None  # the identity that signed, when a signature held
    via: str | None = None  # the referrer or tag it was found through
    refused: str | None = None  # why the image is not mirrored

    def to_json(self) -> dict[str, str]:
        return {
            k: v
            for k, v in (("policy", self.policy), ("signer", self.signer), ("via", self.via), ("refused", self.refused))
            if v
        }


@dataclass(frozen=True, slots=True)
class HeldCopy:
    """A target repository whose tag already points at the source digest."""

    target: str
    client: RegistryClient
    repository: str


def policy_of(rule: SignatureRule) -> SignerPolicy:
    identity = Expected(rule.identity_regexp, pattern=True) if rule.identity_regexp else Expected(str(rule.identity))
    issuer = Expected(rule.issuer_regexp, pattern=True) if rule.issuer_regexp else Expected(str(rule.issuer))
    return SignerPolicy(identity, issuer)


class SignatureGate:
    """One per run: the trusted root (loaded once, on first use) and a client for Rekor look-ups."""

    def __init__(self, trusted_root: Path | None, max_bytes: int, rekor: httpx.AsyncClient) -> None:
        self.trusted_root = trusted_root
        self.max_bytes = max_bytes
        self.rekor = rekor
        self._trust: asyncio.Task[Trust] | None = None

    @classmethod
    def open(
        cls, trusted_root: Path | None, max_bytes: int, timeout: float, retry: RetryPolicy, deadline: float
    ) -> SignatureGate:
        return cls(trusted_root, max_bytes, http_client(timeout, retry, deadline))

    async def aclose(self) -> None:
        if self._trust is not None:
            self._trust.cancel()
        await self.rekor.aclose()

    async def trust(self) -> Trust:
        if self._trust is None:
            self._trust = asyncio.ensure_future(asyncio.to_thread(Trust.load, self.trusted_root))
        return await asyncio.shield(self._trust)

    async def check(
        self, registry: RegistryClient, repository: str, digest: str, found: Found, rule: SignatureRule
    ) -> SignatureCheck:
        """The first signature `found` in `registry` that holds for `digest` under the rule, else why none."""
        policy = policy_of(rule)
        described = policy.describe()
        try:
            trust = await self.trust()
        except NotVerified as exc:
            return SignatureCheck(described, refused=str(exc))
        signatures = [r for r in found.referrers if r.kind == "signature"]
        if not signatures:
            return SignatureCheck(described, refused=f"unsigned: no signature at the source refers to {digest}")
        reasons: list[str] = []
        for referrer in signatures:
            try:
                signer = await self._verify_artifact(registry, repository, digest, referrer, policy, trust)
            except (NotVerified, EvidenceError) as exc:
                reasons.append(f"{referrer.via} {referrer.digest[:19]}: {exc}")
                continue
            except MirrorError as exc:  # one that cannot be read (a stale listing, a corrupt blob) holds nothing
                if exc.kind is Kind.INTERRUPTED:
                    raise
                reasons.append(f"{referrer.via} {referrer.digest[:19]}: not read: {exc}")
                continue
            return SignatureCheck(described, signer=signer, via=referrer.via)
        return SignatureCheck(described, refused=f"no signature by {described} holds: " + "; ".join(reasons))

    async def _verify_artifact(
        self,
        registry: RegistryClient,
        repository: str,
        digest: str,
        referrer: Referrer,
        policy: SignerPolicy,
        trust: Trust,
    ) -> str:
        """The signer of the first layer that holds: a sigstore bundle, or one of a `.sig` image's layers
        (cosign adds a layer there for each signature)."""
        manifest = await registry.get_manifest(repository, referrer.digest)
        problems: list[str] = []
        for layer in manifest.layers:
            try:
                if layer.media_type in SIGSTORE_BUNDLE_TYPES:
                    raw = await self._small_blob(registry, repository, layer)
                    return await asyncio.to_thread(verify_bundle, trust, raw, digest, policy)
                if layer.media_type == SIMPLE_SIGNING and SIGNATURE_ANNOTATION in layer.annotations:
                    signature = LegacySignature.from_annotations(layer.annotations)
                    payload = await self._small_blob(registry, repository, layer)
                    answer = await fetch_entry(self.rekor, trust.rekor_url, signature.log_index, self.max_bytes)
                    bundle = legacy_bundle(signature, payload_digest(payload), answer)
                    return await asyncio.to_thread(verify_legacy, trust, payload, bundle, digest, policy)
            except (NotVerified, EvidenceError) as exc:
                problems.append(str(exc))
            except MirrorError as exc:
                if exc.kind is Kind.INTERRUPTED:
                    raise
                problems.append(f"not read: {exc}")
        if problems:
            raise NotVerified("; ".join(problems))
        raise EvidenceError("no sigstore bundle or signed payload in it")

    async def _small_blob(self, registry: RegistryClient, repository: str, layer: Descriptor) -> bytes:
        if layer.size > self.max_bytes:
            raise EvidenceError(f"a {layer.size}-byte layer, over signatures.max_bytes ({self.max_bytes})")
        return await registry.read_blob(repository, layer)


async def check_image(
    gate: SignatureGate,
    rule: SignatureRule,
    digest: str,
    source: RegistryClient,
    source_repository: str,
    source_found: Callable[[], Awaitable[Found]],
    copies: list[HeldCopy],
) -> SignatureCheck:
    """The first signature that holds, at a target that has the digest already, else at the source (also where
    a target's copy cannot be read, or its bytes are not what they should be: the source decides, not one
    target's refusal or corruption)."""
    for copy in copies:
        try:
            found = await find_referrers(copy.client, copy.repository, digest)
            if any(r.kind == "signature" for r in found.referrers):
                check = await gate.check(copy.client, copy.repository, digest, found, rule)
                if not check.refused:
                    return replace(check, via=f"{check.via} at {copy.target}")
        except MirrorError as exc:
            if exc.kind is Kind.INTERRUPTED:
                raise
            log.info(
                "%s@%s: its signatures at %s not read (%s); checking the source",
                source_repository,
                digest,
                copy.target,
                exc,
            )
    return await gate.check(source, source_repository, digest, await source_found(), rule)
