from __future__ import annotations

import io
import logging

import pytest

from mirror.progress import Progress, TerminalProgress, progress_for


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_gets_a_redrawn_status_line() -> None:
    screen = FakeTerminal()
    progress = progress_for(screen)
    assert isinstance(progress, TerminalProgress)
    progress.event("hami:v2.10.0 -> hz: push 5 manifest(s)")
    progress.expect(4_000_000)
    progress.advance(1_000_000)
    progress.close()
    text = screen.getvalue()
    assert "hami:v2.10.0 -> hz: push 5 manifest(s)\n" in text
    assert "1.0 / 4.0 MB  ( 25.0%)" in text
    assert "\r\x1b[K" in text


def test_plain_logs_when_not_a_terminal() -> None:
    progress = progress_for(io.StringIO())
    assert type(progress) is Progress
    progress.expect(10)
    progress.advance(10)
    assert progress.done_bytes == progress.total_bytes == 10


def test_a_long_copy_without_a_terminal_logs_how_far_it_is_every_interval(caplog: pytest.LogCaptureFixture) -> None:
    """A CronJob's or the service's log said "push ..." and then nothing until "copied", minutes later."""
    caplog.set_level(logging.INFO, logger="mirror")
    now = [0.0]
    progress = Progress(every=30, clock=lambda: now[0])
    progress.expect(200_000_000)
    for _ in range(10):  # 10 MB every 10 s
        now[0] += 10
        progress.advance(10_000_000)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("copying:")]
    assert lines == [
        "copying: 30.0 of 200.0 MB (15%), 1.0 MB/s",
        "copying: 60.0 of 200.0 MB (30%), 1.0 MB/s",
        "copying: 90.0 of 200.0 MB (45%), 1.0 MB/s",
    ]


def test_report_carries_the_source_rate_limit() -> None:
    from mirror.registry.ratelimit import RateLimit
    from mirror.report import ReleaseResult

    report = ReleaseResult("v2.10.0", source_rate_limit=RateLimit(42, 100, 21600)).to_json()
    assert report["source_rate_limit"] == {"remaining": 42, "limit": 100, "window_seconds": 21600}
    assert ReleaseResult("v2.10.0").to_json()["source_rate_limit"] is None
