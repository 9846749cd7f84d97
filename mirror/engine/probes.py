"""HEADs at a target, each asked once per run and shared by every stage that wants the answer.

Where the source tree is known by digest before the target's tag has answered (`ManifestCache`), every child
manifest and blob the target should hold is asked at once, in the same wave as the tag: a no-op then verifies in
one round trip, and a copy plans from the same answers. An answer is what the target held when asked; what the
run pushes afterwards is known to `TargetBlobs`, not here."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from mirror.engine.tasks import cancel_all, memoised
from mirror.engine.tree import ManifestTree
from mirror.oci import Descriptor
from mirror.registry import RegistryClient

T = TypeVar("T")


class TargetProbes:
    def __init__(self, client: RegistryClient, concurrency: int) -> None:
        self.client = client
        self._limit = asyncio.Semaphore(concurrency)  # kept here, not in the connection pool's queue
        self._manifests: dict[tuple[str, str], asyncio.Future[Descriptor | None]] = {}
        self._blobs: dict[tuple[str, str], asyncio.Future[int | None]] = {}

    def manifest(self, repository: str, digest: str) -> asyncio.Future[Descriptor | None]:
        """The manifest `digest` as the target's HEAD describes it, or None where it lacks it."""
        ask = self.client.head_manifest
        return memoised(self._manifests, (repository, digest), lambda: self._limited(ask(repository, digest)))

    def blob(self, repository: str, digest: str) -> asyncio.Future[int | None]:
        """The blob's size at the target, or None where it lacks it."""
        ask = self.client.head_blob
        return memoised(self._blobs, (repository, digest), lambda: self._limited(ask(repository, digest)))

    def tree(self, repository: str, tree: ManifestTree) -> None:
        """Ask at once for every child manifest and blob of `tree` (the root is answered by its tag's HEAD)."""
        for child in tree.children:
            self.manifest(repository, child.digest)
        for blob in tree.blobs():
            self.blob(repository, blob.digest)

    def cancel_pending(self) -> None:
        cancel_all(self._manifests, self._blobs)

    async def _limited(self, request: Awaitable[T]) -> T:
        async with self._limit:
            return await request
