"""Registry client wire cases. Real-registry behaviour is covered by test_sync; a mock transport is used
here only for what Debian's registry does not do (relative Locations, tag paging), and a small server on
loopback for answers over every limit."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
import hashlib
import http.server
import json
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, ClassVar, TypeVar

import httpx
import pytest

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import push_single
from mirror.oci import MAX_MANIFEST_BYTES, OCI_INDEX, OCI_MANIFEST, Descriptor, Manifest
from mirror.registry import RegistryClient, RegistryError
from mirror.registry.body import BodyTooLarge, read_limited
from mirror.registry.client import MAX_TAG_PAGE_BYTES, regrouped
from mirror.registry.errors import IntegrityError, parse_error_body
from mirror.registry.options import ClientOptions
from tests.faultproxy import Fault, FaultProxy
from tests.support import http_server, with_client

T = TypeVar("T")


def mock_client(handler: httpx.MockTransport) -> RegistryClient:
    return RegistryClient("registry.test", httpx.AsyncClient(base_url="https://registry.test", transport=handler))


async def test_relative_upload_location_with_query_is_joined() -> None:
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url}")
        if request.method == "POST":
            return httpx.Response(202, headers={"Location": "/v2/ns/r/blobs/uploads/abc?_state=xyz"})
        assert request.headers["Content-Length"] == "3"
        return httpx.Response(201)

    client = mock_client(httpx.MockTransport(handle))
    await client.push_blob("ns/r", "sha256:" + "0" * 64, b"abc")
    assert seen == [
        "POST https://registry.test/v2/ns/r/blobs/uploads/",
        f"PUT https://registry.test/v2/ns/r/blobs/uploads/abc?_state=xyz&digest=sha256%3A{'0' * 64}",
    ]


async def test_tag_list_follows_link_pages() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if "last=b" in str(request.url):
            return httpx.Response(200, json={"tags": ["c"]})
        return httpx.Response(
            200, json={"tags": ["a", "b"]}, headers={"Link": '</v2/ns/r/tags/list?n=2&last=b>; rel="next"'}
        )

    assert await mock_client(httpx.MockTransport(handle)).list_tags("ns/r") == ["a", "b", "c"]


@pytest.mark.parametrize("tags", [["v1", 7], ["v1", "not a tag"], {"v1": "v2"}], ids=["a number", "a space", "a map"])
async def test_a_tag_list_of_anything_but_tag_names_is_refused(tags: object) -> None:
    client = mock_client(httpx.MockTransport(lambda request: httpx.Response(200, json={"tags": tags})))
    with pytest.raises(RegistryError, match="not a tag list"):
        await client.list_tags("ns/r")


@pytest.mark.parametrize(
    "descriptor",
    [
        {"mediaType": OCI_MANIFEST, "digest": "latest", "size": 10},
        {"mediaType": OCI_MANIFEST, "digest": "sha256:" + "a" * 64, "size": -1},
        {"mediaType": OCI_MANIFEST, "digest": "sha256:" + "a" * 64, "size": 1, "annotations": ["a"]},
    ],
    ids=["a tag for a digest", "a negative size", "annotations not a map"],
)
async def test_an_index_whose_entries_are_not_descriptors_is_refused(descriptor: dict[str, object]) -> None:
    raw = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [descriptor]}).encode()
    client = mock_client(
        httpx.MockTransport(lambda request: httpx.Response(200, content=raw, headers={"Content-Type": OCI_INDEX}))
    )
    with pytest.raises(RegistryError, match="invalid descriptor"):
        await client.get_manifest("ns/r", "sha256:" + hashlib.sha256(raw).hexdigest())


async def test_manifest_bytes_must_match_the_digest_asked_for() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b'{"schemaVersion":2,"manifests":[]}')

    with pytest.raises(RegistryError, match="hash to"):
        await mock_client(httpx.MockTransport(handle)).get_manifest("ns/r", "sha256:" + "1" * 64)


def test_a_head_by_digest_naming_another_digest_is_checked_by_reading_the_manifest(source: LocalRegistry) -> None:
    """A registry (or a proxy) whose HEAD of `sha256:A` names `sha256:B` in Docker-Content-Digest: B was taken
    as the image, so a chart's pinned digest was silently replaced by whatever the header said. The manifest is
    read instead and checked against A (its bytes are A's, or the read fails)."""
    from tests.faultproxy import Fault, fault_proxy

    image = with_client(source, lambda c: push_single(c, "ns/pinned", "one"))
    other = "sha256:" + "2" * 64
    with fault_proxy(source.port) as proxy:
        named = {"Docker-Content-Digest": other}
        proxy.add(
            Fault("headers", method="HEAD", path="/manifests/sha256:", headers=named, strip=("docker-content-digest",))
        )
        client = RegistryClient.open(proxy.host, ClientOptions(plain_http=True))

        async def head() -> Descriptor | None:
            try:
                return await client.head_manifest("ns/pinned", image.digest)
            finally:
                await client.aclose()

        found = asyncio.run(head())
    assert found is not None and found.digest == image.digest
    asked = [f"{e.method} {e.path}" for e in source.access_log() if "/ns/pinned/manifests/sha256:" in e.path]
    assert asked[-2:] == [f"HEAD /v2/ns/pinned/manifests/{image.digest}", f"GET /v2/ns/pinned/manifests/{image.digest}"]


def test_error_bodies_become_typed_errors(source: LocalRegistry) -> None:
    async def fetch(client: RegistryClient) -> Manifest:
        return await client.get_manifest("ns/missing", "v1")

    with pytest.raises(RegistryError) as error:
        with_client(source, fetch)
    assert error.value.status == 404 and error.value.code in {"MANIFEST_UNKNOWN", "NAME_UNKNOWN"}
    assert str(error.value).startswith(f"fetch manifest {source.host}/ns/missing:v1: 404")


@pytest.mark.parametrize("coding", ["gzip", "br"])
def test_a_document_labelled_with_a_coding_it_is_not_in_is_a_registry_error(
    source: LocalRegistry, source_proxy: FaultProxy, coding: str
) -> None:
    """A proxy or a CDN labelling a manifest, a tag list or an error body with a coding its bytes are not in
    raised httpx.DecodingError out of the run, a traceback. The document's read is a RegistryError naming what
    was read and where; an error body that does not decode is dropped and its status kept (the referrers API's
    404 still says the registry has none)."""
    image = with_client(source, lambda c: push_single(c, "ns/r", "one"))
    source_proxy.add(Fault("headers", method="GET", headers={"Content-Encoding": coding}, count=1000))

    async def refusal(read: Awaitable[object]) -> str:
        with pytest.raises(RegistryError) as error:
            await read
        return str(error.value)

    async def reads() -> tuple[list[str], object]:
        client = RegistryClient.open(source_proxy.host, ClientOptions(plain_http=True))
        try:
            refusals = [
                await refusal(client.get_manifest("ns/r", "one")),
                await refusal(client.list_tags("ns/r")),
                await refusal(client.get_manifest("ns/r", "missing")),
            ]
            return refusals, await client.list_referrers("ns/r", image.digest)
        finally:
            await client.aclose()

    (manifest, tags, missing), referrers = asyncio.run(reads())
    assert manifest.startswith(f"fetch manifest {source_proxy.host}/ns/r:one: 200: ")
    assert tags.startswith(f"list tags {source_proxy.host}/ns/r: 200: ")
    assert missing == f"fetch manifest {source_proxy.host}/ns/r:missing: 404"
    assert referrers is None


def test_parse_error_body() -> None:
    assert parse_error_body(b'{"errors":[{"code":"DENIED","message":"no"}]}') == ("DENIED", "no")
    assert parse_error_body(b"<html>bad gateway</html>\nmore") == ("", "<html>bad gateway</html>")
    assert parse_error_body(b"") == ("", "")


def test_tags_at_a_real_registry(source: LocalRegistry) -> None:
    with_client(source, lambda c: push_single(c, "ns/r", "one"))
    with_client(source, lambda c: push_single(c, "ns/r", "two", seed=1))
    assert sorted(with_client(source, lambda c: c.list_tags("ns/r"))) == ["one", "two"]


def test_answers_are_freed_without_the_cycle_collector(source: LocalRegistry) -> None:
    """httpx's Response and the stream it binds to it refer to each other, so an answer, with its body and its
    request's, would wait for a full collection: hundreds of blob bodies at once in a long run. The client
    unbinds every answer it is done with; with the collector off, none is left for it."""

    async def round_trip(client: RegistryClient) -> int:
        await push_single(client, "ns/r", "one", layer_sizes=(64 * 1024, 5 * 1024 * 1024))  # read whole, streamed
        manifest = await client.get_manifest("ns/r", "one")
        assert await client.head_manifest("ns/r", "one") is not None
        sizes = [len(await client.read_blob("ns/r", blob)) for blob in manifest.blobs]
        for blob in manifest.blobs:
            assert await client.head_blob("ns/r", blob.digest) == blob.size
            async with client.open_blob("ns/r", blob.digest) as body:
                async for _ in body.chunks:
                    pass
        return sum(sizes)

    gc.collect()
    gc.disable()
    try:
        assert with_client(source, round_trip) > 5 * 1024 * 1024
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = [type(item).__name__ for item in gc.garbage if isinstance(item, (httpx.Response, httpx.Request))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []


async def test_docker_hub_rate_limit_headers_are_read() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            headers={
                "Docker-Content-Digest": "sha256:" + "2" * 64,
                "Content-Type": "application/vnd.oci.image.index.v1+json",
                "ratelimit-limit": "100;w=21600",
                "ratelimit-remaining": "76;w=21600",
            },
        )

    client = mock_client(httpx.MockTransport(handle))
    await client.head_manifest("projecthami/hami", "v2.10.0")
    assert client.rate_limit is not None
    assert client.rate_limit.to_json() == {"remaining": 76, "limit": 100, "window_seconds": 21600}
    assert str(client.rate_limit) == "76 of 100 pulls left per 21600 s"


async def test_authorization_follows_same_host_redirects_only() -> None:
    from mirror.registry.auth import RegistryAuth
    from mirror.registry.credentials import Credentials

    seen: dict[str, str | None] = {}

    def handle(request: httpx.Request) -> httpx.Response:
        seen[f"{request.url.host}{request.url.path}"] = request.headers.get("Authorization")
        if request.url.host == "registry.test" and request.url.path.endswith("/blobs/sha256:" + "3" * 64):
            if "Authorization" not in request.headers:
                return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})
            return httpx.Response(307, headers={"Location": "/v2/ns/r/blobs/moved"})
        if request.url.path.endswith("/moved"):
            return httpx.Response(307, headers={"Location": "https://cdn.test/data?sig=1"})
        # an answer not yet read, as one off the wire: blob bytes are read raw, and httpx reads (and decodes)
        # a Response made with content= as it is made
        return httpx.Response(200, stream=httpx.ByteStream(b"abc"))

    async def credentials(service: str | None) -> Credentials:
        return Credentials("user", "pw")

    http = httpx.AsyncClient(
        base_url="https://registry.test",
        transport=httpx.MockTransport(handle),
        auth=RegistryAuth("registry.test", credentials),
    )
    client = RegistryClient("registry.test", http)
    async with client.open_blob("ns/r", "sha256:" + "3" * 64) as body:
        assert b"".join([c async for c in body.chunks]) == b"abc"
    assert seen["registry.test/v2/ns/r/blobs/moved"] is not None  # same host: kept
    assert seen["cdn.test/data"] is None  # another host: dropped


