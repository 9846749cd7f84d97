"""Blob bytes and upload sessions on the wire: a blob is read as stored whatever Content-Encoding its answer
names, an upload session's Location is taken relative to the request it answers, and a redirect that is not
followed is named without its query (a pre-signed URL's signature).

No registry here sends Content-Encoding on a blob: a small server on loopback does, standing in front of a
real registry as its storage CDN, and httpx's MockTransport answers the Location cases."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.sample import MiB, push_single
from mirror.oci import Descriptor
from mirror.registry import RegistryClient, RegistryError
from mirror.registry.errors import IntegrityError
from mirror.registry.options import ClientOptions
from tests.support import blob_exists, http_server, with_client
from tests.test_faults import CHUNKED, sync

GZIP_MAGIC = b"\x1f\x8b"


def stored_tar_gz(size: int, seed: int) -> bytes:
    """A layer as a registry stores it: gzip bytes, its digest over them."""
    return gzip.compress(random.Random(seed).randbytes(size), compresslevel=1)


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def descriptor(data: bytes) -> Descriptor:
    return Descriptor("application/vnd.oci.image.layer.v1.tar+gzip", digest_of(data), len(data))


# -- a storage host that labels stored .gz objects `Content-Encoding: gzip` ------------------------------------


class LabelledBlobs(http.server.BaseHTTPRequestHandler):
    """Blobs by digest, each answered with `Content-Encoding: gzip` (S3 or GCS object metadata) over its stored
    bytes; `/long/<digest>` answers twice the bytes."""

    protocol_version = "HTTP/1.1"
    blobs: ClassVar[dict[str, bytes]] = {}

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        digest = self.path.rsplit("/", 1)[-1]
        data = self.blobs.get(digest)
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if "/long/" in self.path:
            data += data
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def labelled() -> Iterator[tuple[str, bytes, bytes]]:
    """The server's host, with a small stored .tar.gz (its answer read ahead whole by the transport) and one
    over that bound (streamed)."""
    small, large = stored_tar_gz(64 * 1024, seed=1), stored_tar_gz(5 * MiB, seed=2)
    LabelledBlobs.blobs = {digest_of(small): small, digest_of(large): large}
    with http_server(LabelledBlobs) as server:
        yield f"127.0.0.1:{server.server_address[1]}", small, large


async def over_loopback(host: str, action: Any) -> Any:
    client = RegistryClient.open(host, ClientOptions(plain_http=True, anonymous=True, read_timeout=30))
    try:
        return await action(client)
    finally:
        await client.aclose()


async def streamed(client: RegistryClient, repository: str, digest: str) -> bytes:
    async with client.open_blob(repository, digest) as body:
        return b"".join([chunk async for chunk in body.chunks])


@pytest.mark.parametrize("which", ["small", "large"])
async def test_a_blob_labelled_gzip_is_streamed_as_stored(labelled: tuple[str, bytes, bytes], which: str) -> None:
    """httpx unpacked it: the bytes never hashed to the digest, and every retry read them the same way."""
    host, small, large = labelled
    data = small if which == "small" else large
    assert await over_loopback(host, lambda c: streamed(c, "ns/r", digest_of(data))) == data


async def test_a_small_blob_labelled_gzip_is_read_as_stored(labelled: tuple[str, bytes, bytes]) -> None:
    host, small, _ = labelled
    assert await over_loopback(host, lambda c: c.read_blob("ns/r", descriptor(small))) == small


async def test_a_small_blob_labelled_gzip_is_still_read_up_to_its_size(labelled: tuple[str, bytes, bytes]) -> None:
    host, small, _ = labelled
    with pytest.raises(IntegrityError, match=f"more than the {len(small)} bytes its descriptor says"):
        await over_loopback(host, lambda c: c.read_blob("long", descriptor(small)))


async def test_a_blob_answer_in_a_coding_is_taken_raw_in_memory_too() -> None:
    """The same through a mock transport, an answer httpx has not read (as one off the wire): both readers."""
    data = stored_tar_gz(4096, seed=3)

    def handle(request: httpx.Request) -> httpx.Response:
        assert request.headers["Accept-Encoding"] == "identity"
        headers = {"Content-Encoding": "gzip", "Content-Length": str(len(data))}
        return httpx.Response(200, headers=headers, stream=httpx.ByteStream(data))

    http = httpx.AsyncClient(base_url="https://registry.test", transport=httpx.MockTransport(handle))
    client = RegistryClient("registry.test", http)
    assert await streamed(client, "ns/r", digest_of(data)) == data
    assert await client.read_blob("ns/r", descriptor(data)) == data


# -- the same in front of a real registry ----------------------------------------------------------------------


@contextmanager
def labelling_cdn(root: Path) -> Iterator[str]:
    """Serves a registry's storage directory as Docker Hub's CDN serves redirected blob GETs, labelling each
    stored gzip object `Content-Encoding: gzip`."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def _answer(self, body: bool) -> None:
            path = (root / self.path.split("?", 1)[0].lstrip("/")).resolve()
            if not path.is_relative_to(root.resolve()) or not path.is_file():
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            if data.startswith(GZIP_MAGIC):
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

    with http_server(Handler) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize("transfer", [{}, CHUNKED], ids=["one PUT", "chunked"])
