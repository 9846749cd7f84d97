"""A manifest tree: an index (or a single manifest) and every child manifest, as exact bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

from mirror.engine.statecache import ManifestCache
from mirror.oci import Descriptor, Manifest, ManifestError
from mirror.registry import RegistryClient


@dataclass(frozen=True, slots=True)
class ManifestTree:
    root: Manifest
    children: tuple[Manifest, ...]  # in the index's order; empty for a single manifest

    @property
    def digest(self) -> str:
        return self.root.digest

    @property
    def images(self) -> tuple[Manifest, ...]:
        """The image manifests: the index's children, or the root itself."""
        return self.children if self.root.is_index else (self.root,)

    def blobs(self) -> list[Descriptor]:
        """Every distinct blob of every image, in first-seen order; not foreign layers, which no registry of
        the copy serves (`Manifest.blobs`)."""
        seen: dict[str, Descriptor] = {}
        for manifest in self.images:
            for blob in manifest.blobs:
                seen.setdefault(blob.digest, blob)
        return list(seen.values())

    def manifests(self) -> tuple[Manifest, ...]:
        """Children first, root last: the order in which a registry accepts them."""
        return (*self.children, self.root) if self.root.is_index else (self.root,)

    def entries(self) -> list[tuple[Descriptor, Manifest]]:
        """Each child with the index entry that names it (platform, annotations), in the index's order."""
        named = {entry.digest: entry for entry in self.root.manifests}
        return [(named[child.digest], child) for child in self.children]

    def with_children(self, children: Iterable[Manifest]) -> ManifestTree:
        """The same root over only these of its children (those a target lacks, or a policy keeps)."""
        return ManifestTree(self.root, tuple(children))


async def load_tree(
    client: RegistryClient, repository: str, digest: str, concurrency: int = 8, known: ManifestCache | None = None
) -> ManifestTree:
    """The manifest `digest` and, for an index, each child by digest (each checked against its digest): from
    `known` where an earlier run kept it, else fetched (and kept)."""
    root = await manifest_by_digest(client, repository, digest, known)
    if not root.is_index:
        return ManifestTree(root, ())
    limit = asyncio.Semaphore(concurrency)

    async def fetch(child: Descriptor) -> Manifest:
        async with limit:
            manifest = await manifest_by_digest(client, repository, child.digest, known)
        if manifest.is_index:
            raise ManifestError(f"{client.where(repository, child.digest)}: nested indexes are not supported")
        return manifest

    children = await asyncio.gather(*(fetch(d) for d in root.manifests))
    return ManifestTree(root, tuple(children))


async def manifest_by_digest(
    client: RegistryClient, repository: str, digest: str, known: ManifestCache | None = None
) -> Manifest:
    """A manifest named by its digest: the bytes kept from an earlier read, else a GET (its bytes then kept).
    Says nothing of whether `repository` still holds it."""
    manifest = known.get(digest) if known is not None else None
    if manifest is None:
        manifest = await client.get_manifest(repository, digest)
        if known is not None:
            known.put(manifest)
    return manifest


def known_tree(known: ManifestCache, digest: str) -> ManifestTree | None:
    """The tree `digest` names, where every manifest of it is kept from an earlier read; else None."""
    root = known.get(digest)
    if root is None or not root.is_index:
        return None if root is None else ManifestTree(root, ())
    children = [known.get(d.digest) for d in root.manifests]
    if any(child is None or child.is_index for child in children):
        return None
    return ManifestTree(root, tuple(c for c in children if c is not None))
