"""Webhook payloads: signature checks and the release each one asks for.

A payload is input from outside even when it is signed: whatever it holds, reading it ends in a release
version or a HookError (4xx) with a short reason, never another exception. Headers that the signature does
not cover (the delivery id, the event) are checked or clipped before they reach the store or a message.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from collections.abc import Callable
from typing import Any, NamedTuple, ParamSpec, TypeVar

from mirror.engine.discover import version_bearing_images, versions_in
from mirror.reference import Repository, is_valid_tag
from mirror.release import matches, normalise_version, parse_filter
from mirror.settings import MirrorSettings
from mirror.untrusted import clip, load_json

P = ParamSpec("P")
R = TypeVar("R")
MAX_VERSION_CHARS = 128  # a release tag is far shorter; longer is refused before it is parsed
OWN_DELIVERIES = ("schedule:", "github-release:")  # delivery ids mirror gives; never taken from a header
MAX_DELIVERY_CHARS = 100  # GitHub's delivery ids are GUIDs (36 characters)
_DELIVERY = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:-]{{0,{MAX_DELIVERY_CHARS - 1}}}")
SHOWN = 80  # characters of a header or payload field a refusal quotes


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


def check_token(expected: bytes | None, given: str) -> None:
    if expected is None or not hmac.compare_digest(expected, given.encode()):
        raise HookError(401, "unknown webhook token")


def check_bearer(expected: bytes | None, header: str | None) -> None:
    """`Authorization: Bearer <service.api_token>`, compared in constant time. No token configured: refused."""
    if expected is None:
        raise HookError(401, "the job API needs service.api_token (or api_token_file) in the config")
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(expected, given.strip().encode()):
        raise HookError(401, "missing or wrong bearer token")


def delivery_id(header: str | None) -> str | None:
    """`X-GitHub-Delivery`, which the signature does not cover: a short printable token, or refused. The ids
    mirror makes itself (a scheduled tick's, one release's) are not a sender's to take: a signed body replayed
    under a tick's id would answer that tick with its job, and the discovery would not run."""
    if header is None:
        return None
    if header.startswith(OWN_DELIVERIES) or not _DELIVERY.fullmatch(header):
        raise HookError(
            400,
            f"X-GitHub-Delivery {clip(header, SHOWN)!r}: expected 1-{MAX_DELIVERY_CHARS} letters, digits or ._:-",
        )
    return header


