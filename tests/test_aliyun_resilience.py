"""The ACR login through a bad moment, against the world of tests/aliyunworld.py (the SDKs' own request code): a
5xx, throttling, a dropped connection or a gateway's error page at STS, the ACR OpenAPI or ECS's metadata service
is tried again (a wait the gateway asks for honoured) and, when it lasts, said as unavailable; a refusal is said at
once as an authentication failure. Also: temporary STS keys exported for `access_key`, the configured timeout
reaching STS and the metadata service, and a namespace that does not create repositories refused up front.

Backoff between tries is recorded, not slept, where a test calls the login itself: nothing here waits on a clock
shorter than the SDKs' own timeouts."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.forwardproxy import socks_proxy
from tests.test_aliyun import HOST, access_key, config, mirror
from tests.test_aliyun_world import AliyunWorld, start_world

MODULE = "tests.test_aliyun_resilience"
IDENTITY_VARIABLES = (
    "ALIBABA_CLOUD_ACCESS_KEY_ID",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
    "ALIBABA_CLOUD_SECURITY_TOKEN",
    "ALIBABA_CLOUD_ROLE_ARN",
    "ALIBABA_CLOUD_OIDC_PROVIDER_ARN",
    "ALIBABA_CLOUD_OIDC_TOKEN_FILE",
    "ALIBABA_CLOUD_STS_ENDPOINT",
)


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[AliyunWorld]:
    """The world of tests/aliyunworld.py; its options (faults among them) by indirect parametrization."""
    running = start_world(tmp_path / "aliyun", tmp_path / "aliyun.log", getattr(request, "param", {}))
    yield running
    running.stop()


# --- what runs inside the world: logins made by mirror's own AcrLogin ----------------------------------------------


def logins(ready_path: str, specs: str) -> list[dict[str, Any]]:
    """One AcrLogin per spec (`credentials`, `env`, `attempts`, `timeout`), one after another, each with its own
    environment; how each ended and the backoff it asked for (recorded: no sleep)."""
    return [asyncio.run(_login(json.loads(Path(ready_path).read_text()), spec)) for spec in json.loads(specs)]


async def _login(ready: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    from mirror.aliyun.login import AcrLogin, LoginError, LoginOptions
    from mirror.registry.retry import RetryPolicy

    for name in IDENTITY_VARIABLES:  # the spec's identity only (the SDK reads its switches once, at its import)
        os.environ.pop(name, None)
    os.environ.update(spec.get("env", {}))
    retry = RetryPolicy(attempts=spec.get("attempts", 4), base_delay=0.01, max_delay=0.01, max_elapsed=120)
    timeout = spec.get("timeout", 30)
    options = LoginOptions(HOST, ready["region"], spec["credentials"], ready["instance_id"], None, timeout, retry)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    login = AcrLogin(options, sleep=sleep)
    try:
        credentials = await login(None)
    except LoginError as exc:
        return {"ok": False, "message": str(exc), "kind": exc.kind.name, "code": exc.code, "waits": waits}
    return {"ok": True, "username": credentials.username, "waits": waits}


def _rrsa_env(ready: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in ready["env"].items() if k in IDENTITY_VARIABLES}


def _outcomes(calls: list[dict[str, Any]]) -> list[str]:
    return [call["outcome"] for call in calls]


# --- mirror's CLI in the world --------------------------------------------------------------------------------------


# --- the tests ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "world",
    [{"sts_faults": ["503", "throttling", "drop"], "openapi_faults": ["503", "throttling:1500", "drop", "502-html"]}],
    indirect=True,
)
def test_passing_failures_at_sts_and_the_openapi_are_tried_again_until_the_login_comes(world: AliyunWorld) -> None:
    """RRSA's exchange at STS meets a 503, throttling and a dropped connection; GetAuthorizationToken a 503,
    throttling with the gateway's wait (1.5 s), a dropped connection and the load balancer's 502 page: each is
    tried again, the gateway's wait taken as given, and the login comes."""
    spec = {"credentials": "oidc_role_arn", "env": _rrsa_env(world.ready), "attempts": 10}
    [result] = world.inside("logins", json.dumps([spec]), module=MODULE)
    summary = world.stop()

    assert result["ok"] is True, result
    assert result["username"] == world.ready["temp_username"]
    assert _outcomes(summary["sts_calls"]) == ["fault:503", "fault:throttling", "fault:drop", "ok"]
    tokens = [call for call in summary["openapi_calls"] if call["action"] == "GetAuthorizationToken"]
    assert _outcomes(tokens) == ["fault:503", "fault:throttling:1500", "fault:drop", "fault:502-html", "success"]
    assert len(result["waits"]) == 7 and result["waits"][4] == 1.5  # the fifth failure: the gateway's wait
    assert max(result["waits"][:4] + result["waits"][5:]) <= 0.01  # the others: the policy's backoff
    assert summary["leaks"] == []


