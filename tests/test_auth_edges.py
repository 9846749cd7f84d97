"""Edges of registry auth found by reading against what Docker and containerd do: a token realm that goes
silent (timed out and retried like any request, its connection slot given back), a registry written with capitals
or its default port, a credential helper with nothing stored, a realm with a query of its own, docker configs and
headers that are not what they should be."""

from __future__ import annotations

import asyncio
import http.server
import json
import socket
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from mirror.demo.serving import serve
from mirror.errors import MirrorError
from mirror.registry import RegistryClient
from mirror.registry.auth import RegistryAuth
from mirror.registry.credentials import CredentialError, Credentials, load_docker_config, resolve_credentials
from mirror.registry.errors import retry_after_seconds
from mirror.registry.options import ClientOptions
from mirror.registry.ratelimit import read_rate_limit
from mirror.registry.retry import RetryPolicy
from mirror.registry.tokens import TokenKey, token_request


@contextmanager
def silent_realm() -> Iterator[tuple[int, list[socket.socket]]]:
    """A token realm that accepts connections and never answers; the connections it accepted."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join()
        for each in (*accepted, listener):
            each.close()


@contextmanager
def challenging_registry(realm: str) -> Iterator[str]:
    """A registry that answers every request 401 with a bearer challenge naming `realm`."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            self.send_response(401)
            self.send_header("WWW-Authenticate", f'Bearer realm="{realm}",service="registry.test"')
            self.send_header("Content-Length", "0")
            self.end_headers()

    with serve(Handler) as server:
        yield f"127.0.0.1:{server.server_address[1]}"


def test_a_silent_token_realm_is_timed_out_and_retried_not_held_to_the_deadline() -> None:
    """The realm's request carries the registry request's timeouts: a silent realm is a read timeout, retried,
    and every connection slot is free afterwards; without them it waited out the whole deadline, once."""
    with silent_realm() as (port, accepted), challenging_registry(f"http://127.0.0.1:{port}/token") as host:
        retry = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.01, max_elapsed=120)
        options = ClientOptions(plain_http=True, read_timeout=1.0, deadline=120.0, retry=retry, max_connections=2)

        async def head() -> None:
            client = RegistryClient.open(host, options)
            try:
                with pytest.raises(MirrorError):
                    await client.head_manifest("hami/hami", "v2.10.0")
            finally:
                await client.aclose()

        asyncio.run(head())
        assert len(accepted) == 3  # each try its own connection: the one timed out was closed, not held


def test_a_registry_written_with_capitals_or_its_default_port_gets_its_credentials() -> None:
    """httpx writes a request's origin in lower case without the default port: `Registry.Test:443` must still
    match it, or its 401s go unanswered."""
    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        if "authorization" not in request.headers:
            return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})
        return httpx.Response(200)

    async def get() -> int:
        async def credentials(service: str | None) -> Credentials | None:
            return Credentials("pusher", "s3cret-Pa55")

        auth = RegistryAuth("Registry.Test:443", credentials)
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer), auth=auth) as client:
            return (await client.get("https://Registry.Test:443/v2/")).status_code

    assert asyncio.run(get()) == 200 and seen[0] is None and str(seen[1]).startswith("Basic ")


def test_a_credential_helper_with_nothing_stored_means_anonymous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Docker reads it, for `credHelpers` as for `credsStore`: a public source (quay.io) named there with
    nothing stored is pulled anonymously, not failed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-empty"
    helper.write_text("#!/bin/sh\necho 'credentials not found in native keychain'\nexit 1\n")
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"credHelpers": {"quay.io": "empty"}}))
    assert asyncio.run(resolve_credentials("quay.io", None, None, config)) is None


@pytest.mark.parametrize("field", ["auths", "credHelpers"])
def test_a_docker_config_whose_sections_are_not_objects_is_one_line(tmp_path: Path, field: str) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({field: ["quay.io"]}))
    with pytest.raises(CredentialError, match=f"{field} is not a JSON object"):
        load_docker_config(config)


def test_a_realms_own_query_is_kept() -> None:
    """Docker and containerd add `service` and `scope` to the realm's query; they do not replace it."""
    key = TokenKey("https://auth.test/token?account=robot", "registry.test", frozenset({"repository:a/b:pull"}))
    params = token_request(key, None).url.params
    assert params["account"] == "robot" and params["service"] == "registry.test"
    assert params.get_list("scope") == ["repository:a/b:pull"]


@pytest.mark.parametrize("value", [b"\xb2", b"1\xb9", b"\xb3\xb2"])
def test_superscript_digits_in_headers_are_no_number(value: bytes) -> None:
    """A header's bytes read as Latin-1 may be `²`, which `str.isdigit` takes and int() refuses: a traceback."""
    assert retry_after_seconds(httpx.Response(429, headers=[(b"Retry-After", value)])) is None
    assert read_rate_limit(httpx.Response(200, headers=[(b"ratelimit-remaining", value + b";w=21600")])) is None
