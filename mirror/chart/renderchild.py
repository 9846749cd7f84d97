"""Helm in a process of its own, both ends. A chart's templates are untrusted code (`range until` loops, nested,
cost what they like), and Helm's Go SDK in-process, through ctypes, can be neither interrupted nor kept from
aborting the whole process when Go runs out of memory. So `render.py` renders through `run`: this module run as
a child, in its own process group, its stdout read up to a limit, the group killed at the wall-clock bound; the
child limits its own address space, CPU time and core size before Helm is loaded, so Go starts inside them.

    python -m mirror.chart.renderchild sdk MEMORY CPU_SECONDS
        stdin: one line of JSON ({"values", "options", "max_output"}), then the chart's .tgz bytes.
        stdout: one JSON object: {"helm": version, "manifests": {template: text}}, {"error": Helm's message},
        {"over": bytes of JSON} (more than max_output), or {"unavailable": why helm-python-sdk does not load}.
    python -m mirror.chart.renderchild exec MEMORY CPU_SECONDS COMMAND...
        COMMAND (a `helm template`) run in the child's place, under the same limits.

Only the standard library is imported, so the child starts in tens of milliseconds."""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal

THREADS = 2  # GOMAXPROCS: threads (each a stack and a malloc arena of address space) as on any machine
# the child's environment besides ours: a fixed thread count, and glibc's malloc arenas (64 MB of address space
# each) fixed with it, so a memory bound means the same on a 2-core laptop and a 64-core node
ENVIRONMENT = {"GOMAXPROCS": str(THREADS), "MALLOC_ARENA_MAX": str(THREADS)}
CPU_GRACE = 2  # seconds of CPU between SIGXCPU and SIGKILL, should SIGXCPU be handled and ignored
STDERR_KEPT = 64 * 1024  # of the child's stderr: a Go runtime's dump can be long
POLL_SECONDS = 0.05  # how often the wall clock and the output limit are checked while the child runs
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when the thread that started it ends
# how a child out of address space ends: Go's runtime, a thread it cannot start, Python in the child
OUT_OF_MEMORY = (b"out of memory", b"cannot allocate", b"failed to reserve", b"pthread_create failed", b"MemoryError")


# --- the parent's end ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ended:
    """How the child ended."""

    returncode: int  # negative: the signal that ended it
    stdout: bytes  # at most max_output bytes of it
    stderr: bytes  # at most STDERR_KEPT bytes of it
    killed: Literal["time", "output"] | None  # killed by `run`: at the wall-clock bound, or for its output's size

    @property
    def out_of_memory(self) -> bool:
        return self.returncode != 0 and any(sign in self.stderr for sign in OUT_OF_MEMORY)

    @property
    def first_line(self) -> str:
        lines = self.stderr.decode("utf-8", "replace").strip().splitlines()
        return lines[0] if lines else ""


def run(message: bytes, seconds: float, memory: int, max_output: int, command: Sequence[str] = ()) -> Ended:
    """The SDK render of `message` (or `command`, exec'd in the child) under `memory` bytes of address space and
    `cpu_seconds(seconds)` of CPU, killed with its whole process group after `seconds` or as soon as its stdout
    passes `max_output` bytes."""
    mode = ["exec", *command] if command else ["sdk"]
    arguments = [mode[0], str(memory), str(cpu_seconds(seconds)), *mode[1:]]
    process = subprocess.Popen(
        [sys.executable, "-m", "mirror.chart.renderchild", *arguments],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=_environment(),
    )
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    stdout, stderr = _Capped(process.stdout, max_output), _Capped(process.stderr, STDERR_KEPT)
    workers = [
        threading.Thread(target=_feed, args=(process.stdin, message), daemon=True),
        threading.Thread(target=stdout.drain, daemon=True),
        threading.Thread(target=stderr.drain, daemon=True),
    ]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + seconds
    killed: Literal["time", "output"] | None = None
    try:
        while killed is None:
            try:
                process.wait(timeout=POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                killed = "output" if stdout.over else "time" if time.monotonic() >= deadline else None
    finally:
        if process.returncode is None:  # not reaped yet, so the group id cannot be anyone else's
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    for worker in workers:
        worker.join(timeout=5)  # the pipes close with the group
    if killed is None and stdout.over:
        killed = "output"
    return Ended(process.returncode, stdout.kept(), stderr.kept(), killed)


def cpu_seconds(seconds: float) -> int:
    """The child's CPU time: as if each of its threads ran for the whole wall-clock bound, so the wall clock ends
    a loop first while the parent lives (the CPU limit when it does not, or when mirror runs under a lower one)."""
    return math.ceil(seconds * THREADS)


def effective_limit(kind: int, ours: int) -> int:
    """What the child ends up with (`_lower`): our limit, or the one this process runs under when lower."""
    soft, _ = resource.getrlimit(kind)
    return ours if soft == resource.RLIM_INFINITY else min(ours, soft)


def _environment() -> dict[str, str]:
    package_root = str(Path(__file__).resolve().parents[2])  # so `-m mirror.chart.renderchild` works from any cwd
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, **ENVIRONMENT, "PYTHONPATH": path}


