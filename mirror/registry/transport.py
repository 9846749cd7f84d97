"""The HTTP client for one registry host: scheme, timeouts, connection limits, user agent and auth."""

from __future__ import annotations

from pathlib import Path

import httpx

from mirror import __version__
from mirror.registry.auth import RegistryAuth
from mirror.registry.credentials import Credentials, resolve_credentials
from mirror.registry.retry import RetryPolicy, RetryTransport
from mirror.settings import RegistrySettings, RetrySettings, TransferSettings

USER_AGENT = f"mirror/{__version__}"


def base_url(host: str, settings: RegistrySettings) -> str:
    return f"{'http' if settings.plain_http else 'https'}://{host}"


def open_http_client(
    host: str,
    settings: RegistrySettings,
    transfer: TransferSettings,
    retry: RetrySettings,
    docker_config: Path | None = None,
    anonymous: bool = False,
) -> httpx.AsyncClient:
    async def credentials() -> Credentials | None:
        return None if anonymous else await resolve_credentials(host, settings, docker_config)

    limits = httpx.Limits(max_connections=settings.max_connections, max_keepalive_connections=settings.max_connections)
    # A plain-HTTP registry never uses TLS: skip loading the CA bundle (tens of milliseconds at start-up).
    connections = httpx.AsyncHTTPTransport(limits=limits, verify=not settings.plain_http)
    transport = RetryTransport(connections, RetryPolicy.from_settings(retry))
    return httpx.AsyncClient(
        base_url=base_url(host, settings),
        transport=transport,
        auth=RegistryAuth(host, credentials),
        headers={"User-Agent": USER_AGENT},
        timeout=httpx.Timeout(transfer.read_timeout, connect=transfer.connect_timeout),
        follow_redirects=False,
    )
