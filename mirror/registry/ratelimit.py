"""Docker Hub's pull budget: `ratelimit-limit: 100;w=21600` and `ratelimit-remaining: 97;w=21600`."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx

from mirror.untrusted import is_number

log = logging.getLogger("mirror")


@dataclass(frozen=True, slots=True)
class RateLimit:
    remaining: int
    limit: int | None
    window_seconds: int | None

    def to_json(self) -> dict[str, int | None]:
        return {"remaining": self.remaining, "limit": self.limit, "window_seconds": self.window_seconds}

    def __str__(self) -> str:
        total = f" of {self.limit}" if self.limit is not None else ""
        window = f" per {self.window_seconds} s" if self.window_seconds else ""
        return f"{self.remaining}{total} pulls left{window}"


def _parse(value: str) -> tuple[int, int | None] | None:
    count, _, params = value.partition(";")
    if not is_number(count.strip()):
        return None
    window = None
    for param in params.split(";"):
        key, _, number = param.strip().partition("=")
        if key == "w" and is_number(number):
            window = int(number)
    return int(count.strip()), window


def read_rate_limit(response: httpx.Response) -> RateLimit | None:
    remaining = _parse(response.headers.get("ratelimit-remaining", ""))
    if remaining is None:
        return None
    limit = _parse(response.headers.get("ratelimit-limit", ""))
    return RateLimit(remaining[0], limit[0] if limit else None, remaining[1] or (limit[1] if limit else None))
