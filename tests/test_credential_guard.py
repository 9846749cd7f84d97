"""Credentials kept to the registry's own scheme, challenges parsed in linear time, and one failed credential
load shared by every request waiting on it.

An https registry's credentials never travel over plain HTTP: not to an `http://` Location on its own host name
(what a registry behind a proxy that ends TLS answers an upload with), nor to a token realm on plain HTTP.
Real registries where a registry is involved; httpx's MockTransport where the wire case is one no real registry
here would answer (an `http://` upload Location from an https registry)."""

from __future__ import annotations

import asyncio
import base64
import http.server
import os
import stat
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.demo.certs import make_certificates
from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.registry import RegistryClient, RegistryError
from mirror.registry.auth import AuthError, RegistryAuth
from mirror.registry.challenge import Challenge, parse_challenge
from mirror.registry.credentials import CredentialError, Credentials
from mirror.registry.options import ClientOptions
from tests.support import http_server
from tests.tokenserver import TokenServer, token_server

USER, PASSWORD = "pusher", "hunter2-registry-password"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
BEARER = "SECRET-BEARER-TOKEN"
HOST = "reg.test"
SESSION = "/v2/ns/app/blobs/uploads/abc?_state=opaque"
# Seconds of CPU (time.process_time), which a loaded machine does not stretch as it does the wall clock: the
# quadratic parse took over 30 s of CPU for each 100 KB header; the linear one takes milliseconds.
HOSTILE_CPU_SECONDS = 10.0


# -- an https registry's credentials over plain HTTP ---------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    method: str
    url: str
    authorization: str | None


def https_registry(scheme: str, sent: list[Sent], post_location: str, patch_location: str) -> RegistryClient:
    """`https://reg.test`, challenging with `scheme` (bearer or basic) and answering an upload's POST and PATCH
    with the Locations given; every request it is sent is recorded."""

    def handle(request: httpx.Request) -> httpx.Response:
        authorization = request.headers.get("Authorization")
        sent.append(Sent(request.method, str(request.url), authorization))
        if request.url.host == "auth.test":
            return httpx.Response(200, json={"token": BEARER, "expires_in": 300})
        if request.url.scheme == "http":
            return httpx.Response(202)
        if scheme == "bearer" and authorization != f"Bearer {BEARER}":
            challenge = 'Bearer realm="https://auth.test/token",service="reg"'
            return httpx.Response(401, headers={"WWW-Authenticate": challenge})
        if scheme == "basic" and authorization != f"Basic {BASIC}":
            return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="reg"'})
        if request.method == "POST":
            return httpx.Response(202, headers={"Location": post_location})
        if request.method == "PATCH":
            return httpx.Response(202, headers={"Location": patch_location, "Range": "0-2"})
        return httpx.Response(200, json={"name": "ns/app", "tags": ["v1"]})

    async def credentials(service: str | None) -> Credentials:
        return Credentials(USER, PASSWORD, origin="config")

    http = httpx.AsyncClient(
        base_url=f"https://{HOST}", transport=httpx.MockTransport(handle), auth=RegistryAuth(HOST, credentials)
    )
    return RegistryClient(HOST, http)


def assert_no_secret(text: str) -> None:
    for secret in (PASSWORD, BASIC, BEARER):
        assert secret not in text


async def chunk(client: RegistryClient) -> None:
    async def three_bytes() -> AsyncIterator[bytes]:
        yield b"abc"

    session = await client.start_upload("ns/app")
    assert session is not None
    await client.upload_chunk("ns/app", session, 0, 3, three_bytes())


@pytest.mark.parametrize("scheme", ["bearer", "basic"])
@pytest.mark.parametrize("answer", ["POST", "PATCH"])
async def test_an_upload_session_on_plain_http_from_an_https_registry_is_refused(scheme: str, answer: str) -> None:
    """A registry behind a proxy that ends TLS names its upload session `http://<its host>/...`: the old code
    sent the blob there, with the registry's Basic password or bearer token."""
    sent: list[Sent] = []
    downgraded, kept = f"http://{HOST}{SESSION}", f"https://{HOST}{SESSION}"
    post, patch = (downgraded, kept) if answer == "POST" else (kept, downgraded)
    client = https_registry(scheme, sent, post, patch)
    try:
        with pytest.raises(RegistryError) as refused:
            await chunk(client)
    finally:
        await client.aclose()
    action = "start upload" if answer == "POST" else "upload chunk"
    message = str(refused.value)
    assert message.startswith(f"{action} {HOST}/ns/app: 202: the upload session is at http://{HOST}/v2/ns/app/")
    assert "not https: refused, the blob would go in clear" in message and "_state" not in message
    assert_no_secret(message)
    assert [s for s in sent if s.url.startswith("http://")] == []  # nothing went in clear, bytes or credentials


