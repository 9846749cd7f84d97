"""Executing a target plan: blobs first, then child manifests by digest, then the root by digest, and the
tag last, so a tag at the target never points at something incomplete."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from mirror.engine.blobs import BlobOutcome, TargetBlobs
from mirror.engine.plan import TargetPlan
from mirror.engine.tasks import gather_or_raise
from mirror.engine.upload import BlobOrigin
from mirror.oci import Manifest
from mirror.registry import RegistryClient


@dataclass(frozen=True, slots=True)
class CopyStats:
    counts: Counter[BlobOutcome]
    bytes_uploaded: int


async def copy_to_target(
    plan: TargetPlan,
    tag: str,
    origin: BlobOrigin,
    client: RegistryClient,
    blobs: TargetBlobs,
    manifest_concurrency: int,
    on_bytes: Callable[[int], None] | None = None,
) -> CopyStats:
    repository = plan.target.repository.name
    outcomes = await gather_or_raise(blobs.ensure(repository, blob, origin, on_bytes) for blob in plan.missing_blobs)
    *children, root = plan.manifests
    limit = asyncio.Semaphore(manifest_concurrency)

    async def push_child(child: Manifest) -> None:
        async with limit:
            await client.put_manifest(repository, child.digest, child)

    await gather_or_raise(push_child(child) for child in children)
    await client.put_manifest(repository, root.digest, root)
    await client.put_manifest(repository, tag, root)
    counts = Counter(outcomes)
    counts[BlobOutcome.PRESENT] += len(plan.present_blobs)
    uploaded = sum(b.size for b, o in zip(plan.missing_blobs, outcomes, strict=True) if o is BlobOutcome.UPLOADED)
    return CopyStats(counts, uploaded)