@pytest.mark.parametrize("world", [{"openapi_faults": ["503"] * 3 + ["throttling:600000", "503"]}], indirect=True)
def test_a_lasting_failure_is_unavailable_after_a_few_tries_and_a_refusal_is_not_tried_again(
    world: AliyunWorld,
) -> None:
    """Three 503s in a row end the login as unavailable (a passing failure: the run may try it again later),
    after three tries; a gateway asking to wait ten minutes is not waited for; a RAM refusal after a 503 is an
    authentication failure at once, not tried again."""
    with_permission = {"credentials": "access_key", "env": access_key(world), "attempts": 3}
    without = {"credentials": "access_key", "env": access_key(world, "without_permission"), "attempts": 3}
    lasting, waited, refused = world.inside("logins", json.dumps([with_permission] * 2 + [without]), module=MODULE)
    summary = world.stop()

    assert lasting["ok"] is False and lasting["kind"] == "UNAVAILABLE" and len(lasting["waits"]) == 2
    assert "ServiceUnavailable" in lasting["message"] and "(3 tries)" in lasting["message"], lasting
    assert waited["ok"] is False and waited["kind"] == "UNAVAILABLE" and waited["waits"] == []
    assert "asked to wait 600 s" in waited["message"], waited
    assert refused["ok"] is False and refused["kind"] == "AUTH" and refused["code"] == "Forbidden.RAM", refused
    assert "cr:GetAuthorizationToken" in refused["message"] and len(refused["waits"]) == 1
    outcomes = _outcomes(summary["openapi_calls"])
    assert outcomes == ["fault:503"] * 3 + ["fault:throttling:600000", "fault:503", "Forbidden.RAM"]
    assert summary["leaks"] == []


@pytest.mark.parametrize("world", [{"openapi_faults": ["503", "drop"]}], indirect=True)
def test_a_blip_at_the_openapi_does_not_fail_the_run(tmp_path: Path, world: AliyunWorld) -> None:
    """`mirror sync` whose first OpenAPI calls (the namespace's look-up) meet a 503 and a dropped connection: the
    run copies and verifies the image as if nothing had happened."""
    path = config(world, tmp_path, credentials="access_key", instance_id=world.ready["instance_id"])
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=access_key(world))
    assert done.returncode == 0, done.stderr
    (image,) = json.loads(done.stdout)["images"]
    assert image["targets"][0]["verified"] is True
    summary = world.stop()
    calls = summary["openapi_calls"]
    assert [(call["action"], call["outcome"]) for call in calls[:3]] == [
        ("GetNamespace", "fault:503"),
        ("GetNamespace", "fault:drop"),
        ("GetNamespace", "success"),
    ]
    assert summary["leaks"] == []


@pytest.mark.parametrize("world", [{"openapi_faults": ["503"] * 4}], indirect=True)
def test_the_login_is_tried_as_often_as_the_configs_retry_says(tmp_path: Path, world: AliyunWorld) -> None:
    """`retry: {attempts: 2}` bounds the ACR login's tries too: a lasting 503 at the OpenAPI fails the run after
    two calls, said as unavailable, where the login's own policy made four."""
    path = config(world, tmp_path, credentials="access_key", instance_id=world.ready["instance_id"])
    data = yaml.safe_load(path.read_text())
    data["retry"]["attempts"] = 2
    path.write_text(yaml.safe_dump(data))

    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=access_key(world))

    assert done.returncode == 1, done.stderr
    assert "ServiceUnavailable" in done.stderr and "(2 tries)" in done.stderr, done.stderr
    summary = world.stop()
    assert _outcomes(summary["openapi_calls"]) == ["fault:503"] * 2
    assert summary["leaks"] == []


def test_a_certificate_the_sdk_cannot_verify_is_said_at_once_not_tried_again(world: AliyunWorld) -> None:
    """The OpenAPI's certificate from a CA this machine does not trust (a TLS-intercepting proxy's, say): the SDK's
    network error wraps the verification failure, which would be the same a moment later. Said at once, with the
    reason, where it was tried as a passing failure and said as unavailable."""
    untrusted = {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "REQUESTS_CA_BUNDLE": ""}
    spec = {"credentials": "access_key", "env": {**access_key(world), **untrusted}, "attempts": 3}
    [result] = world.inside("logins", json.dumps([spec]), module=MODULE)
    world.stop()

    assert result["ok"] is False and result["kind"] == "AUTH", result
    assert "TLS certificate verify failed" in result["message"] and result["waits"] == [], result
    assert "(3 tries)" not in result["message"]


