"""Run a command and measure it: wall time and peak resident memory (VmHWM, read from /proc while it
runs: a forked child's own rusage would also count the pages it shared with its parent before exec)."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Measured:
    returncode: int
    seconds: float
    peak_rss_mb: float
    stderr: str


def run_measured(command: list[str], poll: float = 0.01) -> Measured:
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    status = Path(f"/proc/{process.pid}/status")
    peak_kb = 0
    while process.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak_kb = max(peak_kb, int(line.split()[1]))
        except (OSError, ValueError):
            pass
        time.sleep(poll)
    seconds = time.monotonic() - started
    stderr = process.stderr.read() if process.stderr else ""
    return Measured(process.returncode, seconds, peak_kb / 1024, stderr)
