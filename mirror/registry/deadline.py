"""A whole request within a deadline: its retries, its request body and its answer's body together.

A read timeout bounds one wait for the next bytes; a peer that sends a byte just inside it each time can hold a
request forever. This layer, outermost, gives each request `deadline` seconds, plus the time its bodies take
at `min_rate` bytes per second (the request body's declared length, the answer's declared length, else what
has arrived so far), so large blobs are bounded by their size and a trickle by the deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx

from mirror.untrusted import is_number


class DeadlineExceeded(httpx.TimeoutException):
    """A request, or its answer's body, took longer than its deadline."""


def _declared(headers: httpx.Headers) -> int:
    value = headers.get("Content-Length", "")
    return int(value) if is_number(value) and len(value) < 19 else 0


class DeadlineTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, deadline: float, min_rate: int) -> None:
        self.inner = inner
        self.deadline = deadline
        self.min_rate = min_rate

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        started = time.monotonic()
        allowed = self.deadline + _declared(request.headers) / self.min_rate
        try:
            async with asyncio.timeout(allowed):
                response = await self.inner.handle_async_request(request)
        except TimeoutError:
            raise DeadlineExceeded(f"no answer within its {allowed:.0f} s deadline", request=request) from None
        if response.is_stream_consumed:
            return response  # read already, within the deadline (the retries read small bodies)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        body = _DeadlineStream(response.stream, request, started + allowed, _declared(response.headers), self.min_rate)
        return httpx.Response(
            response.status_code, headers=response.headers, stream=body, extensions=response.extensions
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class _DeadlineStream(httpx.AsyncByteStream):
    def __init__(
        self, inner: httpx.AsyncByteStream, request: httpx.Request, due: float, declared: int, min_rate: int
    ) -> None:
        self.inner = inner
        self.request = request
        self.due = due + declared / min_rate
        self.grows = declared == 0  # no length given: each byte that arrives earns its time
        self.min_rate = min_rate

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self.inner.__aiter__()
        while True:
            remaining = self.due - time.monotonic()
            try:
                async with asyncio.timeout(max(remaining, 0)):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise DeadlineExceeded(
                    "the answer's body did not arrive within its deadline", request=self.request
                ) from None
            if self.grows:
                self.due += len(chunk) / self.min_rate
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()
