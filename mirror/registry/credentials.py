"""Where credentials for a registry come from, first match wins:

1. the config's `registries.<host>` (`username` + `password_file` or `password`);
2. a docker `config.json` (`docker_config`, else `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`;
   a mounted Kubernetes `dockerconfigjson` secret works the same way): `credHelpers`, then `credsStore`,
   each by running `docker-credential-<name> get` as docker does, then the `auths` entry (`auth`,
   `username`/`password`, `identitytoken`);
3. anonymous.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirror.errors import Kind, MirrorError
from mirror.placeholders import LOGIN_PLACEHOLDER, is_placeholder
from mirror.reference import DOCKER_HUB_API_HOST, api_host
from mirror.untrusted import docker_auth, load_json

DOCKER_HUB_CONFIG_KEY = "https://index.docker.io/v1/"
HELPER_TIMEOUT = 30.0
MAX_HELPER_OUTPUT = 64 * 1024


class CredentialError(MirrorError):
    """Credentials were configured but could not be read. Never carries a secret."""

    kind = Kind.AUTH


@dataclass(frozen=True, slots=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    identity_token: str | None = field(default=None, repr=False)  # an OAuth2 refresh token
    origin: str = ""  # where they came from, for messages
    expires_at: float | None = None  # a temporary login (ACR's GetAuthorizationToken): when it lapses (epoch s)
    issued_at: float | None = None
    renewable: bool = False  # a credential helper's: refused, it is asked once more (it may hand out short-lived ones)

    def due_for_renewal(self, now: float) -> bool:
        """A temporary login is renewed once three quarters of its life have passed, or when it lapsed."""
        if self.expires_at is None:
            return False
        lifetime = self.expires_at - (self.issued_at if self.issued_at is not None else self.expires_at)
        return now >= self.expires_at - max(lifetime, 0.0) / 4

    def lapsed(self, now: float) -> bool:
        """A temporary login past its end (one with no end never lapses)."""
        return self.expires_at is not None and now >= self.expires_at

    def basic_header(self) -> str:
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")
        return f"Basic {token}"


@dataclass(frozen=True, slots=True)
class DockerConfig:
    path: Path
    auths: dict[str, dict[str, Any]]
    cred_helpers: dict[str, str]
    creds_store: str | None

    def key_for(self, host: str, keys: list[str]) -> str | None:
        """The config's key for `host`: keys may carry a scheme and a path, and Docker Hub has aliases."""
        wanted = api_host(host)
        for key in keys:
            bare = key.split("://", 1)[-1].split("/", 1)[0]
            if api_host(bare) == wanted or (bare == "index.docker.io" and wanted == DOCKER_HUB_API_HOST):
                return key
        return None


def docker_config_path(explicit: Path | None) -> Path | None:
    if explicit is not None:
        return explicit
    directory = os.environ.get("DOCKER_CONFIG")
    path = Path(directory) / "config.json" if directory else Path.home() / ".docker" / "config.json"
    return path if path.is_file() else None


def load_docker_config(path: Path) -> DockerConfig:
    try:
        doc = load_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CredentialError(f"docker config {path}: {type(exc).__name__}: cannot be read as JSON") from None
    if not isinstance(doc, dict):
        raise CredentialError(f"docker config {path}: not a JSON object")
    auths = doc.get("auths") or {}
    helpers = doc.get("credHelpers") or {}
    for name, value in (("auths", auths), ("credHelpers", helpers)):
        if not isinstance(value, dict):
            raise CredentialError(f"docker config {path}: {name} is not a JSON object")
    return DockerConfig(
        path=path,
        auths={str(k): v for k, v in auths.items() if isinstance(v, dict)},
        cred_helpers={str(k): str(v) for k, v in helpers.items()},
        creds_store=str(doc["credsStore"]) if doc.get("credsStore") else None,
    )


