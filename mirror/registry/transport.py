"""The HTTP client for one registry host: scheme, timeouts, connection limits, user agent and auth."""

from __future__ import annotations

import httpx

from mirror import __version__
from mirror.registry.auth import RegistryAuth
from mirror.registry.body import ACCEPTED_CODINGS
from mirror.registry.cancelsafe import CancelSafeTransport
from mirror.registry.credentials import Credentials, resolve_credentials
from mirror.registry.deadline import DeadlineTransport
from mirror.registry.options import ClientOptions
from mirror.registry.pool import pooled_transport
from mirror.registry.poollimit import PoolLimitTransport
from mirror.registry.retry import RetryPolicy, RetryTransport, StatusObserver

USER_AGENT = f"mirror/{__version__}"


def base_url(host: str, plain_http: bool) -> str:
    return f"{'http' if plain_http else 'https'}://{host}"


def layered(
    connections: httpx.AsyncBaseTransport,
    retry: RetryPolicy,
    deadline: float,
    min_rate: int,
    on_retry_status: StatusObserver | None = None,
    max_connections: int = 32,
) -> DeadlineTransport:
    """The transport stack under every client: a deadline over the retries over cancel-safe requests, at most
    `max_connections` of them in the pool at once."""
    limited = PoolLimitTransport(connections, max_connections)
    retries = RetryTransport(CancelSafeTransport(limited), retry, on_retry_status=on_retry_status)
    return DeadlineTransport(retries, deadline, min_rate)


def open_http_client(host: str, options: ClientOptions) -> httpx.AsyncClient:
    async def credentials(service: str | None) -> Credentials | None:
        if options.anonymous:
            return None
        if options.login is not None:
            return await options.login(service)
        return await resolve_credentials(
            host, options.username, options.password, options.docker_config, options.login_origin
        )

    limits = httpx.Limits(max_connections=options.max_connections, max_keepalive_connections=options.max_connections)
    # verified whatever the registry's scheme: its token realm or a blob's redirect may be https (the pool loads
    # the CA bundle at its first TLS connection, so a plain-HTTP registry that never meets one does not)
    http2 = options.http2 and not options.plain_http
    connections = pooled_transport(limits, verify=True, http2=http2, proxies=options.proxies)
    return httpx.AsyncClient(
        base_url=base_url(host, options.plain_http),
        transport=layered(
            connections,
            options.retry,
            options.deadline,
            options.min_rate,
            options.on_retry_status,
            options.max_connections,
        ),
        auth=RegistryAuth(host, credentials, "http" if options.plain_http else "https"),
        headers={"User-Agent": USER_AGENT, "Accept-Encoding": ACCEPTED_CODINGS},
        timeout=httpx.Timeout(options.read_timeout, connect=options.connect_timeout),
        follow_redirects=False,
    )
