"""Temporary registry logins (ACR's GetAuthorizationToken): renewed before they lapse and once when the realm
refuses one, given the challenge's service; and the config's `aliyun:` block checked when it loads."""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path

import httpx
import pytest
import yaml

from mirror.acr import instance_of, region_of
from mirror.registry import RegistryClient
from mirror.registry.auth import RegistryAuth
from mirror.registry.credentials import Credentials
from mirror.settings import ConfigError, load_settings

SERVICE = "registry.aliyuncs.com:cn-hangzhou:china:cri-mirrortest0001"
REALM = "https://realm.test/token"


def test_a_login_is_due_once_three_quarters_of_its_life_have_passed() -> None:
    now = 1_000_000.0
    assert not Credentials("u", "p").due_for_renewal(now)  # a stored password never lapses
    fresh = Credentials("u", "p", expires_at=now + 3600, issued_at=now)
    assert not fresh.due_for_renewal(now + 2699) and fresh.due_for_renewal(now + 2700)
    assert Credentials("u", "p", expires_at=now - 1, issued_at=now - 3601).due_for_renewal(now)


def test_the_endpoint_names_and_the_challenge_name_the_region_and_instance() -> None:
    assert region_of("mirror-test-registry.cn-hangzhou.cr.aliyuncs.com") == "cn-hangzhou"
    assert region_of("crpi-abc.cn-beijing.personal.cr.aliyuncs.com") == "cn-beijing"
    assert region_of("harbor.example.com") is None
    assert instance_of(SERVICE) == "cri-mirrortest0001"
    assert instance_of("registry.aliyuncs.com:cn-hangzhou:26842") is None  # Personal Edition


async def test_a_refused_temporary_login_is_renewed_once_and_the_request_goes_through() -> None:
    """The realm refuses the first login (it lapsed before the hour, or was revoked): one more login, the
    token request again with it, and the registry request succeeds. Asked with the challenge's service."""
    asked: list[str | None] = []
    realm_users: list[str] = []

    async def login(service: str | None) -> Credentials:
        asked.append(service)
        now = time.time()
        return Credentials(f"temp-{len(asked)}", "password", expires_at=now + 3600, issued_at=now)

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.host == "realm.test":
            header = request.headers.get("Authorization", "")
            name = base64.b64decode(header.removeprefix("Basic ")).decode().split(":")[0]
            realm_users.append(name)
            if name == "temp-1":
                return httpx.Response(401, json={"errors": [{"code": "UNAUTHORIZED", "message": "bad login"}]})
            return httpx.Response(200, json={"token": "t", "expires_in": 300})
        if request.headers.get("Authorization") != "Bearer t":
            challenge = f'Bearer realm="{REALM}",service="{SERVICE}",scope="repository:ns/r:pull"'
            return httpx.Response(401, headers={"WWW-Authenticate": challenge})
        return httpx.Response(200, headers={"Docker-Content-Digest": "sha256:" + "1" * 64, "Content-Type": "x"})

    http = httpx.AsyncClient(
        base_url="https://acr.test", transport=httpx.MockTransport(handle), auth=RegistryAuth("acr.test", login)
    )
    client = RegistryClient("acr.test", http)
    try:
        found = await client.head_manifest("ns/r", "v1")
    finally:
        await client.aclose()
    assert found is not None and found.digest == "sha256:" + "1" * 64
    assert asked == [SERVICE, SERVICE] and realm_users == ["temp-1", "temp-2"]


async def test_a_login_near_its_end_is_renewed_before_use_and_a_fresh_one_is_kept() -> None:
    logins: list[Credentials] = []

    async def login(service: str | None) -> Credentials:
        now = time.time()
        # the first lasts 110 s, of which 100 have passed; the next lasts an hour
        made = (
            Credentials("old", "p", expires_at=now + 10, issued_at=now - 100)
            if not logins
            else Credentials("new", "p", expires_at=now + 3600, issued_at=now)
        )
        logins.append(made)
        return made

    auth = RegistryAuth("acr.test", login)
    first = await auth.credentials()
    second = await auth.credentials()
    third = await auth.credentials()
    assert [c.username for c in (first, second, third) if c] == ["old", "new", "new"]
    assert len(logins) == 2


