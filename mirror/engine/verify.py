"""Verification at the target: the tag resolves to the expected digest, every child manifest resolves by
digest, every blob is there with the right size (and, with deep, the right sha256)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mirror.engine.stream import hash_blob
from mirror.oci import Descriptor, Manifest, ManifestError
from mirror.registry import RegistryClient, RegistryError


@dataclass(frozen=True, slots=True)
class Verification:
    problems: tuple[str, ...]
    children: tuple[str, ...] | None = None  # the index's child digests, when the root was read

    @property
    def ok(self) -> bool:
        return not self.problems


async def verify_copy(
    client: RegistryClient,
    repository: str,
    tag: str,
    digest: str,
    deep: bool = False,
    concurrency: int = 8,
    children: list[str] | None = None,
    resolved: Descriptor | None = None,
    tag_only: bool = False,
) -> Verification:
    """`children`, when given, is exactly the list of child digests the index must hold; `resolved`, the
    tag's descriptor when the caller has just read it (no second HEAD); `tag_only`, after a copy whose every
    push the registry confirmed (digests checked), asks only that the tag resolves to the root."""
    where = client.where(repository, tag)
    resolved = resolved or await client.head_manifest(repository, tag)
    if resolved is None:
        return Verification((f"{where}: tag not found",))
    if resolved.digest != digest:
        return Verification((f"{where}: tag resolves to {resolved.digest}, expected {digest}",))
    if tag_only and not deep:
        return Verification(())
    limit = asyncio.Semaphore(concurrency)
    checks: dict[str, asyncio.Future[str | None]] = {}

    async def check(blob: Descriptor) -> str | None:
        async with limit:
            if deep:
                return await hash_blob(client, repository, blob)
            size = await client.head_blob(repository, blob.digest)
        if size is None:
            return f"{client.where(repository, blob.digest)}: blob missing"
        if size != blob.size:
            return f"{client.where(repository, blob.digest)}: blob is {size} bytes, expected {blob.size}"
        return None

    async def check_image(manifest: Manifest) -> list[str | None]:
        # each blob once, however many images share it; checked as soon as its manifest arrives
        futures = [checks.setdefault(b.digest, asyncio.ensure_future(check(b))) for b in manifest.blobs]
        return list(await asyncio.gather(*futures))

    async def check_child(digest: str) -> list[str | None]:
        async with limit:
            child = await client.get_manifest(repository, digest)
        return await check_image(child)

    try:
        root = await client.get_manifest(repository, digest)
        if children is not None and [m.digest for m in root.manifests] != children:
            return Verification((f"{where}: the index holds other children than expected",))
        if root.is_index:
            results = await asyncio.gather(*(check_child(d.digest) for d in root.manifests))
            problems = [p for found in results for p in found if p]
        else:
            problems = [p for p in await check_image(root) if p]
    except (RegistryError, ManifestError) as exc:
        for future in checks.values():
            future.cancel()
        return Verification((str(exc),))
    return Verification(tuple(dict.fromkeys(problems)), tuple(d.digest for d in root.manifests))