def payload_refusals(parse: Callable[P, R]) -> Callable[P, R]:
    """Whatever a payload makes the parsing raise (a number past Python's digit limit, nesting past the
    recursion limit, a version the release module refuses) is the sender's problem: a 422, never a 500."""

    @functools.wraps(parse)
    def parsed(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return parse(*args, **kwargs)
        except RecursionError:
            raise HookError(422, "payload nested too deeply") from None
        except ValueError as exc:  # VersionError included
            raise HookError(422, f"payload refused: {clip(str(exc))}") from None

    return parsed


def _json(body: bytes) -> dict[str, Any]:
    try:
        doc = load_json(body)  # nesting deeper than the parser recurses is refused as not JSON, too
    except ValueError as exc:
        raise HookError(422, f"body is not JSON: {clip(str(exc))}") from None
    if not isinstance(doc, dict):
        raise HookError(422, "body is not a JSON object")
    return doc


def accepted_version(settings: MirrorSettings, text: Any) -> str:
    if not isinstance(text, str):
        raise HookError(422, "no version in the payload")
    if len(text) > MAX_VERSION_CHARS:
        raise HookError(422, f"version of {len(text)} characters: at most {MAX_VERSION_CHARS}")
    try:
        version = normalise_version(text)
        wanted = matches(version, parse_filter(settings.discovery.versions))
    except ValueError as exc:  # VersionError, or a number Python will not convert
        raise HookError(422, clip(str(exc))) from None
    if not wanted:
        raise HookError(422, f"{version} is outside the version filter {settings.discovery.versions!r}")
    return version


def published_version(settings: MirrorSettings, text: Any, prerelease: bool = False) -> str:
    """A version a release or a push announced, as discovery would take it: a pre-release (`-rc.1`, or one
    GitHub marks so) only with `discovery.prereleases`. One asked for by name (`{"version": ...}`) is taken as
    asked, as `mirror sync` takes it."""
    version = accepted_version(settings, text)
    if (prerelease or "-" in version) and not settings.discovery.prereleases:
        raise HookIgnored(f"{version} is a pre-release, and discovery.prereleases is off")
    return version


PUBLISHING_ACTIONS = ("published", "released")


class CiRequest(NamedTuple):
    version: str
    # one delivery id for every action GitHub sends about one release (`published` and `released` come
    # together): the second finds the first's job rather than queueing a second run behind it
    release_delivery: str | None = None


@payload_refusals
def ci_request(settings: MirrorSettings, body: bytes, event: str | None) -> CiRequest:
    """`{"version": "v2.10.0"}`, or a GitHub `release` event (`release.tag_name`) whose action is `published` or
    `released` (GitHub sends both for a release; only `released` when a pre-release is promoted to one).
    Other release actions and other GitHub events raise HookIgnored."""
    doc = _json(body)
    if event == "release" or "release" in doc:
        action = doc.get("action", "published")
        if action not in PUBLISHING_ACTIONS:
            shown = clip(action, SHOWN) if isinstance(action, str) else "(not a string)"
            raise HookIgnored(f"release {shown}: only a published release is mirrored")
        release = doc.get("release")
        if not isinstance(release, dict):
            raise HookError(422, "no release in the payload")
        version = published_version(settings, release.get("tag_name"), release.get("prerelease") is True)
        number = release.get("id")
        known = isinstance(number, int) and not isinstance(number, bool) and 0 < number < 2**63
        # the version too: a pre-release retagged as the release keeps its id
        tagged = hashlib.sha256(version.encode()).hexdigest()[:12]
        return CiRequest(version, f"github-release:{number}:{tagged}" if known else None)
    if event and "version" not in doc:
        raise HookIgnored(f"event {clip(event, SHOWN)!r} asks for no release")
    return CiRequest(accepted_version(settings, doc.get("version")))


@payload_refusals
def dockerhub_version(settings: MirrorSettings, body: bytes) -> str:
    """Docker Hub's push webhook: `repository.repo_name` must be a configured, version-bearing image whose
    source is that repository on Docker Hub (`pushed_repositories`)."""
    doc = _json(body)
    push, repository = doc.get("push_data"), doc.get("repository")
    if not isinstance(push, dict) or not isinstance(repository, dict):
        raise HookError(422, "not a Docker Hub push payload")
    name = repository.get("repo_name")
    if not isinstance(name, str):
        raise HookError(422, "no repository.repo_name in the payload")
    try:
        pushed = pushed_repositories(settings, name)
    except ValueError:
        raise HookError(422, f"repository {clip(name, SHOWN)!r} is not valid") from None
    images = [image for image, repository in version_bearing_images(settings) if repository in pushed]
    if not images:
        raise HookError(422, f"repository {clip(name, SHOWN)!r} on Docker Hub is not one this service mirrors")
    tag = push.get("tag")
    if not isinstance(tag, str):
        raise HookError(422, "no push_data.tag in the payload")
    if not is_valid_tag(tag):  # what a registry would refuse as a tag: junk, not a push to pass over
        raise HookError(422, f"push_data.tag {clip(tag, SHOWN)!r} is not a tag")
    # `v2.10.0` from `v2.10.0-ubuntu` for a tag of `{version}-ubuntu`; a push of `latest` asks for nothing
    versions = [v for v in versions_in(images[0], [tag]) if _is_version(v)]
    if not versions:
        raise HookIgnored(f"tag {clip(tag, SHOWN)!r} is not a release of {images[0].tag!r}")
    return published_version(settings, versions[0])


def pushed_repositories(settings: MirrorSettings, name: str) -> set[Repository]:
    """The repositories a Docker Hub push of `name` stands for, matched by registry and path: the one on Docker
    Hub, and the one on `source.registry` (Docker Hub itself by default, else the registry the config reads
    Docker Hub's images through). An image on another registry (`registry: nvcr.io`) is never one of them,
    whatever its path."""
    return {Repository.of("docker.io", name), Repository.of(settings.source.registry, name)}


def _is_version(text: str) -> bool:
    try:
        normalise_version(text)
    except ValueError:
        return False
    return True
