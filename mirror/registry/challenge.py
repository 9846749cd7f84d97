"""`WWW-Authenticate` challenges and the token scopes a request needs."""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx

# The pieces of a `WWW-Authenticate` value (RFC 7235 section 4.1: one or more challenges, each a scheme and then a
# token68 or auth-params). Each is matched once from where the scan stands, and the scan moves past what it
# matched, so a header is read in time linear in its length: it comes from the registry, or from any host a
# redirect leads to (a 100 KB header once held the event loop over 30 s).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TOKEN68 = re.compile(r"[ \t]*[A-Za-z0-9\-._~+/]+=*[ \t]*(?=,|\Z)")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)(?:"|\\?\Z)')  # an unterminated one runs to the end
_BARE = re.compile(r"[^\s,]*")
_REST = re.compile(r'(?:"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[^,"])*')  # to the next comma outside quotes
_SEPARATORS = re.compile(r"[\s,]*")
_ESCAPED = re.compile(r"\\(.)")
_PREFERRED = {"bearer": 0, "basic": 1}
# The distribution API's paths, the name being everything before the last operation: a name may hold a
# `tags`, `blobs`, `manifests` or `referrers` segment itself (`ns/tags/app`).
_API_PATH = re.compile(
    r"/v2/(?P<name>.+)/(?:manifests/[^/]+|blobs/uploads/[^/]*|blobs/[^/]+|tags/list|referrers/[^/]+)/?"
)
_LOOSE_API_PATH = re.compile(r"^/v2/(?P<name>.+?)/(?:manifests|blobs|tags|referrers)(?:/|$)")  # any other shape


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


def parse_challenges(header: str) -> list[Challenge]:
    """Every challenge in `header`, in order: `Bearer realm="...",service="...", Basic realm="..."` is two
    (httpx joins a response's `WWW-Authenticate` headers so). A token followed by `=` is an auth-param of the
    challenge before it; any other token standing first in a list element starts a challenge. Quoted values may
    hold commas and escaped quotes; a parameter outside any challenge, or without a value, is left out."""
    challenges: list[Challenge] = []
    params: dict[str, str] = {}
    pos = 0
    while (pos := _match(_SEPARATORS, header, pos)) < len(header):
        token = _TOKEN.match(header, pos)
        after = token.end() if token else pos
        if token and header.startswith("=", after):
            value, pos = _value(header, after + 1)
            if challenges and value is not None:
                params[token.group().lower()] = value
        elif token and (after == len(header) or header[after] in " \t,"):
            params = {}
            challenges.append(Challenge(token.group().lower(), params))
            pos = _match(_TOKEN68, header, after)  # a token68 (Negotiate's, say) is not kept
        else:
            pos = _match(_REST, header, after)
    return challenges


def parse_challenge(header: str) -> Challenge | None:
    """The challenge to answer among those in `header` (joined headers included): the first Bearer one with a
    realm, else the first Bearer, else the first Basic, else the first."""
    challenges = parse_challenges(header)
    if not challenges:
        return None
    return min(challenges, key=lambda c: (_PREFERRED.get(c.scheme, 2), c.scheme == "bearer" and not c.realm))


def _match(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Where the scan stands after `pattern` at `pos` (at `pos` itself when it does not match there)."""
    match = pattern.match(text, pos)
    return match.end() if match else pos


def _value(header: str, pos: int) -> tuple[str | None, int]:
    """An auth-param's value at `pos` (None when empty), and where its list element ends."""
    quoted = _QUOTED.match(header, pos)
    if quoted is not None:
        value: str | None = _ESCAPED.sub(r"\1", quoted[1])
        pos = quoted.end()
    else:
        bare = _BARE.match(header, pos)
        assert bare is not None  # it matches the empty string
        value, pos = bare.group() or None, bare.end()
    return value, _match(_REST, header, pos)


def repository_of(request: httpx.Request) -> str | None:
    """The repository a request is about, read from its path's end (the distribution API's last operation)."""
    path = request.url.path
    match = _API_PATH.fullmatch(path) or _LOOSE_API_PATH.match(path)
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
