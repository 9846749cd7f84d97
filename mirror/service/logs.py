"""Structured logs: one JSON object a line, with the job id of the job being run. A message is one line of at
most `MAX_MESSAGE_CHARS`, whatever outside text reached it."""

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


def configure() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for noisy in ("httpx", "httpcore", "apscheduler.executors.default"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
