"""What one run learns once and shares: the registry clients, each target registry's blobs, the spool, the
source trees, and what refers to each source digest. Each entry is a memoised task, started by the first stage
that needs it and awaited by every other; nothing here decides anything."""

from __future__ import annotations

import asyncio
import logging

from mirror.engine.blobs import TargetBlobs
from mirror.engine.clients import Clients, open_client, retry_policy
from mirror.engine.fanout import Spool
from mirror.engine.jobs import ImageJob, TargetRef
from mirror.engine.referrers import Found, look_up_referrers, read_fallback
from mirror.engine.shutdown import Shutdown
from mirror.engine.statecache import LastDigests, ManifestCache, RegistryNotes
from mirror.engine.tasks import cancel_all, memoised, started
from mirror.engine.tree import ManifestTree, load_tree
from mirror.engine.upload import BlobOrigin, RegistryOrigin
from mirror.oci import Descriptor
from mirror.registry import RegistryClient
from mirror.settings import MirrorSettings

ReferrerKey = tuple[str, str, str]  # source registry, repository, digest

log = logging.getLogger("mirror")


class RunCache:
    def __init__(self, settings: MirrorSettings, clients: Clients, shutdown: Shutdown) -> None:
        self.settings = settings
        self.clients = clients
        self.shutdown = shutdown
        transfer = settings.transfer
        self.run_transfer_limit = asyncio.Semaphore(transfer.run_blob_concurrency)
        self.spool = Spool(settings.spool.max_bytes, transfer.chunk_size, settings.spool.dir)
        self.blobs: dict[str, TargetBlobs] = {}
        self._trees: dict[str, asyncio.Future[ManifestTree]] = {}
        self._held_trees: dict[tuple[str, str, str], asyncio.Future[ManifestTree]] = {}
        self._referrers: dict[ReferrerKey, asyncio.Future[Found]] = {}
        self._referrer_heads: dict[ReferrerKey, asyncio.Future[Found]] = {}
        self._anonymous: dict[str, RegistryClient] = {}
        self.manifests = ManifestCache(settings.state_dir)
        self.notes = RegistryNotes(settings.state_dir)
        self.last_digests = LastDigests(settings.state_dir)

    def blobs_at(self, host: str, repositories: frozenset[str]) -> TargetBlobs:
        """What the run knows a target registry holds, and its one transfer per blob."""
        state = self.blobs.get(host)
        if state is None:
            transfer = self.settings.transfer
            state = self.blobs[host] = TargetBlobs(
                self.clients[host],
                asyncio.Semaphore(transfer.blob_concurrency),
                self.run_transfer_limit,
                repositories,
                retry_policy(self.settings.retry),
                transfer.chunked_upload_threshold,
                transfer.upload_chunk_size,
                self.shutdown,
                transfer.max_blob_size,
                self.settings.registry(host).max_connections,
            )
        return state

    def origin_for(self, job: ImageJob) -> BlobOrigin:
        """The source repository, read through its blob reader (a client of its own where the host is also a
        target); through the spool when several targets want the same blobs."""
        source = RegistryOrigin(self.clients.reader(job.source.registry), job.source.name)
        return self.spool.origin(source) if len(job.targets) > 1 else source

    def source_tree(self, job: ImageJob, digest: str) -> asyncio.Future[ManifestTree]:
        source, concurrency = self.clients[job.source.registry], self.settings.transfer.manifest_concurrency
        return memoised(
            self._trees, digest, lambda: load_tree(source, job.source.name, digest, concurrency, self.manifests)
        )

    def tree_at_target(self, ref: TargetRef, digest: str) -> asyncio.Future[ManifestTree]:
        """A tree a target holds under the source's own digest, read there or from the kept manifests (each
        manifest checked against its digest). Apart from `source_tree`: a target missing part of its copy fails
        only its own read."""
        target, concurrency = self.clients[ref.repository.registry], self.settings.transfer.manifest_concurrency
        key = (ref.repository.registry, ref.repository.name, digest)
        return memoised(
            self._held_trees, key, lambda: load_tree(target, ref.repository.name, digest, concurrency, self.manifests)
        )

    def target_tag(self, job: ImageJob, ref: TargetRef) -> asyncio.Task[Descriptor | None]:
        """The target tag's descriptor, asked at once (not memoised: each tag is asked once per image)."""
        client = self.clients[ref.repository.registry]
        return started(client.head_manifest(ref.repository.name, job.tag))

    def look_up_referrers(self, job: ImageJob, digest: str, api: bool = True) -> asyncio.Future[Found]:
        """The HEADs (and the referrers API) of the look-up, started as soon as the source digest is known; the
        fallback index's listing, a manifest GET, is read only when something needs it (`referrers_of`)."""
        key = (job.source.registry, job.source.name, digest)
        return memoised(self._referrer_heads, key, lambda: self._looked_up(job, digest, api))

    async def _looked_up(self, job: ImageJob, digest: str, api: bool) -> Found:
        """The look-up, without the referrers API where the source lacked it within the last day."""
        host = job.source.registry
        asked = api and not self.notes.lacks_referrers_api(host)
        found = await look_up_referrers(self.clients[host], job.source.name, digest, asked)
        if asked:
            self.notes.note_referrers_api(host, found.api)
        return found

    def referrers_of(self, job: ImageJob, digest: str, api: bool = True) -> asyncio.Future[Found]:
        """What refers to a source digest, listed in full, once per run for the gate and every target. `api`:
        False once the source is known to lack the referrers API (its tags are still looked at)."""
        key = (job.source.registry, job.source.name, digest)
        return memoised(self._referrers, key, lambda: self._listed(job, digest, api))

    async def _listed(self, job: ImageJob, digest: str, api: bool) -> Found:
        """The look-up's HEADs, then the fallback index's listing, read from a target that holds its exact bytes
        (an earlier run's copy) where one does, so a re-run sends the source no GET for it."""
        heads = await asyncio.shield(self.look_up_referrers(job, digest, api))
        copies = [(self.clients[ref.repository.registry], ref.repository.name) for ref in job.targets]
        return await read_fallback(heads, self.clients[job.source.registry], job.source.name, copies, self.manifests)

    def anonymous_client(self, host: str) -> RegistryClient:
        client = self._anonymous.get(host)
        if client is None:
            client = self._anonymous[host] = open_client(
                self.settings, host, anonymous=True, on_retry_status=self.clients.on_retry_status
            )
        return client

    async def _let_uploads_finish(self) -> None:
        """After SIGTERM an image fails as soon as one of its blobs is refused a start, while others of its
        uploads may still be under way. Those get the grace period as promised (the next run then skips their
        blobs): the run waits for them here, and the grace period's end cancels them."""
        uploads = [task for blobs in self.blobs.values() for task in blobs.in_flight()]
        if uploads:
            log.warning("%d blob upload(s) still under way: waiting for them within the grace period", len(uploads))
            await asyncio.wait(uploads)

    def cancel_pending(self) -> None:
        """Stop the shared work still under way: the run is abandoned at shutdown, or over."""
        for blobs in self.blobs.values():
            blobs.cancel_pending()
        cancel_all(self._trees, self._held_trees, self._referrers, self._referrer_heads)

    async def aclose(self) -> None:
        try:
            if self.shutdown.stopping:
                await self._let_uploads_finish()
        finally:
            self.cancel_pending()
        await self.spool.aclose()
        self.notes.save()
        self.last_digests.save()
        await asyncio.gather(*(client.aclose() for client in self._anonymous.values()))