async def resolve_credentials(
    host: str,
    username: str | None,
    password_source: Callable[[], str | None] | None,
    docker_config: Path | None,
    origin: str = "config",
) -> Credentials | None:
    """The credentials for `host`, or None for anonymous access; `origin` names where a username and password
    given are set (the setting, the variable or file), for a refusal to say which to mend."""
    password = password_source() if password_source else None
    if username and password is not None:
        if is_placeholder(username) or is_placeholder(password):  # a Secret written over since the config loaded
            raise CredentialError(f"{origin} {LOGIN_PLACEHOLDER}")
        return Credentials(username, password, origin=origin)
    path = docker_config_path(docker_config)
    if path is None:
        return None
    config = load_docker_config(path)
    helper_key = config.key_for(host, list(config.cred_helpers))
    if helper_key is not None:
        # as Docker reads a helper's "credentials not found": anonymous, like the store's below
        return await run_credential_helper(
            config.cred_helpers[helper_key], _server_url(host, helper_key), missing_ok=True
        )
    if config.creds_store:
        found = await run_credential_helper(config.creds_store, _server_url(host, None), missing_ok=True)
        if found:
            return found
    auth_key = config.key_for(host, list(config.auths))
    return _from_auths_entry(config.auths[auth_key], f"{path} ({auth_key})") if auth_key else None


def _server_url(host: str, configured_key: str | None) -> str:
    if configured_key:
        return configured_key
    return DOCKER_HUB_CONFIG_KEY if api_host(host) == DOCKER_HUB_API_HOST else host


def _from_auths_entry(entry: dict[str, Any], origin: str) -> Credentials | None:
    username, password = str(entry.get("username") or ""), str(entry.get("password") or "")
    if entry.get("auth"):
        login = docker_auth(str(entry["auth"]))
        if login is None or not login[1]:
            raise CredentialError(f"docker config {origin}: `auth` is not base64 of user:password")
        username, _, password = login
    identity = str(entry.get("identitytoken") or "") or None
    if any(is_placeholder(value) for value in (username, password, identity or "")):
        raise CredentialError(f"docker config {origin}: the login {LOGIN_PLACEHOLDER}")
    if identity:
        return Credentials(username or "<token>", password, identity_token=identity, origin=origin)
    if username:
        return Credentials(username, password, origin=origin)
    return None


async def run_credential_helper(name: str, server_url: str, missing_ok: bool = False) -> Credentials | None:
    """`docker-credential-<name> get`, the server URL on stdin, JSON {Username, Secret} on stdout."""
    binary = f"docker-credential-{name}"
    try:
        process = await asyncio.create_subprocess_exec(
            binary,
            "get",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError:
        raise CredentialError(f"credential helper {binary} is not on PATH") from None
    try:
        out, err = await asyncio.wait_for(process.communicate(server_url.encode()), HELPER_TIMEOUT)
    except TimeoutError:
        process.kill()
        raise CredentialError(f"credential helper {binary} did not answer within {HELPER_TIMEOUT:.0f} s") from None
    if process.returncode != 0:
        message = _helper_complaint(err or out, process.returncode)
        if missing_ok and "credentials not found" in message.lower():
            return None
        raise CredentialError(f"credential helper {binary} failed for {server_url}: {message[:200]}")
    try:
        doc = load_json(out[:MAX_HELPER_OUTPUT])
        username, secret = str(doc["Username"]), str(doc["Secret"])
    except (ValueError, KeyError, TypeError):
        raise CredentialError(f"credential helper {binary} answered something that is not credentials") from None
    if username == "<token>":
        return Credentials(username, "", identity_token=secret, origin=binary, renewable=True)
    return Credentials(username, secret, origin=binary, renewable=True)


def _helper_complaint(said: bytes, status: int | None) -> str:
    """The first line a failed helper wrote (docker's helpers write their errors to stdout), unless it is
    JSON: a helper's answer carries the secret, and that is never shown."""
    lines = said.decode("utf-8", "replace").strip().splitlines()
    if not lines or lines[0].lstrip().startswith(("{", "[")):
        return f"exit status {status}"
    return lines[0]
