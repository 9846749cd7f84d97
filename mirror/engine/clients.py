"""One registry client per host for a whole run: discovery, the charts and every copy share its connections
and its token cache, so a scope's token is fetched once per run, not once per step."""

from __future__ import annotations

import asyncio
from types import TracebackType

from mirror.reference import api_host
from mirror.registry import RegistryClient
from mirror.registry.options import ClientOptions, PullBudgetOptions
from mirror.registry.retry import RetryPolicy
from mirror.settings import MirrorSettings, RetrySettings


def retry_policy(retry: RetrySettings) -> RetryPolicy:
    return RetryPolicy(retry.attempts, retry.base_delay, retry.max_delay, retry.max_elapsed)


def client_options(settings: MirrorSettings, host: str, anonymous: bool = False) -> ClientOptions:
    """The config's word on one registry host, as the wire's plain options."""
    registry, transfer, budget = settings.registry(host), settings.transfer, settings.pull_budget
    return ClientOptions(
        plain_http=registry.plain_http,
        max_connections=registry.max_connections,
        connect_timeout=transfer.connect_timeout,
        read_timeout=transfer.read_timeout,
        chunk_size=transfer.chunk_size,
        retry=retry_policy(settings.retry),
        pull_budget=PullBudgetOptions(budget.floor, budget.max_wait, budget.poll_interval),
        username=registry.username,
        password=registry.password_value,
        docker_config=settings.docker_config,
        anonymous=anonymous,
    )


def open_client(settings: MirrorSettings, host: str, anonymous: bool = False) -> RegistryClient:
    return RegistryClient.open(host, client_options(settings, host, anonymous))


class Clients:
    def __init__(self, settings: MirrorSettings) -> None:
        self.settings = settings
        self._open: dict[str, RegistryClient] = {}

    def __getitem__(self, host: str) -> RegistryClient:
        host = api_host(host)
        client = self._open.get(host)
        if client is None:
            client = self._open[host] = open_client(self.settings, host)
        return client

    async def aclose(self) -> None:
        clients, self._open = list(self._open.values()), {}
        await asyncio.gather(*(client.aclose() for client in clients))

    async def __aenter__(self) -> Clients:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()
