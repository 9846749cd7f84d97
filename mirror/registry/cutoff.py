"""An upload's body that its caller's cancellation cuts off.

Under the cancel-safe transport a cancelled request runs on to its answer (cancelsafe.py). For an upload step
whose body streams from a source that is the wrong way round: the PUT or PATCH goes on feeding the session for
as long as the source keeps sending, and a DELETE of the session sent meanwhile is undone by the writes still
arriving (distribution puts the session's files back). Here the caller's cancellation ends the body at once:
the source read is cancelled, the request fails with `BodyCut` (its connection closed, the registry sees the
upload stop) and the caller may then cancel the session for good."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from mirror.registry.cancelsafe import retrieved_when_done

T = TypeVar("T")


class BodyCut(Exception):
    """The request's body was cut off: whoever sent it was cancelled."""


async def send_cuttable(
    send: Callable[[AsyncIterable[bytes]], Awaitable[T]], body: AsyncIterable[bytes], wait: float
) -> T:
    """`send(body)`, whose body is cut off if the caller is cancelled; the cancellation goes on once the
    request has ended, or after `wait` seconds."""
    cut = asyncio.Event()
    sending = asyncio.ensure_future(send(_until(cut, body)))
    try:
        return await asyncio.shield(sending)
    except asyncio.CancelledError:
        cut.set()
        try:
            await asyncio.wait([sending], timeout=wait)
        finally:  # cancelled again meanwhile too (a runner's stop, a third Ctrl-C)
            retrieved_when_done(sending)
        raise


async def _until(cut: asyncio.Event, body: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    pieces = aiter(body)
    stop = asyncio.ensure_future(cut.wait())
    try:
        while True:
            data = await _next_unless_cut(pieces, stop)
            if data is None:
                return
            yield data
            del data  # not held while the next is read: a chunk in memory at a time per upload
    finally:
        stop.cancel()


async def _next_unless_cut(pieces: AsyncIterator[bytes], stop: asyncio.Future[Any]) -> bytes | None:
    """The next piece of the body (None at its end), unless `stop` comes first: then the read is cancelled."""
    piece = asyncio.ensure_future(_next(pieces))
    await asyncio.wait([piece, stop], return_when=asyncio.FIRST_COMPLETED)
    if not piece.done():
        piece.cancel()
        await asyncio.wait([piece])
        raise BodyCut("the upload's sender was cancelled")
    return piece.result()


async def _next(pieces: AsyncIterator[bytes]) -> bytes | None:
    try:
        return await anext(pieces)
    except StopAsyncIteration:
        return None
