"""Small helpers for running coroutines together and failing as one, and for work started once and shared."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from typing import Any, TypeVar

from mirror.errors import Kind, MirrorError

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


def started(work: Awaitable[T]) -> asyncio.Task[T]:
    """`work` under way; its failure is kept for whoever awaits it, and dropped quietly if nobody does."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_dropped_unless_read)
    return task


def memoised(table: dict[K, asyncio.Future[T]], key: K, start: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
    """The answer for `key`: started by the first caller, shared by every caller while it is under way. An
    answer is kept once it succeeded, or failed for good; a passing failure (`Kind.UNAVAILABLE`: the network, a
    registry's 5xx or 429) only for those who waited for it: a later caller (a later release of the run, say)
    starts the work again, as the registry may answer by then. A refusal, bytes that came wrong or a cancelled
    answer are kept (what a shutdown cancelled is not started again). Once the work is done, its entry is a bare
    future holding the outcome: a run keeps thousands of answers, and a finished task with its coroutine costs
    four times the memory."""
    answer = table.get(key)
    if answer is None or _passing_failure(answer):
        answer = table[key] = started(start())
        answer.add_done_callback(functools.partial(_settle, table, key))
    return answer


async def asked_again_if_failed(table: dict[K, asyncio.Future[T]], key: K, ask: Callable[[], Awaitable[T]]) -> T:
    """`memoised`'s shared answer, where one that was cancelled is not kept either: the next caller asks again.
    The caller's own cancellation leaves the shared work running for the others."""
    answer = table.get(key)
    if answer is not None and answer.done() and answer.cancelled():
        del table[key]
    return await asyncio.shield(memoised(table, key, ask))


def _passing_failure(answer: asyncio.Future[Any]) -> bool:
    if not answer.done() or answer.cancelled():
        return False
    error = answer.exception()
    return isinstance(error, MirrorError) and error.kind is Kind.UNAVAILABLE


def cancel_all(*tables: Mapping[Any, asyncio.Future[Any]]) -> None:
    """Cancel what is still under way in memo tables (a settled answer ignores it)."""
    for table in tables:
        for answer in table.values():
            answer.cancel()


def _settle(table: dict[K, asyncio.Future[T]], key: K, task: asyncio.Future[T]) -> None:
    if task.cancelled() or table.get(key) is not task:
        return
    settled: asyncio.Future[T] = task.get_loop().create_future()
    error = task.exception()
    if error is None:
        settled.set_result(task.result())
    else:
        settled.set_exception(error)
        settled.exception()  # read, as `started` reads the task's: nobody may ask for it
    table[key] = settled


def _dropped_unless_read(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def gather_then_raise(awaitables: Iterable[Awaitable[T]]) -> list[T]:
    """Run all to their end, then raise the first failure. For writes to a registry that must neither be cut
    short by a sibling's failure nor outlive their caller (the run closes its clients and locks after it)."""
    results = await asyncio.gather(*awaitables, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]  # no failures: every result is a T


async def gather_or_raise(awaitables: Iterable[Awaitable[T]]) -> list[T]:
    """Run all, cancel the rest at the first failure, and raise that failure itself (not a group)."""
    tasks: list[asyncio.Task[T]] = []
    try:
        async with asyncio.TaskGroup() as group:
            for awaitable in awaitables:
                tasks.append(group.create_task(_await(awaitable)))
    except BaseExceptionGroup as group_error:
        raise _first_leaf(group_error) from None
    return [task.result() for task in tasks]


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _first_leaf(error: BaseExceptionGroup[BaseException]) -> BaseException:
    first = error.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first