def test_the_login_goes_through_a_socks5_proxy(tmp_path: Path, world: AliyunWorld) -> None:
    """`HTTPS_PROXY=socks5://...`: the SDKs read it themselves and speak SOCKS5 through requests (PySocks, in the
    `aliyun` extra), the proxy's login with it; the login comes as it does direct."""
    inside = ("nsenter", "--target", str(world.ready["pid"]), "--net", "--mount", "--")
    with socks_proxy(tmp_path / "socks", login=("mirror", "proxy-s3cret"), prefix=inside) as proxy:
        spec = {"credentials": "access_key", "env": {**access_key(world), "HTTPS_PROXY": proxy.url()}, "attempts": 2}
        [result] = world.inside("logins", json.dumps([spec]), module=MODULE)
        tunnels = proxy.tunnels()
    summary = world.stop()

    assert result["ok"] is True, result
    assert tunnels and all(tunnel.endswith(":443") for tunnel in tunnels), tunnels
    assert [call["outcome"] for call in summary["openapi_calls"]] == ["success"]


def test_a_socks_proxy_the_sdks_cannot_speak_is_said_at_once() -> None:
    """Without PySocks, requests refuses a socks5:// proxy and the SDK's core raises it as its network error
    (`except IOError: raise RetryError(str(e))`): not a passing failure, said with what to do."""
    from darabonba.exceptions import RetryError
    from requests.exceptions import InvalidSchema

    from mirror.aliyun.login import AcrLogin, LoginOptions
    from mirror.errors import Kind

    try:
        try:
            raise InvalidSchema("Missing dependencies for SOCKS support.")
        except OSError as e:
            raise RetryError(str(e)) from None  # the words are in its text, as the core raises it
    except RetryError as raised:
        error = AcrLogin(LoginOptions(HOST, "cn-hangzhou")).sdk_failure(raised)
    assert error.kind is Kind.AUTH and not error.transient and "install PySocks" in str(error), error


def test_temporary_sts_keys_exported_for_access_key_are_signed_with_their_token(
    tmp_path: Path, world: AliyunWorld
) -> None:
    """A CI job exports STS keys (ALIBABA_CLOUD_ACCESS_KEY_ID/SECRET and ALIBABA_CLOUD_SECURITY_TOKEN) with
    `credentials: access_key`: every OpenAPI call carries the token, and the run goes through."""
    env = access_key(world, "sts")
    done = mirror(
        world, tmp_path, "sync", "v2.10.0", "--config", str(config(world, tmp_path, credentials="access_key")), env=env
    )
    assert done.returncode == 0, done.stderr
    summary = world.stop()
    assert summary["openapi_calls"], summary
    for call in summary["openapi_calls"]:
        assert call["outcome"] == "success" and call["credential"] == "sts", call
        assert call["principal"] == "assumed-role/mirror-acr/ci-job" and call["signature_verified"] is True
    assert summary["leaks"] == []
    for secret in (env["ALIBABA_CLOUD_ACCESS_KEY_SECRET"], env["ALIBABA_CLOUD_SECURITY_TOKEN"]):
        assert secret not in done.stdout + done.stderr


@pytest.mark.parametrize("world", [{"sts_faults": ["stall"], "metadata_faults": ["stall"]}], indirect=True)
def test_the_timeout_reaches_sts_and_the_ecs_metadata_service(world: AliyunWorld) -> None:
    """`timeout: 3` bounds the SDKs' own calls to STS (RRSA) and to ECS's metadata service, which answer nothing:
    each gives up after its 3 s (the libraries' own defaults are 10 s and 1 s) and says so. The ECS role then
    logs in through the world's metadata service."""
    ready = world.ready
    rrsa = {"credentials": "oidc_role_arn", "env": _rrsa_env(ready), "attempts": 1, "timeout": 3}
    ecs = {"credentials": "ecs_ram_role", "attempts": 1, "timeout": 3}
    switches = {"ALIBABA_CLOUD_ECS_METADATA_DISABLED": "false", "ALIBABA_CLOUD_IMDSV1_DISABLED": "true"}
    results = world.inside("logins", json.dumps([rrsa, ecs, {**ecs, "timeout": 30}]), env=switches, module=MODULE)
    sts, metadata, ecs_role = results
    summary = world.stop()

    assert sts["ok"] is False and sts["kind"] == "UNAVAILABLE", sts
    assert "read timeout=3" in sts["message"] and "sts-vpc.cn-hangzhou.aliyuncs.com" in sts["message"], sts
    assert metadata["ok"] is False and metadata["kind"] == "UNAVAILABLE", metadata
    assert "read timeout=3" in metadata["message"] and "100.100.100.200" in metadata["message"], metadata
    assert ecs_role["ok"] is True, ecs_role
    assert _outcomes(summary["sts_calls"]) == ["fault:stall"]
    assert _outcomes(summary["metadata_requests"])[0] == "fault:stall"
    [call] = summary["openapi_calls"]
    assert call["principal"].startswith("assumed-role/mirror-ecs/") and call["credential"] == "sts"
    assert summary["leaks"] == []


