"""What refers to a copied image: signatures, attestations and SBOMs, carried byte for byte.

At the source, for the image's digest: the OCI 1.1 referrers (the referrers API where the registry has it,
else the `sha256-<hex>` fallback tag index) and cosign's older tags (`sha256-<hex>.sig`, `.att`, `.sbom`).
Each artifact is copied by digest (its blobs through the same transfers as the images), the older tags
pushed last. At the target, a registry with the referrers API indexes the artifacts by their `subject`;
for one without, the `sha256-<hex>` fallback index is maintained as the distribution spec describes (the
source's own bytes when it carried the same set and the target listed nothing else; what other tools listed
there is kept). An artifact the target refuses for its manifest class is left out and reported
(`attestations: auto`), or fails the copy (`keep`); one the source cannot serve is left out and reported; an
older tag to which signatures were added at the target is left as it is.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mirror.acr import refuses_manifest_class
from mirror.engine.blobs import TargetBlobs
from mirror.engine.statecache import ManifestCache
from mirror.engine.tasks import gather_or_raise, gather_then_raise
from mirror.engine.tree import ManifestTree
from mirror.engine.upload import BlobOrigin
from mirror.oci import OCI_INDEX, Descriptor, Manifest, ManifestError
from mirror.registry import RegistryClient, RegistryError, RegistryUnreachable
from mirror.untrusted import load_json

log = logging.getLogger("mirror")

LEGACY_TAGS = {".sig": "signature", ".att": "attestation", ".sbom": "sbom"}
UNREADABLE_MANIFEST = "MANIFEST_INVALID"  # what the client says of bytes it fetched but cannot read as a manifest


def fallback_tag(digest: str) -> str:
    """`sha256:abc...` -> `sha256-abc...`: the tag of the referrers fallback index (and cosign's prefix)."""
    algorithm, _, hexpart = digest.partition(":")
    return f"{algorithm}-{hexpart}"


def kind_of(entry: dict[str, Any], manifest: Manifest | None = None) -> str:
    """signature, attestation, sbom or artifact, from the artifact type and the media types it carries. A
    sigstore bundle is a signature when its predicate (annotated by cosign v3) is cosign's signing one. A listing
    is the source's word: annotations that are no mapping count as none."""
    annotations = entry.get("annotations")
    annotated = annotations.get("dev.sigstore.bundle.predicateType") if isinstance(annotations, dict) else None
    predicate = str(annotated or "")
    if predicate and predicate != "https://sigstore.dev/cosign/sign/v1":
        return "sbom" if "spdx" in predicate or "cyclonedx" in predicate else "attestation"
    types = [str(entry.get("artifactType") or ""), str(entry.get("mediaType") or "")]
    if manifest is not None:
        types += [manifest.config.media_type if manifest.config else "", *(b.media_type for b in manifest.layers)]
    text = " ".join(types).lower()
    if "sig" in text and ("cosign" in text or "sigstore" in text):
        return "signature"
    if "in-toto" in text or "dsse" in text:
        return "attestation"
    if "spdx" in text or "cyclonedx" in text or "sbom" in text:
        return "sbom"
    return "artifact"


def index_entries(index: Manifest) -> list[dict[str, Any]]:
    """The descriptors an index lists, as written (artifactType and annotations kept)."""
    return [e for e in load_json(index.raw).get("manifests") or [] if isinstance(e, dict)]


@dataclass(frozen=True, slots=True)
class Referrer:
    digest: str
    kind: str
    via: str  # "referrers" or the older tag that names it
    entry: dict[str, Any]  # the descriptor as the source listed it (artifactType, annotations)
    subject: str = ""  # the digest it refers to: the image's index, or one of its children

    def to_json(self) -> dict[str, str]:
        return {"digest": self.digest, "kind": self.kind, "via": self.via, "subject": self.subject}


@dataclass
class Carried:
    """What went across for one image at one target, and what did not, and why."""

    carried: list[dict[str, str]] = field(default_factory=list)
    left_out: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, list[dict[str, str]]]:
        return {"carried": self.carried, "left_out": self.left_out}


@dataclass(frozen=True, slots=True)
class Found:
    referrers: tuple[Referrer, ...]
    fallback_index: Manifest | None  # the source's `sha256-<hex>` index, when that is how it lists them
    api: bool = True  # did the source answer the referrers API?
    unread_fallback: Descriptor | None = None  # the fallback index's HEAD, its listing not read yet
    subject: str = ""  # the digest they refer to


