"""One retry policy: exponential backoff with full jitter, capped attempts and total time, Retry-After
honoured. The transport applies it to idempotent requests with replayable bodies; steps that are not
idempotent (an upload session) use `retry_step` to restart or resume the whole step instead."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx

from mirror.errors import MirrorError
from mirror.registry.errors import retry_after_seconds, without_query
from mirror.untrusted import is_number

log = logging.getLogger("mirror")
T = TypeVar("T")

# Told each retryable status a registry answered (the service counts 429s for its metrics).
StatusObserver = Callable[[int], None]
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
RETRY_EXCEPTIONS: tuple[type[Exception], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 5  # tries in all, the first included
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_elapsed: float = 300.0

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before try number `attempt + 1` (attempt counts from 1)."""
        if retry_after is not None:
            return max(0.0, retry_after)
        return random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))  # noqa: S311

    def allows(self, attempt: int, started: float, delay: float) -> bool:
        return attempt < self.attempts and time.monotonic() - started + delay <= self.max_elapsed


BUFFERED_BODY_LIMIT = 4 * 1024 * 1024


async def _read_ahead(response: httpx.Response) -> None:
    """The body's bytes read as they came and held in the response, still coded: whoever reads it decodes it
    under its own limit (body.py), where httpx would decode a gzip answer whole. The stream is closed either
    way: httpx closes an answer only once its body is read to the end, and an open one keeps its place among
    the host's connections."""
    stream = response.stream
    assert isinstance(stream, httpx.AsyncByteStream)
    try:
        raw = b"".join([chunk async for chunk in stream])
    finally:
        await stream.aclose()
    response.stream = httpx.ByteStream(raw)


def _small(request: httpx.Request, response: httpx.Response) -> bool:
    declared = response.headers.get("Content-Length", "")
    return request.method == "GET" and is_number(declared) and int(declared) <= BUFFERED_BODY_LIMIT


def replayable(request: httpx.Request) -> bool:
    """A request whose body was streamed from a generator cannot be sent again."""
    return isinstance(request.stream, httpx.ByteStream)


def _describe(request: httpx.Request) -> str:
    return f"{request.method} {without_query(str(request.url))}"


