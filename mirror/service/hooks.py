"""Webhook payloads: signature checks and the release each one asks for."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from mirror.engine.discover import version_bearing_images
from mirror.reference import Repository
from mirror.release import VersionError, matches, normalise_version, parse_filter
from mirror.settings import MirrorSettings


class HookError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class HookIgnored(Exception):
    """A genuine delivery that asks for nothing (a ping, a release edited or deleted): answered, not queued."""


def check_signature(secret: bytes | None, body: bytes, header: str | None) -> None:
    """`X-Hub-Signature-256: sha256=<hex>` over the raw body, compared in constant time."""
    if secret is None:
        raise HookError(401, "the webhook secret is not configured: every delivery is refused")
    if not header or not header.startswith("sha256="):
        raise HookError(401, "missing X-Hub-Signature-256")
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), header.strip().encode()):
        raise HookError(401, "bad signature")


def check_token(expected: str | None, given: str) -> None:
    if expected is None or not hmac.compare_digest(expected.encode(), given.encode()):
        raise HookError(401, "unknown webhook token")


def check_bearer(expected: bytes | None, header: str | None) -> None:
    """`Authorization: Bearer <service.api_token>`, compared in constant time. No token configured: refused."""
    if expected is None:
        raise HookError(401, "the job API needs service.api_token (or api_token_file) in the config")
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(expected, given.strip().encode()):
        raise HookError(401, "missing or wrong bearer token")


def _json(body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise HookError(422, f"body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise HookError(422, "body is not a JSON object")
    return doc


def accepted_version(settings: MirrorSettings, text: Any) -> str:
    if not isinstance(text, str):
        raise HookError(422, "no version in the payload")
    try:
        version = normalise_version(text)
    except VersionError as exc:
        raise HookError(422, str(exc)) from None
    if not matches(version, parse_filter(settings.discovery.versions)):
        raise HookError(422, f"{version} is outside the version filter {settings.discovery.versions!r}")
    return version


def ci_version(settings: MirrorSettings, body: bytes, event: str | None) -> str:
    """`{"version": "v2.10.0"}`, or a GitHub `release` event (`release.tag_name`) whose action is `published`.
    Other release actions and other GitHub events raise HookIgnored."""
    doc = _json(body)
    if event == "release" or "release" in doc:
        action = doc.get("action", "published")
        if action != "published":
            raise HookIgnored(f"release {action}: only a published release is mirrored")
        release = doc.get("release")
        return accepted_version(settings, release.get("tag_name") if isinstance(release, dict) else None)
    if event and "version" not in doc:
        raise HookIgnored(f"event {event!r} asks for no release")
    return accepted_version(settings, doc.get("version"))


def dockerhub_version(settings: MirrorSettings, body: bytes) -> str:
    """Docker Hub's push webhook: `repository.repo_name` must be a configured, version-bearing image."""
    doc = _json(body)
    push, repository = doc.get("push_data"), doc.get("repository")
    if not isinstance(push, dict) or not isinstance(repository, dict):
        raise HookError(422, "not a Docker Hub push payload")
    name = str(repository.get("repo_name", ""))
    wanted = {repository.name for _, repository in version_bearing_images(settings)}
    try:
        pushed = Repository.of(settings.source.registry, name).name
    except ValueError:
        raise HookError(422, f"repository {name!r} is not valid") from None
    if pushed not in wanted:
        raise HookError(422, f"repository {name!r} is not one this service mirrors")
    return accepted_version(settings, push.get("tag"))