async def find_referrers(source: RegistryClient, repository: str, digest: str) -> Found:
    """What refers to `digest`, listed in full (`look_up_referrers`, then `read_fallback`)."""
    return await read_fallback(await look_up_referrers(source, repository, digest), source, repository)


async def look_up_referrers(source: RegistryClient, repository: str, digest: str, api: bool = True) -> Found:
    """At once: the referrers API (unless the source is known to lack it), a HEAD of the fallback tag and of
    each older cosign tag. Where the registry has no referrers API and the fallback index exists, its listing
    is left for `read_fallback`: a manifest GET, which whoever needs the listing pays for."""
    prefix = fallback_tag(digest)
    listed, fallback_head, *legacy = await asyncio.gather(
        source.list_referrers(repository, digest) if api else _none(),
        source.head_manifest(repository, prefix),
        *(source.head_manifest(repository, prefix + suffix) for suffix in LEGACY_TAGS),
    )
    entries = [e for e in listed or [] if e.get("digest")]
    referrers = [Referrer(str(e["digest"]), kind_of(e), "referrers", e, digest) for e in entries]
    for (suffix, kind), found in zip(LEGACY_TAGS.items(), legacy, strict=True):
        if isinstance(found, Descriptor):
            referrers.append(Referrer(found.digest, kind, prefix + suffix, {"mediaType": found.media_type}, digest))
    unread = fallback_head if listed is None else None
    return Found(tuple(referrers), None, listed is not None, unread, digest)


async def read_fallback(
    found: Found,
    source: RegistryClient,
    repository: str,
    copies: Sequence[tuple[RegistryClient, str]] = (),
    known: ManifestCache | None = None,
) -> Found:
    """The fallback index's listing added: its bytes as an earlier run kept them, else read by its digest from a
    copy that holds those exact bytes (a target of an earlier run), else from the source, where a manifest GET
    is a counted pull."""
    if found.unread_fallback is None:
        return found
    digest = found.unread_fallback.digest
    fallback = known.get(digest) if known is not None else None
    fallback = fallback or await _held_copy(copies, digest) or await source.get_manifest(repository, digest)
    if known is not None:
        known.put(fallback)
    entries = [e for e in index_entries(fallback) if e.get("digest")]
    listed = tuple(Referrer(str(e["digest"]), kind_of(e), "referrers", e, found.subject) for e in entries)
    return Found(listed + found.referrers, fallback, found.api, None, found.subject)


async def _held_copy(copies: Sequence[tuple[RegistryClient, str]], digest: str) -> Manifest | None:
    """The manifest `digest` from the first copy that has it (checked against the digest as it is read)."""
    for client, repository in copies:
        try:
            return await client.get_manifest(repository, digest)
        except (RegistryError, RegistryUnreachable):
            continue
    return None


async def _none() -> None:
    return None


@dataclass(frozen=True, slots=True)
class ArtifactSource:
    """Where the artifacts are read from: each tree once per run however many targets want it (the run's
    memoised trees), its blobs through the run's origin (the spool, when several targets share them)."""

    tree: Callable[[str], Awaitable[ManifestTree]]
    origin: BlobOrigin


async def carry_referrers(
    source: ArtifactSource,
    target: RegistryClient,
    target_repository: str,
    blobs: TargetBlobs,
    digest: str,
    found: Found,
    attestations: str,
) -> Carried:
    """Copy everything `find_referrers` found for `digest` from the source to the target repository. One that
    cannot go across is left out, logged and reported with why, and the rest carried."""
    report = Carried()
    carried: list[Referrer] = []
    keep = attestations == "keep"
    reasons = await gather_then_raise(
        _copy_artifact(source, target, target_repository, blobs, r, keep) for r in found.referrers
    )
    for referrer, reason in zip(found.referrers, reasons, strict=True):
        if reason is None:
            carried.append(referrer)
            report.carried.append(referrer.to_json())
        else:
            where = target.where(target_repository, digest)
            log.warning("%s: %s %s (%s) left out: %s", where, referrer.kind, referrer.digest, referrer.via, reason)
            report.left_out.append({**referrer.to_json(), "reason": reason})
    listed = [r for r in carried if r.via == "referrers"]
    if listed and await target.list_referrers(target_repository, digest) is None:
        await _update_fallback_index(target, target_repository, digest, listed, found.fallback_index)
    return report


