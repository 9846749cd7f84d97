"""Bearer-token auth the way Docker Hub and ACR do it, against registries running `auth: token`.

The source grants anonymous pull (like Docker Hub); the target wants a user and password for everything
(like a private ACR repository). Blob GETs at the source redirect to a CDN stand-in that records whether
an Authorization header arrived."""

from __future__ import annotations

import asyncio
import base64
import http.server
import itertools
import json
import os
import stat
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.sample import SampleImage, push_multiarch
from mirror.engine.clients import open_client
from mirror.registry.auth import AuthError
from mirror.registry.credentials import CredentialError, run_credential_helper
from mirror.registry.errors import MAX_ERROR_BODY
from mirror.registry.tokens import MAX_TOKEN_RESPONSE
from mirror.settings import MirrorSettings
from tests.faultproxy import Fault, fault_proxy
from tests.support import CdnServer, blob_exists, cdn_server, http_server, manifest_digest, write_config
from tests.test_client import at, chunked
from tests.test_sync import SHARED, VERSION
from tests.tokenserver import TokenServer, token_server

USER, PASSWORD = "pusher", "Tr0ub4dor&3-secret"
IDENTITY_TOKEN = "identity-refresh-token-7f3a9c"


@dataclass
class World:
    tmp: Path
    tokens: TokenServer
    cdn: CdnServer
    source: LocalRegistry
    target: LocalRegistry
    hami: SampleImage
    certgen: SampleImage

    def config(self, target_registry: dict[str, Any] | None = None, **extra: Any) -> Path:
        path = write_config(self.tmp / "mirror.yaml", self.source, [self.target], **extra)
        data = yaml.safe_load(path.read_text())
        data["registries"][self.target.host].update(target_registry or {})
        path.write_text(yaml.safe_dump(data))
        return path

    def secrets(self) -> list[str]:
        basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        return [PASSWORD, IDENTITY_TOKEN, basic, *self.tokens.issued]


def seed(source: LocalRegistry) -> tuple[SampleImage, SampleImage]:
    settings = MirrorSettings(
        targets=[{"name": "t", "registry": source.host, "namespace": "ns"}],  # type: ignore[list-item]
        images=[{"name": "x", "source": "a/b"}],  # type: ignore[list-item]
        registries={source.host: {"plain_http": True, "username": USER, "password": PASSWORD}},  # type: ignore[dict-item]
    )

    async def push() -> tuple[SampleImage, SampleImage]:
        client = open_client(settings, source.host)
        try:
            hami = await push_multiarch(
                client, "projecthami/hami", VERSION, shared_layers=(SHARED,), layer_sizes=(1 << 20,), seed=1
            )
            certgen = await push_multiarch(
                client, "liangjw/kube-webhook-certgen", "v1.1.1", shared_layers=(SHARED,), docker=True, seed=2
            )
            return hami, certgen
        finally:
            await client.aclose()

    import asyncio

    return asyncio.run(push())


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    yield from make_world(tmp_path)


def make_world(tmp_path: Path, cdn_delay: float = 0.0, **token_options: Any) -> Iterator[World]:
    options = {
        "users": {USER: PASSWORD},
        "identity_tokens": {IDENTITY_TOKEN: USER},
        "public": ("projecthami", "liangjw"),
        **token_options,
    }
    with (
        token_server(tmp_path / "tokens", **options) as tokens,
        cdn_server(tmp_path / "source" / "data", delay=cdn_delay) as cdn,
    ):
        source = start_registry(tmp_path / "source", auth=tokens.registry_auth("source-registry"), redirect_to=cdn.url)
        target = start_registry(tmp_path / "target", auth=tokens.registry_auth("target-registry:cn-test:1234"))
        try:
            hami, certgen = seed(source)
            tokens.requests.clear()
            cdn.seen_authorization.clear()
            yield World(tmp_path, tokens, cdn, source, target, hami, certgen)
        finally:
            source.stop()
            target.stop()


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def assert_copied(world: World) -> None:
    # the target refuses anonymous reads: what landed is read from its access log
    target_log = world.target.access_log()
    pushed_tags = [e for e in target_log if e.method == "PUT" and e.status == 201 and "/manifests/v" in e.path]
    assert sorted(e.path for e in pushed_tags) == [
        "/v2/mirrored/hami/manifests/v2.10.0",
        "/v2/mirrored/kube-webhook-certgen/manifests/v1.1.1",
    ]


