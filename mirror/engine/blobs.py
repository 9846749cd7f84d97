"""Getting blobs into a target registry: skip, mount or stream, each blob once per target in a run."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from mirror.engine.probes import TargetProbes
from mirror.engine.shutdown import Interrupted, Shutdown
from mirror.engine.tasks import cancel_all, memoised
from mirror.engine.upload import (
    BlobOrigin,
    BlobUpload,
    ChunkedUpload,
    ChunkedUploadUnsupported,
    CountingOrigin,
    is_transient,
    upload_whole,
)
from mirror.oci import Descriptor
from mirror.registry import RegistryClient, RegistryError, UploadSession
from mirror.registry.errors import IntegrityError
from mirror.registry.retry import RetryPolicy, retry_step
from mirror.registry.uploads import CANCEL_TIMEOUT, CANCELLED_WAIT
from mirror.untrusted import clip

log = logging.getLogger("mirror")


class BlobOutcome(enum.StrEnum):
    PRESENT = "present"
    MOUNTED = "mounted"
    UPLOADED = "uploaded"


@dataclass
class MountGate:
    """Whether a target registry takes cross-repository mounts, learned from the first mount it answers. Until
    then the mounts wait their turn: a run starts many uploads at once, and each would try what the first may
    find refused. Once one is refused (no pull on the source repository: 401 insufficient_scope; 403; any answer
    but a passing failure) and the ordinary upload that follows is not, none is tried again in the run; a guessed
    source answered 404 (not there yet) ends only the guesses: repositories known to hold a blob are still
    mounted from."""

    refused: bool = False
    guessing: bool = True
    answered: bool = False
    no_push: set[str] = field(default_factory=set)  # repositories that refused an upload session: no mount tried
    _first: asyncio.Lock = field(default_factory=asyncio.Lock)

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[bool]:
        """Whether to try a mount now; the first is alone until the registry has said whether it takes mounts (a
        failure in passing, or a guess not there, leaves the question to the next)."""
        if not self.answered:
            async with self._first:
                if not self.answered:
                    yield not self.refused
                    return
        yield not self.refused

    def taken(self) -> None:
        """The registry answered a mount (mounted, or an ordinary session instead): it takes them."""
        self.answered = True

    def refuse(self, host: str, refusal: RegistryError, guessed: bool) -> None:
        if guessed and refusal.status == 404:
            self.guessing = False
            return
        self.answered = True
        if not self.refused:
            log.info("%s refused a blob mount (%s): ordinary uploads there for the rest of the run", host, refusal)
        self.refused = True


@dataclass
class TargetBlobs:
    """What one target registry holds, as learned during a run, and the transfers into it.

    The first repository that needs a blob gets it streamed from the source; every other repository on the
    same registry then mounts it from there. Known locations also come from HEAD checks."""

    client: RegistryClient
    transfer_limit: asyncio.Semaphore  # this registry's transfers at once
    run_limit: asyncio.Semaphore  # the whole run's: each transfer holds buffers
    repositories: frozenset[str]  # the run's repositories here: candidates for a mount
    policy: RetryPolicy
    chunked_threshold: int
    upload_chunk_size: int
    shutdown: Shutdown = field(default_factory=Shutdown)
    max_blob_size: int = 50 * 1024**3
    probe_concurrency: int = 16  # HEADs at this registry at once (its connection limit)
    mounts: MountGate = field(default_factory=MountGate)
    takes_chunks: bool = True  # until a chunked upload is turned down: then one PUT a blob, for the run
    _present: dict[str, set[str]] = field(default_factory=dict)
    _first: dict[str, str] = field(default_factory=dict)  # digest -> the repository that transfers it
    _ensured: dict[tuple[str, str], asyncio.Future[BlobOutcome]] = field(default_factory=dict)
    probes: TargetProbes = field(init=False)  # the run's HEADs at this registry, shared with verification

    def __post_init__(self) -> None:
        self.probes = TargetProbes(self.client, self.probe_concurrency)

    def known_present(self, repository: str, digest: str) -> bool:
        return repository in self._present.get(digest, ())

    def record(self, repository: str, digest: str) -> None:
        self._present.setdefault(digest, set()).add(repository)

    async def exists(self, repository: str, blob: Descriptor) -> bool:
        """HEAD the blob unless the run already knows; a size mismatch counts as missing."""
        if self.known_present(repository, blob.digest):
            return True
        size = await asyncio.shield(self.probes.blob(repository, blob.digest))
        if size == blob.size:
            self.record(repository, blob.digest)
            return True
        return False

    def mount_source(self, repository: str, digest: str) -> str | None:
        """Another repository here known to hold the blob, or failing that one of the run's repositories
        that may (a mount from one that lacks it costs nothing: the registry starts an ordinary upload instead);
        None once the registry refused a mount (a guess, once it refused one)."""
        if self.mounts.refused:
            return None
        known = sorted(self._present.get(digest, set()) - {repository})
        if known:
            return known[0]
        if not self.mounts.guessing:
            return None
        guesses = sorted(self.repositories - {repository})
        return guesses[0] if guesses else None

    async def ensure(
        self, repository: str, blob: Descriptor, origin: BlobOrigin, on_bytes: Callable[[int], None] | None = None
    ) -> BlobOutcome:
        """Make `repository` hold `blob`. Concurrent calls for the same blob share one transfer."""
        key = (repository, blob.digest)
        task = memoised(self._ensured, key, lambda: self._ensure(repository, blob, origin, on_bytes))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled() and self.shutdown.abandoned:
                raise Interrupted(f"blob {blob.digest}: upload abandoned at shutdown") from None
            raise

    def in_flight(self) -> list[asyncio.Future[BlobOutcome]]:
        return [task for task in self._ensured.values() if not task.done()]

    def cancel_pending(self) -> None:
        self.probes.cancel_pending()
        cancel_all(self._ensured)

    async def _ensure(
        self, repository: str, blob: Descriptor, origin: BlobOrigin, on_bytes: Callable[[int], None] | None
    ) -> BlobOutcome:
        if self.known_present(repository, blob.digest):
            return BlobOutcome.PRESENT
        first = self._first.setdefault(blob.digest, repository)
        if first != repository:
            # Another repository here is already getting this blob: wait, then mount it from there.
            await asyncio.wait([self._ensured[(first, blob.digest)]])
        return await self._transfer(repository, blob, origin, on_bytes)

    async def _transfer(
        self, repository: str, blob: Descriptor, origin: BlobOrigin, on_bytes: Callable[[int], None] | None
    ) -> BlobOutcome:
        if blob.size > self.max_blob_size:  # refused before any session is opened or byte is read
            raise IntegrityError(
                f"blob {blob.digest} claims {blob.size} bytes, over transfer.max_blob_size ({self.max_blob_size})"
            )
        counted = CountingOrigin(origin)
        transfer = _BlobTransfer(self, repository, BlobUpload(self.client, repository, blob, counted, on_bytes))
        # One retry loop for every way a blob goes up: a streamed PUT cannot be replayed, so a transient
        # failure restarts it with a new session (its POST also gets a fresh token if the old one was
        # refused) and a fresh read of the source; a chunked upload resumes its session instead. Bytes read
        # are progress: the policy's time budget counts from the last attempt that moved some. An attempt
        # that got the registry to confirm more of a chunked upload than ever before costs no attempt.
        where = f"blob {blob.digest} to {self.client.where(repository)}"
        try:
            outcome = await retry_step(
                self.policy,
                transfer.attempt,
                is_transient,
                where,
                progress=lambda: counted.read,
                secured=transfer.confirmed,
            )
        except (Exception, asyncio.CancelledError) as exc:
            await transfer.abandon(cancelled=isinstance(exc, asyncio.CancelledError))
            raise
        self.record(repository, blob.digest)
        return outcome


class _BlobTransfer:
    """One blob into one repository, across attempts: a chunked upload resumes where the registry says the
    last attempt got to; anything else starts again in a new session."""

    def __init__(self, blobs: TargetBlobs, repository: str, upload: BlobUpload) -> None:
        self.blobs = blobs
        self.client = blobs.client
        self.repository = repository
        self.upload = upload
        self.chunked: ChunkedUpload | None = None  # what a chunked upload's registry confirmed

    def confirmed(self) -> int:
        """Whole chunks of a chunked upload the registry confirmed holding: what the next attempt resumes from.
        Counted in chunks, so an attempt is free only for a chunk's worth more, never for a few bytes."""
        return self.chunked.offset // self.chunked.chunk_size if self.chunked is not None else 0

    async def attempt(self, number: int) -> BlobOutcome:
        self.blobs.shutdown.check()
        async with self.blobs.transfer_limit, self.blobs.run_limit:
            self.blobs.shutdown.check()
            if number > 1 and await self._landed():
                self.chunked = None
                return BlobOutcome.UPLOADED
            if self.chunked is not None:
                await self.chunked.resume()
                return await self._in_chunks_else_whole()
            return await self._in_new_session()

    async def _landed(self) -> bool:
        """Whether the last attempt's upload completed though its answer was lost, asked before a byte is sent
        again (a chunked upload's last PUT, retried, finds its session gone and would start over)."""
        return await self.client.head_blob(self.repository, self.upload.blob.digest) == self.upload.blob.size

    async def _start_session(self) -> UploadSession | None:
        """A new upload session, or None when the registry mounted the blob from another repository here. A
        mount the registry refuses is followed by an ordinary session (as Docker's pusher does), and ends the
        mounts (or, for a guess not there, the guesses) at this registry for the run, unless the repository
        refuses that session too: then the refusal was about the repository (no push there), and the next mount,
        into another one, is tried."""
        blob, repository, mounts = self.upload.blob, self.repository, self.blobs.mounts
        if self.blobs.mount_source(repository, blob.digest) is not None:
            async with mounts.turn() as allowed:
                # asked again after the wait: the first mount's answer may have ended the guesses, or the mounts
                source = self.blobs.mount_source(repository, blob.digest) if allowed else None
                if repository in mounts.no_push:  # it refused an upload session: the mount would be refused too
                    source = None
                if source is not None:
                    try:
                        started = await self.client.start_upload(repository, blob.digest, source)
                        mounts.taken()
                        return started
                    except RegistryError as refusal:
                        if refusal.transient:
                            raise
                        guessed = not self.blobs.known_present(source, blob.digest)
                        try:
                            session = await self._ordinary_session()
                        except RegistryError as again:
                            if not again.transient:  # the refusal was this repository's, not the mount's
                                mounts.no_push.add(repository)
                            raise
                        mounts.refuse(self.client.host, refusal, guessed)
                        return session
        return await self._ordinary_session()

    async def _ordinary_session(self) -> UploadSession:
        session = await self.client.start_upload(self.repository)
        assert session is not None
        return session

    async def _in_new_session(self) -> BlobOutcome:
        blob = self.upload.blob
        session = await self._start_session()
        if session is None:
            if self.upload.on_bytes:
                self.upload.on_bytes(blob.size)
            return BlobOutcome.MOUNTED
        if blob.size >= self.blobs.chunked_threshold and self.blobs.takes_chunks:
            self.chunked = ChunkedUpload(self.upload, self.blobs.upload_chunk_size, session)
            return await self._in_chunks_else_whole()
        return await self._whole(session)

    async def _whole(self, session: UploadSession) -> BlobOutcome:
        try:
            await upload_whole(self.upload, session)
        except (Exception, asyncio.CancelledError) as exc:
            # the next attempt starts a new one
            await self._cancel(session, cancelled=isinstance(exc, asyncio.CancelledError))
            raise
        return BlobOutcome.UPLOADED

    async def _in_chunks_else_whole(self) -> BlobOutcome:
        """The chunked upload's send, first or resumed (a first PATCH that met a passing 503 learns only on the
        resume that the registry takes no chunks). Chunks turned down: the session is cancelled and the blob goes
        in one PUT in a new one, as does every later blob at this registry."""
        assert self.chunked is not None
        try:
            await self._send_chunked()
        except ChunkedUploadUnsupported as exc:
            log.info("%s does not take chunked uploads (%s): one PUT instead", self.client.host, exc)
            self.blobs.takes_chunks = False
            session, self.chunked = self.chunked.session, None
            await self._cancel(session, cancelled=False)
            return await self._whole(await self._ordinary_session())
        return BlobOutcome.UPLOADED

    async def _send_chunked(self) -> None:
        """The chunked upload's send. Bytes that fail their check leave nothing to resume: what the session holds
        came from the same reads, and so did its checkpoints' hashes. Nor does a session whose bytes the registry
        finds wrong at its closing check (DIGEST_INVALID: bytes changed on their way, every chunk having checked
        out as it was sent). Either way the session is cancelled and the next attempt starts a new one from the
        first byte, with a fresh hash."""
        assert self.chunked is not None
        try:
            try:
                await self.chunked.send()
            except RegistryError as refused:
                if refused.code != "DIGEST_INVALID":
                    raise
                wrong = f"blob {self.upload.blob.digest}: the registry found the uploaded bytes wrong: {refused}"
                raise IntegrityError(wrong) from refused
        except IntegrityError as exc:
            log.info(
                "cancelling the upload session of %s, its bytes not to be trusted: %s", self.upload.blob.digest, exc
            )
            session, self.chunked = self.chunked.session, None
            await self._cancel(session, cancelled=False)
            raise

    async def abandon(self, cancelled: bool = False) -> None:
        """Given up, or cancelled: let the registry drop what a chunked session holds."""
        if self.chunked is not None:
            await self._cancel(self.chunked.session, cancelled)

    async def _cancel(self, session: UploadSession, cancelled: bool) -> None:
        """DELETE a session given up on. A transfer that was cancelled waits for it only briefly, then its
        CancelledError goes on (the DELETE is cancelled with it only if the task is cancelled again)."""
        within = CANCELLED_WAIT if cancelled else CANCEL_TIMEOUT  # the DELETE runs on unwatched (cancelsafe.py)
        try:
            await self.client.cancel_upload(self.repository, session, within)
        except Exception as exc:  # clean-up: never in place of the failure, or the cancellation, that led here
            log.info("could not cancel the upload session of %s: %s", self.upload.blob.digest, clip(str(exc)))
