"""The process meter the benchmark and the memory tests use: a chatty run is not blocked on its stderr."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mirror.demo.procstat import run_measured


def test_a_run_that_logs_more_than_a_pipe_holds_is_measured_to_its_end() -> None:
    script = "import sys; sys.stderr.write('log line\\n' * 40_000); sys.exit(3)"  # 320 KB: five pipes' worth
    measured = run_measured([sys.executable, "-c", script], poll=0.05)
    assert measured.returncode == 3
    assert measured.stderr.count("log line\n") == 40_000


def test_a_run_past_its_timeout_is_killed_with_what_it_wrote() -> None:
    script = "import sys, time; sys.stderr.write('started\\n'); sys.stderr.flush(); time.sleep(120)"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as expired:
        run_measured([sys.executable, "-c", script], poll=0.05, timeout=3)
    assert time.monotonic() - started < 60  # killed, not waited out
    assert expired.value.stderr == b"started\n"
