"""Registry client wire cases. Real-registry behaviour is covered by test_sync; a mock transport is used
here only for what Debian's registry does not do (relative Locations, tag paging)."""

from __future__ import annotations

import httpx
import pytest

from mirror.demo.localregistry import LocalRegistry
from mirror.oci import Manifest
from mirror.registry import RegistryClient, RegistryError
from mirror.registry.errors import parse_error_body
from tests.support import with_client


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


async def test_manifest_bytes_must_match_the_digest_asked_for() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b'{"schemaVersion":2,"manifests":[]}')

    with pytest.raises(RegistryError, match="hash to"):
        await mock_client(httpx.MockTransport(handle)).get_manifest("ns/r", "sha256:" + "1" * 64)


def test_error_bodies_become_typed_errors(source: LocalRegistry) -> None:
    async def fetch(client: RegistryClient) -> Manifest:
        return await client.get_manifest("ns/missing", "v1")

    with pytest.raises(RegistryError) as error:
        with_client(source, fetch)
    assert error.value.status == 404 and error.value.code in {"MANIFEST_UNKNOWN", "NAME_UNKNOWN"}
    assert error.value.not_found
    assert str(error.value).startswith(f"fetch manifest {source.host}/ns/missing:v1: 404")


def test_parse_error_body() -> None:
    assert parse_error_body(b'{"errors":[{"code":"DENIED","message":"no"}]}') == ("DENIED", "no")
    assert parse_error_body(b"<html>bad gateway</html>\nmore") == ("", "<html>bad gateway</html>")
    assert parse_error_body(b"") == ("", "")


def test_tags_at_a_real_registry(source: LocalRegistry) -> None:
    from mirror.demo.sample import push_single

    with_client(source, lambda c: push_single(c, "ns/r", "one"))
    with_client(source, lambda c: push_single(c, "ns/r", "two", seed=1))
    assert sorted(with_client(source, lambda c: c.list_tags("ns/r"))) == ["one", "two"]


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
        return httpx.Response(200, content=b"abc")

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
