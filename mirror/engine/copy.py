"""Executing a target plan: blobs first, then child manifests by digest, then the root by digest, and the
tag last, so a tag at the target never points at something incomplete. Under `attestations: auto`, a
non-image child the target refuses for its manifest class is left out and the index is rewritten."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from mirror.acr import refuses_manifest_class
from mirror.engine.blobs import BlobOutcome, TargetBlobs
from mirror.engine.plan import TargetPlan
from mirror.engine.policy import Dropped, is_runnable, policy_text, rewrite_index
from mirror.engine.tasks import gather_or_raise
from mirror.engine.upload import BlobOrigin
from mirror.oci import Descriptor, Manifest
from mirror.registry import RegistryClient, RegistryError


@dataclass(frozen=True, slots=True)
class CopyStats:
    counts: Counter[BlobOutcome]
    bytes_uploaded: int
    root: Manifest  # what the tag points at now
    dropped: tuple[Dropped, ...]  # every entry left out, by policy or by refusal


async def copy_to_target(
    plan: TargetPlan,
    tag: str,
    origin: BlobOrigin,
    client: RegistryClient,
    blobs: TargetBlobs,
    manifest_concurrency: int,
    attestations: str = "auto",
    on_bytes: Callable[[int], None] | None = None,
    platforms: list[str] | None = None,
) -> CopyStats:
    repository = plan.target.repository.name
    outcomes = await gather_or_raise(blobs.ensure(repository, blob, origin, on_bytes) for blob in plan.missing_blobs)
    *children, root = plan.manifests
    limit = asyncio.Semaphore(manifest_concurrency)

    entries = {d.digest: d for d in root.manifests}
    refused: list[Dropped] = []

    async def push_child(child: Manifest) -> None:
        async with limit:
            try:
                await client.put_manifest(repository, child.digest, child)
            except RegistryError as exc:
                entry = entries[child.digest]
                if not refuses_manifest_class(exc) or is_runnable(entry, child):
                    raise
                if attestations != "auto":
                    raise _copied_whole(exc, entry, attestations) from exc
                refused.append(
                    Dropped(child.digest, entry.platform, f"refused by the target: {exc.message or exc.code}")
                )

    await gather_or_raise(push_child(child) for child in children)
    if refused:
        source_root = plan.source_root or root
        keep = set(entries) - {d.digest for d in refused}
        root = rewrite_index(source_root, keep, policy_text(attestations, platforms))
    await client.put_manifest(repository, root.digest, root)
    await client.put_manifest(repository, tag, root)
    counts = Counter(outcomes)
    counts[BlobOutcome.PRESENT] += len(plan.present_blobs)
    uploaded = sum(b.size for b, o in zip(plan.missing_blobs, outcomes, strict=True) if o is BlobOutcome.UPLOADED)
    return CopyStats(counts, uploaded, root, (*plan.dropped, *refused))


def _copied_whole(refusal: RegistryError, entry: Descriptor, attestations: str) -> RegistryError:
    """The target's refusal of a non-image entry where the policy copies the index byte for byte."""
    return RegistryError(
        refusal.action,
        refusal.where,
        refusal.status,
        refusal.code,
        f"{refusal.message} (a non-image entry, platform {entry.platform}; with attestations: "
        f"{attestations} the index is copied byte for byte: use auto or drop for this target)",
    )
