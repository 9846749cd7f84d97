"""Structured logs: one JSON object a line, with the job id of the job being run. A message is one line of at
most `MAX_MESSAGE_CHARS`, whatever outside text reached it; a problem of several lines (a config file's, a line
a key) is logged by `error_lines` as one record a line."""

from __future__ import annotations

import contextvars
import json
import logging
import time

from mirror.untrusted import clip

MAX_MESSAGE_CHARS = 2000
current_job: contextvars.ContextVar[str | None] = contextvars.ContextVar("current_job", default=None)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": clip(record.getMessage(), MAX_MESSAGE_CHARS),
        }
        job = current_job.get()
        if job is not None:
            entry["job"] = job
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def error_lines(logger: logging.Logger, problem: str) -> None:
    """`problem` at error level, one record for each of its lines, so that `kubectl logs` shows them as lines and
    not as one line with `\\n` in it. Under a heading (a first line ending in ':', as a config file's problems
    are), each record is the heading and its line: it reads alone. Split at newlines only: any other control
    character is escaped by the formatter, as in every message."""
    lines = [line.strip(" ") for line in problem.split("\n")]
    lines = [line for line in lines if line] or [""]
    heading, rest = lines[0], lines[1:]
    if rest and heading.endswith(":"):
        for line in rest:
            logger.error("%s %s", heading, line)
    else:
        for line in lines:
            logger.error("%s", line)


def configure() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for noisy in ("httpx", "httpcore", "apscheduler.executors.default"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
