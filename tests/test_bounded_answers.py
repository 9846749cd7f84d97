"""The answers to upload steps, to a session's cancelling DELETE and to manifest PUTs are read within a bound,
decoded as they arrive: they were read whole and gzip-decoded by httpx, so a server answering a POST with 510
KB of gzip made mirror's memory grow by 526 MB. The registry's error code and message still reach the error.

An upload API in memory (httpx's MockTransport) whose answers count the coded bytes read from them; and a
loopback server behind mirror's own transport stack, its memory measured by tracemalloc (bytes allocated,
not a timing)."""

from __future__ import annotations

import gzip
import http.server
import json
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from mirror.demo.sample import MiB
from mirror.oci import Manifest
from mirror.registry import RegistryClient, RegistryError, UploadSession
from mirror.registry.options import ClientOptions
from mirror.registry.retry import RetryPolicy
from tests.support import http_server

PIECE = 16 * 1024  # coded bytes per piece of an answer's body
DIGEST = "sha256:" + "a" * 64


def gzip_bomb(decoded: int) -> bytes:
    """An OCI error body of `decoded` bytes (a message of one letter repeated), gzipped to about a thousandth."""
    head = b'{"errors": [{"code": "DENIED", "message": "'
    squeezer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    coded = [squeezer.compress(head)]
    block = b"a" * MiB
    for _ in range(decoded // MiB):
        coded.append(squeezer.compress(block))
    coded.append(squeezer.compress(b'"}]}') + squeezer.flush())
    return b"".join(coded)


BOMB = gzip_bomb(64 * MiB)  # about 64 KB coded


class CountedBody(httpx.AsyncByteStream):
    """A body sent in pieces, counting the coded bytes taken from it."""

    def __init__(self, data: bytes, taken: list[int]) -> None:
        self.data = data
        self.taken = taken

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for at in range(0, len(self.data), PIECE):
            piece = self.data[at : at + PIECE]
            self.taken.append(len(piece))
            yield piece


@dataclass
class BombingRegistry:
    """Answers every request with `status` and a gzip bomb for a body (a Location and a Range where an upload
    step needs them); counts the coded bytes read of each answer."""

    status: int
    body: bytes = BOMB
    taken: list[int] = field(default_factory=list)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        headers |= {"Location": "/v2/ns/r/blobs/uploads/next", "Range": "0-0"}
        return httpx.Response(self.status, headers=headers, stream=CountedBody(self.body, self.taken))

    def client(self) -> RegistryClient:
        http = httpx.AsyncClient(base_url="https://registry.test", transport=httpx.MockTransport(self.handle))
        return RegistryClient("registry.test", http)

    @property
    def read(self) -> int:
        return sum(self.taken)


INDEX = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}
MANIFEST = Manifest.parse(json.dumps(INDEX).encode())


def session(client: RegistryClient) -> UploadSession:
    return UploadSession(client.http.base_url.join("/v2/ns/r/blobs/uploads/u1"))


async def chunk_body() -> AsyncIterator[bytes]:
    yield b"x" * 1024


STEPS: dict[str, Callable[[RegistryClient], Awaitable[Any]]] = {
    "start upload": lambda c: c.start_upload("ns/r"),
    "mount": lambda c: c.start_upload("ns/r", DIGEST, "ns/other"),
    "upload chunk": lambda c: c.upload_chunk("ns/r", session(c), 0, 1024, chunk_body()),
    "upload blob": lambda c: c.finish_upload("ns/r", session(c), DIGEST, 3, b"abc"),
    "check upload": lambda c: c.upload_status("ns/r", session(c)),
    "push manifest": lambda c: c.put_manifest("ns/r", "v1", MANIFEST),
    "cancel upload": lambda c: c.cancel_upload("ns/r", session(c)),
}


@pytest.mark.parametrize("status", [400, 202], ids=["error", "success"])
@pytest.mark.parametrize("step", list(STEPS))
async def test_an_answers_body_is_read_within_a_bound(step: str, status: int) -> None:
    registry = BombingRegistry(status)
    client = registry.client()
    try:
        await STEPS[step](client)
    except RegistryError as exc:
        assert status == 400
        assert len(exc.message) < 1000  # the cut text, never the whole
    finally:
        await client.aclose()
    # 64 KiB of the decoded body is all an error shows: the first piece of the coded body holds more
    assert 0 < registry.read <= PIECE < len(BOMB)


async def test_a_gzipped_error_body_still_names_the_registrys_code_and_message() -> None:
    error = {"errors": [{"code": "DENIED", "message": "requested access to the resource is denied"}]}
    registry = BombingRegistry(403, gzip.compress(json.dumps(error).encode()))
    client = registry.client()
    try:
        with pytest.raises(RegistryError) as raised:
            await client.start_upload("ns/r")
    finally:
        await client.aclose()
    assert (raised.value.status, raised.value.code) == (403, "DENIED")
    assert raised.value.message == "requested access to the resource is denied"


@contextmanager
def bombing_server(body: bytes) -> Iterator[str]:
    """A loopback server answering every POST, PUT and DELETE with 400 and `body`, gzip-coded."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _bomb(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:  # the client read what it wanted and closed
                self.close_connection = True

        do_POST = do_PUT = do_DELETE = _bomb

    with http_server(Handler) as server:
        yield f"127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize("step", ["start upload", "push manifest", "cancel upload"])
async def test_a_gzip_bomb_through_the_transport_stack_costs_no_memory(step: str) -> None:
    with bombing_server(BOMB) as host:
        client = RegistryClient.open(host, ClientOptions(plain_http=True, retry=RetryPolicy(attempts=1)))
        tracemalloc.start()
        try:
            try:
                await STEPS[step](client)
            except RegistryError as exc:
                assert exc.status == 400 and "aaaa" in exc.message
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            await client.aclose()
    assert peak < 16 * MiB  # the whole answer decoded is 64 MiB
