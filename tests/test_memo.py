"""The run's memo of answers (`tasks.memoised`): a passing failure is asked again by a later caller, a refusal is
not (a later release of a discovery run would download a corrupt blob again, or ask a refused manifest again)."""

from __future__ import annotations

import asyncio

import pytest

from mirror.engine.tasks import memoised
from mirror.registry import RegistryError


async def asked_twice(error: RegistryError) -> int:
    table: dict[str, asyncio.Future[str]] = {}
    calls = 0

    async def ask() -> str:
        nonlocal calls
        calls += 1
        raise error

    for _ in range(2):  # one release, then a later one
        with pytest.raises(RegistryError):
            await memoised(table, "key", ask)
    return calls


@pytest.mark.parametrize(("status", "calls"), [(503, 2), (429, 2), (403, 1), (404, 1)])
async def test_only_a_passing_failure_is_asked_again(status: int, calls: int) -> None:
    assert await asked_twice(RegistryError("fetch blob", "r/x", status)) == calls