# -- bodies read up to a limit, against a server that declares or streams too much --------------------------

LONG_ANSWER = 3 * MAX_MANIFEST_BYTES  # what the server would go on sending if nobody stopped reading


def chunked(handler: http.server.BaseHTTPRequestHandler, status: int, first: bytes, total: int) -> None:
    """Answer with a chunked body (no Content-Length): `first`, then spaces, in 64 KiB chunks up to `total`
    bytes (one chunk at least)."""
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    piece = first + b" " * (64 * 1024 - len(first))
    sent = 0
    try:
        while sent < total:
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            sent += len(piece)
            piece = b" " * len(piece)
        handler.wfile.write(b"0\r\n\r\n")
    except OSError:
        pass  # the client stopped reading: what a bounded reader does


class OverLimit(http.server.BaseHTTPRequestHandler):
    """A registry whose answers are over every limit: declared (Content-Length, and nothing sent), or streamed
    on and on."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.endswith("/declared"):
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
            self.send_header("Content-Length", str(MAX_MANIFEST_BYTES + 1))
            self.end_headers()
            self.close_connection = True
        elif self.path.endswith("/error"):
            chunked(self, 400, b"the first line of a long story\n", LONG_ANSWER)
        else:  # a manifest, a tag page, a blob: streamed past any limit
            chunked(self, 200, b'{"schemaVersion":2,', LONG_ANSWER)


@pytest.fixture
def over_limit() -> Iterator[str]:
    with http_server(OverLimit) as server:
        yield f"127.0.0.1:{server.server_address[1]}"


async def at(host: str, action: Callable[[RegistryClient], Awaitable[T]]) -> T:
    client = RegistryClient.open(host, ClientOptions(plain_http=True, anonymous=True, read_timeout=30))
    try:
        return await action(client)
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    ("what", "said"),
    [
        ("manifest declared", f"fetch manifest {{host}}/ns/r:declared: 200: answer {MAX_MANIFEST_BYTES + 1} bytes"),
        ("manifest streamed", f"fetch manifest {{host}}/ns/r:streamed: 200: answer over {MAX_MANIFEST_BYTES} bytes"),
        ("tag page streamed", f"list tags {{host}}/ns/r: 200: answer over {MAX_TAG_PAGE_BYTES} bytes"),
    ],
)
async def test_a_document_over_its_limit_is_refused_naming_the_limit(over_limit: str, what: str, said: str) -> None:
    read: dict[str, Callable[[RegistryClient], Awaitable[object]]] = {
        "manifest declared": lambda c: c.get_manifest("ns/r", "declared"),  # refused before its body arrives
        "manifest streamed": lambda c: c.get_manifest("ns/r", "streamed"),  # refused as the limit is passed
        "tag page streamed": lambda c: c.list_tags("ns/r"),
    }
    with pytest.raises(RegistryError) as error:
        await at(over_limit, read[what])
    assert str(error.value).startswith(said.format(host=over_limit))


async def test_a_small_blob_longer_than_its_descriptor_is_refused(over_limit: str) -> None:
    descriptor = Descriptor("application/octet-stream", "sha256:" + "4" * 64, 1000)
    with pytest.raises(IntegrityError, match="more than the 1000 bytes its descriptor says"):
        await at(over_limit, lambda c: c.read_blob("ns/r", descriptor))


async def test_an_error_body_that_goes_on_is_cut_and_its_first_line_kept(over_limit: str) -> None:
    with pytest.raises(RegistryError) as error:
        await at(over_limit, lambda c: c.get_manifest("ns/r", "error"))
    assert (error.value.status, error.value.code, error.value.message) == (400, "", "the first line of a long story")


BOMB_BYTES = 256 * 1024 * 1024  # what the gzip answers below stand for: about 250 KB on the wire


def gzip_bomb() -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    zeros = bytes(1024 * 1024)
    return b"".join(packer.compress(zeros) for _ in range(BOMB_BYTES // len(zeros))) + packer.flush()


SMALL_MANIFEST = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + "1" * 64, "size": 2},
        "layers": [],
    }
).encode()
CODED: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "deflate-raw": lambda data: zlib.compress(data, wbits=-zlib.MAX_WBITS),
}


class Bombs(http.server.BaseHTTPRequestHandler):
    """A registry and its token realm answering in gzip, never asked for: a refusal (401, the bearer
    challenge), a token and a manifest that each decode to 256 MB."""

    protocol_version = "HTTP/1.1"
    bomb = b""
    asked: ClassVar[list[str]] = []  # the Accept-Encoding of each request

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.asked.append(self.headers.get("Accept-Encoding", ""))
        host = self.headers["Host"]
        coding = self.path.rsplit("/", 1)[-1]
        if coding in CODED:  # a manifest as small as they are, in gzip or in deflate (a zlib stream or raw)
            body = CODED[coding](SMALL_MANIFEST)
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
            self.send_header("Content-Encoding", coding.split("-")[0])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.startswith("/v2/guarded/"):
            self.send_response(401)
            self.send_header("WWW-Authenticate", f'Bearer realm="http://{host}/token",service="bombs"')
        else:  # /token, or a manifest
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(self.bomb)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client stopped reading
            self.wfile.write(self.bomb)


@pytest.fixture(scope="module")
def bombs() -> Iterator[str]:
    Bombs.bomb = gzip_bomb()
    with http_server(Bombs) as server:
        yield f"127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize(
    ("read", "said"),
    [
        ("ns/r", f"answer over {MAX_MANIFEST_BYTES} bytes"),  # read and dropped: the plain path
        ("guarded/r", "token server 127.0.0.1: over 1048576 bytes"),  # kept for httpx: the auth flow's path
    ],
    ids=["a manifest", "a refusal, then a token"],
)
async def test_a_coded_body_is_measured_as_it_decodes_not_once_decoded(bombs: str, read: str, said: str) -> None:
    """httpx decodes what a server sends in gzip whether or not it was asked for, and reads a whole body before
    a limit can be checked: about 250 KB on the wire stood for 256 MB in memory. Each refusal names its limit,
    and the memory the run allocated stays far under what the bodies stand for."""
    tracemalloc.start()
    try:
        with pytest.raises(RegistryError) as error:
            await at(bombs, lambda c: c.get_manifest(read, "v1"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert said in str(error.value)
    assert peak < 32 * 1024 * 1024, f"{peak / 1e6:.0f} MB allocated"


@pytest.mark.parametrize("coding", sorted(CODED))
async def test_a_coded_manifest_decodes_to_the_bytes_its_digest_names(bombs: str, coding: str) -> None:
    digest = "sha256:" + hashlib.sha256(SMALL_MANIFEST).hexdigest()
    manifest = await at(bombs, lambda c: c.get_manifest("ns/r", coding))
    assert (manifest.raw, manifest.digest) == (SMALL_MANIFEST, digest)
    assert Bombs.asked[-1] == "gzip, deflate"  # only what is decoded as it arrives, whatever else is installed


async def test_read_limited_truncates_or_refuses_what_is_already_in_memory() -> None:
    request = httpx.Request("GET", "https://registry.test/")
    assert await read_limited(httpx.Response(200, content=b"abcdef", request=request), 6) == b"abcdef"
    assert await read_limited(httpx.Response(200, content=b"abcdef", request=request), 4, truncate=True) == b"abcd"
    with pytest.raises(BodyTooLarge, match=r"^6 bytes \(limit 4\)$"):  # its Content-Length says so
        await read_limited(httpx.Response(200, content=b"abcdef", request=request), 4)


async def test_blob_pieces_are_regrouped_into_chunks_of_at_least_the_chunk_size_each_byte_copied_once() -> None:
    pieces = [bytes([n]) * 3 for n in range(10)] + [b"x" * 20, b"y"]

    async def arriving() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    chunks = [chunk async for chunk in regrouped(arriving(), 8)]
    assert b"".join(chunks) == b"".join(pieces)
    assert [len(chunk) for chunk in chunks] == [9, 9, 9, 3 + 20, 1]  # at least 8 each, the last excepted
    big = [chunk async for chunk in regrouped(arriving(), 1)]
    assert all(chunk is piece for chunk, piece in zip(big, pieces, strict=True))  # a piece that fills a chunk: as is
