"""The plan: for each image and target, what is already there and what must be copied. Plain data, so a
dry run prints it, the copy executes it and the report is built from it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from mirror.engine.blobs import TargetBlobs
from mirror.engine.jobs import ImageJob, TargetRef
from mirror.engine.tree import ManifestTree
from mirror.oci import Descriptor, Manifest
from mirror.registry import RegistryClient


@dataclass(frozen=True, slots=True)
class TargetPlan:
    target: TargetRef
    up_to_date: bool  # the target tag already points at the source digest: verify only
    manifests: tuple[Manifest, ...] = ()  # to push by digest, children first (the root is always last)
    present_manifests: int = 0
    missing_blobs: tuple[Descriptor, ...] = ()
    present_blobs: tuple[Descriptor, ...] = ()

    @property
    def bytes_to_copy(self) -> int:
        return sum(b.size for b in self.missing_blobs)

    def describe(self) -> str:
        if self.up_to_date:
            return "up to date (tag already at the source digest): verify only"
        return (
            f"push {len(self.manifests)} manifest(s) ({self.present_manifests} present), "
            f"copy or mount {len(self.missing_blobs)} blob(s) ({_mb(self.bytes_to_copy)}), "
            f"skip {len(self.present_blobs)} present blob(s)"
        )


@dataclass(frozen=True, slots=True)
class ImagePlan:
    job: ImageJob
    source: Descriptor  # the source tag's descriptor
    tree: ManifestTree | None  # fetched only when some target needs a copy
    targets: tuple[TargetPlan, ...] = field(default=())


def _mb(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB"


async def plan_target(ref: TargetRef, tree: ManifestTree, blobs: TargetBlobs, client: RegistryClient) -> TargetPlan:
    """HEAD each child manifest and each blob the missing children need."""
    repository = ref.repository.name
    missing_children: list[Manifest] = []
    present = 0
    for child in tree.children:
        if await client.head_manifest(repository, child.digest) is None:
            missing_children.append(child)
        else:
            present += 1
    images = [m for m in missing_children] if tree.root.is_index else [tree.root]
    needed: dict[str, Descriptor] = {}
    for manifest in images:
        for blob in manifest.blobs:
            needed.setdefault(blob.digest, blob)
    exists = await asyncio.gather(*(blobs.exists(repository, b) for b in needed.values()))
    return TargetPlan(
        target=ref,
        up_to_date=False,
        manifests=(*missing_children, tree.root) if tree.root.is_index else (tree.root,),
        present_manifests=present,
        missing_blobs=tuple(b for b, ok in zip(needed.values(), exists, strict=True) if not ok),
        present_blobs=tuple(b for b, ok in zip(needed.values(), exists, strict=True) if ok),
    )
