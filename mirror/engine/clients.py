"""One registry client per host for a whole run: discovery, the charts and every copy share its connections
and its token cache, so a scope's token is fetched once per run, not once per step."""

from __future__ import annotations

import asyncio
from types import TracebackType

from mirror.reference import api_host
from mirror.registry import RegistryClient
from mirror.settings import MirrorSettings


class Clients:
    def __init__(self, settings: MirrorSettings) -> None:
        self.settings = settings
        self._open: dict[str, RegistryClient] = {}

    def __getitem__(self, host: str) -> RegistryClient:
        host = api_host(host)
        client = self._open.get(host)
        if client is None:
            client = self._open[host] = RegistryClient.open(host, self.settings)
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
