"""An upload's body cut off by its caller's cancellation (`registry/cutoff.py`): the request ends at once rather
than when the source's next bytes come, and a caller cancelled again while it waits for that end leaves nothing
behind: no task running on, no failure logged as never retrieved. Plain asyncio, ordered by events."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import pytest

from mirror.registry.cutoff import BodyCut, send_cuttable


async def never_sends() -> AsyncIterator[bytes]:
    """A source whose next bytes never come."""
    await asyncio.Event().wait()
    yield b""


async def test_a_caller_cancelled_twice_while_the_request_closes_leaves_no_failure_unretrieved() -> None:
    unretrieved: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: unretrieved.append(context))
    reading, closing, closed = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def send(body: AsyncIterable[bytes]) -> None:
        try:
            reading.set()
            async for _ in body:
                pass
        except BodyCut:
            await closing.wait()  # the connection takes its time to close
            closed.set()
            raise

    caller = asyncio.ensure_future(send_cuttable(send, never_sends(), wait=60))
    await reading.wait()
    caller.cancel()
    await asyncio.sleep(0)  # the first cancellation is taken: the body is cut, the caller waits for the end
    caller.cancel()  # and is cancelled again meanwhile (a runner's stop, a third Ctrl-C)
    with pytest.raises(asyncio.CancelledError):
        await caller
    closing.set()
    await closed.wait()
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if others:
        await asyncio.wait(others)  # the request's own task finishes, with its BodyCut (wait takes no outcome)
    gc.collect()
    assert unretrieved == []