def _feed(pipe: IO[bytes], message: bytes) -> None:
    try:
        with pipe:
            pipe.write(message)
    except OSError:  # BrokenPipeError: the child ended (or was killed) before reading it all
        pass


class _Capped:
    """A pipe read to its end, keeping its first `limit` bytes; `over` once more than that came."""

    def __init__(self, pipe: IO[bytes], limit: int) -> None:
        self._pipe = pipe
        self._limit = limit
        self._chunks: list[bytes] = []
        self._size = 0

    @property
    def over(self) -> bool:
        return self._size > self._limit

    def drain(self) -> None:
        with self._pipe:
            while chunk := self._pipe.read(64 * 1024):
                if self._size < self._limit:
                    self._chunks.append(chunk[: self._limit - self._size])
                self._size += len(chunk)

    def kept(self) -> bytes:
        return b"".join(self._chunks)


# --- the child's end -----------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    mode, memory, cpu, command = argv[0], int(argv[1]), int(argv[2]), argv[3:]
    limit_self(memory, cpu)
    try:
        if mode == "exec":
            os.execvp(command[0], command)  # noqa: S606 - a helm binary found on PATH, its arguments a list
        answer = render(sys.stdin.buffer)
    except Exception as exc:  # MemoryError included: one line for the parent, not a traceback
        print(f"renderchild: {type(exc).__name__}: {exc}".replace("\n", " "), file=sys.stderr)
        return 1
    sys.stdout.buffer.write(answer)
    sys.stdout.flush()
    return 0


def limit_self(memory: int, cpu: int) -> None:
    """The bounds, only ever lowered: a limit mirror itself runs under (`prlimit`, `ulimit`) stays when lower."""
    _lower(resource.RLIMIT_AS, memory, memory)
    _lower(resource.RLIMIT_CPU, cpu, cpu + CPU_GRACE)
    _lower(resource.RLIMIT_CORE, 0, 0)  # SIGXCPU dumps core by default: not a 2 GB core file in the cwd
    # the parent dies (a killed service): so does this render, without waiting for its CPU bound
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no prctl, not Linux
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _lower(kind: int, soft: int, hard: int) -> None:
    current_soft, current_hard = resource.getrlimit(kind)
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
    if current_soft != resource.RLIM_INFINITY:
        soft = min(soft, current_soft)
    resource.setrlimit(kind, (min(soft, hard), hard))


def render(stdin: BinaryIO) -> bytes:
    header = json.loads(stdin.readline())
    archive = stdin.read()
    try:
        import helm_python
        from helm_python import _native
    except MemoryError:
        raise
    except Exception as exc:  # ImportError, OSError, helm_python's HelmLibraryError: its library does not load
        return _json({"unavailable": f"{type(exc).__name__}: {exc}"})
    try:
        with helm_python.Chart.load_archive(archive) as chart:
            payload = _native.call_string(
                "helm_render", chart._raw(), json.dumps(header["values"]), json.dumps(header["options"])
            )
    except helm_python.HelmError as exc:
        return _json({"error": str(exc)})
    manifests = payload.encode()  # Helm's own JSON (template -> text), passed on as it is, not decoded again
    if len(manifests) > header["max_output"]:
        return _json({"over": len(manifests)})
    return b'{"helm": ' + json.dumps(helm_python.helm_sdk_version()).encode() + b', "manifests": ' + manifests + b"}"


def _json(answer: dict[str, Any]) -> bytes:
    return json.dumps(answer).encode()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
