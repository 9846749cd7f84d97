"""One sync per target at a time on this machine: an exclusive lock file per target repository prefix
(registry + namespace), held for the whole run. A second run waits for it, up to `lock_timeout`."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import re
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from mirror.engine.jobs import ReleaseJob
from mirror.settings import MirrorSettings

log = logging.getLogger("mirror")
POLL_SECONDS = 0.2


class LockTimeout(Exception):
    pass


def lock_path(settings: MirrorSettings, registry: str, namespace: str) -> Path:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", f"{registry}_{namespace}")
    return (settings.lock_dir or Path(tempfile.gettempdir()) / "mirror-locks") / f"{name}.lock"


@asynccontextmanager
async def target_locks(settings: MirrorSettings, jobs: list[ReleaseJob], enabled: bool = True) -> AsyncIterator[None]:
    paths = sorted({lock_path(settings, t.registry, t.namespace) for job in jobs for t in job.targets})
    held: list[int] = []
    try:
        if enabled:
            for path in paths:  # always in the same order: two runs never wait on each other in a circle
                held.append(await _acquire(path, settings.lock_timeout))
        yield
    finally:
        for fd in held:
            os.close(fd)  # closing the descriptor releases the lock


async def _acquire(path: Path, wait_limit: float) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    started = time.monotonic()
    announced = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        except BlockingIOError:
            if time.monotonic() - started >= wait_limit:
                os.close(fd)
                raise LockTimeout(
                    f"another mirror sync holds {path} (lock_timeout {wait_limit:.0f} s passed)"
                ) from None
            if not announced:
                log.warning("waiting for another mirror sync of the same target (%s)", path)
                announced = True
            await asyncio.sleep(POLL_SECONDS)