@pytest.mark.parametrize("scheme", ["bearer", "basic"])
async def test_credentials_never_go_to_the_registry_host_over_plain_http(scheme: str) -> None:
    """Whatever sends a request to `http://<the registry's host>` (a Location, a redirect), the auth flow itself
    gives it no credentials: they are the https origin's, not the host name's."""
    sent: list[Sent] = []
    client = https_registry(scheme, sent, f"https://{HOST}{SESSION}", f"https://{HOST}{SESSION}")
    try:
        assert await client.list_tags("ns/app") == ["v1"]  # challenged, answered with credentials
        await client.http.request("PUT", f"http://{HOST}{SESSION}&digest=sha256:0", content=b"abc")
    finally:
        await client.aclose()
    assert [s.authorization for s in sent if s.url.startswith("https://reg.test/")][-1] is not None
    (plain,) = [s for s in sent if s.url.startswith("http://")]
    assert plain.method == "PUT" and plain.authorization is None


@pytest.fixture
def realm_on_plain_http(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TokenServer, LocalRegistry]]:
    """A registry serving https whose token realm is on plain HTTP (the token server of the other tests)."""
    certificates = tmp_path / "certificates"
    certificates.mkdir()
    ca, cert, key = make_certificates(certificates, {"localhost": "127.0.0.1"})
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    with token_server(tmp_path / "tokens", users={USER: PASSWORD}) as tokens:
        registry = start_registry(tmp_path / "tls", auth=tokens.registry_auth("tls-registry"), tls=(cert, key))
        try:
            yield tokens, registry
        finally:
            registry.stop()


def resolve(registry: LocalRegistry, options: ClientOptions) -> object:
    async def go() -> object:
        client = RegistryClient.open(registry.host, options)
        try:
            return await client.head_manifest("ns/app", "v1")
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_a_token_realm_on_plain_http_gets_no_credentials_from_an_https_registry(
    realm_on_plain_http: tuple[TokenServer, LocalRegistry],
) -> None:
    tokens, registry = realm_on_plain_http
    assert tokens.realm.startswith("http://")
    with pytest.raises(AuthError) as refused:
        resolve(registry, ClientOptions(username=USER, password=lambda: PASSWORD))
    assert str(refused.value) == (
        f"access denied to ns/app at {registry.host}: 401: the token realm {tokens.realm} is not https:"
        " credentials are not sent there in clear"
    )
    assert tokens.requests == []  # the realm was never asked: the password did not go in clear


# -- WWW-Authenticate parsed in linear time ------------------------------------------------------------------

# Every form the suite's registries, token servers and stand-ins send, and what each parses to.
CHALLENGES = {
    'Bearer realm="http://127.0.0.1:5000/token",service="target-registry:cn-test:1234"': Challenge(
        "bearer", {"realm": "http://127.0.0.1:5000/token", "service": "target-registry:cn-test:1234"}
    ),
    'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
    'scope="repository:library/ubuntu:pull,push",error="insufficient_scope"': Challenge(
        "bearer",
        {
            "realm": "https://auth.docker.io/token",
            "service": "registry.docker.io",
            "scope": "repository:library/ubuntu:pull,push",
            "error": "insufficient_scope",
        },
    ),
    'Bearer realm="https://dockerauth.cn-hangzhou.aliyuncs.com/auth",'
    'service="registry.aliyuncs.com:cn-hangzhou:china:cri-abc",scope="repository:ns/r:pull repository:ns/s:pull"': (
        Challenge(
            "bearer",
            {
                "realm": "https://dockerauth.cn-hangzhou.aliyuncs.com/auth",
                "service": "registry.aliyuncs.com:cn-hangzhou:china:cri-abc",
                "scope": "repository:ns/r:pull repository:ns/s:pull",
            },
        )
    ),
    'Basic realm="mirror-test"': Challenge("basic", {"realm": "mirror-test"}),
    "Bearer": Challenge("bearer", {}),
    "": None,
    'BEARER Realm="https://a.test/t", Service=svc, scope="x:\\"quoted\\":pull"': Challenge(
        "bearer", {"realm": "https://a.test/t", "service": "svc", "scope": 'x:"quoted":pull'}
    ),
    'Bearer realm="https://a.test/t",service=,scope="s"': Challenge(
        "bearer", {"realm": "https://a.test/t", "scope": "s"}
    ),
    'Bearer xrealm="a",realm="b"': Challenge("bearer", {"xrealm": "a", "realm": "b"}),
}

