"""The HTTP client for one registry host: scheme, timeouts, connection limits, user agent and auth."""

from __future__ import annotations

import httpx

from mirror import __version__
from mirror.registry.auth import Credentials, RegistryAuth
from mirror.settings import RegistrySettings, TransferSettings

USER_AGENT = f"mirror/{__version__}"


def base_url(host: str, settings: RegistrySettings) -> str:
    return f"{'http' if settings.plain_http else 'https'}://{host}"


def credentials_for(settings: RegistrySettings) -> Credentials | None:
    password = settings.password_value()
    if settings.username and password is not None:
        return Credentials(settings.username, password)
    return None


def open_http_client(host: str, settings: RegistrySettings, transfer: TransferSettings) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=settings.max_connections, max_keepalive_connections=settings.max_connections)
    # retries=2 re-tries only failed connection attempts, which is always safe.
    transport = httpx.AsyncHTTPTransport(limits=limits, retries=2)
    return httpx.AsyncClient(
        base_url=base_url(host, settings),
        transport=transport,
        auth=RegistryAuth(credentials_for(settings)),
        headers={"User-Agent": USER_AGENT},
        timeout=httpx.Timeout(transfer.read_timeout, connect=transfer.connect_timeout),
        follow_redirects=False,
    )
