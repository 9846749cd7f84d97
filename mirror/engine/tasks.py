"""Small helpers for running coroutines together and failing as one, and for work started once and shared."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


def started(work: Awaitable[T]) -> asyncio.Task[T]:
    """`work` under way; its failure is kept for whoever awaits it, and dropped quietly if nobody does."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_dropped_unless_read)
    return task


def memoised(table: dict[K, asyncio.Task[T]], key: K, start: Callable[[], Awaitable[T]]) -> asyncio.Task[T]:
    """The task for `key`: started by the first caller, shared by every other."""
    task = table.get(key)
    if task is None:
        task = table[key] = started(start())
    return task


def _dropped_unless_read(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


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
