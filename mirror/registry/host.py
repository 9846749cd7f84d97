"""What every part of a registry client shares: the host it talks to, its HTTP client (the transport stack and
auth of `transport.py`), how a place is named in messages, and a request whose network failure is one line."""

from __future__ import annotations

from typing import Any

import httpx

from mirror.reference import is_valid_digest
from mirror.registry.auth import RegistryAuth
from mirror.registry.body import released
from mirror.registry.errors import RegistryUnreachable


class RegistryHost:
    def __init__(self, host: str, http: httpx.AsyncClient) -> None:
        self.host = host
        self.http = http

    @property
    def answers_anyone(self) -> bool:
        """True while the registry has never challenged this client: what it answered so far, it would have
        answered a client without credentials (a node pulling anonymously)."""
        auth = self.http.auth
        return not (isinstance(auth, RegistryAuth) and auth.challenged)

    def where(self, repository: str, ref: str = "") -> str:
        sep = "@" if is_valid_digest(ref) else ":"
        return f"{self.host}/{repository}" + (f"{sep}{ref}" if ref else "")

    async def _send(self, action: str, where: str, method: str, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        try:
            return released(await self.http.request(method, url, **kwargs))
        except httpx.TransportError as exc:
            raise RegistryUnreachable(action, where, exc) from exc