async def _copy_artifact(
    source: ArtifactSource,
    target: RegistryClient,
    target_repository: str,
    blobs: TargetBlobs,
    referrer: Referrer,
    keep: bool,
) -> str | None:
    """Copy one artifact. None when it is there; else why not. The target refusing its manifest class leaves it
    out under `attestations: auto` and fails the copy under `keep` (every referrer must go through); any other
    failure fails the copy, to be tried again by the next run, as an image's would."""
    try:
        return await _copy_or_why_not(source, target, target_repository, blobs, referrer)
    except RegistryError as exc:
        if not refuses_manifest_class(exc):
            raise
        reason = f"refused by the target: {exc.message or exc.code}"
        if keep:
            raise RegistryError(
                "push referrer",
                target.where(target_repository, referrer.digest),
                403,
                "DENIED",
                f"{reason} (with attestations: keep every referrer must go through; auto leaves it out)",
            ) from None
        return reason


async def _copy_or_why_not(
    source: ArtifactSource, target: RegistryClient, target_repository: str, blobs: TargetBlobs, referrer: Referrer
) -> str | None:
    """By digest, then its older tag, if any. An artifact the source cannot serve is left out: a stale entry of
    its fallback index (clients update those indexes after the fact, or not at all after a delete), or a
    manifest mirror cannot read (an OCI 1.1-rc artifact manifest, a nested index, malformed JSON)."""
    tag = None if referrer.via == "referrers" else referrer.via
    present = await target.head_manifest(target_repository, tag or referrer.digest)
    if present is not None and present.digest == referrer.digest:
        return None
    try:
        tree = await source.tree(referrer.digest)
    except (ManifestError, RegistryError) as exc:
        if isinstance(exc, RegistryError) and exc.status != 404 and exc.code != UNREADABLE_MANIFEST:
            raise  # the source failing now (5xx, refusals) is not an artifact it lacks: the next run tries again
        return f"not read at the source: {exc}"
    if tag is not None and present is not None:
        held = await target.get_manifest(target_repository, present.digest)
        if _holds_every_layer(held, tree.root):
            return None  # the source's signatures are there, with others added at the target: leave them be
        if not _holds_every_layer(tree.root, held):
            return f"the target's {tag} holds layers the source's lacks (signed there too?): kept, not to drop them"
    await gather_or_raise(blobs.ensure(target_repository, blob, source.origin) for blob in tree.blobs())
    for manifest in tree.manifests():
        await target.put_manifest(target_repository, manifest.digest, manifest)
    if tag is not None:
        await target.put_manifest(target_repository, tag, tree.root)
    return None


def _holds_every_layer(outer: Manifest, inner: Manifest) -> bool:
    """Does `outer` hold each layer of `inner`? A layer of cosign's older tags is one signature (attestation,
    SBOM): `cosign sign` appends one to the tag's image. Annotations count, as the signature is one of them:
    every signature of an image signs the same payload."""
    held = {(layer.digest, json.dumps(layer.annotations, sort_keys=True)) for layer in outer.layers}
    return all((layer.digest, json.dumps(layer.annotations, sort_keys=True)) in held for layer in inner.layers)


async def _update_fallback_index(
    target: RegistryClient,
    repository: str,
    digest: str,
    carried: list[Referrer],
    source_index: Manifest | None,
) -> None:
    """Keep the target's `sha256-<hex>` index listing every referrer carried, and whatever else it lists (a
    signature or an SBOM another tool added at the target). It is the source's own bytes where it lists nothing
    the source does not and the source's whole set went across; else the entries missing are appended."""
    tag = fallback_tag(digest)
    current = await target.head_manifest(repository, tag)
    if current is not None and source_index is not None and current.digest == source_index.digest:
        return
    held = index_entries(await target.get_manifest(repository, current.digest)) if current is not None else []
    listed = _digests(held)
    wanted = {r.digest: r.entry for r in carried}
    if set(wanted) <= listed:
        return
    if source_index is not None and listed <= set(wanted) and _digests(index_entries(source_index)) == set(wanted):
        await target.put_manifest(repository, tag, source_index)
        return
    entries = held + [entry for each, entry in wanted.items() if each not in listed]
    doc = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
    await target.put_manifest(repository, tag, Manifest.parse(json.dumps(doc, separators=(",", ":")).encode()))


def _digests(entries: list[dict[str, Any]]) -> set[str]:
    return {str(e.get("digest")) for e in entries}
