"""Input from outside (a chart repository, a webhook, a registry's error body) read within bounds, and text
from it cut short before it reaches a message, a log line or a stored job."""

from __future__ import annotations

MAX_SHOWN = 300  # characters of someone else's text an error message may carry


def clip(text: str, limit: int = MAX_SHOWN) -> str:
    """`text` as one line of at most about `limit` characters: control characters escaped, the middle cut out
    (saying how much) when it is longer."""
    line = text.replace("\r", "\\r").replace("\n", "\\n")
    if len(line) <= limit:
        return line
    keep = max(limit // 2 - 10, 1)
    return f"{line[:keep]}...[{len(line) - 2 * keep} characters cut]...{line[-keep:]}"
