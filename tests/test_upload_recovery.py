"""A blob upload that fails part-way is recovered the right way: a chunked upload whose session holds every
byte only sends its closing PUT again, one whose bytes failed their check starts over in a new session, and one
cancelled at shutdown lets the registry drop its session, without waiting long or keeping the cancellation.

Real registries behind the fault proxy for the wire faults; an upload API in memory (httpx's MockTransport)
where the test holds a request open until it is cancelled."""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import MiB
from mirror.engine import blobs as blobs_module
from mirror.engine.blobs import TargetBlobs
from mirror.engine.shutdown import Interrupted, Shutdown
from mirror.engine.stream import new_hasher
from mirror.engine.upload import BlobUpload, ChunkedUpload, is_transient
from mirror.oci import Descriptor
from mirror.registry import BlobBody, RegistryClient, RegistryError
from mirror.registry import uploads as uploads_module
from mirror.registry.auth import AuthError
from mirror.registry.errors import IntegrityError
from mirror.registry.retry import RetryPolicy
from tests.faultproxy import Fault, FaultProxy
from tests.support import blob_exists
from tests.test_faults import BIG_IMAGE, CHUNKED, large_image, sync, upload_uuid


def layer_reads(registry: LocalRegistry, mark: int, digest: str) -> list[int]:
    return [e.status for e in registry.access_log()[mark:] if e.method == "GET" and digest in e.path]


# -- the closing PUT of a chunked upload -------------------------------------------------------------------


def test_a_failed_closing_put_is_sent_again_without_reading_the_source_again(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    """Every PATCH confirmed, then the closing PUT fails for a whole round of the transport's retries. The next
    attempt asked the source for `Range: bytes=<size>-`, which is answered 416, taken for temporary: every
    attempt left did the same, the full session was deleted and the image failed."""
    size = 6 * MiB
    digest = large_image(source, size)
    finishing = re.escape(digest.replace(":", "%3A"))
    target_proxy.add(Fault("status", method="PUT", path=finishing, status=500, count=3))
    mark = len(source.access_log())
    retry = {"attempts": 3, "base_delay": 0.05, "max_delay": 0.1, "max_elapsed": 30}
    assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, transfer=CHUNKED, retry=retry) == 0
    assert layer_reads(source, mark, digest) == [200]  # the blob read once, never a Range past its end
    assert target_proxy.request_bytes["PATCH"] == size  # each chunk sent once, into the one session
    puts = [e.status for e in target_proxy.log if e.method == "PUT" and digest.replace(":", "%3A") in e.path]
    assert puts == [500, 500, 500, 201]
    assert not [e for e in target_proxy.log if e.method == "DELETE"]  # the full session was kept, and closed
    assert blob_exists(target, "mirrored/layer", digest)


def test_a_416_is_temporary_from_an_upload_step_only() -> None:
    where = "registry.test/ns/r"
    assert is_transient(RegistryError("upload chunk", where, 416))  # the session out of step: ask it, resume
    assert is_transient(RegistryError("check upload", where, 416))
    assert not is_transient(RegistryError("fetch blob", where, 416))  # a Range past the source blob's end


# -- an upload API in memory ----------------------------------------------------------------------------


@dataclass
class MemoryRegistry:
    """The upload half of the distribution API, with its sessions in memory. `hold` names methods whose
    requests are never answered (until the test is done); every request is recorded."""

    hold: set[str] = field(default_factory=set)
    sessions: dict[str, bytearray] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)
    held: asyncio.Event = field(default_factory=asyncio.Event)  # set once a request is being held

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(f"{request.method} {request.url.path}")
        if request.method in self.hold:
            self.held.set()
            await asyncio.Event().wait()
        if request.method == "POST":
            name = uuid.uuid4().hex
            self.sessions[name] = bytearray()
            return httpx.Response(202, headers={"Location": f"/v2/ns/r/blobs/uploads/{name}"})
        name = request.url.path.rsplit("/", 1)[-1]
        if name not in self.sessions:
            return httpx.Response(404)
        if request.method == "DELETE":
            del self.sessions[name]
            return httpx.Response(204)
        held = self.sessions[name]
        if request.method in ("PATCH", "PUT"):
            held += await request.aread()
        if request.method == "PUT":
            digest = request.url.params["digest"]
            if "sha256:" + hashlib.sha256(held).hexdigest() != digest:
                return httpx.Response(400, json={"errors": [{"code": "DIGEST_INVALID", "message": "no"}]})
            self.blobs[digest] = bytes(self.sessions.pop(name))
            return httpx.Response(201)
        end = f"0-{len(held) - 1}" if held else "0-0"
        return httpx.Response(202 if request.method == "PATCH" else 204, headers={"Range": end})

    def client(self) -> RegistryClient:
        http = httpx.AsyncClient(base_url="https://registry.test", transport=httpx.MockTransport(self.handle))
        return RegistryClient("registry.test", http)


