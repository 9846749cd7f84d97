"""Registry authentication as an httpx.Auth flow: send, read the 401 challenge, answer it, resend.

The credentials are per registry host. A scheme learned from a challenge is remembered, so later requests
(including streamed uploads, which cannot be replayed) carry the answer up front.
"""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass

import httpx

_PARAM = re.compile(r'([A-Za-z_]+)=(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


@dataclass(frozen=True, slots=True)
class Challenge:
    scheme: str  # lower-case: "basic" or "bearer"
    params: dict[str, str]


def parse_challenge(header: str) -> Challenge | None:
    """Parse one `WWW-Authenticate` value: `Bearer realm="...",service="...",scope="..."`."""
    scheme, _, rest = header.strip().partition(" ")
    if not scheme:
        return None
    params = {m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3)) for m in _PARAM.finditer(rest)}
    return Challenge(scheme.lower(), {k: v.replace('\\"', '"') for k, v in params.items()})


@dataclass(frozen=True, slots=True)
class Credentials:
    username: str
    password: str

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password=<hidden>)"

    def basic_header(self) -> str:
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")
        return f"Basic {token}"


class RegistryAuth(httpx.Auth):
    """Answers Basic challenges with the configured credentials; anonymous when there are none."""

    def __init__(self, credentials: Credentials | None) -> None:
        self._credentials = credentials
        self._basic_known = False

    def __repr__(self) -> str:
        return f"RegistryAuth(credentials={'set' if self._credentials else 'none'})"

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        if self._basic_known and self._credentials:
            request.headers["Authorization"] = self._credentials.basic_header()
        response = yield request
        if response.status_code != 401 or "Authorization" in request.headers or not self._credentials:
            return
        challenge = parse_challenge(response.headers.get("WWW-Authenticate", ""))
        if challenge is None or challenge.scheme != "basic":
            return
        self._basic_known = True
        request.headers["Authorization"] = self._credentials.basic_header()
        yield request
