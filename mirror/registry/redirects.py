"""Redirects of the registry API: which are followed, how far, and with whose credentials.

registry.k8s.io answers manifest, tag and blob requests with a 307 to another registry's API (a regional
Artifact Registry), which challenges with its own anonymous token flow. Docker's web site answers
`https://docker.io/v2/...` with a 301 to `https://www.docker.com/`, which is no registry at all. So a hop is
followed when its Location is a registry API path (`/v2/...`), or anywhere for a blob (a CDN or a storage
host), at most MAX_REDIRECTS hops; any other redirect is handed back for `raise_for_response` to refuse.

Each hop is a new request. The configured host's auth (its credentials and tokens) is used only for its own
origin; every other origin gets an anonymous `RegistryAuth` of its own, kept for the client's life, so its
tokens are fetched once per scope set and ours never leave the configured host.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from mirror.registry.auth import RegistryAuth
from mirror.registry.body import released
from mirror.registry.errors import RegistryError, RegistryUnreachable, without_query

MAX_REDIRECTS = 5


def is_api_path(url: httpx.URL) -> bool:
    return url.path.startswith("/v2/")


def next_hop(response: httpx.Response, any_location: bool) -> httpx.URL | None:
    """Where a redirect sends the request, if it is one to follow."""
    location = response.headers.get("Location")
    if not response.is_redirect or not location:
        return None
    try:
        url = response.request.url.join(location)
    except httpx.InvalidURL:
        return None
    if url.scheme not in ("http", "https"):
        return None
    return url if any_location or is_api_path(url) else None


class Redirects:
    """Sends a GET or HEAD through `http` and follows its redirects, with each origin's own auth."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self._foreign: dict[tuple[str, str], RegistryAuth] = {}
        # httpx parses a path relative to the client's base URL, then the two joined: a second parse per request
        self._origin = str(http.base_url).rstrip("/")

    def auth_for(self, url: httpx.URL) -> httpx.Auth | None:
        """The client's own auth for its origin; an anonymous one per other origin (scheme included: a
        downgrade to plain HTTP on the same host gets no credentials either)."""
        base = self.http.base_url
        if url.scheme == base.scheme and url.netloc == base.netloc:
            return self.http.auth
        key = (url.scheme, url.netloc.decode("ascii"))
        auth = self._foreign.get(key)
        if auth is None:
            auth = self._foreign[key] = RegistryAuth.anonymous(key[1], key[0])
        return auth

    @asynccontextmanager
    async def stream(
        self,
        action: str,
        where: str,
        method: str,
        url: str | httpx.URL,
        headers: dict[str, str] | None = None,
        any_location: bool = False,
    ) -> AsyncIterator[httpx.Response]:
        """The last answer, its body not yet read. Redirect bodies are closed unread. More than
        MAX_REDIRECTS hops is a RegistryError (a loop fails at once instead of spinning), and so is a body that
        does not decode as its Content-Encoding says; a connection that fails, before the answer or while its body
        is read, is RegistryUnreachable."""
        try:
            target = self._origin + url if isinstance(url, str) and url.startswith("/") else url
            for hop in range(MAX_REDIRECTS + 1):
                request = self.http.build_request(method, target, headers=headers)
                response = await self.http.send(request, auth=self.auth_for(request.url), stream=True)
                following = next_hop(response, any_location)
                if following is None:
                    break
                await response.aclose()
                released(response)
                if hop == MAX_REDIRECTS:
                    message = f"more than {MAX_REDIRECTS} redirects, the last to {without_query(str(following))}"
                    raise RegistryError(action, where, response.status_code, "", message)
                target = following
            try:
                yield response
            except httpx.DecodingError as exc:  # labelled with a coding its bytes are not in (a proxy, a CDN)
                raise RegistryError(action, where, response.status_code, "", str(exc)) from None
            finally:
                await response.aclose()
                released(response)
        except httpx.TransportError as exc:
            raise RegistryUnreachable(action, where, exc) from exc