@dataclass
class BytesOrigin:
    """A source blob's bytes, served from any offset asked for; each `open` is recorded by its start."""

    data: bytes
    opened: list[int] = field(default_factory=list)

    @asynccontextmanager
    async def open(self, blob: Descriptor, start: int = 0) -> AsyncIterator[BlobBody]:
        self.opened.append(start)

        async def chunks() -> AsyncIterator[bytes]:
            for at in range(start, len(self.data), 64 * 1024):
                yield self.data[at : at + 64 * 1024]

        yield BlobBody(chunks(), start)


def layer(size: int) -> tuple[bytes, Descriptor]:
    data = bytes(range(256)) * (size // 256)
    return data, Descriptor("application/octet-stream", "sha256:" + hashlib.sha256(data).hexdigest(), len(data))


async def test_a_full_session_whose_bytes_this_upload_never_checked_is_read_back_from_a_checkpoint() -> None:
    """A session that says it holds every byte, though no check of this upload saw them go: the source is read
    from a checkpoint below the end (not from the end: nothing is there), the digest checked, then closed."""
    registry = MemoryRegistry()
    data, blob = layer(256 * 1024)
    client = registry.client()
    session = await client.start_upload("ns/r")
    assert session is not None
    registry.sessions[session.url.path.rsplit("/", 1)[-1]] += data
    full = new_hasher()
    full.update(data)
    origin = BytesOrigin(data)
    chunked = ChunkedUpload(BlobUpload(client, "ns/r", blob, origin), 64 * 1024, session, offset=len(data))
    chunked.marks.append((len(data), full))
    await chunked.send()
    assert origin.opened == [0]
    assert registry.blobs == {blob.digest: data}

    origin.data = data[:-1] + b"?"  # the source now says otherwise: nothing is closed
    again = ChunkedUpload(BlobUpload(client, "ns/r", blob, origin), 64 * 1024, session, offset=len(data))
    with pytest.raises(IntegrityError):
        await again.send()


# -- bytes that fail their check --------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [2 * MiB, 64 * 1024], ids=["2MiB-chunks", "64KiB-chunks"])
def test_one_corrupt_source_read_starts_the_upload_over_in_a_new_session(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, source_proxy: FaultProxy, chunk: int
) -> None:
    """A byte flipped once, early in the blob: the chunks before the last went up unchecked, their checkpoints
    hashing the wrong byte, and the last chunk's check failed. Every retry resumed the session from that
    checkpoint and failed the same way; the session is now cancelled and the blob sent again from its start."""
    digest = large_image(source, 6 * MiB)
    source_proxy.add(Fault("corrupt", method="GET", path=re.escape(digest), after_bytes=1000, count=1))
    mark = len(target.access_log())
    transfer = {"chunked_upload_threshold": 4 * MiB, "upload_chunk_size": chunk}
    assert sync(tmp_path, source_proxy, target, images=BIG_IMAGE, transfer=transfer) == 0
    assert source_proxy.faults[0].applied == 1
    reads = [e.status for e in source_proxy.log if digest in e.path and e.method == "GET"]
    assert reads == [200, 200]  # the second read from the first byte, not a Range from a checkpoint
    uploads = [e for e in target.access_log()[mark:] if "/blobs/uploads/" in e.path and e.method != "POST"]
    sessions = list(dict.fromkeys(upload_uuid(e.path) for e in uploads if e.method == "PATCH"))
    assert len(sessions) == 2
    assert "DELETE" in [e.method for e in uploads if upload_uuid(e.path) == sessions[0]]  # the first let go
    assert blob_exists(target, "mirrored/layer", digest)


def test_a_session_whose_bytes_the_registry_finds_wrong_starts_over_in_a_new_one(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    """A byte flipped on its way to the registry (a broken middlebox): every chunk checked out as it was sent, and
    the registry's closing check (DIGEST_INVALID) is the first to see it. The session holds wrong bytes that no
    resume can mend: it is cancelled and the blob sent again in a new one, where the answer was final."""
    digest = large_image(source, 6 * MiB)
    target_proxy.add(Fault("corrupt_request", method="PATCH", path="/blobs/uploads/", after_bytes=1000, count=1))
    assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, transfer=CHUNKED) == 0
    assert target_proxy.faults[0].applied == 1
    closing = [e.status for e in target_proxy.log if e.method == "PUT" and digest.replace(":", "%3A") in e.path]
    assert closing == [400, 201]
    sessions = list(dict.fromkeys(upload_uuid(e.path) for e in target_proxy.log if e.method == "PATCH"))
    assert len(sessions) == 2
    assert any(e.method == "DELETE" and upload_uuid(e.path) == sessions[0] for e in target_proxy.log)
    assert blob_exists(target, "mirrored/layer", digest)


# -- cancelled at shutdown --------------------------------------------------------------------------------


def target_blobs(client: RegistryClient, shutdown: Shutdown) -> TargetBlobs:
    blobs = TargetBlobs(
        client,
        asyncio.Semaphore(4),
        asyncio.Semaphore(4),
        frozenset({"ns/r"}),
        RetryPolicy(attempts=1),
        chunked_threshold=128 * 1024,
        upload_chunk_size=64 * 1024,
        shutdown=shutdown,
    )
    shutdown.on_abandon(blobs.cancel_pending)
    return blobs


async def stopped_while_held(registry: MemoryRegistry, client: RegistryClient, size: int, abandoned: bool) -> None:
    """A transfer of a `size`-byte layer, held by the registry, stopped as a shutdown abandons it (Interrupted)
    or as a cancellation does (CancelledError): raises what the transfer ended with."""
    data, blob = layer(size)
    blobs = target_blobs(client, Shutdown())
    ensured = asyncio.ensure_future(blobs.ensure("ns/r", blob, BytesOrigin(data)))
    await asyncio.wait_for(registry.held.wait(), 10)
    if abandoned:
        blobs.shutdown.abandon()
    else:
        blobs.cancel_pending()
    await asyncio.wait_for(ensured, 10)


@pytest.mark.parametrize(
    ("size", "held"), [(64 * 1024, "PUT"), (256 * 1024, "PATCH")], ids=["one PUT", "chunked, first chunk"]
)
@pytest.mark.parametrize("abandoned", [True, False], ids=["abandoned at shutdown", "cancelled"])
async def test_a_cancelled_transfer_lets_the_registry_drop_its_session(size: int, held: str, abandoned: bool) -> None:
    registry = MemoryRegistry(hold={held})
    with pytest.raises(Interrupted if abandoned else asyncio.CancelledError):
        await stopped_while_held(registry, registry.client(), size, abandoned)
    assert registry.seen[-1].startswith("DELETE /v2/ns/r/blobs/uploads/")
    assert registry.sessions == {}  # the registry let the session go


async def test_a_cancelled_transfer_waits_for_the_delete_only_briefly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry answers neither the upload nor the DELETE: the cancellation goes on after CANCELLED_WAIT for
    each, not after the ten seconds a failed upload's DELETE may take."""
    monkeypatch.setattr(blobs_module, "CANCELLED_WAIT", 0.2)
    monkeypatch.setattr(uploads_module, "CANCELLED_WAIT", 0.2)
    registry = MemoryRegistry(hold={"PATCH", "DELETE"})
    data, blob = layer(256 * 1024)
    blobs = target_blobs(registry.client(), Shutdown())
    ensured = asyncio.ensure_future(blobs.ensure("ns/r", blob, BytesOrigin(data)))
    await asyncio.wait_for(registry.held.wait(), 10)
    started = time.monotonic()
    blobs.cancel_pending()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(ensured, 10)
    assert time.monotonic() - started < 5  # the DELETE alone may take 10 s otherwise
    assert registry.seen[-1].startswith("DELETE /v2/ns/r/blobs/uploads/")


@pytest.mark.parametrize("abandoned", [True, False], ids=["abandoned at shutdown", "cancelled"])
async def test_a_clean_up_that_fails_never_takes_the_cancellations_place(
    monkeypatch: pytest.MonkeyPatch, abandoned: bool
) -> None:
    """The DELETE's token refused (an AuthError from the auth flow): the shutdown still ends as a shutdown, not
    as 'access denied' (which would exit 1, not 143)."""
    registry = MemoryRegistry(hold={"PATCH"})
    client = registry.client()

    async def refused(*args: object, **kwargs: object) -> bool:
        raise AuthError("registry.test", "ns/r", 401, "", "token server auth.test: refused")

    monkeypatch.setattr(client, "cancel_upload", refused)
    with pytest.raises(Interrupted if abandoned else asyncio.CancelledError):
        await stopped_while_held(registry, client, 256 * 1024, abandoned)
