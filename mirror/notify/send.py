"""Posting the events to every channel that wants them: at once, each post bounded by `notify.timeout`, sent
again (at most `notify.attempts` times) only when it did not arrive (no connection) or the platform was briefly
unable (5xx, 429), never after a post that may have arrived (no answer in time), and all of them within
`notify.deadline`. Nothing here raises: a receiver that is down, slow or refusing
is logged by the channel's name (its URL holds a token and is never shown), and the run's result stands."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from mirror.notify.channels import post_for, refusal
from mirror.notify.events import Event
from mirror.registry.body import BodyTooLarge, read_limited
from mirror.registry.pool import pooled_transport
from mirror.registry.proxy import environment_proxies
from mirror.registry.tls import TrustError
from mirror.settings import NotifyChannelSettings, NotifySettings
from mirror.untrusted import clip

log = logging.getLogger("mirror")

MAX_ANSWER_BYTES = 64 * 1024
NOT_ARRIVED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)  # the post never left: send it again
RETRY_DELAY = 1.0  # then doubled
CONNECTIONS = httpx.Limits(max_connections=100, max_keepalive_connections=20)  # httpx's own: posts go at once


@dataclass(frozen=True, slots=True)
class Sent:
    channel: str
    event: str
    error: str | None  # None when the platform took it


async def notify(settings: NotifySettings, events: list[Event], clock: Callable[[], float] = time.time) -> list[Sent]:
    """Post each event to each channel that takes its kind; what became of each post."""
    wanted = [(c, e) for c in settings.channels for e in events if e.kind in c.events]
    if not wanted:
        return []
    connections = pooled_transport(CONNECTIONS, verify=True, http2=False, proxies=environment_proxies())
    client = httpx.AsyncClient(transport=connections, timeout=settings.timeout, follow_redirects=False, trust_env=False)
    async with client as http:
        posts = [asyncio.ensure_future(_post(http, settings, c, e, clock)) for c, e in wanted]
        done, pending = await asyncio.wait(posts, timeout=settings.deadline)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    sent = [
        task.result() if task in done else Sent(c.name, e.kind, f"not sent within {settings.deadline:g} s")
        for task, (c, e) in zip(posts, wanted, strict=True)
    ]
    for each in sent:
        if each.error:
            log.warning("notification to %s (%s) not delivered: %s", each.channel, each.event, each.error)
    return sent


async def _post(
    http: httpx.AsyncClient,
    settings: NotifySettings,
    channel: NotifyChannelSettings,
    event: Event,
    clock: Callable[[], float],
) -> Sent:
    try:  # read at load, and again here: the file or variable may have gone since
        secret = channel.secret() if channel.kind in ("dingtalk", "feishu", "webhook") else None
        url = channel.url()
    except ValueError as exc:
        return Sent(channel.name, event.kind, clip(str(exc), 300))
    error = "not sent"
    for attempt in range(settings.attempts):
        if attempt:
            await asyncio.sleep(RETRY_DELAY * 2 ** (attempt - 1))
        post = post_for(channel.kind, url, secret, event, clock())  # signed afresh: timestamps expire
        try:
            async with http.stream("POST", post.url, content=post.body, headers=post.headers) as response:
                body = await read_limited(response, MAX_ANSWER_BYTES, truncate=True)
                status = response.status_code
        except (httpx.HTTPError, BodyTooLarge, TrustError) as exc:
            error = f"{type(exc).__name__}: {_without(str(exc), url)}"
            if isinstance(exc, NOT_ARRIVED):
                continue
            break  # it may have arrived (no answer in time, a broken answer): a second would be a duplicate
        except (httpx.InvalidURL, UnicodeError, ValueError) as exc:  # the URL changed since load into no URL
            error = f"{type(exc).__name__}: the URL is not one to post to"
            break
        error = refusal(channel.kind, status, body) or ""
        if not error:
            return Sent(channel.name, event.kind, None)
        if not (status == 429 or status >= 500):
            break
    return Sent(channel.name, event.kind, clip(_without(error, url), 300))


def _without(text: str, url: str) -> str:
    """An error's text with the webhook URL (and its token) taken out."""
    return text.replace(url, "<webhook URL>").replace(url.split("?", 1)[0], "<webhook URL>")
