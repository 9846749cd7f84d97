"""The plan: for each image and target, what is already there and what must be copied. Plain data, so a
dry run prints it, the copy executes it and the report is built from it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mirror.engine.blobs import TargetBlobs
from mirror.engine.jobs import TargetRef
from mirror.engine.policy import Dropped, is_runnable, policy_text, rewrite_index, select
from mirror.engine.tree import ManifestTree
from mirror.oci import Descriptor, Manifest, ManifestError


@dataclass(frozen=True, slots=True)
class TargetPlan:
    target: TargetRef
    manifests: tuple[Manifest, ...]  # to push by digest, children first, the root (to be tagged) last
    present_manifests: int = 0
    missing_blobs: tuple[Descriptor, ...] = ()
    present_blobs: tuple[Descriptor, ...] = ()
    source_root: Manifest | None = None  # set when the root is a rewrite of this source index
    dropped: tuple[Dropped, ...] = ()

    @property
    def bytes_to_copy(self) -> int:
        return sum(b.size for b in self.missing_blobs)

    def describe(self) -> str:
        text = (
            f"push {len(self.manifests)} manifest(s) ({self.present_manifests} present), "
            f"copy or mount {len(self.missing_blobs)} blob(s) ({_mb(self.bytes_to_copy)}), "
            f"skip {len(self.present_blobs)} present blob(s)"
        )
        if self.dropped:
            text += f", leave out {len(self.dropped)} index entr{'y' if len(self.dropped) == 1 else 'ies'}"
        return text


def _mb(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB"


def apply_policy(
    tree: ManifestTree, attestations: str, platforms: list[str] | None
) -> tuple[ManifestTree, tuple[Dropped, ...]]:
    """The tree this target gets: the source's, or a rewritten index without the entries left out."""
    if not tree.root.is_index:
        return tree, ()
    kept, dropped = select(tree, attestations, platforms)
    if not dropped:
        return tree, ()
    policy = policy_text(attestations, platforms)
    rewritten = ManifestTree(rewrite_index(tree.root, {m.digest for m in kept}, policy), tuple(kept))
    if not any(is_runnable(entry, child) for entry, child in rewritten.entries()):
        raise ManifestError(f"index {tree.digest}: no image is left after the platform filter {platforms}")
    return rewritten, tuple(dropped)


async def plan_target(
    ref: TargetRef,
    tree: ManifestTree,
    blobs: TargetBlobs,
    source_root: Manifest | None = None,
    dropped: tuple[Dropped, ...] = (),
    every_blob: bool = False,
) -> TargetPlan:
    """Each child manifest and each blob the missing children need (`every_blob`: every child's, where a blob
    may be missing under a manifest that is there), as the target's HEADs answer (asked once per run: the
    answers may have been asked for before the tag's, `probes.py`)."""
    repository = ref.repository.name
    found = await asyncio.gather(*(asyncio.shield(blobs.probes.manifest(repository, c.digest)) for c in tree.children))
    missing = tree.with_children(child for child, there in zip(tree.children, found, strict=True) if there is None)
    needed = tree.blobs() if every_blob else missing.blobs()
    exists = await asyncio.gather(*(blobs.exists(repository, b) for b in needed))
    return TargetPlan(
        target=ref,
        source_root=source_root,
        dropped=dropped,
        manifests=missing.manifests(),
        present_manifests=len(tree.children) - len(missing.children),
        missing_blobs=tuple(b for b, ok in zip(needed, exists, strict=True) if not ok),
        present_blobs=tuple(b for b, ok in zip(needed, exists, strict=True) if ok),
    )
