"""The process meter the benchmark and the memory tests use: a chatty run is not blocked on its stderr."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mirror.demo.procstat import cpu_seconds, run_measured


def test_a_run_that_logs_more_than_a_pipe_holds_is_measured_to_its_end() -> None:
    script = "import sys; sys.stderr.write('log line\\n' * 40_000); sys.exit(3)"  # 320 KB: five pipes' worth
    measured = run_measured([sys.executable, "-c", script], poll=0.05)
    assert measured.returncode == 3
    assert measured.stderr.count("log line\n") == 40_000


def test_a_run_past_its_timeout_is_killed_with_what_it_wrote() -> None:
    # the line is the child's first act, and 15 s leaves a cold interpreter start on a loaded machine time to
    # reach it: what it wrote is kept when it is killed
    script = "import sys, time; sys.stderr.write('started\\n'); sys.stderr.flush(); time.sleep(120)"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as expired:
        run_measured([sys.executable, "-c", script], poll=0.05, timeout=15)
    assert time.monotonic() - started < 60  # killed, not waited out
    assert expired.value.stderr == b"started\n"


BURN = "import time\nwhile time.process_time() < {seconds}: pass\n"  # CPU work the child counts itself


def test_a_run_is_charged_the_cpu_it_took_and_not_the_time_it_slept() -> None:
    burnt = run_measured([sys.executable, "-c", BURN.format(seconds=0.6)], poll=0.05)
    slept = run_measured([sys.executable, "-c", "import time; time.sleep(1.5)"], poll=0.05)
    assert burnt.returncode == slept.returncode == 0
    assert burnt.cpu_seconds >= 0.5  # rusage too is sampled at clock ticks
    assert slept.cpu_seconds < 0.5 < slept.seconds


def test_the_cpu_a_running_process_has_taken_is_read_from_proc() -> None:
    script = BURN.format(seconds=0.6) + "print('burnt', flush=True)\ntime.sleep(60)\n"
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None and child.stdout.readline() == "burnt\n"
            assert 0.5 <= cpu_seconds(child.pid) < 30  # /proc counts whole clock ticks, sampled
        finally:
            child.kill()