def test_layers_from_a_cdn_that_labels_them_gzip_are_copied_byte_for_byte(
    tmp_path: Path, target: LocalRegistry, transfer: dict[str, int]
) -> None:
    layers = (stored_tar_gz(256 * 1024, seed=4), stored_tar_gz(5 * MiB, seed=5))
    with labelling_cdn(tmp_path / "source" / "data") as cdn:
        source = start_registry(tmp_path / "source", redirect_to=cdn)
        try:
            with_client(source, lambda c: push_single(c, "big/layer", "v1", layer_sizes=(), shared_layers=layers))
            images = [{"name": "layer", "source": "big/layer", "tag": "v1"}]
            assert sync(tmp_path, source, target, images=images, transfer=transfer) == 0
        finally:
            source.stop()
    for data in layers:
        assert blob_exists(target, "mirrored/layer", digest_of(data))
        assert target.blob_path(digest_of(data)).read_bytes() == data


# -- upload sessions' Locations --------------------------------------------------------------------------------


def recording_client(
    answers: dict[str, httpx.Response], base: str = "http://reg.test"
) -> tuple[RegistryClient, list[str]]:
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url}")
        return answers.get(request.method, httpx.Response(201))

    http = httpx.AsyncClient(base_url=base, transport=httpx.MockTransport(handle))
    return RegistryClient(base.split("//", 1)[1], http), seen


async def one_chunk(client: RegistryClient, repository: str) -> tuple[httpx.URL, httpx.URL]:
    async def body() -> Any:
        yield b"abcd"

    session = await client.start_upload(repository)
    assert session is not None
    following, _ = await client.upload_chunk(repository, session, 0, 4, body())
    return session.url, following.url


async def test_a_path_relative_location_is_beside_the_request_path() -> None:
    client, _ = recording_client({"POST": httpx.Response(202, headers={"Location": "u2?_state=1"})})
    session = await client.start_upload("ns/r")
    assert session is not None
    assert str(session.url) == "http://reg.test/v2/ns/r/blobs/uploads/u2?_state=1"  # was http://reg.test/u2?...


async def test_a_location_answered_on_an_upload_host_stays_on_that_host() -> None:
    client, seen = recording_client(
        {
            "POST": httpx.Response(202, headers={"Location": "https://upload.test/v2/ns/r/blobs/uploads/u1"}),
            "PATCH": httpx.Response(202, headers={"Location": "/v2/ns/r/blobs/uploads/u1?_state=2", "Range": "0-3"}),
        },
        base="https://reg.test",
    )
    first, following = await one_chunk(client, "ns/r")
    assert str(first) == "https://upload.test/v2/ns/r/blobs/uploads/u1"
    assert str(following) == "https://upload.test/v2/ns/r/blobs/uploads/u1?_state=2"  # was on reg.test
    assert seen[1] == "PATCH https://upload.test/v2/ns/r/blobs/uploads/u1"


async def test_a_location_that_leaves_https_is_still_refused_and_shown_without_its_query() -> None:
    client, _ = recording_client(
        {
            "POST": httpx.Response(202, headers={"Location": "https://upload.test/v2/ns/r/blobs/uploads/u1"}),
            "PATCH": httpx.Response(202, headers={"Location": "http://upload.test/u1?_state=secret#x", "Range": "0-3"}),
        },
        base="https://reg.test",
    )
    with pytest.raises(RegistryError) as refused:
        await one_chunk(client, "ns/r")
    assert "the upload session is at http://upload.test/u1, not https" in str(refused.value)
    assert "secret" not in str(refused.value)


# -- a redirect that is not followed ---------------------------------------------------------------------------


async def test_a_redirect_not_followed_is_named_without_its_query() -> None:
    signed = "https://store.test/bucket/u1?se=2030-01-01&sp=w&sig=SECRETSIGNATURE%3D#frag"
    client, _ = recording_client(
        {
            "POST": httpx.Response(202, headers={"Location": "/v2/ns/r/blobs/uploads/u1"}),
            "PATCH": httpx.Response(307, headers={"Location": signed}),
        }
    )
    with pytest.raises(RegistryError) as refused:
        await one_chunk(client, "ns/r")
    message = str(refused.value)
    assert message.endswith("307: redirected to https://store.test/bucket/u1: not a registry API endpoint")
    assert "SECRET" not in message and "frag" not in message
