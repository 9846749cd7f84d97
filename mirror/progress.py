"""Progress for long copies: a redrawn status line on a terminal, plain log lines otherwise."""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

log = logging.getLogger("mirror")


class Progress:
    """Counts bytes moved and tells the user what is happening. The base class logs events only."""

    def __init__(self) -> None:
        self.total_bytes = 0
        self.done_bytes = 0

    def event(self, message: str) -> None:
        log.info("%s", message)

    def expect(self, size: int) -> None:
        self.total_bytes += size

    def advance(self, size: int) -> None:
        self.done_bytes += size

    def close(self) -> None:
        if self.total_bytes:
            log.info("moved %.1f MB", self.done_bytes / 1e6)


class TerminalProgress(Progress):
    """One status line on stderr, redrawn at most ten times a second; events print above it."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        super().__init__()
        self.stream = stream
        self._last_draw = 0.0

    def event(self, message: str) -> None:
        self.stream.write("\r\x1b[K" + message + "\n")
        self._draw(force=True)

    def advance(self, size: int) -> None:
        super().advance(size)
        self._draw()

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.total_bytes or (not force and now - self._last_draw < 0.1):
            return
        self._last_draw = now
        percent = 100 * self.done_bytes / self.total_bytes
        self.stream.write(
            f"\r\x1b[K  {self.done_bytes / 1e6:8.1f} / {self.total_bytes / 1e6:.1f} MB  ({percent:5.1f}%)"
        )
        self.stream.flush()

    def close(self) -> None:
        if self.total_bytes:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()


def progress_for(stream: TextIO) -> Progress:
    return TerminalProgress(stream) if stream.isatty() else Progress()
