"""HEADs at a target, each asked once per run and shared by every stage that wants the answer.

Where the source tree is known by digest before the target's tag has answered (`ManifestCache`), every child
manifest and blob the target should hold is asked at once, in the same wave as the tag: a no-op then verifies in
one round trip, and a copy plans from the same answers. An answer is what the target held when asked; what the
run pushes afterwards is known to `TargetBlobs`, not here.

`pulls_anonymously`: whether something the run holds at a target (an image's tag, a published chart) can be
pulled without credentials."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from mirror import acr
from mirror.engine.tasks import cancel_all, memoised
from mirror.engine.tree import ManifestTree
from mirror.errors import MirrorError
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


async def pulls_anonymously(
    client: RegistryClient, anonymous: Callable[[str], RegistryClient], repository: str, tag: str, found: bool = True
) -> bool:
    """Can a client without credentials (a node, Helm not logged in) pull `repository:tag`? No where the edition
    never allows it; where the registry never challenged `client` (the run's own for the registry), its look at the
    tag (`found`) went without credentials and is the answer; else one `HEAD` by the run's anonymous client for
    the host (`anonymous`), within the run's deadline: an answer without the tag, or no answer, is a no."""
    host = client.host
    if acr.allows_anonymous_pull(host) is False:
        return False
    if client.answers_anyone:
        return found
    try:
        return await anonymous(host).head_manifest(repository, tag) is not None
    except MirrorError:
        return False
