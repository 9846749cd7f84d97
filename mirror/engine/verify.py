"""Verification at the target: the tag resolves to the expected digest, every child manifest resolves by
digest, every blob is there with the right size (and, with deep, the right sha256). Foreign layers are not
checked: the target never holds them, nodes fetch them from their `urls`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mirror.engine.probes import TargetProbes
from mirror.engine.statecache import ManifestCache
from mirror.engine.stream import verified_stream
from mirror.engine.tasks import gather_or_raise
from mirror.engine.tree import manifest_by_digest
from mirror.engine.upload import CountingOrigin, RegistryOrigin, is_transient
from mirror.oci import Descriptor, Manifest, ManifestError
from mirror.registry import RegistryClient, RegistryError
from mirror.registry.errors import IntegrityError
from mirror.registry.retry import retry_step


@dataclass(frozen=True, slots=True)
class Known:
    """What the run knows without reading the target: manifests by digest, and its HEADs there (asked once)."""

    manifests: ManifestCache
    probes: TargetProbes | None  # None after a copy: the answers asked before it are out of date


@dataclass(frozen=True, slots=True)
class Verification:
    problems: tuple[str, ...]
    children: tuple[Descriptor, ...] | None = None  # the index's entries, when the root was read

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
    known: Known | None = None,
) -> Verification:
    """`children`, when given, is exactly the list of child digests the index must hold; `resolved`, the
    tag's descriptor when the caller has just read it (no second HEAD); `tag_only`, after a copy whose every
    push the registry confirmed (digests checked), asks only that the tag resolves to the root; `known`, the
    manifests kept by earlier runs (their presence is asked with a HEAD alongside their blobs, not re-read) and
    the run's HEADs at the target, asked once."""
    where = client.where(repository, tag)
    resolved = resolved or await client.head_manifest(repository, tag)
    if resolved is None:
        return Verification((f"{where}: tag not found",))
    if resolved.digest != digest:
        return Verification((f"{where}: tag resolves to {resolved.digest}, expected {digest}",))
    if tag_only and not deep:
        return Verification(())
    checks = _BlobChecks(client, repository, deep, asyncio.Semaphore(concurrency), known)
    try:
        root = await manifest_by_digest(
            client, repository, digest, known.manifests if known else None
        )  # the tag named it
        if children is not None and [m.digest for m in root.manifests] != children:
            return Verification((f"{where}: the index holds other children than expected",))
        if root.is_index:
            results = await gather_or_raise(checks.child(d.digest) for d in root.manifests)
            problems = [p for found in results for p in found if p]
        else:
            problems = [p for p in await checks.image(root) if p]
    except (RegistryError, ManifestError) as exc:
        return Verification((str(exc),))
    finally:
        checks.cancel()  # whatever ended it (a failure, a cancellation), no check reads on after it
    return Verification(tuple(dict.fromkeys(problems)), tuple(root.manifests))


class _BlobChecks:
    """Each blob checked once, however many images share it, as soon as the first manifest naming it arrives."""

    def __init__(
        self,
        client: RegistryClient,
        repository: str,
        deep: bool,
        limit: asyncio.Semaphore,
        known: Known | None,
    ) -> None:
        self.client = client
        self.repository = repository
        self.deep = deep
        self.limit = limit
        self.known = known
        self._checks: dict[str, asyncio.Task[str | None]] = {}

    async def child(self, digest: str) -> list[str | None]:
        """A child manifest and its blobs: its bytes read at the target, or, where they are known by digest,
        its presence asked in the same wave as its blobs'."""
        manifest = self.known.manifests.get(digest) if self.known is not None else None
        if manifest is None:
            async with self.limit:
                manifest = await manifest_by_digest(
                    self.client, self.repository, digest, self.known.manifests if self.known else None
                )
            return await self.image(manifest)
        present, blobs = await asyncio.gather(self._manifest_problem(digest), self.image(manifest))
        return [present, *blobs]

    async def _manifest_problem(self, digest: str) -> str | None:
        if self.known is not None and self.known.probes is not None:
            found = await asyncio.shield(self.known.probes.manifest(self.repository, digest))
        else:
            async with self.limit:
                found = await self.client.head_manifest(self.repository, digest)
        if found is None or found.digest != digest:
            return f"{self.client.where(self.repository, digest)}: manifest missing"
        return None

    async def image(self, manifest: Manifest) -> list[str | None]:
        return list(await asyncio.gather(*(self._check(blob) for blob in manifest.blobs)))

    def _check(self, blob: Descriptor) -> asyncio.Task[str | None]:
        task = self._checks.get(blob.digest)
        if task is None:
            task = self._checks[blob.digest] = asyncio.ensure_future(self._problem(blob))
        return task

    async def _problem(self, blob: Descriptor) -> str | None:
        where = self.client.where(self.repository, blob.digest)
        if self.deep:
            async with self.limit:
                return await hash_blob(self.client, self.repository, blob)
        if self.known is not None and self.known.probes is not None:
            size = await asyncio.shield(self.known.probes.blob(self.repository, blob.digest))
        else:
            async with self.limit:
                size = await self.client.head_blob(self.repository, blob.digest)
        if size is None:
            return f"{where}: blob missing"
        if size != blob.size:
            return f"{where}: blob is {size} bytes, expected {blob.size}"
        return None

    def cancel(self) -> None:
        for task in self._checks.values():
            task.cancel()


async def hash_blob(client: RegistryClient, repository: str, blob: Descriptor) -> str | None:
    """Re-read a blob at the target: a problem, or None when its bytes match its descriptor. A read that fails
    in passing (a reset mid-body) is read again under the client's retry policy, as a transfer is, its clock
    started again by an attempt that read some of the blob."""
    sender = client.where(repository)
    origin = CountingOrigin(RegistryOrigin(client, repository))

    async def read(attempt: int) -> str | None:
        try:
            async with origin.open(blob) as body:
                async for _ in verified_stream(body.chunks, blob, sender=sender):
                    pass
        except IntegrityError as exc:  # the copy's bytes are wrong: a finding, not a failure to read them
            return str(exc)
        return None

    what = f"the check of {client.where(repository, blob.digest)}"
    return await retry_step(client.retry, read, is_transient, what, progress=lambda: origin.read)
