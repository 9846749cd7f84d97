"""What every part of a registry client shares: the host it talks to, its HTTP client (the transport stack and
auth of `transport.py`), how a place is named in messages, and a request whose network failure is one line and
whose answer is read within a bound."""

from __future__ import annotations

from typing import Any

import httpx

from mirror.reference import is_valid_digest
from mirror.registry.auth import RegistryAuth
from mirror.registry.body import read_limited, released
from mirror.registry.errors import MAX_ERROR_BODY, RegistryUnreachable
from mirror.registry.retry import RetryPolicy


class RegistryHost:
    def __init__(self, host: str, http: httpx.AsyncClient) -> None:
        self.host = host
        self.http = http
        self.retry = RetryPolicy()  # its requests' policy, for a step the transport cannot retry (retry_step)

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
        """The answer to a request whose body tells the caller nothing it needs (an upload step, a manifest PUT:
        their status and headers do), closed, holding at most MAX_ERROR_BODY bytes of its body, decoded as they
        arrived: read whole, a few hundred KB of gzip stood for hundreds of MB. An error keeps the registry's code
        and message for `raise_for_response`."""
        request = self.http.build_request(method, url, **kwargs)
        try:
            response = await self.http.send(request, stream=True)
            try:
                body = await read_limited(response, MAX_ERROR_BODY, truncate=True)  # dropped where it does not decode
            finally:
                await response.aclose()
                released(response)
        except httpx.TransportError as exc:
            raise RegistryUnreachable(action, where, exc) from exc
        # read_limited took Content-Encoding out of the headers: the body kept is decoded already
        return httpx.Response(response.status_code, headers=response.headers, content=body, request=response.request)
