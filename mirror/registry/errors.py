"""Registry error bodies (`{"errors": [{"code", "message"}]}`) turned into typed exceptions."""

from __future__ import annotations

import email.utils
import time

import httpx

from mirror.errors import Kind, MirrorError
from mirror.registry.body import read_limited
from mirror.registry.proxy import refusal_kind
from mirror.untrusted import clip, is_number, load_json

MAX_ERROR_BODY = 64 * 1024


def kind_of_status(status: int) -> Kind:
    """What an error answer means for whoever retries or reports it."""
    if status in (401, 403):
        return Kind.AUTH
    if status in (408, 429) or status >= 500:
        return Kind.UNAVAILABLE
    return Kind.REFUSED


def retry_after_seconds(response: httpx.Response) -> float | None:
    """`Retry-After` as seconds or an HTTP date; None when absent or unreadable."""
    value = response.headers.get("Retry-After", "").strip()
    if not value:
        return None
    if is_number(value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class RegistryError(MirrorError):
    """A registry answered with an error. `code` is the OCI error code when the body carried one; `retry_after`,
    the seconds a passing refusal (429, 503, any status of `Kind.UNAVAILABLE`) asked to wait before the next try
    (its `Retry-After`), which `retry_step` waits, as the transport does for the requests it retries."""

    def __init__(
        self,
        action: str,
        where: str,
        status: int,
        code: str = "",
        message: str = "",
        retry_after: float | None = None,
    ) -> None:
        self.action = action
        self.where = where
        self.status = status
        self.kind = kind_of_status(status)
        self.code = clip(code, 100)
        self.message = message = clip(message)  # the registry's words: bounded before they reach a log or a job
        self.retry_after = retry_after
        detail = f"{status} {code}".strip() + (f": {message}" if message else "")
        if retry_after:
            detail += f" (asked to wait {retry_after:.1f}".removesuffix(".0") + " s)"
        super().__init__(f"{action} {where}: {detail}")


class RegistryUnreachable(MirrorError):
    """The registry could not be reached at all (DNS, connection refused, TLS, timeout, a proxy's refusal: which
    is no passing trouble, and says so in its kind)."""

    def __init__(self, action: str, where: str, cause: Exception) -> None:
        reason = clip(str(cause)) or type(cause).__name__
        if "WRONG_VERSION_NUMBER" in reason:  # what OpenSSL makes of an HTTP answer to its TLS hello
            reason += " (it answers in plain HTTP, not HTTPS: is it a registry with plain_http on?)"
        self.kind = refusal_kind(cause) or self.kind
        super().__init__(f"{action} {where}: registry unreachable: {reason}")


class IntegrityError(MirrorError):
    """Bytes that do not hash to, or are not the size of, the descriptor that named them."""

    kind = Kind.INTEGRITY


def parse_error_body(body: bytes) -> tuple[str, str]:
    """The first (code, message) of an OCI error body, or ("", first line of the text)."""
    try:
        doc = load_json(body[:MAX_ERROR_BODY])
        first = doc["errors"][0]
        return str(first.get("code", "")), str(first.get("message", ""))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        text = body[:200].decode("utf-8", "replace").strip().splitlines()
        return "", text[0] if text else ""


async def raise_for_response(response: httpx.Response, action: str, where: str) -> None:
    """Raise a RegistryError for a non-2xx response, reading at most MAX_ERROR_BODY of its body."""
    if response.is_success:
        return
    body = b"" if response.request.method == "HEAD" else await read_limited(response, MAX_ERROR_BODY, truncate=True)
    code, message = parse_error_body(body)
    # Redirects to the registry API were followed (redirects.py): this one leads to a web site, e.g. docker.io
    # instead of registry-1.docker.io.
    if response.is_redirect:
        shown = clip(without_query(response.headers.get("Location", "?")))
        message = f"redirected to {shown}: not a registry API endpoint"
    status = response.status_code
    # The wait a passing refusal asks for (the transport honours it on every status it retries, all of this kind)
    asked = retry_after_seconds(response) if kind_of_status(status) is Kind.UNAVAILABLE else None
    raise RegistryError(action, where, status, code, message, asked)


def without_query(location: str) -> str:
    """A URL as it may be shown: without its query and fragment, where a pre-signed URL keeps its signature."""
    return location.split("#", 1)[0].split("?", 1)[0]