async def test_a_renewal_that_fails_keeps_the_login_in_hand_while_it_lasts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Renewal starts at three quarters of a login's life: an STS or OpenAPI hiccup then must not fail requests
    while the login has a quarter left. Asked again a minute later, not on every request; once the login has
    lapsed, the failure is the caller's."""
    from mirror.aliyun.login import LoginError
    from mirror.registry import auth as auth_module

    now = [1_700_000_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])  # the one auth.py reads
    asked: list[float] = []

    async def login(service: str | None) -> Credentials:
        asked.append(now[0])
        if len(asked) == 1:  # lasts an hour, 50 minutes of it gone when it is next needed
            return Credentials("old", "p", expires_at=now[0] + 3600, issued_at=now[0])
        raise LoginError("ACR login for acr.test: ServiceUnavailable: try later")

    auth = RegistryAuth("acr.test", login)
    assert (await auth.credentials()) is not None
    now[0] += 3000
    kept = [await auth.credentials() for _ in range(5)]
    assert [c.username for c in kept if c] == ["old"] * 5 and len(asked) == 2  # one failed renewal, not five
    now[0] += auth_module.RENEWAL_RETRY_SECONDS + 1
    assert (await auth.credentials()) is kept[0] and len(asked) == 3  # asked again a minute later
    now[0] += 600  # lapsed
    with pytest.raises(LoginError):
        await auth.credentials()


def config_with_aliyun(tmp_path: Path, host: str, **login: object) -> Path:
    data = {
        "targets": [{"name": "t", "registry": host, "namespace": "hami-system"}],
        "images": [{"name": "hami", "source": "projecthami/hami"}],
        "registries": {host: {"aliyun": login}},
    }
    path = tmp_path / "mirror.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


ENTERPRISE = "mirror-test-registry.cn-hangzhou.cr.aliyuncs.com"
NO_CLOUD = {"ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true", "ALIBABA_CLOUD_CLI_PROFILE_DISABLED": "true"}


@pytest.mark.parametrize(
    ("host", "login", "environment", "message"),
    [
        (
            ENTERPRISE,
            {},
            NO_CLOUD,
            "no default credential found: needs an AccessKey pair, RRSA's variables",
        ),
        (
            ENTERPRISE,
            {"credentials": "oidc_role_arn"},
            {**NO_CLOUD, "ALIBABA_CLOUD_ACCESS_KEY_ID": "a", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "b"},
            "no oidc_role_arn credential found: needs ALIBABA_CLOUD_ROLE_ARN",
        ),
        (
            ENTERPRISE,
            {},
            {
                **NO_CLOUD,
                "ALIBABA_CLOUD_ROLE_ARN": "acs:ram::1:role/r",
                "ALIBABA_CLOUD_OIDC_PROVIDER_ARN": "acs:ram::1:oidc-provider/p",
                "ALIBABA_CLOUD_OIDC_TOKEN_FILE": "/nonexistent/token",
            },
            "/nonexistent/token, which is not a file (is RRSA's webhook on?)",
        ),
        ("registry.cn-hangzhou.aliyuncs.com", {}, NO_CLOUD, "is a Personal Edition instance"),
        ("harbor.example.com", {}, NO_CLOUD, "is not an ACR endpoint name: give region and instance_id"),
    ],
)
def test_an_aliyun_login_that_cannot_work_here_fails_at_load_naming_the_key(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    host: str,
    login: dict[str, object],
    environment: dict[str, str],
    message: str,
) -> None:
    for name in (
        "ALIBABA_CLOUD_ACCESS_KEY_ID",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
        "ALIBABA_CLOUD_ROLE_ARN",
        "ALIBABA_CLOUD_OIDC_PROVIDER_ARN",
        "ALIBABA_CLOUD_OIDC_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=re.escape(f"registries.{host}.aliyun: ") + ".*" + re.escape(message)):
        load_settings(config_with_aliyun(tmp_path, host, **login))


def test_an_aliyun_login_takes_no_password_beside_it(tmp_path: Path) -> None:
    path = config_with_aliyun(tmp_path, ENTERPRISE)
    data = yaml.safe_load(path.read_text())
    data["registries"][ENTERPRISE]["password"] = "stored-password-0123"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="logs in with a RAM identity; give no username or password"):
        load_settings(path)


def test_a_refused_push_at_a_personal_instance_names_the_namespace_quota() -> None:
    from mirror.acr import missing_namespace_hint
    from mirror.registry import RegistryError

    denied = RegistryError("push blob", "registry.cn-hangzhou.aliyuncs.com/ns/hami", 403, "DENIED", "denied")
    assert "at most 3 namespaces" in missing_namespace_hint("registry.cn-hangzhou.aliyuncs.com", denied)
    assert missing_namespace_hint("hami-registry.cn-hangzhou.cr.aliyuncs.com", denied) == ""  # Enterprise: looked up
    other = RegistryError("push blob", "x", 500, "", "boom")
    assert missing_namespace_hint("registry.cn-hangzhou.aliyuncs.com", other) == ""


def test_an_aliyun_login_without_the_sdks_installed_fails_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name.startswith("alibabacloud") else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"aliyun: .*needs the Alibaba Cloud SDKs: pip install 'mirror\[aliyun\]'"):
        load_settings(config_with_aliyun(tmp_path, ENTERPRISE))