@pytest.mark.parametrize("world", [{"manual_namespace": "by-hand"}], indirect=True)
def test_a_namespace_that_creates_no_repositories_names_the_missing_ones_before_the_push_it_refuses(
    tmp_path: Path, world: AliyunWorld
) -> None:
    """A namespace with automatic repository creation off refuses a push into a repository not made beforehand
    with a bare DENIED: the run looks each repository up and names the missing one, with how to make it, before
    it pushes; mirror changes nothing it was not asked to."""
    path = config(world, tmp_path, namespace="by-hand", credentials="access_key")
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=access_key(world))

    assert done.returncode == 1, done.stderr  # the repository was not made by hand: the push is refused
    said = done.stderr[: done.stderr.index("\nmirror: v2.10.0 hami -> hz")]  # said before the refusal
    assert "namespace by-hand" in said and "missing hami;" in said, done.stderr
    assert "CreateRepository" in said and "provision: true" in said and "UpdateNamespace" in said, done.stderr
    summary = world.stop()
    actions = [call["action"] for call in summary["openapi_calls"]]
    assert "GetRepository" in actions and not {"CreateRepository", "CreateNamespace", "UpdateNamespace"} & set(actions)
    assert summary["namespaces"]["by-hand"]["auto_create_repo"] is False and summary["repositories"] == {}


@pytest.mark.parametrize(
    "world", [{"manual_namespace": "by-hand", "openapi_faults": ["pass"] + ["503"] * 5}], indirect=True
)
def test_repositories_that_cannot_be_looked_up_are_warned_of_and_the_run_goes_on(
    tmp_path: Path, world: AliyunWorld
) -> None:
    """GetNamespace answers, then every GetRepository try meets a 503: the run does not stop there (the pushes say
    what the registry makes of each repository), it warns and goes on to the copy."""
    path = config(
        world, tmp_path, namespace="by-hand", credentials="access_key", instance_id=world.ready["instance_id"]
    )
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=access_key(world))

    assert done.returncode == 1, done.stderr  # the repository is not there: its push is refused
    assert "the repositories it needs could not be looked up" in done.stderr, done.stderr
    assert "mirror: v2.10.0 hami -> hz" in done.stderr, done.stderr  # the copy was tried
    summary = world.stop()
    actions = [(call["action"], call["outcome"]) for call in summary["openapi_calls"]]
    assert actions[:6] == [("GetNamespace", "success")] + [("GetRepository", "fault:503")] * 5, actions


@pytest.mark.parametrize("world", [{"manual_namespace": "by-hand"}], indirect=True)
def test_provision_creates_the_repositories_a_namespace_does_not_create_on_push(
    tmp_path: Path, world: AliyunWorld
) -> None:
    """`provision: true` and a namespace with automatic repository creation off: the repository the run pushes to
    is created first (private, with the summary the API requires), and the image lands; the next run finds it and
    creates nothing."""
    path = config(world, tmp_path, namespace="by-hand", credentials="access_key", provision=True)
    env = access_key(world)
    first = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=env)
    again = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=env)

    assert first.returncode == 0, first.stderr
    assert "created repository hami (private)" in first.stderr and "missing" not in first.stderr, first.stderr
    (image,) = json.loads(first.stdout)["images"]
    assert image["targets"][0]["verified"] is True
    assert again.returncode == 0 and "created repository" not in again.stderr, again.stderr
    summary = world.stop()
    repository = summary["repositories"]["by-hand/hami"]
    assert repository["repo_type"] == "PRIVATE" and repository["summary"] == "Mirrored by mirror"
    assert repository["created_by"] == "user/mirror-ci"
    created = [call for call in summary["openapi_calls"] if call["action"] == "CreateRepository"]
    assert [call["outcome"] for call in created] == ["success"]  # once, on the first run
    assert summary["namespaces"]["by-hand"]["auto_create_repo"] is False  # the namespace is left as it was
