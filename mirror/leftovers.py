"""Files a killed write left behind (a temporary never renamed into place, an old file kept aside for an undo),
removed when a later write to the same place succeeds: nothing else would, and a state volume or an output
folder gathers one at each SIGKILL (the OOM killer, a failed liveness probe). Only files untouched for
LEFTOVER_SECONDS go, so a write under way in another process is never taken for one."""

from __future__ import annotations

import contextlib
import stat
import time
from pathlib import Path

LEFTOVER_SECONDS = 3600.0


def sweep(directory: Path, patterns: tuple[str, ...]) -> int:
    """Remove the regular files in `directory` matching any of `patterns` that no one has written or linked for
    LEFTOVER_SECONDS (their ctime too: a hard link kept aside has an old file's mtime); how many went."""
    removed = 0
    now = time.time()
    for pattern in patterns:
        for path in directory.glob(pattern):
            with contextlib.suppress(OSError):
                seen = path.lstat()
                untouched = now - max(seen.st_mtime, seen.st_ctime) >= LEFTOVER_SECONDS
                if untouched and stat.S_ISREG(seen.st_mode):
                    path.unlink()
                    removed += 1
    return removed