def assert_no_secret(world: World, output: str) -> None:
    for secret in world.secrets():
        assert secret not in output


def test_anonymous_source_and_password_file_target(
    world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    secret = tmp_path / "acr-password"
    secret.write_text(PASSWORD + "\n")
    config = world.config({"username": USER, "password_file": str(secret)})

    code, output = run_cli(["sync", VERSION, "--config", str(config), "--json", "--verbose"], capsys)

    assert code == 0, output
    assert_copied(world)
    assert_no_secret(world, output)
    source_requests = [r for r in world.tokens.requests if r.service == "source-registry"]
    assert source_requests and all(r.user is None for r in source_requests)  # Docker Hub style: anonymous pull
    target_requests = [r for r in world.tokens.requests if r.service == "target-registry:cn-test:1234"]
    copying = [r for r in target_requests if r.user is not None]
    assert copying and all(r.user == USER for r in copying)
    # the rest is the pullability check: what a node without credentials gets (nothing: the repos are private)
    probes = [r for r in target_requests if r.user is None]
    assert probes and all(r.method == "GET" and all(s.endswith(":pull") for s in r.scopes) for r in probes)
    assert all(dict(r.granted).get(name) == () for r in probes for name in dict(r.granted))
    # the CDN served the blobs and never saw the registry token
    assert world.cdn.requests >= len(set(world.hami.blobs) | set(world.certgen.blobs))
    assert world.cdn.seen_authorization == []


def test_token_requests_are_one_per_scope_set(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    config = world.config({"username": USER, "password": PASSWORD})
    code, output = run_cli(["sync", VERSION, "--config", str(config)], capsys)
    assert code == 0, output
    scope_sets = [(r.service, r.scopes) for r in world.tokens.requests if r.user is not None or "source" in r.service]
    assert len(scope_sets) == len(set(scope_sets)), scope_sets  # tokens live 300 s: never fetched twice
    target = "target-registry:cn-test:1234"
    hami, certgen = "repository:mirrored/hami", "repository:mirrored/kube-webhook-certgen"
    expected = {
        ("source-registry", frozenset({"repository:projecthami/hami:pull"})),
        ("source-registry", frozenset({"repository:liangjw/kube-webhook-certgen:pull"})),
        (target, frozenset({f"{hami}:pull"})),
        (target, frozenset({f"{certgen}:pull"})),
        (target, frozenset({f"{hami}:pull,push"})),
        (target, frozenset({f"{certgen}:pull,push"})),
    }
    # uploads try a mount from the run's other repository: a two-repository scope, one per direction
    mounts = {
        (target, frozenset({f"{hami}:pull,push", f"{certgen}:pull"})),
        (target, frozenset({f"{certgen}:pull,push", f"{hami}:pull"})),
    }
    assert set(scope_sets) - expected <= mounts and len(set(scope_sets) - expected) >= 1
    assert expected <= set(scope_sets)


def test_discovery_and_the_sync_after_it_share_each_token(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    config = world.config({"username": USER, "password": PASSWORD})
    code, output = run_cli(["sync", "--discover", "--config", str(config)], capsys)
    assert code == 0, output
    scope_sets = [(r.service, r.scopes) for r in world.tokens.requests if r.user is not None or "source" in r.service]
    assert len(scope_sets) == len(set(scope_sets)), scope_sets  # the tag list's token serves the copy too
    assert ("source-registry", frozenset({"repository:projecthami/hami:pull"})) in scope_sets


def test_mount_across_repositories_uses_a_two_repository_scope(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    only_certgen = [{"name": "kube-webhook-certgen", "source": "liangjw/kube-webhook-certgen", "tag": "v1.1.1"}]
    first = world.config({"username": USER, "password": PASSWORD}, images=only_certgen)
    assert run_cli(["sync", VERSION, "--config", str(first)], capsys)[0] == 0
    world.tokens.requests.clear()
    mark = len(world.target.access_log())

    config = world.config({"username": USER, "password": PASSWORD})
    assert run_cli(["sync", VERSION, "--config", str(config)], capsys)[0] == 0

    two_repo = {"repository:mirrored/hami:pull,push", "repository:mirrored/kube-webhook-certgen:pull"}
    assert world.tokens.count(two_repo) == 1
    (granted,) = [r.granted for r in world.tokens.requests if r.scopes == frozenset(two_repo)]
    assert dict(granted) == {"mirrored/hami": ("pull", "push"), "mirrored/kube-webhook-certgen": ("pull",)}
    shared = f"sha256:{__import__('hashlib').sha256(SHARED).hexdigest()}"
    mounts = [e for e in world.target.access_log()[mark:] if e.method == "POST" and shared in e.path]
    assert [e.status for e in mounts] == [201]


def test_wrong_password_fails_fast_and_writes_nothing(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    config = world.config({"username": USER, "password": "wrong-password-123"})
    code, output = run_cli(["sync", VERSION, "--config", str(config)], capsys)
    assert code == 1
    failures = [line for line in output.splitlines() if line.startswith("mirror: ")]
    assert len(failures) == 2
    for line in failures:
        assert "access denied to mirrored/" in line and f"at {world.target.host}" in line
        assert "incorrect username or password" in line
        # which credentials to mend: the setting
        assert f"(credentials from registries.{world.target.host}: username and password)" in line
    assert "wrong-password-123" not in output and "Traceback" not in output
    assert not any(e.method in ("POST", "PUT", "PATCH") for e in world.target.access_log())
    assert len(world.tokens.requests) <= 4  # no retry loop against the token server


def test_a_refused_password_from_a_variable_names_the_variable(
    world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRROR_TEST_ACR_PASSWORD", "wrong-password-123")
    config = world.config({"username": USER, "password_env": "MIRROR_TEST_ACR_PASSWORD"})
    code, output = run_cli(["sync", VERSION, "--config", str(config)], capsys)
    assert code == 1
    where = f"registries.{world.target.host}: username and password_env MIRROR_TEST_ACR_PASSWORD"
    assert f"(credentials from {where})" in output and "wrong-password-123" not in output


def test_no_credentials_for_a_private_target_is_access_denied(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    code, output = run_cli(["sync", VERSION, "--config", str(world.config())], capsys)
    assert code == 1
    assert f"access denied to mirrored/hami at {world.target.host}" in output
    assert "(no credentials for this registry: it refused anonymous access)" in output  # set a login for it
    assert len([r for r in world.tokens.requests if r.service.startswith("target")]) <= 4


def test_docker_config_auths_entry(world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    docker = tmp_path / "docker"
    docker.mkdir()
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (docker / "config.json").write_text(json.dumps({"auths": {f"http://{world.target.host}": {"auth": basic}}}))
    os.environ["DOCKER_CONFIG"] = str(docker)
    try:
        code, output = run_cli(["sync", VERSION, "--config", str(world.config())], capsys)
    finally:
        del os.environ["DOCKER_CONFIG"]
    assert code == 0, output
    assert_copied(world)
    assert_no_secret(world, output)


def test_mounted_dockerconfigjson_with_identity_token(
    world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    secret = tmp_path / ".dockerconfigjson"
    secret.write_text(json.dumps({"auths": {world.target.host: {"identitytoken": IDENTITY_TOKEN}}}))
    code, output = run_cli(["sync", VERSION, "--config", str(world.config(docker_config=str(secret)))], capsys)
    assert code == 0, output
    assert_copied(world)
    target_requests = [r for r in world.tokens.requests if r.service.startswith("target") and r.user is not None]
    assert target_requests and {r.method for r in target_requests} == {"POST"}  # the OAuth2 refresh grant
    assert_no_secret(world, output)


def credential_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, answer: str, docker_config: dict[str, Any]
) -> Path:
    """`docker-credential-<name>` on the PATH, answering `get` with the shell lines `answer`; and the docker
    config that names it, whose path is returned."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / f"docker-credential-{name}"
    helper.write_text('#!/bin/sh\n[ "$1" = get ] || exit 1\n' + answer)
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    docker = tmp_path / "config.json"
    docker.write_text(json.dumps(docker_config))
    return docker


@pytest.mark.parametrize("mode", ["credHelpers", "credsStore"])
def test_docker_credential_helper(
    world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    asked = tmp_path / "helper-was-asked-for"
    answer = (
        f'read server; echo "$server" >> {asked}\n'
        f'if [ "$server" = "{world.target.host}" ]; then\n'
        f'  printf \'{{"ServerURL":"%s","Username":"{USER}","Secret":"{PASSWORD}"}}\' "$server"\n'
        "else echo 'credentials not found in native keychain'; exit 1; fi\n"
    )
    config_json = {"credHelpers": {world.target.host: "test"}} if mode == "credHelpers" else {"credsStore": "test"}
    docker = credential_helper(tmp_path, monkeypatch, "test", answer, config_json)

    code, output = run_cli(["sync", VERSION, "--config", str(world.config(docker_config=str(docker)))], capsys)

    assert code == 0, output
    assert_copied(world)
    assert world.target.host in asked.read_text().split()
    assert_no_secret(world, output)


def test_a_credential_helpers_refused_password_is_asked_for_once_more(
    world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A helper that hands out short-lived passwords gave one that has lapsed since it was cached (here: the
    first answer is stale): the realm refuses it, the helper is asked once more, and the run goes on."""
    calls = tmp_path / "calls"
    answer = (
        f"read server; echo x >> {calls}\n"
        f'if [ "$(wc -l < {calls})" -eq 1 ]; then secret=lapsed; else secret="{PASSWORD}"; fi\n'
        f'printf \'{{"ServerURL":"%s","Username":"{USER}","Secret":"%s"}}\' "$server" "$secret"\n'
    )
    docker = credential_helper(
        tmp_path, monkeypatch, "rotating", answer, {"credHelpers": {world.target.host: "rotating"}}
    )

    code, output = run_cli(["sync", VERSION, "--config", str(world.config(docker_config=str(docker)))], capsys)

    assert code == 0, output
    assert_copied(world)
    assert calls.read_text().count("x") == 2  # the stale answer, then the fresh one: no more
    assert_no_secret(world, output)


@pytest.mark.parametrize(
    ("says", "missing_ok", "expected"),
    [
        ("echo 'credentials not found in native keychain'", True, None),  # docker's helpers say it on stdout
        ("echo 'keychain locked' >&2", False, "keychain locked"),
        (f'printf \'{{"Username":"{USER}","Secret":"{PASSWORD}"}}\'', False, "exit status 1"),  # never shown
    ],
    ids=["not found", "its complaint", "an answer, though it failed"],
)
def test_a_failing_credential_helper_is_quoted_but_never_its_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, says: str, missing_ok: bool, expected: str | None
) -> None:
    helper = tmp_path / "docker-credential-failing"
    helper.write_text(f"#!/bin/sh\nread server\n{says}\nexit 1\n")
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    asked = run_credential_helper("failing", "registry.test", missing_ok=missing_ok)
    if expected is None:
        assert asyncio.run(asked) is None
        return
    with pytest.raises(CredentialError) as failed:
        asyncio.run(asked)
    assert str(failed.value).endswith(f"failed for registry.test: {expected}")
    assert PASSWORD not in str(failed.value)


def test_password_from_environment(
    world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"MIRROR_REGISTRIES__{world.target.host}__PASSWORD", PASSWORD)
    code, output = run_cli(["sync", VERSION, "--config", str(world.config({"username": USER}))], capsys)
    assert code == 0, output
    assert_no_secret(world, output)


def test_token_expiring_mid_copy_is_renewed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokens live 2 s; the CDN needs about 0.6 s a blob, so the copy outlives several tokens. A token is renewed a
    quarter of its life before it expires, so the copy's fetches of one scope come 1.5 s apart or more, however
    long a busy machine makes the copy; a token fetched per request would be fetched again milliseconds later."""
    for world in make_world(tmp_path, cdn_delay=0.6, ttl=2):
        fetched = fetch_times(world.tokens, monkeypatch)
        config = world.config({"username": USER, "password": PASSWORD}, transfer={"blob_concurrency": 2})
        code, output = run_cli(["sync", VERSION, "--config", str(config)], capsys)
        assert code == 0, output
        assert_copied(world)
        assert max(_fetches_per_scope(world).values()) >= 2  # renewed
        gaps = {key: [b - a for a, b in itertools.pairwise(sorted(times))] for key, times in fetched.items()}
        assert any(gaps.values()) and all(gap >= 1.0 for each in gaps.values() for gap in each), gaps  # not per request


def fetch_times(
    tokens: TokenServer, monkeypatch: pytest.MonkeyPatch
) -> dict[tuple[str, str | None, frozenset[str]], list[float]]:
    """When each of the copy's tokens was issued (time.monotonic()), per service, user and scope set. Anonymous
    tokens at the target are the pullability check's, fetched by a client of its own: they are left out."""
    fetched: dict[tuple[str, str | None, frozenset[str]], list[float]] = defaultdict(list)
    issue = tokens.issue

    def timed(user: str | None, service: str, scopes: list[str], method: str) -> dict[str, Any]:
        if user is not None or service.startswith("source"):
            fetched[service, user, frozenset(scopes)].append(time.monotonic())
        return issue(user, service, scopes, method)

    monkeypatch.setattr(tokens, "issue", timed)
    return fetched


def test_registry_refusing_a_cached_token_gets_a_fresh_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The token server says tokens last 300 s; the registry stops taking them after about 2 s (clock skew,
    # revocation). The slow CDN makes the copy outlive them: refused tokens are replaced, not retried.
    for world in make_world(tmp_path, cdn_delay=0.6, ttl=3, advertised_ttl=300):
        config = world.config({"username": USER, "password": PASSWORD}, transfer={"blob_concurrency": 2})
        code, output = run_cli(["sync", VERSION, "--config", str(config)], capsys)
        assert code == 0, output
        assert_copied(world)
        # with expires_in = 300, a scope fetched twice means its token was refused and replaced
        assert max(_fetches_per_scope(world).values()) >= 2


def _fetches_per_scope(world: World) -> Counter[frozenset[str]]:
    return Counter(r.scopes for r in world.tokens.requests if r.service.startswith("target"))


def test_target_refuses_anonymous_reads(world: World) -> None:
    # like a private ACR repository: what the suite's anonymous probes cannot see, the copy had to log in for
    assert manifest_digest(world.target, "mirrored/hami", VERSION) is None
    assert not blob_exists(world.target, "mirrored/hami", world.hami.digest)


# -- the realm's answer, read up to MAX_TOKEN_RESPONSE ------------------------------------------------------

TOKEN_ANSWER = b'{"token":"granted","expires_in":300}'


def realm_answering(how: str) -> type[http.server.BaseHTTPRequestHandler]:
    """A registry and its token realm on one port. `/v2/...` wants `Bearer granted`; `/token` answers as `how`
    says: `chunked` (a small JSON answer with no Content-Length, which httpx cannot have read before the auth
    flow sees it), `chunked-on-and-on` (a JSON answer padded past the limit), or `declared` (a Content-Length
    over the limit). With `long-refusal` or `long-refusal-chunked`, the 401 itself runs past the error body
    limit (declared, or chunked on and on) and the token answer is a plain one."""

    class Realm(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.startswith("/token"):
                return self.token()
            if self.headers.get("Authorization") == "Bearer granted":
                return self.send(200, b'{"name":"ns/r","tags":["v1"]}', {"Content-Type": "application/json"})
            challenge = f'Bearer realm="http://{self.headers["Host"]}/token",service="realm-test"'
            refusal = b'{"errors":[{"code":"UNAUTHORIZED"}]}'
            if how == "long-refusal":
                return self.send(401, refusal + b" " * 4 * MAX_ERROR_BODY, {"WWW-Authenticate": challenge})
            if how == "long-refusal-chunked":
                self.send_response(401)
                self.send_header("WWW-Authenticate", challenge)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for _ in range(4 * MAX_ERROR_BODY // 4096):
                    self.wfile.write(b"1000\r\n" + b" " * 4096 + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
                return None
            self.send(401, refusal, {"WWW-Authenticate": challenge})

        def token(self) -> None:
            if how == "chunked":  # the answer and some white space, in one chunk
                chunked(self, 200, TOKEN_ANSWER, 1)
            elif how in ("long-refusal", "long-refusal-chunked"):
                self.send(200, TOKEN_ANSWER, {"Content-Type": "application/json"})
            elif how == "chunked-on-and-on":  # white space inside the object, on and on
                chunked(self, 200, TOKEN_ANSWER[:-1], 4 * MAX_TOKEN_RESPONSE)
            elif how == "mislabelled":  # a proxy's label: gzip, over plain JSON
                self.send(200, TOKEN_ANSWER, {"Content-Type": "application/json", "Content-Encoding": "gzip"})
            else:
                self.send(200, TOKEN_ANSWER + b" " * MAX_TOKEN_RESPONSE, {"Content-Type": "application/json"})

    return Realm


def list_tags_at(server: http.server.HTTPServer) -> list[str]:
    return asyncio.run(at(f"127.0.0.1:{server.server_address[1]}", lambda client: client.list_tags("ns/r")))


@pytest.mark.parametrize("how", ["long-refusal", "long-refusal-chunked"])
def test_a_refusal_longer_than_an_error_body_is_cut_and_the_token_still_fetched(how: str) -> None:
    with http_server(realm_answering(how)) as server:
        assert list_tags_at(server) == ["v1"]


def test_a_token_answer_without_content_length_is_read_and_kept_for_httpx() -> None:
    with http_server(realm_answering("chunked")) as server:
        assert list_tags_at(server) == ["v1"]


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("chunked-on-and-on", f"over {MAX_TOKEN_RESPONSE} bytes"),
        ("declared", f"{len(TOKEN_ANSWER) + MAX_TOKEN_RESPONSE} bytes (limit {MAX_TOKEN_RESPONSE})"),
        ("mislabelled", "the body does not decode: "),  # httpx.DecodingError left the run as a traceback
    ],
)
def test_a_token_answer_over_the_limit_or_not_decoding_is_access_denied_naming_why(how: str, said: str) -> None:
    with http_server(realm_answering(how)) as server, pytest.raises(AuthError) as error:
        list_tags_at(server)
    assert f"token server 127.0.0.1: {said}" in str(error.value)


def test_more_first_requests_than_connections_all_get_their_token(world: World) -> None:
    """Every request of a fresh client meets the challenge at once; those waiting for the one token fetch must
    not hold the connections that fetch needs (with two connections and eight requests, they all did)."""
    settings = MirrorSettings(
        targets=[{"name": "t", "registry": world.source.host, "namespace": "ns"}],  # type: ignore[list-item]
        images=[{"name": "x", "source": "a/b"}],  # type: ignore[list-item]
        registries={
            world.source.host: {"plain_http": True, "username": USER, "password": PASSWORD, "max_connections": 2}  # type: ignore[dict-item]
        },
    )
    blobs = sorted(world.hami.blobs)
    assert len(blobs) >= 6

    async def ask_all() -> list[int | None]:
        client = open_client(settings, world.source.host)
        try:
            asks = (client.head_blob("projecthami/hami", digest) for digest in blobs)
            return await asyncio.wait_for(asyncio.gather(*asks), timeout=60)
        finally:
            await client.aclose()

    sizes = asyncio.run(ask_all())
    assert sizes == [world.hami.blobs[digest] for digest in blobs]
    assert [r.scopes for r in world.tokens.requests] == [frozenset({"repository:projecthami/hami:pull"})]  # one


def test_a_request_refused_after_another_fetched_the_token_takes_that_token(world: World) -> None:
    """Two first requests go out before the registry has challenged, so neither carries a token. The second one's
    refusal is held until the first has fetched its token and been answered: the second then takes that token,
    and the token server is asked once, not twice. (Under load the second's refusal arrived after the fetch it
    would have followed was over, and it fetched a token of its own.)"""
    first_answered = threading.Event()
    first, second = sorted(world.hami.blobs)[:2]
    with fault_proxy(world.source.port) as proxy:
        settings = MirrorSettings(
            targets=[{"name": "t", "registry": proxy.host, "namespace": "ns"}],  # type: ignore[list-item]
            images=[{"name": "x", "source": "a/b"}],  # type: ignore[list-item]
            registries={proxy.host: {"plain_http": True, "username": USER, "password": PASSWORD}},  # type: ignore[dict-item]
        )
        held = Fault("stall", "HEAD", rf"/blobs/{second}$", seconds=60, until=first_answered.is_set)
        proxy.add(held)

        async def both() -> list[int | None]:
            client = open_client(settings, proxy.host)

            async def ask_first() -> int | None:
                size = await client.head_blob("projecthami/hami", first)
                first_answered.set()
                return size

            try:
                asks = asyncio.gather(ask_first(), client.head_blob("projecthami/hami", second))
                return list(await asyncio.wait_for(asks, timeout=60))
            finally:
                await client.aclose()

        sizes = asyncio.run(both())
    assert sizes == [world.hami.blobs[first], world.hami.blobs[second]]
    assert held.released == 1  # let go by the first answer, not by the 60 s bound
    assert [r.scopes for r in world.tokens.requests] == [frozenset({"repository:projecthami/hami:pull"})]


def test_a_misspelt_source_repository_says_it_may_not_exist(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    """Docker Hub's token server grants an anonymous token nothing for a repository that does not exist, and the
    registry answers 401, not 404: the run told the user to mend credentials for a typo."""
    images = [{"name": "hami", "source": "projecthamii/hami", "tag": "{version}", "values_keys": []}]
    config = world.config({"username": USER, "password": PASSWORD}, images=images)
    code, output = run_cli(["sync", VERSION, "--config", str(config)], capsys)
    assert code == 1
    assert (
        "projecthamii/hami" in output
        and "the repository may not exist (check its name), or pulling it needs a login (no credentials" in output
    )
