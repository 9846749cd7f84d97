"""Registry API redirects the way registry.k8s.io does them: every `/v2/<name>/...` request answered with a 307
to another registry (Artifact Registry, under `/v2/k8s-artifacts-prod/images/<name>/...`) that wants its own
anonymous bearer token. Followed for manifests, tags and blobs, our credentials never leaving the configured
host; a redirect to anything that is not the registry API (Docker's web site) and a loop each fail with one line.

Everything runs on 127.0.0.1: a small Python front, a real `docker-registry` with token auth behind it."""

from __future__ import annotations

import asyncio
import base64
import http.server
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from mirror.cli import main
from mirror.demo.localregistry import AccessEntry, LocalRegistry, start_registry
from mirror.demo.sample import MiB, SampleImage, push_multiarch
from mirror.oci import Descriptor, Manifest
from mirror.registry import RegistryClient, RegistryError
from mirror.registry.options import ClientOptions
from mirror.registry.redirects import MAX_REDIRECTS
from tests.support import blob_bytes, http_server, manifest_bytes, manifest_digest, sync_json, write_config
from tests.test_sync import SHARED, VERSION
from tests.tokenserver import TokenServer, token_server

T = TypeVar("T")

USER, PASSWORD = "mirror-user", "front-only-secret-5f2b9e"  # configured for the front's host only
PUBLISHER, PUBLISHER_PASSWORD = "publisher", "publisher-secret-8c1d4a"
PREFIX = "k8s-artifacts-prod/images/"
REPOSITORY = "projecthami/hami"
_API = re.compile(r"^/v2/(?P<name>.+?)/(?P<rest>(?:manifests|blobs|tags|referrers)(?:/.*)?)$")


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    authorization: str | None


@dataclass
class Front:
    """A registry host that answers every API request with a redirect, and records what it was sent."""

    seen: list[Seen] = field(default_factory=list)
    port: int = 0

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"


