"""A request whose caller is cancelled finishes on its own, so the connection pool stays whole.

An HTTP/1.1 exchange cut off halfway leaves its connection unusable (mirror's pool closes it, and a later request
opens another), and httpcore's pool (a host with HTTP/2 on) loses a connection slot for good when a request is
cancelled at the wrong moment, for instance while it waits for a pooled connection that is being opened for it
(encode/httpcore#1093, #830). mirror cancels requests routinely (a target tag asked while the source answers, then
not needed; a run abandoned at SIGTERM), and after enough of them every request waited out the pool timeout. Under
this layer a request is never cancelled mid-flight: the caller stops waiting at once, and the request runs to its
answer (bounded by the client's timeouts) and is closed, its connection returned to the pool."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx


class CancelSafeTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self._orphans: set[asyncio.Task[httpx.Response]] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        task = asyncio.ensure_future(self.inner.handle_async_request(request))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            self._orphans.add(task)
            task.add_done_callback(self._close_orphan)
            raise

    def _close_orphan(self, task: asyncio.Task[httpx.Response]) -> None:
        self._orphans.discard(task)
        if task.cancelled() or task.exception() is not None:
            return
        retrieved_when_done(asyncio.ensure_future(task.result().aclose()))

    async def aclose(self) -> None:
        for task in self._orphans:  # the pool is closing: its connections go with it
            task.cancel()
        await asyncio.gather(*self._orphans, return_exceptions=True)
        await self.inner.aclose()


def retrieved_when_done(future: asyncio.Future[Any]) -> None:
    """Have `future`'s outcome taken when it comes: work left to finish on its own, whose failure nobody awaits,
    is not then logged as an exception never retrieved."""
    future.add_done_callback(lambda done: done.cancelled() or done.exception())
