"""Run a command and measure it: wall time, CPU time, and peak resident memory (VmHWM, read from /proc while
it runs: a forked child's own rusage would also count the pages it shared with its parent before exec)."""

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
    cpu_seconds: float = 0.0  # user and system time of the command and of the children it waited for


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
            peak_kb, cpu_seconds = _watch(process, Path(f"/proc/{process.pid}/status"), poll, deadline)
        except subprocess.TimeoutExpired as expired:
            errors.seek(0)
            expired.stderr = errors.read()
            raise
        seconds = time.monotonic() - started
        errors.seek(0)
        stderr = errors.read().decode("utf-8", errors="replace")
    return Measured(process.returncode, seconds, peak_kb / 1024, stderr, cpu_seconds)


def _watch(process: subprocess.Popen[bytes], status: Path, poll: float, deadline: float | None) -> tuple[int, float]:
    """The highest VmHWM (kB) seen while the process runs, and the CPU seconds it took (the process is reaped
    here, with `wait4`, for its rusage); past `deadline`, its process group is killed."""
    peak_kb = 0
    while True:
        pid, wait_status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(wait_status)
            return peak_kb, usage.ru_utime + usage.ru_stime
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


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a running process has taken so far (/proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