HOSTILE = {
    "one name, no =": "Bearer " + "a" * 100_000,
    "a long name, then a lone =": "Bearer " + "Realm_" * 16_665 + ' ="x"',
    "a realm, then a name without =": 'Bearer realm="https://a.test/t",' + "s" * 100_000,
}


def test_challenges_parse_as_before_and_a_100_kb_hostile_one_at_once() -> None:
    for header, expected in CHALLENGES.items():
        assert parse_challenge(header) == expected, header
    started = time.process_time()
    parsed = {name: parse_challenge(header) for name, header in HOSTILE.items()}
    assert time.process_time() - started < HOSTILE_CPU_SECONDS
    assert parsed == {
        "one name, no =": Challenge("bearer", {}),
        "a long name, then a lone =": Challenge("bearer", {}),
        "a realm, then a name without =": Challenge("bearer", {"realm": "https://a.test/t"}),
    }


def test_a_registry_answering_with_a_100_kb_challenge_fails_at_once() -> None:
    """The parse runs on the event loop: a quadratic one stalled every transfer of the run with it."""

    class Hostile(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_HEAD(self) -> None:
            self.send_response(401)
            self.send_header("WWW-Authenticate", HOSTILE["one name, no ="])
            self.send_header("Content-Length", "0")
            self.end_headers()

    with http_server(Hostile) as server:
        host = f"127.0.0.1:{server.server_address[1]}"

        async def go() -> object:
            client = RegistryClient.open(host, ClientOptions(plain_http=True))
            try:
                return await client.head_manifest("ns/app", "v1")
            finally:
                await client.aclose()

        started = time.process_time()  # the client's and the server thread's CPU: the parse is what it bounds
        with pytest.raises(RegistryError) as refused:
            asyncio.run(go())
        assert time.process_time() - started < HOSTILE_CPU_SECONDS
    assert str(refused.value) == f"resolve {host}/ns/app:v1: 401"


# -- a failed credential load, shared ------------------------------------------------------------------------


@pytest.fixture
def private_registry(tmp_path: Path) -> Iterator[LocalRegistry]:
    """A registry that wants a login for everything (token auth, no public repositories)."""
    with token_server(tmp_path / "tokens", users={USER: PASSWORD}) as tokens:
        registry = start_registry(tmp_path / "private", auth=tokens.registry_auth("private-registry"))
        try:
            yield registry
        finally:
            registry.stop()


def failing_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Callable[[], int]]:
    """A docker config whose credential helper counts its calls and fails each (a keychain that is locked)."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "helper-calls"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-locked"
    helper.write_text(f"#!/bin/sh\nread server\necho call >> {calls}\necho 'keychain locked' >&2\nexit 1\n")
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    config = tmp_path / "config.json"
    config.write_text('{"credsStore": "locked"}')
    return config, lambda: len(calls.read_text().splitlines()) if calls.exists() else 0


def test_a_failed_credential_load_is_shared_by_every_request_waiting_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, private_registry: LocalRegistry
) -> None:
    config, calls = failing_helper(tmp_path, monkeypatch)
    waiting = 8  # on two repositories: two token fetches, each with requests following it

    async def go() -> tuple[BaseException, list[BaseException], BaseException]:
        client = RegistryClient.open(private_registry.host, ClientOptions(plain_http=True, docker_config=config))
        try:
            with pytest.raises(CredentialError) as first:  # learns the challenge; the helper's first call
                await client.head_manifest("ns/app0", "v0")
            assert calls() == 1
            asks = (client.head_manifest(f"ns/app{i % 2}", f"v{i}") for i in range(waiting))
            together = await asyncio.gather(*asks, return_exceptions=True)
            assert calls() == 2  # one call for all of them
            with pytest.raises(CredentialError) as later:  # a later request tries again
                await client.head_manifest("ns/app0", "v0")
            return first.value, [r for r in together if isinstance(r, BaseException)], later.value
        finally:
            await client.aclose()

    first, together, later = asyncio.run(go())
    assert len(together) == waiting and all(isinstance(e, CredentialError) for e in together)
    assert {str(e) for e in [first, *together, later]} == {
        f"credential helper docker-credential-locked failed for {private_registry.host}: keychain locked"
    }
    assert calls() == 3
