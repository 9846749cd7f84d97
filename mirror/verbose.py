"""What `-v` shows of each HTTP request httpx logs: the method, the host and, for a registry's API, the path.
Other hosts' paths and every query string are left out: a notification webhook's URL is its secret (Slack's and
Feishu's in the path, DingTalk's and WeCom's in the query), and a blob's CDN redirect carries a signature."""

from __future__ import annotations

import logging
import re

import httpx

# a registry API path names a repository and a digest or tag: worth showing, never secret (a webhook receiver's
# path may also begin /v2/, with its token after it)
REGISTRY_API = re.compile(r"/v2/(?:[a-z0-9._/-]+/(?:manifests|blobs|tags|referrers)/[\w.:+/-]*)?")


def shown_url(url: httpx.URL) -> str:
    path = url.path if REGISTRY_API.fullmatch(url.path) else "/..."
    return f"{url.scheme}://{url.netloc.decode('ascii', 'replace').rpartition('@')[2]}{path}"


class RequestLines(logging.Filter):
    """Rewrites the URL in httpx's request lines (`HTTP Request: GET <url> ...`) as `shown_url` does."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(arg, httpx.URL) for arg in record.args):
            record.args = tuple(shown_url(arg) if isinstance(arg, httpx.URL) else arg for arg in record.args)
        return True


def show_requests() -> None:
    """httpx's request lines on, their URLs as `shown_url` gives them."""
    logger = logging.getLogger("httpx")
    logger.setLevel(logging.INFO)
    if not any(isinstance(f, RequestLines) for f in logger.filters):
        logger.addFilter(RequestLines())
