"""Small helpers for running coroutines together and failing as one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")


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
