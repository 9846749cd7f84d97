"""Run a command and measure it: wall time and peak resident memory (VmHWM, read from /proc while it
runs: a forked child's own rusage would also count the pages it shared with its parent before exec)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Measured:
    returncode: int
    seconds: float
    peak_rss_mb: float
    stderr: str


def run_measured(command: list[str], poll: float = 0.01, timeout: float | None = None) -> Measured:
    """Run `command` to its end. Its stderr goes to a file, not a pipe: a run that logs more than a pipe holds
    (64 KiB) would otherwise block on it while nobody reads until it exits. A run still going after `timeout`
    seconds is killed with its process group: subprocess.TimeoutExpired, with the stderr it wrote."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=errors, start_new_session=timeout is not None
        )
        deadline = None if timeout is None else started + timeout
        try:
            peak_kb = _watch(process, Path(f"/proc/{process.pid}/status"), poll, deadline)
        except subprocess.TimeoutExpired as expired:
            errors.seek(0)
            expired.stderr = errors.read()
            raise
        seconds = time.monotonic() - started
        errors.seek(0)
        stderr = errors.read().decode("utf-8", errors="replace")
    return Measured(process.returncode, seconds, peak_kb / 1024, stderr)


def _watch(process: subprocess.Popen[bytes], status: Path, poll: float, deadline: float | None) -> int:
    """The highest VmHWM (kB) seen while the process runs; past `deadline`, its process group is killed."""
    peak_kb = 0
    while process.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak_kb = max(peak_kb, int(line.split()[1]))
        except (OSError, ValueError):
            pass
        if deadline is not None and time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise subprocess.TimeoutExpired(process.args, deadline)
        time.sleep(poll)
    return peak_kb