class RetryLines:
    """A retry's line told at most once per `window` seconds per host and reason: a host that is down or
    refusing fails every request alike, and a line per request (hundreds) says nothing more than the first. The
    ones held back are counted in the next line."""

    def __init__(self, window: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window, self.clock = window, clock
        self._told: dict[tuple[str, str], tuple[float, int]] = {}  # (host, reason) -> when told, held since

    def held_back(self, host: str, reason: str) -> int | None:
        """None to hold this one back; else how many were held back since the last line."""
        now, key = self.clock(), (host, reason)
        told, held = self._told.get(key, (float("-inf"), 0))
        if now - told < self.window:
            self._told[key] = (told, held + 1)
            return None
        if len(self._told) > 1000:  # hosts and reasons come and go in a long-running service
            self._told.clear()
        self._told[key] = (now, 0)
        return held


RETRY_LINES = RetryLines()


class RetryTransport(httpx.AsyncBaseTransport):
    """Wraps the connection transport; retries idempotent requests whose body can be sent again. Each
    retryable status answered is told to `on_retry_status`, if given."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        policy: RetryPolicy,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_retry_status: StatusObserver | None = None,
    ) -> None:
        self.inner = inner
        self.policy = policy
        self.sleep = sleep
        self.on_retry_status = on_retry_status

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method not in IDEMPOTENT_METHODS or not replayable(request):
            return await self.inner.handle_async_request(request)
        started = time.monotonic()
        attempt = 1
        while True:
            try:
                response = await self.inner.handle_async_request(request)
                if _small(request, response):
                    # Read small bodies (manifests, tag lists, token answers) here, so that a connection
                    # dropped mid-body is retried like one dropped before the headers.
                    await _read_ahead(response)
            except RETRY_EXCEPTIONS as exc:
                delay = self.policy.backoff(attempt)
                if not self.policy.allows(attempt, started, delay):
                    raise
                reason = type(exc).__name__
            else:
                if response.status_code not in RETRY_STATUSES:
                    return response
                if self.on_retry_status is not None:
                    self.on_retry_status(response.status_code)
                delay = self.policy.backoff(attempt, retry_after_seconds(response))
                if not self.policy.allows(attempt, started, delay):
                    return response
                await response.aclose()
                reason = f"HTTP {response.status_code}"
            held = RETRY_LINES.held_back(request.url.netloc.decode("ascii", "replace"), reason)
            if held is not None:
                log.info(
                    "retrying %s in %.1f s (%s, try %d of %d)%s",
                    _describe(request),
                    delay,
                    reason,
                    attempt + 1,
                    self.policy.attempts,
                    f"; {held} more retr{'y' if held == 1 else 'ies'} like it since the last line" if held else "",
                )
            await self.sleep(delay)
            attempt += 1

    async def aclose(self) -> None:
        await self.inner.aclose()


async def retry_step(
    policy: RetryPolicy,
    step: Callable[[int], Awaitable[T]],
    should_retry: Callable[[Exception], bool],
    what: str,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    progress: Callable[[], int] | None = None,
    secured: Callable[[], int] | None = None,
) -> T:
    """Run a whole step again (a new upload session, a fresh read of the source) while `should_retry`
    says the failure was transient and the policy allows. `step` gets the attempt number. A failure that carries
    the wait its service asked for (`retry_after`, seconds: a RegistryError's Retry-After) is waited that long,
    whatever the policy's own backoff, within `max_elapsed` as the transport does; a longer wait is not slept
    through: the failure is raised at once, its line saying so.

    `progress`, if given, counts what the step got done so far (a blob's bytes read). An attempt that moved it
    restarts the policy's clock as it fails: `max_elapsed` bounds the time spent failing and waiting since the
    step last made progress, not the time a long transfer takes (a layer of a few hundred MB over a slow link
    takes the whole default budget to send).

    `secured`, if given, says how far the step has got that the next attempt keeps (a chunked upload's offset the
    registry confirmed). An attempt that took it past every earlier one is not counted against `attempts`: a
    long upload over a link that resets every few minutes goes on while each resume gets further. It stays
    bounded as long as the mark is: a blob's confirmed chunks."""
    started = time.monotonic()
    attempt, failed = 1, 0
    best = secured() if secured is not None else 0
    while True:
        done = progress() if progress is not None else 0
        try:
            return await step(attempt)
        except Exception as exc:
            if progress is not None and progress() != done:
                started = time.monotonic()
            if secured is not None and secured() > best:
                best = secured()
            else:
                failed += 1
            if not should_retry(exc):
                raise
            asked = _asked_wait(exc)
            delay = policy.backoff(max(failed, 1), asked)
            if not policy.allows(failed, started, delay):
                if asked is not None and failed < policy.attempts:  # tries left, but not the time to wait
                    _say_not_waited(exc, policy)
                raise
            log.info("retrying %s in %.1f s: %s", what, delay, exc)
        await sleep(delay)
        attempt += 1


def _asked_wait(exc: Exception) -> float | None:
    """The seconds a failure says its service asked to wait before the next try, if it says."""
    asked = getattr(exc, "retry_after", None)
    return float(asked) if isinstance(asked, int | float) and not isinstance(asked, bool) else None


def _say_not_waited(exc: Exception, policy: RetryPolicy) -> None:
    """The failure's own line says why it was not tried again: the wait asked for is past the time budget."""
    reason = f"not tried again: past the retry policy's time budget (max_elapsed {policy.max_elapsed:g} s)"
    if reason in str(exc) or reason in (getattr(exc, "__notes__", None) or ()):
        return  # one error several readers share (a spooled blob's source failure): said once
    if isinstance(exc, MirrorError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        exc.args = (f"{exc.args[0]}; {reason}",)  # the same error, kind and type kept: callers tell it by them
    else:
        exc.add_note(reason)
