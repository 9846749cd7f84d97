"""A secret left as the repository ships it (deploy/'s Secrets, README.md's examples) is published: it is
refused at load, one line naming the setting, the file or the variable and never the value (exit 2), and
refused again where the service re-reads it (the webhook secret, for each delivery)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mirror.cli import main
from mirror.demo.ports import free_port
from mirror.placeholders import is_placeholder
from mirror.settings import ConfigError, load_settings

ROOT = Path(__file__).parents[1]
# README.md's examples of where a secret goes, each checked to be there still
README_EXAMPLES = ["<a long random string>", "...", "$(openssl rand -hex 32)", "${{ secrets.MIRROR_WEBHOOK_SECRET }}"]


def shipped_secrets() -> list[str]:
    """Every value deploy/'s Secrets ship, and each login inside a dockerconfigjson one."""
    found = []
    for path in sorted((ROOT / "deploy").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") != "Secret":
                continue
            for key, value in doc.get("stringData", {}).items():
                if key != ".dockerconfigjson":
                    found.append(value)
                    continue
                for entry in json.loads(value)["auths"].values():
                    found += [entry["username"], entry["password"]]
    return found


SHIPPED = shipped_secrets()
STRONG = ["webhook.secret", "webhook.dockerhub_token", "service.api_token"]


def config(tmp_path: Path, **changes: Any) -> Path:
    """A config whose registries are loopback ports where nothing listens: a config that loads fails there."""
    data = {
        "source": {"registry": f"127.0.0.1:{free_port()}"},
        "targets": [{"name": "hz", "registry": f"127.0.0.1:{free_port()}", "namespace": "ns"}],
        "images": [{"name": "hami", "source": "projecthami/hami"}],
        "registries": {"127.0.0.1": {"plain_http": True}},
        "state_dir": str(tmp_path / "state"),
        "output_dir": str(tmp_path / "out"),
        **changes,
    }
    path = tmp_path / "mirror.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def refused(path: Path, value: str, *named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    said = str(caught.value)
    assert all(name in said for name in named), said
    assert "put the real value there" in said or "real username" in said or "real name" in said, said
    assert value not in said, said


def test_every_secret_deploy_and_the_readme_ship_is_taken_for_a_placeholder() -> None:
    assert len(SHIPPED) >= 7  # webhook, api, database url, two logins of two fields
    readme = (ROOT / "README.md").read_text()
    assert all(example in readme for example in README_EXAMPLES)
    assert all(is_placeholder(value) for value in [*SHIPPED, *README_EXAMPLES])
    assert not is_placeholder(secrets.token_hex(32)) and not is_placeholder("a<b>c-0123456789abcdef")


@pytest.mark.parametrize("value", sorted({v for v in [*SHIPPED, *README_EXAMPLES] if len(v) >= 16}))
@pytest.mark.parametrize("key", STRONG)
def test_a_placeholder_in_a_secret_file_is_refused_at_load(tmp_path: Path, key: str, value: str) -> None:
    secret = tmp_path / "secret"
    secret.write_text(value + "\n")  # as a Secret made from a file holds it
    section, _, field = key.partition(".")
    refused(config(tmp_path, **{section: {f"{field}_file": str(secret)}}), value, f"{key}_file: {secret}")


@pytest.mark.parametrize("key", STRONG)
def test_a_placeholder_from_a_variable_is_refused_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    variable = "MIRROR_" + key.upper().replace(".", "__")
    monkeypatch.setenv(variable, "<a long random string shared with CI>")
    refused(config(tmp_path), "<a long random string", f"{key} (set by the environment variable {variable})")


@pytest.mark.parametrize("key", STRONG)
def test_a_placeholder_inline_is_refused(tmp_path: Path, key: str) -> None:
    section, _, field = key.partition(".")
    refused(config(tmp_path, **{section: {field: "<a long random string>"}}), "<a long random string>", key)


def test_a_placeholder_is_exit_2_and_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "secret"
    secret.write_text("<a long random string: the bearer token for GET /jobs>")
    path = config(tmp_path, service={"api_token_file": str(secret)})
    assert main(["sync", "v2.10.0", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "service.api_token_file" in line]
    assert "placeholder" in line and "put the real value there" in line and "bearer token" not in err, err


def test_a_real_random_secret_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "secret"
    secret.write_text(secrets.token_hex(32) + "\n")
    monkeypatch.setenv("MIRROR_SERVICE__API_TOKEN", secrets.token_urlsafe(32))
    settings = load_settings(config(tmp_path, webhook={"secret_file": str(secret), "dockerhub_token": "x" * 40}))
    assert settings.webhook.secret_value() == secret.read_text().strip().encode()


@pytest.mark.parametrize("source", ["password_file", "password_env", "password"])
def test_a_placeholder_registry_password_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    value = "<your ACR registry password>"
    (tmp_path / "password").write_text(value)
    monkeypatch.setenv("ACR_PASSWORD", value)
    given = {"password_file": str(tmp_path / "password"), "password_env": "ACR_PASSWORD", "password": value}
    login = {"username": "someone", source: given[source]}
    refused(config(tmp_path, registries={"r.example": login}), value, f"registries.r.example.{source}")


def secret_yaml_docker_config(**auths: dict[str, str]) -> dict[str, Any]:
    for doc in yaml.safe_load_all((ROOT / "deploy" / "base" / "secret.yaml").read_text()):
        if doc["metadata"]["name"] == "mirror-registries":
            shipped: dict[str, Any] = json.loads(doc["stringData"][".dockerconfigjson"])
            shipped["auths"].update(auths)
            return shipped
    raise AssertionError("no mirror-registries Secret")


def test_the_placeholder_docker_hub_login_of_secret_yaml_is_refused_at_load(tmp_path: Path) -> None:
    acr = {"username": "someone", "password": secrets.token_hex(16)}
    docker_config = tmp_path / ".dockerconfigjson"
    docker_config.write_text(json.dumps(secret_yaml_docker_config(**{"registry.cn-hangzhou.aliyuncs.com": acr})))
    path = config(tmp_path, docker_config=str(docker_config))
    refused(path, "<optional Docker Hub", f"docker_config: {docker_config} auths.https://index.docker.io/v1/")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert "aliyuncs" not in str(caught.value)  # the real login is not blamed
    # the Docker Hub line deleted, as secret.yaml says: it loads
    shipped = secret_yaml_docker_config(**{"registry.cn-hangzhou.aliyuncs.com": acr})
    del shipped["auths"]["https://index.docker.io/v1/"]
    docker_config.write_text(json.dumps(shipped))
    assert load_settings(path).docker_config == docker_config


def test_placeholder_logins_hidden_in_auth_are_refused_and_token_logins_are_not(tmp_path: Path) -> None:
    docker_config = tmp_path / "config.json"
    path = config(tmp_path, docker_config=str(docker_config))
    auth = base64.b64encode(b"<account>:<password>").decode()
    docker_config.write_text(json.dumps({"auths": {"r.example": {"auth": auth}}}))
    refused(path, "<account>", "auths.r.example: the login is a placeholder")
    token = {"username": "<token>", "identitytoken": secrets.token_hex(16)}  # as docker writes a token login
    docker_config.write_text(json.dumps({"auths": {"r.example": token}}))
    assert load_settings(path).docker_config == docker_config


def signed(url: str, key: str) -> httpx.Response:
    body = json.dumps({"version": "v2.10.0"}).encode()
    headers = {"X-Hub-Signature-256": "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()}
    return httpx.post(f"{url}/hooks/ci", content=body, headers=headers, timeout=10)


def test_a_placeholder_put_in_the_webhook_secret_file_after_start_is_refused(tmp_path: Path) -> None:
    from tests.test_service import API_TOKEN, Service

    real, placeholder = secrets.token_hex(32), "<a long random string shared with CI>"
    secret = tmp_path / "webhook-secret"
    secret.write_text(real)
    service = Service(config(tmp_path, webhook={"secret_file": str(secret)}, service={"api_token": API_TOKEN}), 0)
    service.port = free_port()
    service.start()
    try:
        secret.write_text(placeholder + "\n")  # kubectl apply -k deploy/ with secret.yaml still in the base
        for _ in range(3):
            assert signed(service.url, placeholder).status_code == 401  # forged with the published string
        secret.write_text(real)
        assert signed(service.url, real).status_code == 202  # the real one is taken again
    finally:
        service.stop()
    log = service.log.read_text()
    warned = [line for line in log.splitlines() if "webhook.secret_file" in line and "placeholder" in line]
    assert len(warned) == 1 and "WARNING" in warned[0].upper(), log[-3000:]
    assert "a long random string" not in log, log[-3000:]


def test_a_password_in_angle_brackets_without_a_space_is_a_real_one() -> None:
    """A password manager may make `<Sup3rS3cret!pass-real>`: a placeholder reads like a phrase, or is one the
    repository shows."""
    assert not is_placeholder("<Sup3rS3cret!pass-real>") and not is_placeholder("<token>")
    assert is_placeholder("<your ACR registry password>") and is_placeholder(" <account> ")


async def test_a_login_written_over_by_a_placeholder_after_load_is_refused_naming_it(tmp_path: Path) -> None:
    """The service reads a registry's password file and docker config again for each job: a placeholder that
    `kubectl apply -k` wrote over the Secret since is refused as one, not sent as a login."""
    from mirror.registry.credentials import CredentialError, resolve_credentials

    origin = "registries.r.example: username and password_file /run/p"
    with pytest.raises(CredentialError, match="password_file /run/p is a placeholder, not a login"):
        await resolve_credentials("r.example", "me", lambda: "<your ACR registry password>", None, origin)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {"r.example": {"username": "<optional Docker Hub user>", "password": "x"}}}))
    with pytest.raises(CredentialError, match="the login is a placeholder, not a login"):
        await resolve_credentials("r.example", None, None, config)
    assert await resolve_credentials("r.example", "me", lambda: "<Sup3rS3cret!pass-real>", None) is not None
