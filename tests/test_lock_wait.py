"""A run that had to wait for a target's lock (another run held it) is told so, and asks the source's tags anew:
what it learnt before the wait (a guessed chart tag's HEAD) may have changed while the other run copied."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import push_multiarch
from mirror.engine.clients import Clients
from mirror.engine.jobs import ReleaseJob
from mirror.engine.lock import FileLock, lock_dir, lock_name, target_locks
from mirror.settings import load_settings
from tests.support import write_config
from tests.test_proxy import Unreachable


async def test_the_locks_say_whether_the_run_had_to_wait(tmp_path: Path) -> None:
    settings = load_settings(write_config(tmp_path / "mirror.yaml", Unreachable(), [Unreachable()]))
    target = settings.targets[0]
    jobs = [ReleaseJob("v2.10.0", (), (target,))]

    async with target_locks(settings, jobs) as waited:
        assert waited is False  # free: taken at the first try

    holder = FileLock(lock_dir(settings) / lock_name(target.registry, target.namespace))
    assert await holder.try_acquire()  # another run's

    async def let_go() -> None:
        await asyncio.sleep(1)
        await holder.close()

    releasing = asyncio.create_task(let_go())
    async with target_locks(settings, jobs) as waited:
        assert waited is True
    await releasing


async def test_a_tag_pushed_after_it_was_asked_is_found_once_the_tags_are_forgotten(
    tmp_path: Path, source: LocalRegistry
) -> None:
    """Debian's registry: the tag asked before it is pushed is not there, and stays so for the run's memo until the
    memo is dropped, as a run drops it after a wait for its lock."""
    settings = load_settings(write_config(tmp_path / "mirror.yaml", source, [Unreachable()]))
    async with Clients(settings) as clients:
        assert await clients.head_tag(source.host, "projecthami/hami", "v2.10.0") is None
        pushed = await push_multiarch(clients[source.host], "projecthami/hami", "v2.10.0", seed=3)
        assert await clients.head_tag(source.host, "projecthami/hami", "v2.10.0") is None  # the run's memo
        clients.forget_tags()
        found = await clients.head_tag(source.host, "projecthami/hami", "v2.10.0")
    assert found is not None and found.digest == pushed.digest
