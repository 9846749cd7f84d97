"""`WWW-Authenticate` challenges and the token scopes a request needs."""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx

# A name starts where no name character stands before it: without the look-behind, a name not followed by `=` was
# tried again from each of its characters, each time to its end (quadratic: a 100 KB header took over 30 s).
_PARAM = re.compile(r'(?<![A-Za-z_])([A-Za-z_]+)=(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')
_API_PATH = re.compile(r"^/v2/(?P<name>.+?)/(?:manifests|blobs|tags|referrers)(?:/|$)")


@dataclass(frozen=True, slots=True)
class Challenge:
    scheme: str  # lower-case: "basic" or "bearer"
    params: dict[str, str]

    @property
    def realm(self) -> str:
        return self.params.get("realm", "")

    @property
    def service(self) -> str:
        return self.params.get("service", "")

    @property
    def scopes(self) -> frozenset[str]:
        return frozenset(self.params.get("scope", "").split())


def parse_challenge(header: str) -> Challenge | None:
    """Parse `Bearer realm="...",service="...",scope="..."` (quoted values may hold commas and colons), in time
    linear in the header's length: it comes from the registry, or from any host a redirect leads to."""
    scheme, _, rest = header.strip().partition(" ")
    if not scheme:
        return None
    params = {}
    for match in _PARAM.finditer(rest):
        quoted, bare = match.group(2), match.group(3)
        params[match.group(1).lower()] = quoted.replace('\\"', '"') if quoted is not None else bare
    return Challenge(scheme.lower(), params)


def repository_of(request: httpx.Request) -> str | None:
    match = _API_PATH.match(request.url.path)
    return match["name"] if match else None


def scopes_for(request: httpx.Request) -> frozenset[str]:
    """What a request needs: pull to read, pull+push to write, and pull on the `from` repository of a mount."""
    name = repository_of(request)
    if name is None:
        return frozenset()
    actions = "pull" if request.method in ("GET", "HEAD") else "pull,push"
    scopes = {f"repository:{name}:{actions}"}
    mount_from = request.url.params.get("from")
    if mount_from:
        scopes.add(f"repository:{mount_from}:pull")
    return frozenset(scopes)


def merge_scopes(scopes: frozenset[str]) -> frozenset[str]:
    """One scope per repository with the union of its actions (`pull` + `pull,push` -> `pull,push`)."""
    actions: dict[str, set[str]] = {}
    others = set()
    for scope in scopes:
        kind, _, rest = scope.partition(":")
        name, sep, acts = rest.rpartition(":")
        if kind != "repository" or not sep:
            others.add(scope)
            continue
        actions.setdefault(name, set()).update(a for a in acts.split(",") if a)
    merged = {f"repository:{n}:{','.join(sorted(a))}" for n, a in actions.items()}
    return frozenset(merged | others)
