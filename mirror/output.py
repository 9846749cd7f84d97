"""The files a run writes (values, RBAC, a chart's .tgz): all files of one delivery or none, and the output
directory checked before a run sends its first request, so a copy is never made only to fail at the end."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from mirror.errors import Kind, MirrorError

MIN_FREE_BYTES = 32 * 1024 * 1024  # a delivery is a few values files and a chart archive of a few MB


class OutputError(MirrorError):
    """The output directory cannot take the run's files; the message says which and why."""

    kind = Kind.UNAVAILABLE


def check_writable(directory: Path, what: str, min_free: int = MIN_FREE_BYTES) -> None:
    """`directory` is (or can be made) a directory that takes a file and has `min_free` bytes free. Leaves
    nothing behind: folders made for the check are removed again."""
    made: list[Path] = []
    try:
        made = _make_parents(directory)
        fd, probe = tempfile.mkstemp(prefix=".mirror-probe-", dir=directory)
        try:
            os.write(fd, b"probe")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
        free = shutil.disk_usage(directory).free
    except OSError as exc:
        raise OutputError(f"{what} {directory}: cannot write there: {exc.strerror or exc}") from None
    finally:
        for folder in reversed(made):
            _remove_if_empty(folder)
    if free < min_free:
        raise OutputError(f"{what} {directory}: {free // 1024**2} MB free, a run needs {min_free // 1024**2} MB")


def write_all(files: Mapping[Path, str | bytes]) -> None:
    """Write every file or none: each goes to a temporary file beside its destination, and only when all are
    written and flushed are they renamed into place (a rename takes no space and does not fail on a full
    disk; a process killed between two renames leaves some files of the new delivery beside some of the
    old). On failure the temporary files and the directories made for them are removed. Files get the mode a
    plain `open` would give them (0666 less the umask), not the temporary file's 0600."""
    made: list[Path] = []
    pending: list[tuple[str, Path]] = []
    mode = 0o666 & ~_umask()
    try:
        for path, content in files.items():
            made += _make_parents(path.parent)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            pending.append((tmp, path))
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(content.encode() if isinstance(content, str) else content)
                handle.flush()
                os.fsync(handle.fileno())
        for tmp, path in pending:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in pending:
            Path(tmp).unlink(missing_ok=True)
        for directory in reversed(made):
            _remove_if_empty(directory)
        raise


def _umask() -> int:
    """The process's umask, read without setting it (os.umask would change it for every thread meanwhile)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def _make_parents(directory: Path) -> list[Path]:
    """Make `directory` and its missing parents; the ones made, outermost first."""
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    directory.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))


def _remove_if_empty(directory: Path) -> None:
    with contextlib.suppress(OSError):
        directory.rmdir()
