"""Several `WWW-Authenticate` challenges in one answer, a repository name holding an API word, and an upload
session the login may not cancel: each against a real `docker-registry` with token auth where a registry is
involved (the fault proxy adds or replaces the challenge headers distribution cannot send)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.registry import RegistryClient
from mirror.registry.challenge import Challenge, parse_challenge, parse_challenges, repository_of, scopes_for
from mirror.registry.options import ClientOptions
from tests.faultproxy import Fault, FaultProxy, fault_proxy
from tests.tokenserver import TokenServer, token_server

USER, PASSWORD = "pusher", "Tr0ub4dor&3-secret"
SERVICE = "challenges-registry"
BLOB = b"a blob pushed through several challenges\n" * 64
DIGEST = "sha256:" + hashlib.sha256(BLOB).hexdigest()
EVERY_ANSWER = 1_000_000  # a fault's count: applied to every matching request


@dataclass
class World:
    tokens: TokenServer
    registry: LocalRegistry
    proxy: FaultProxy

    def client(self, host: str | None = None) -> RegistryClient:
        options = ClientOptions(plain_http=True, username=USER, password=lambda: PASSWORD, read_timeout=30)
        return RegistryClient.open(host or self.registry.host, options)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with token_server(tmp_path / "tokens", users={USER: PASSWORD}) as tokens:
        registry = start_registry(tmp_path / "registry", auth=tokens.registry_auth(SERVICE))
        try:
            with fault_proxy(registry.port) as proxy:
                yield World(tokens, registry, proxy)
        finally:
            registry.stop()


async def pieces(data: bytes) -> AsyncIterator[bytes]:
    """A streamed body: httpx cannot send it twice, so a 401 to it is never answered by a replay."""
    for start in range(0, len(data), 1024):
        yield data[start : start + 1024]


async def push_and_check(client: RegistryClient, repository: str) -> int | None:
    """A blob pushed in one streamed PUT (the session's POST first), then its size as the registry reports it."""
    try:
        session = await client.start_upload(repository)
        assert session is not None
        await client.finish_upload(repository, session, DIGEST, len(BLOB), pieces(BLOB))
        return await client.head_blob(repository, DIGEST)
    finally:
        await client.aclose()


# -- several challenges -------------------------------------------------------------------------------------


def test_each_challenge_keeps_its_own_parameters() -> None:
    header = 'Bearer realm="https://a.test/t",service="r", Basic realm="x"'
    assert parse_challenges(header) == [
        Challenge("bearer", {"realm": "https://a.test/t", "service": "r"}),
        Challenge("basic", {"realm": "x"}),
    ]
    assert parse_challenge(header) == Challenge("bearer", {"realm": "https://a.test/t", "service": "r"})


@pytest.mark.parametrize(
    ("header", "chosen"),
    [
        # Basic first, in one header or in two that httpx joined with ", "
        ('Basic realm="x", Bearer realm="https://a.test/t",service="r"', "https://a.test/t"),
        ('Basic realm="x",Bearer realm="https://a.test/t"', "https://a.test/t"),
        # a scheme with no parameters, and one with a token68 (Negotiate's), before the Bearer one
        ('Negotiate, Bearer realm="https://a.test/t"', "https://a.test/t"),
        ('Negotiate YIIBhgYGKwYB==, Bearer realm="https://a.test/t"', "https://a.test/t"),
        # a Bearer challenge without a realm gives way to one with
        ('Bearer error="invalid_token", Bearer realm="https://a.test/t"', "https://a.test/t"),
    ],
)
def test_bearer_is_preferred_wherever_it_stands(header: str, chosen: str) -> None:
    challenge = parse_challenge(header)
    assert challenge is not None and challenge.scheme == "bearer" and challenge.realm == chosen, challenge


def test_basic_is_taken_over_schemes_mirror_cannot_answer() -> None:
    assert parse_challenge('Negotiate abc==, Basic realm="r", Digest realm="d"') == Challenge("basic", {"realm": "r"})
    assert parse_challenge("Negotiate") == Challenge("negotiate", {})


def test_commas_and_scheme_names_inside_quotes_stay_in_their_value() -> None:
    header = r'Bearer realm="https://a.test/t?x=1, Basic realm=y",scope="a:\"b, c\":pull", Basic realm="z"'
    assert parse_challenges(header) == [
        Challenge("bearer", {"realm": "https://a.test/t?x=1, Basic realm=y", "scope": 'a:"b, c":pull'}),
        Challenge("basic", {"realm": "z"}),
    ]


def test_an_unterminated_quote_runs_to_the_end_of_the_header() -> None:
    assert parse_challenges('Bearer realm="https://a.test/t, Basic realm=y') == [
        Challenge("bearer", {"realm": "https://a.test/t, Basic realm=y"})
    ]
    # a value's closing quote ends it: what follows without a comma belongs to no challenge
    assert parse_challenges('Bearer realm="https://a.test/t"x Basic, Basic realm="z"') == [
        Challenge("bearer", {"realm": "https://a.test/t"}),
        Challenge("basic", {"realm": "z"}),
    ]


def test_many_challenges_parse_in_linear_time() -> None:
    headers = [
        'Basic realm="x", ' * 20_000,
        "Negotiate abc==, " * 20_000,
        'x="\\",' * 30_000,  # every quote escaped: nothing closes
        "Bearer " + "a " * 50_000,
    ]
    started = time.process_time()
    for header in headers:
        parse_challenges(header)
    assert time.process_time() - started < 2.0


def test_a_registry_sending_bearer_then_basic_gets_a_token_from_the_bearer_realm(world: World) -> None:
    """Two `WWW-Authenticate` headers: the registry's own Bearer one and a Basic one after it (as a registry
    behind a front that adds its own sends them). The realm is the Bearer challenge's, not the Basic one's."""
    world.proxy.add(Fault("headers", path="^/v2/", count=EVERY_ANSWER, headers={"WWW-Authenticate": 'Basic realm="x"'}))
    size = asyncio.run(push_and_check(world.client(world.proxy.host), "ns/app"))
    assert size == len(BLOB)
    assert world.tokens.requests and all(r.user == USER for r in world.tokens.requests)


def test_a_registry_sending_basic_then_bearer_in_one_header_gets_a_token(world: World) -> None:
    """One header, Basic first: the Basic challenge is not answered with the password (this registry takes
    tokens only), the Bearer one is."""
    both = f'Basic realm="registry", Bearer realm="{world.tokens.realm}",service="{SERVICE}"'
    world.proxy.add(
        Fault(
            "headers",
            path="^/v2/",
            count=EVERY_ANSWER,
            headers={"WWW-Authenticate": both},
            strip=("www-authenticate",),
        )
    )
    size = asyncio.run(push_and_check(world.client(world.proxy.host), "ns/app"))
    assert size == len(BLOB)
    assert {r.service for r in world.tokens.requests} == {SERVICE}


# -- the repository a path names ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ns/app", "ns/tags/app", "ns/blobs/uploads", "manifests/x/referrers", "a/tags"])
@pytest.mark.parametrize(
    "tail",
    [
        "manifests/v1",
        "manifests/tags",
        "manifests/sha256:" + "0" * 64,
        "blobs/sha256:" + "0" * 64,
        "blobs/uploads/",
        "blobs/uploads/0d1e2f3a-4b5c",
        "tags/list",
        "referrers/sha256:" + "0" * 64,
    ],
)
def test_the_repository_is_what_stands_before_the_last_operation(name: str, tail: str) -> None:
    request = httpx.Request("PATCH", f"https://registry.test/v2/{name}/{tail}?_state=abc")
    assert repository_of(request) == name
    assert scopes_for(request) == frozenset({f"repository:{name}:pull,push"})


def test_a_mount_names_both_repositories_whatever_their_segments() -> None:
    request = httpx.Request("POST", "https://registry.test/v2/ns/tags/app/blobs/uploads/?mount=sha256:1&from=a/blobs")
    assert scopes_for(request) == frozenset({"repository:ns/tags/app:pull,push", "repository:a/blobs:pull"})


def test_a_streamed_upload_into_a_repository_named_with_tags_in_it_lands(world: World) -> None:
    """`ns/tags/app`: the POST's challenge asked for the whole name and it got its token, but a PUT whose token
    was for `ns` alone met a 401 it could not be replayed after, upload after upload."""
    size = asyncio.run(push_and_check(world.client(), "ns/tags/app"))
    assert size == len(BLOB)
    asked = set().union(*(r.scopes for r in world.tokens.requests))
    assert not any(scope.startswith("repository:ns:") for scope in asked), asked


# -- a session the login may not cancel ---------------------------------------------------------------------


def test_an_upload_session_the_login_may_not_cancel_is_a_warning_naming_the_repository(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Distribution wants `delete` for the DELETE of an upload session; this user may pull and push only. The
    session stays until the registry's purge: a warning says so, with neither the session's URL (its query holds
    the registry's state) nor a secret. No other request asks for the delete scope."""

    async def go() -> tuple[str, bool]:
        client = world.client()
        try:
            session = await client.start_upload("ns/app")
            assert session is not None
            return str(session.url), await client.cancel_upload("ns/app", session)
        finally:
            await client.aclose()

    with caplog.at_level(logging.INFO, logger="mirror"):
        session_url, confirmed = asyncio.run(go())

    assert not confirmed
    warnings = [r for r in caplog.records if r.name == "mirror" and r.levelno == logging.WARNING]
    assert len(warnings) == 1, caplog.records
    said = warnings[0].getMessage()
    assert f"{world.registry.host}/ns/app" in said and "purge" in said, said
    for secret in [PASSWORD, session_url, httpx.URL(session_url).query.decode(), *world.tokens.issued]:
        assert secret not in caplog.text
    # the delete scope came from the DELETE's challenge alone: the session's start asked for pull and push
    deleting = [r for r in world.tokens.requests if any("delete" in s.rpartition(":")[2] for s in r.scopes)]
    assert len(deleting) == 1 and deleting[0].granted == (("ns/app", ("pull", "push")),), world.tokens.requests
    deletes = [e for e in world.registry.access_log() if e.method == "DELETE"]
    assert deletes and all(e.status == 401 for e in deletes)
