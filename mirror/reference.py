"""Image references: parsing, validation and Docker Hub normalisation. Nothing here touches the network."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mirror.errors import Kind, MirrorError

DOCKER_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
DOCKER_HUB_API_HOST = "registry-1.docker.io"

# From the OCI distribution spec. Each is used with fullmatch: `$` would also match before a final newline.
_REPOSITORY = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
_HOST = re.compile(r"(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?")
# The userinfo of every URL in a text: `https://user:token@host/...`; a chart repository's credentials ride there
# up to the last `@` of the URL: a login whose password holds `/` is cut whole (a path`@` with it, which is safe)
_USERINFO = re.compile(r"(?<=://)\S*@")


class ReferenceError(MirrorError, ValueError):
    """A name, tag or digest that is not valid."""

    kind = Kind.USAGE


def is_valid_tag(tag: str) -> bool:
    return bool(_TAG.fullmatch(tag))


def is_valid_digest(digest: str) -> bool:
    return bool(_DIGEST.fullmatch(digest))


def validate_repository(repository: str) -> str:
    if len(repository) > 255 or not _REPOSITORY.fullmatch(repository):
        raise ReferenceError(f"invalid repository name {repository!r}")
    return repository


def validate_host(host: str) -> str:
    if not _HOST.fullmatch(host):
        raise ReferenceError(without_userinfo(f"invalid registry host {host!r}{_host_hint(host)}"))
    return host


def _host_hint(text: str) -> str:
    """What to write instead, for the mistakes a URL copied from a browser makes (a login in it left out)."""
    scheme, found, rest = text.partition("://")
    if found:
        host = rest.split("/", 1)[0].rsplit("@", 1)[-1]
        http = "; plain_http under registries: for http" if scheme.lower() == "http" else ""
        return f": write the host alone ({host!r}{http})"
    if "/" in text:
        return f": write the host alone ({text.split('/', 1)[0]!r})"
    return ""


def without_userinfo(text: str) -> str:
    """`text` with every URL in it shown without its userinfo (`https://user:token@host/x` -> `https://host/x`): for
    a message, a log line or a job record, which must not carry a chart repository's credentials."""
    return _USERINFO.sub("", text)


def api_host(registry: str) -> str:
    """The host to send API requests to, in lower case as DNS reads it (`Quay.io` is quay.io, one registry):
    Docker Hub's aliases all answer at one API host."""
    host = registry.lower()
    return DOCKER_HUB_API_HOST if host in DOCKER_HUB_ALIASES else host


def normalise_repository(registry: str, repository: str) -> str:
    """Docker Hub puts one-component names under `library/` (`nginx` -> `library/nginx`)."""
    if api_host(registry) == DOCKER_HUB_API_HOST and "/" not in repository:
        return f"library/{repository}"
    return repository


def spellings(registry: str, repository: str) -> tuple[str, ...]:
    """Every name a person may write for this repository: bare and behind its registry, and on Docker Hub behind
    each of its host aliases and, for an official image, without `library/` (`docker.io/nginx`)."""
    on_docker_hub = api_host(registry) == DOCKER_HUB_API_HOST
    names = [repository]
    if on_docker_hub and repository.startswith("library/") and repository.count("/") == 1:
        names.append(repository.removeprefix("library/"))
    hosts = sorted(DOCKER_HUB_ALIASES) if on_docker_hub else [registry]
    return (*names, *(f"{host}/{name}" for host in hosts for name in names))


@dataclass(frozen=True, slots=True)
class Repository:
    """A repository at a registry: `registry` is the API host[:port]."""

    registry: str
    name: str

    @classmethod
    def of(cls, registry: str, name: str) -> Repository:
        validate_host(registry)
        return cls(api_host(registry), validate_repository(normalise_repository(registry, name)))

    def __str__(self) -> str:
        return f"{self.registry}/{self.name}"


@dataclass(frozen=True, slots=True)
class Reference:
    """A tag or a digest in a repository."""

    repository: Repository
    identifier: str

    def __post_init__(self) -> None:
        if not (is_valid_tag(self.identifier) or is_valid_digest(self.identifier)):
            raise ReferenceError(f"invalid tag or digest {self.identifier!r}")

    @property
    def is_digest(self) -> bool:
        return is_valid_digest(self.identifier)

    def __str__(self) -> str:
        sep = "@" if self.is_digest else ":"
        return f"{self.repository}{sep}{self.identifier}"


def parse(text: str, default_registry: str = "docker.io") -> Reference:
    """Parse `[registry/]repo[:tag][@digest]` the way docker does (a first component with a dot, a colon or
    `localhost` is a registry)."""
    rest = text
    digest = None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
    first, _, remainder = rest.partition("/")
    if remainder and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, remainder
    else:
        registry, path = default_registry, rest
    tag = "latest"
    name, sep, maybe_tag = path.rpartition(":")
    if sep and "/" not in maybe_tag:
        path, tag = name, maybe_tag
    return Reference(Repository.of(registry, path), digest or tag)
