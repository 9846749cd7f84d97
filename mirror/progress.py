"""Progress for long copies: a redrawn status line on a terminal, plain log lines otherwise."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TextIO

log = logging.getLogger("mirror")


LOG_EVERY = 30.0  # seconds between the log lines of a long copy (no terminal: a CronJob's, a service's log)


class Progress:
    """Counts bytes moved and tells the user what is happening, in log lines: the events, and while bytes move,
    how far the copy is every `every` seconds."""

    def __init__(self, every: float = LOG_EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        self.total_bytes = 0
        self.done_bytes = 0
        self._every, self._clock = every, clock
        self._since = clock()
        self._last_logged = (self._since, 0)  # when, and how many bytes were done then

    def event(self, message: str) -> None:
        log.info("%s", message)

    def expect(self, size: int) -> None:
        self.total_bytes += size

    def advance(self, size: int) -> None:
        self.done_bytes += size
        now = self._clock()
        when, done = self._last_logged
        if now - when >= self._every and self.total_bytes:
            rate = (self.done_bytes - done) / (now - when) / 1e6
            percent = 100 * self.done_bytes / self.total_bytes
            log.info(
                "copying: %.1f of %.1f MB (%.0f%%), %.1f MB/s",
                self.done_bytes / 1e6,
                self.total_bytes / 1e6,
                percent,
                rate,
            )
            self._last_logged = (now, self.done_bytes)

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
        self.done_bytes += size  # the line redrawn says it: no log lines
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
