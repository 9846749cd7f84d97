"""Plain HTTP reads outside the registry API (a chart repository's index and archives, Rekor's entries):
one retrying client, and bodies read up to a limit."""

from __future__ import annotations

import httpx

from mirror.errors import MirrorError
from mirror.reference import without_userinfo
from mirror.registry.body import ACCEPTED_CODINGS, BodyTooLarge, read_limited
from mirror.registry.pool import pooled_transport
from mirror.registry.proxy import ProxyRules, environment_proxies, refusal_kind
from mirror.registry.retry import RetryPolicy
from mirror.registry.transport import layered
from mirror.untrusted import clip


class FetchError(MirrorError):
    """A read that did not give a body: a status, a body over its limit, or the network; one line."""


MAX_CONNECTIONS = 16  # a chart repository's index and archives, Rekor's entries: a few at a time


def http_client(
    timeout: float,
    retry: RetryPolicy,
    deadline: float = 300.0,
    min_rate: int = 64 * 1024,
    proxies: ProxyRules | None = None,
) -> httpx.AsyncClient:
    """Over mirror's own connection pool, as a registry client is (`proxies`: else the environment's)."""
    proxies = proxies if proxies is not None else environment_proxies()
    limits = httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS)
    connections = pooled_transport(limits, verify=True, http2=False, proxies=proxies)
    transport = layered(connections, retry, deadline, min_rate, max_connections=MAX_CONNECTIONS)
    headers = {"Accept-Encoding": ACCEPTED_CODINGS}
    return httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=True, headers=headers)


async def read_capped(client: httpx.AsyncClient, url: str, limit: int, what: str, *, stored: bool = False) -> bytes:
    """GET `url` (200 only), refusing a body over `limit` bytes whether declared or streamed. A refusal shows no
    credentials the URL carries (`https://user:token@host/...`), in `what`, the URL or httpx's own words: each
    is cleaned before it is clipped, which could cut a URL's `://` from its `@`.

    With `stored`, the bytes as the server stores them (a chart archive, whose digest is over them): asked for
    without transport coding, and read raw whatever Content-Encoding the answer names, as Helm's getter reads
    them (a storage host labelling a stored .tgz `Content-Encoding: gzip` would otherwise have it unpacked)."""
    what, shown = without_userinfo(what), clip(without_userinfo(url), 200)
    headers = {"Accept-Encoding": "identity"} if stored else None
    try:
        address, auth = _credentials_apart(url)
        async with client.stream("GET", address, auth=auth, headers=headers) as response:
            if response.status_code != 200:
                raise FetchError(f"{what}: GET {shown} answered {response.status_code}")
            try:
                return await read_limited(response, limit, raw=stored)
            except BodyTooLarge as exc:
                raise FetchError(f"{what}: {shown} is {exc}") from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        failed = FetchError(f"{what}: GET {shown}: {type(exc).__name__}: {clip(without_userinfo(str(exc)))}")
        failed.kind = refusal_kind(exc) or failed.kind  # a proxy's refusal is not the network's passing trouble
        raise failed from None


def _credentials_apart(url: str) -> tuple[httpx.URL, httpx.BasicAuth | None]:
    """The URL without its userinfo, and the login it carried, sent as httpx sends one from a URL (Basic, to the
    URL's origin only): the request's URL, which the retry log line and httpx's own log show, holds no secret."""
    parsed = httpx.URL(url)
    if not parsed.userinfo:
        return parsed, None
    return parsed.copy_with(userinfo=b""), httpx.BasicAuth(parsed.username, parsed.password)
