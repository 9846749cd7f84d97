"""At most as many requests in the connection pool as it has connections; the rest wait here.

Waiting in an asyncio semaphore costs nothing per waiter, whichever pool is below: mirror's (`pool.py`), or
httpcore's for a host with HTTP/2 on, which scans every queued request against every connection each time a request
comes or goes (a wave of hundreds of look-ups cost more CPU in that scan than in the requests). A request holds its
slot until its response is closed, body read or not, so a streamed blob counts as long as it flows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx


class PoolLimitTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, limit: int) -> None:
        self.inner = inner
        self._slots = asyncio.Semaphore(limit)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await self._slots.acquire()
        try:
            response = await self.inner.handle_async_request(request)
        except BaseException:
            self._slots.release()
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _ReleasedOnClose(response.stream, self._slots.release)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class _ReleasedOnClose(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, release: Callable[[], None]) -> None:
        self._inner = inner
        self._release: Callable[[], None] | None = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()
