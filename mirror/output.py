"""The files a run writes (values, RBAC, a chart's .tgz): all files of one delivery or none, and the output
directory checked before a run sends its first request, so a copy is never made only to fail at the end."""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from mirror.errors import Kind, MirrorError
from mirror.leftovers import sweep

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
    """Write every file or none. Each destination must be absent or a regular file (anything else in the way is
    refused before a byte is written). Each file goes to a temporary file beside its destination, and only when
    all are written and flushed are they renamed into place (a rename takes no space and does not fail on a full
    disk). Each file a rename replaces is kept under a second name until every rename has succeeded: if one
    fails, the files already renamed are taken back out and the old ones put back, so the delivery's files are
    all new or all old (a process killed between two renames still leaves some of each, and the second names).
    On failure the temporary files and the directories made for them are removed. Files get the mode a plain
    `open` would give them (0666 less the umask), not the temporary file's 0600."""
    for path in files:
        _check_destination(path)
    made: list[Path] = []
    pending: list[tuple[str, Path]] = []
    mode = 0o666 & ~_umask()
    try:
        for path, content in files.items():
            made += _make_parents(path.parent)
            pending.append((_write_temporary(path, content, mode), path))
        _rename_all(pending)
    except BaseException:
        for tmp, _ in pending:
            Path(tmp).unlink(missing_ok=True)
        for directory in reversed(made):
            _remove_if_empty(directory)
        raise


def _check_destination(path: Path) -> None:
    """`path` is absent or a regular file, so renaming a new file over it replaces only an old file."""
    try:
        mode = path.lstat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISREG(mode):
        what = "a directory" if stat.S_ISDIR(mode) else "a symbolic link" if stat.S_ISLNK(mode) else "not a file"
        raise OutputError(
            f"{path} is {what}, where this delivery writes a file: move it away (or remove it) and run again"
        )


def _write_temporary(path: Path, content: str | bytes, mode: int) -> str:
    """`content` flushed to a new temporary file beside `path`, with `mode`; its name."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(content.encode() if isinstance(content, str) else content)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _rename_all(pending: list[tuple[str, Path]]) -> None:
    """Each temporary file onto its destination, the old file kept aside until all are in place; on a failure,
    every destination already renamed gets its old file back (or is removed, where there was none)."""
    undo: list[tuple[Path, Path | None]] = []  # a destination, and where its old file is kept (None: it had none)
    try:
        for tmp, path in pending:
            old = _keep_aside(path)
            if old is not None:
                undo.append((path, old))
            os.replace(tmp, path)
            if old is None:
                undo.append((path, None))
    except BaseException:
        for path, old in reversed(undo):
            _put_back(path, old)
        raise
    for _, old in undo:
        if old is not None:
            old.unlink(missing_ok=True)
    for _, path in pending:  # what a killed write of the same file left: its temporary, its old file kept aside
        sweep(path.parent, (f".{glob.escape(path.name)}.{'?' * 8}", f".{glob.escape(path.name)}.{'?' * 12}.old"))


def _keep_aside(path: Path) -> Path | None:
    """A second name for the file at `path` (None when there is none): a hard link, so the destination is never
    missing; where the file system has none, the file itself is moved aside."""
    if not os.path.lexists(path):
        return None
    aside = path.with_name(f".{path.name}.{secrets.token_hex(6)}.old")
    try:
        os.link(path, aside)
    except OSError:
        os.rename(path, aside)
    return aside


def _put_back(path: Path, old: Path | None) -> None:
    """Undo one rename: the old file back at `path`, or the new one removed where there was no old one. An undo
    that fails leaves the old file under its second name rather than losing it."""
    with contextlib.suppress(OSError):
        if old is None:
            path.unlink(missing_ok=True)
        else:
            os.replace(old, path)


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