@contextmanager
def front_server(mode: str, upstream: str = "", prefix: str = "", tokens: TokenServer | None = None) -> Iterator[Front]:
    """`mode` "api": 307 to `upstream` + `/v2/<prefix><name>/...`; "website": 301 to a page, as `docker.io`
    does; "loop": 307 to the same path. With `tokens`, a request without one of its tokens is challenged."""
    front = Front()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def answer(self, status: int, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in {**headers, "Content-Length": "0"}.items():
                self.send_header(name, value)
            self.end_headers()

        def challenged(self, name: str) -> bool:
            if tokens is None:
                return False
            scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
            if scheme == "Bearer" and token in tokens.issued:
                return False
            challenge = f'Bearer realm="{tokens.realm}",service="front",scope="repository:{name}:pull"'
            self.answer(401, {"WWW-Authenticate": challenge})
            return True

        def handle_any(self) -> None:
            front.seen.append(Seen(self.command, self.path, self.headers.get("Authorization")))
            path, sep, query = self.path.partition("?")
            match = _API.match(path)
            if match is None:
                self.answer(200 if path in ("/", "/v2/") else 404, {})
                return
            if self.challenged(match["name"]):
                return
            if mode == "website":
                self.answer(301, {"Location": f"{front.url}/"})
            elif mode == "loop":
                self.answer(307, {"Location": self.path})
            else:
                self.answer(307, {"Location": f"{upstream}/v2/{prefix}{match['name']}/{match['rest']}{sep}{query}"})

        do_GET = do_HEAD = handle_any

    with http_server(Handler) as server:
        front.port = server.server_address[1]
        yield front


@dataclass
class World:
    tmp: Path
    tokens: TokenServer  # the second registry's token server
    registry: LocalRegistry  # the second registry, behind the front
    front: Front
    image: SampleImage
    mark: int  # the registry's access log before the test

    def served(self) -> list[AccessEntry]:
        """What the registry behind the front answered since the test began (its challenges left out)."""
        return [e for e in self.registry.access_log()[self.mark :] if e.status != 401]

    @property
    def hosted_at(self) -> str:
        return PREFIX + REPOSITORY

    def client(self, host: str | None = None) -> RegistryClient:
        """A client for the front's host (or `host`), configured with credentials for that host."""
        options = ClientOptions(plain_http=True, username=USER, password=lambda: PASSWORD)
        return RegistryClient.open(host or self.front.host, options)


def run(world: World, action: Callable[[RegistryClient], Awaitable[T]], host: str | None = None) -> T:
    async def go() -> T:
        client = world.client(host)
        try:
            return await action(client)
        finally:
            await client.aclose()

    return asyncio.run(go())


def our_secrets() -> list[str]:
    return [PASSWORD, base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()]


def publish(registry: LocalRegistry) -> SampleImage:
    options = ClientOptions(plain_http=True, username=PUBLISHER, password=lambda: PUBLISHER_PASSWORD)

    async def push() -> SampleImage:
        client = RegistryClient.open(registry.host, options)
        try:
            return await push_multiarch(
                client, PREFIX + REPOSITORY, VERSION, shared_layers=(SHARED,), layer_sizes=(MiB,), seed=1
            )
        finally:
            await client.aclose()

    return asyncio.run(push())


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    # The token server knows our user too: credentials that leaked would be granted and recorded, not refused.
    users = {PUBLISHER: PUBLISHER_PASSWORD, USER: PASSWORD}
    with token_server(tmp_path / "tokens", users=users, public=("k8s-artifacts-prod",)) as tokens:
        registry = start_registry(tmp_path / "artifact-registry", auth=tokens.registry_auth("artifact-registry"))
        try:
            image = publish(registry)
            tokens.requests.clear()
            with front_server("api", registry.url, PREFIX) as front:
                yield World(tmp_path, tokens, registry, front, image, len(registry.access_log()))
        finally:
            registry.stop()


def assert_no_credentials_left_the_front(world: World) -> None:
    assert world.front.seen, "the front was never asked"
    assert [s for s in world.front.seen if s.authorization is not None] == []  # it never challenged
    assert world.tokens.requests and all(r.user is None for r in world.tokens.requests)  # anonymous only
    assert all(r.method == "GET" for r in world.tokens.requests)


def test_manifests_tags_and_blobs_follow_the_redirect_anonymously(world: World) -> None:
    image = world.image
    index = Manifest.parse(image.manifests[image.digest])
    child = index.manifests[0]

    async def reads(client: RegistryClient) -> dict[str, Any]:
        child_manifest = await client.get_manifest(REPOSITORY, child.digest)
        config = child_manifest.blobs[0]
        layer = max(child_manifest.layers, key=lambda d: d.size)
        return {
            "head_tag": await client.head_manifest(REPOSITORY, VERSION),
            "get_tag": await client.get_manifest(REPOSITORY, VERSION),
            "head_child": await client.head_manifest(REPOSITORY, child.digest),
            "get_child": child_manifest,
            "blob_size": await client.head_blob(REPOSITORY, layer.digest),
            "layer": layer,
            "config": await client.read_blob(REPOSITORY, config),
            "config_descriptor": config,
            "layer_bytes": await read_whole_blob(client, layer),
            "tags": await client.list_tags(REPOSITORY),
            "missing": await client.head_manifest(REPOSITORY, "no-such-tag"),
        }

    got = run(world, reads)

    assert got["head_tag"].digest == image.digest and got["head_tag"].media_type == image.media_type
    assert got["get_tag"].digest == image.digest and got["get_tag"].raw == image.manifests[image.digest]
    assert got["head_child"].digest == child.digest and got["head_child"].size == child.size
    assert got["get_child"].raw == image.manifests[child.digest]
    layer: Descriptor = got["layer"]
    assert got["blob_size"] == layer.size
    assert got["layer_bytes"] == blob_bytes_at(world, layer.digest)
    assert got["config"] == blob_bytes_at(world, got["config_descriptor"].digest)
    assert got["tags"] == [VERSION]
    assert got["missing"] is None  # a 404 behind the redirect is still "not there"

    # every request went to the front first, and was answered there with the redirect
    assert {s.method for s in world.front.seen} == {"GET", "HEAD"}
    assert all(s.path.startswith(f"/v2/{REPOSITORY}/") for s in world.front.seen)
    # ... and was served by the registry behind it, at its own path
    served = world.served()
    assert [(e.method, e.path.removeprefix("/v2/" + PREFIX)) for e in served] == [
        (s.method, s.path.removeprefix("/v2/")) for s in world.front.seen
    ]
    assert_no_credentials_left_the_front(world)
    # one anonymous token for the one scope set, reused for every request after the first challenge
    assert [r.scopes for r in world.tokens.requests] == [frozenset({f"repository:{PREFIX}{REPOSITORY}:pull"})]


async def read_whole_blob(client: RegistryClient, descriptor: Descriptor) -> bytes:
    async with client.open_blob(REPOSITORY, descriptor.digest) as body:
        return b"".join([chunk async for chunk in body.chunks])


def blob_bytes_at(world: World, digest: str) -> bytes:
    return world.registry.blob_path(digest).read_bytes()


def test_a_redirected_manifest_is_still_checked_against_its_digest(world: World) -> None:
    """Bytes changed behind the redirect (same length, still valid JSON) are refused, by tag and by digest."""
    image = world.image
    child = Manifest.parse(image.manifests[image.digest]).manifests[0].digest
    for digest in (image.digest, child):
        stored = world.registry.blob_path(digest)
        stored.write_bytes(stored.read_bytes().replace(b"\n   ", b"\n\t  ", 1))

    def fetch(ref: str) -> Callable[[RegistryClient], Awaitable[Manifest]]:
        return lambda client: client.get_manifest(REPOSITORY, ref)

    for ref in (VERSION, child):
        with pytest.raises(RegistryError, match="hash to") as error:
            run(world, fetch(ref))
        assert error.value.code == "MANIFEST_INVALID" and "\n" not in str(error.value)


def test_sync_through_the_redirect_copies_byte_for_byte(
    world: World, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    image = world.image
    hami = {"name": "hami", "source": REPOSITORY, "tag": VERSION, "values_keys": ["scheduler.extender.image"]}
    config = write_config(world.tmp / "mirror.yaml", world.front, [target], images=[hami])
    data = yaml.safe_load(config.read_text())
    data["registries"][world.front.host].update({"username": USER, "password": PASSWORD})
    config.write_text(yaml.safe_dump(data))

    code, report, err = sync_json(config, capsys, VERSION)

    assert code == 0, err
    (result,) = report["images"]
    assert result["source_digest"] == image.digest
    (copied,) = result["targets"]
    assert copied["verified"] is True and copied["digest"] == image.digest
    assert manifest_digest(target, "mirrored/hami", VERSION) == image.digest
    for digest, raw in image.manifests.items():
        assert manifest_bytes(target, "mirrored/hami", digest) == raw
    for digest in image.blobs:
        assert blob_bytes(target, "mirrored/hami", digest) == blob_bytes_at(world, digest)
    assert_no_credentials_left_the_front(world)
    scope_sets = [r.scopes for r in world.tokens.requests]
    assert len(scope_sets) == len(set(scope_sets)), scope_sets  # one token per scope set for the whole run
    for secret in our_secrets():
        assert secret not in err


def test_credentials_the_configured_host_asked_for_stay_there(tmp_path: Path, world: World) -> None:
    """The configured host itself challenges (our credentials and its token are used there), then redirects
    through a second host to the registry: neither of those ever sees our token or credentials."""
    with (
        token_server(tmp_path / "gate-tokens", users={USER: PASSWORD}) as gate_tokens,
        front_server("api", world.front.url, tokens=gate_tokens) as gate,
    ):

        async def reads(client: RegistryClient) -> tuple[Manifest, Descriptor | None]:
            return await client.get_manifest(REPOSITORY, VERSION), await client.head_manifest(REPOSITORY, VERSION)

        manifest, head = run(world, reads, host=gate.host)

    assert manifest.digest == world.image.digest and head is not None and head.digest == world.image.digest
    assert gate_tokens.requests and all(r.user == USER for r in gate_tokens.requests)
    ours = {f"Bearer {token}" for token in gate_tokens.issued}
    assert any(s.authorization in ours for s in gate.seen)  # the configured host got its token
    assert_no_credentials_left_the_front(world)  # the next host got nothing, the realm only anonymous asks


def test_a_redirect_to_a_web_site_is_one_line(world: World) -> None:
    with front_server("website") as site:
        for name, action in {
            "resolve": lambda c: c.head_manifest(REPOSITORY, VERSION),
            "fetch manifest": lambda c: c.get_manifest(REPOSITORY, VERSION),
            "list tags": lambda c: c.list_tags(REPOSITORY),
        }.items():
            with pytest.raises(RegistryError) as error:
                run(world, action, host=site.host)
            message = str(error.value)
            assert message.startswith(f"{name} {site.host}/{REPOSITORY}")
            assert message.endswith(f"301: redirected to {site.url}/: not a registry API endpoint")
            assert "\n" not in message
        assert [s.path for s in site.seen if not s.path.startswith("/v2/")] == []  # the page was never fetched
        assert all(s.authorization is None for s in site.seen)


def test_a_redirect_loop_is_one_line(world: World, target: LocalRegistry, capsys: pytest.CaptureFixture[str]) -> None:
    with front_server("loop") as loop:
        with pytest.raises(RegistryError) as error:
            run(world, lambda c: c.head_manifest(REPOSITORY, VERSION), host=loop.host)
        assert f"more than {MAX_REDIRECTS} redirects" in str(error.value) and "\n" not in str(error.value)
        assert len(loop.seen) == MAX_REDIRECTS + 1

        blob = next(iter(world.image.blobs))
        with pytest.raises(RegistryError, match=f"more than {MAX_REDIRECTS} redirects"):
            run(world, lambda c: c.head_blob(REPOSITORY, blob), host=loop.host)

        images = [{"name": "hami", "source": REPOSITORY, "tag": VERSION}]
        config = write_config(world.tmp / "loop.yaml", loop, [target], images=images)
        assert main(["sync", VERSION, "--config", str(config)]) == 1
        err = capsys.readouterr().err
        failures = [line for line in err.splitlines() if line.startswith("mirror: ")]
        assert len(failures) == 1 and f"more than {MAX_REDIRECTS} redirects" in failures[0], err
        assert "Traceback" not in err
