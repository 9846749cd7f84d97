"""A file touched every few seconds while the service's event loop turns (`service.heartbeat_file`), whose age
the Deployment's liveness probe reads. An HTTP probe would share the webhook port's connection limit (anyone
holding the connections would have the pod restarted, its running job with it); a TCP connect is accepted by
the kernel even while the loop hangs. The file goes stale exactly when the loop stops turning."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("mirror.service")
HEARTBEAT_SECONDS = 5.0


async def beat(path: Path, every: float = HEARTBEAT_SECONDS, running: Callable[[], bool] = lambda: True) -> None:
    """Touch `path` every `every` seconds until cancelled, while `running()` (the job runner is running: a
    service whose runner ended serves webhooks that no one runs, and must be restarted); a file that cannot be
    written is said once."""
    failing = False
    while running():
        try:
            # on the loop itself (microseconds on an emptyDir): a worker thread would tie the beat to the shared
            # pool, which a slow database can fill while the loop turns
            path.touch()  # noqa: ASYNC240
        except OSError as exc:
            if not failing:
                log.warning("heartbeat file %s cannot be written: %s", path, exc.strerror or exc)
            failing = True
        else:
            failing = False
        await asyncio.sleep(every)
    log.error("the job runner has stopped: the heartbeat stops with it, so the liveness probe restarts the service")
