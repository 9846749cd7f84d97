"""The files and environment variables the config names: secrets, read within bounds and never kept in a
model, and the check at load that each one is there and usable."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, SecretStr, field_validator, model_validator

from mirror import acr
from mirror.placeholders import PLACEHOLDER, is_placeholder
from mirror.settings.fields import one_source
from mirror.untrusted import clip, docker_auth

if TYPE_CHECKING:
    from mirror.settings.registries import AliyunLoginSettings
    from mirror.settings.root import MirrorSettings

MIN_SECRET_BYTES = 16  # an HMAC key or bearer token shorter than this is guessable, an empty one signs anything
MAX_SECRET_FILE_BYTES = 64 * 1024  # a password, key or token file
MAX_DOCUMENT_FILE_BYTES = 4 * 1024 * 1024  # docker_config, signatures.trusted_root
log = logging.getLogger("mirror.service")
_refused: set[str] = set()  # the secrets refused at a re-read since their last good value: warned about once


def usable_secret(label: str, value: bytes | None) -> bytes | None:
    """A secret re-read after load (a mounted Secret's file changes in place), or None where it is no longer one
    to use: a placeholder, or shorter than MIN_SECRET_BYTES (an empty key lets anyone sign). One warning, without
    the value, until a good value is read again."""
    if value is None:
        return None
    text = value.decode("utf-8", "replace")
    problem = PLACEHOLDER if is_placeholder(text) else None
    if problem is None and len(value) < MIN_SECRET_BYTES:
        problem = f"holds fewer than {MIN_SECRET_BYTES} bytes"
    if problem is None:
        _refused.discard(label)
        return value
    if label not in _refused:
        _refused.add(label)
        log.warning("%s %s; refused as if none were configured until it is replaced", label, problem)
    return None


def _long_enough(value: SecretStr | None) -> SecretStr | None:
    if value is not None and is_placeholder(value.get_secret_value()):
        raise ValueError(PLACEHOLDER)
    if value is not None and len(secret_text(value.get_secret_value()).encode()) < MIN_SECRET_BYTES:
        raise ValueError(f"must be at least {MIN_SECRET_BYTES} bytes (an empty or short key lets others sign)")
    return value


def strong_secrets(*fields: str) -> Any:
    """A validator refusing an empty or short inline secret in any of `fields`."""

    def strong(cls: type[BaseModel], value: SecretStr | None) -> SecretStr | None:
        return _long_enough(value)

    return field_validator(*fields)(classmethod(strong))


def inline_or_file(label: str, inline: str) -> Any:
    """A validator refusing a secret given both inline (`inline`) and in a file (`<inline>_file`)."""

    def one(model: BaseModel) -> BaseModel:
        one_source(label, **{inline: getattr(model, inline), f"{inline}_file": getattr(model, f"{inline}_file")})
        return model

    return model_validator(mode="after")(one)


def secret_text(raw: str) -> str:
    """A secret as it is sent: without the whitespace around it (the newline a file, `echo` or a Secret made from a
    file leaves), the same for a variable and a file, at the check at load and where it is used."""
    return raw.strip()


def read_secret_file(path: Path) -> bytes:
    with path.open("rb") as stream:
        return stream.read(MAX_SECRET_FILE_BYTES + 1).strip()


def secret_bytes(value: SecretStr | None, path: Path | None) -> bytes | None:
    """A secret given inline (in the config or a MIRROR_* variable) or in a file (the one the config names), without
    the whitespace around it either way, or None when neither is given."""
    if value is not None:
        return secret_text(value.get_secret_value()).encode()
    return read_secret_file(path) if path is not None else None


def secret_from(what: str, env: str | None, file: Path | None) -> str:
    """A secret named by an environment variable or a file (the fields `<what>_env`, `<what>_file`), read (and
    checked) at load; never kept in the model."""
    one_source(what, **{f"{what}_env": env, f"{what}_file": file})
    if env is not None:
        value = secret_text(os.environ.get(env, ""))
        if not value:
            raise ValueError(f"{what}: the environment variable {env} is not set")
        if is_placeholder(value):
            raise ValueError(f"{what}: the environment variable {env} {PLACEHOLDER}")
        return value
    if file is not None:
        try:
            value = read_secret_file(file).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{what}: cannot read {file}: {getattr(exc, 'strerror', None) or exc}") from None
        if not value:
            raise ValueError(f"{what}: {file} is empty")
        if is_placeholder(value):
            raise ValueError(f"{what}: {file} {PLACEHOLDER}")
        return value
    raise ValueError(f"{what}: give {what}_env or {what}_file (a secret is never written in the config)")


def read_named_file(path: Path, limit: int) -> str:
    """A file the config names, as text: a regular file, readable, at most `limit` bytes, UTF-8. The
    ValueError says which of these it is not."""
    try:
        regular = path.is_file()
    except OSError as exc:
        raise ValueError(f"cannot be read: {exc.strerror or exc}") from None
    if not regular:
        raise ValueError("is not a readable file")
    try:
        with path.open("rb") as stream:
            raw = stream.read(limit + 1)
    except OSError as exc:
        raise ValueError(f"cannot be read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise ValueError(f"is larger than {limit // 1024} KiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(undecodable(raw, exc)) from None


def _json_object_problem(text: str) -> str | None:
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return f"is not JSON ({type(exc).__name__})"
    return None if isinstance(document, dict) else "is not a JSON object"


def missing_inputs(settings: MirrorSettings, environ: Mapping[str, str]) -> list[str]:
    """The files and environment variables the config names that are not there, not usable as they are
    (unreadable, not UTF-8, empty, not JSON where JSON is due), or too weak to use."""
    problems = []

    def need_file(key: str, path: Path | None, limit: int) -> str | None:
        if path is None:
            return None
        try:
            return read_named_file(path, limit)
        except ValueError as exc:
            problems.append(f"{key}: {path} {exc}")
            return None

    def need_json_file(key: str, path: Path | None) -> str | None:
        text = need_file(key, path, MAX_DOCUMENT_FILE_BYTES)
        problem = None if text is None else _json_object_problem(text)
        if problem:
            problems.append(f"{key}: {path} {problem}")
        return None if problem else text

    def need_secret_file(key: str, path: Path | None, min_bytes: int = 1) -> None:
        text = need_file(key, path, MAX_SECRET_FILE_BYTES)
        secret = None if text is None else secret_text(text)
        if secret == "":
            problems.append(f"{key}: {path} is empty")
        elif secret is not None and is_placeholder(secret):
            problems.append(f"{key}: {path} {PLACEHOLDER}")
        elif secret is not None and len(secret.encode()) < min_bytes:
            problems.append(f"{key}: {path} holds fewer than {min_bytes} bytes (an empty key lets anyone sign)")

    docker_config = need_json_file("docker_config", settings.docker_config)
    if docker_config is not None:
        problems += [f"docker_config: {settings.docker_config} {p}" for p in placeholder_logins(docker_config)]
    for host, registry in settings.registries.items():
        need_secret_file(f"registries.{host}.password_file", registry.password_file)
        if registry.password_env is not None:
            problem = _variable_problem(environ.get(registry.password_env))
            if problem:
                problems.append(f"registries.{host}.password_env: the variable {registry.password_env} {problem}")
        if registry.aliyun is not None:
            problems += [f"registries.{host}.aliyun: {p}" for p in _aliyun_problems(host, registry.aliyun, environ)]
    need_secret_file("webhook.secret_file", settings.webhook.secret_file, MIN_SECRET_BYTES)
    need_secret_file("webhook.dockerhub_token_file", settings.webhook.dockerhub_token_file, MIN_SECRET_BYTES)
    need_secret_file("service.api_token_file", settings.service.api_token_file, MIN_SECRET_BYTES)
    need_json_file("signatures.trusted_root", settings.signatures.trusted_root)
    return problems


def _variable_problem(value: str | None) -> str | None:
    if value is None:
        return "is not set"
    if not secret_text(value):
        return "is empty"
    return PLACEHOLDER if is_placeholder(value) else None


def placeholder_logins(text: str) -> list[str]:
    """The `auths` entries of a docker config (JSON) whose login is a placeholder, as deploy/base/secret.yaml ships
    them: sent, the registry would refuse it and every pull or push with it. Never the values."""
    auths = json.loads(text).get("auths")
    found = []
    for key, entry in auths.items() if isinstance(auths, dict) else ():
        if not isinstance(entry, dict):
            continue
        auth = entry.get("auth")
        login = docker_auth(auth) if isinstance(auth, str) and auth else None
        values = [entry.get("username"), entry.get("password"), entry.get("identitytoken")]
        values += [login[0], login[2]] if login is not None else []
        if any(isinstance(value, str) and is_placeholder(value) for value in values):
            found.append(
                f"auths.{clip(str(key), 200)}: the login is a placeholder: put the real username and password there, "
                "or delete the entry (Docker Hub's is optional: without it, pulls are anonymous)"
            )
    return found


def _aliyun_problems(host: str, login: AliyunLoginSettings, environ: Mapping[str, str]) -> list[str]:
    from mirror.aliyun.login import credential_problem

    if acr.is_personal(host):
        return [
            f"{host} is a Personal Edition instance: its temporary login is not available through ACR's "
            "OpenAPI with a RAM identity; use a registry password (password_env) there, or an Enterprise instance"
        ]
    if acr.edition_of(host) is None and (login.region is None or login.instance_id is None):
        return [f"{host} is not an ACR endpoint name: give region and instance_id"]
    problem = credential_problem(login.credentials, dict(environ))
    return [problem] if problem else []


def undecodable(raw: bytes, exc: UnicodeDecodeError) -> str:
    return f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
