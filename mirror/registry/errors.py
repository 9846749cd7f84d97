"""Registry error bodies (`{"errors": [{"code", "message"}]}`) turned into typed exceptions."""

from __future__ import annotations

import json

import httpx

from mirror.untrusted import clip

MAX_ERROR_BODY = 64 * 1024


class RegistryError(Exception):
    """A registry answered with an error. `code` is the OCI error code when the body carried one."""

    def __init__(self, action: str, where: str, status: int, code: str = "", message: str = "") -> None:
        self.action = action
        self.where = where
        self.status = status
        self.code = clip(code, 100)
        self.message = message = clip(message)  # the registry's words: bounded before they reach a log or a job
        detail = f"{status} {code}".strip() + (f": {message}" if message else "")
        super().__init__(f"{action} {where}: {detail}")

    @property
    def not_found(self) -> bool:
        return self.status == 404 or self.code in {"MANIFEST_UNKNOWN", "BLOB_UNKNOWN", "NAME_UNKNOWN"}


class RegistryUnreachable(Exception):
    """The registry could not be reached at all (DNS, connection refused, TLS, timeout)."""

    def __init__(self, action: str, where: str, cause: Exception) -> None:
        reason = clip(str(cause)) or type(cause).__name__
        super().__init__(f"{action} {where}: registry unreachable: {reason}")


class IntegrityError(Exception):
    """Bytes that do not hash to, or are not the size of, the descriptor that named them."""


def parse_error_body(body: bytes) -> tuple[str, str]:
    """The first (code, message) of an OCI error body, or ("", first line of the text)."""
    try:
        doc = json.loads(body[:MAX_ERROR_BODY])
        first = doc["errors"][0]
        return str(first.get("code", "")), str(first.get("message", ""))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        text = body[:200].decode("utf-8", "replace").strip().splitlines()
        return "", text[0] if text else ""


async def raise_for_response(response: httpx.Response, action: str, where: str) -> None:
    """Raise a RegistryError for a non-2xx response, reading at most MAX_ERROR_BODY of its body."""
    if response.is_success:
        return
    body = b""
    if response.request.method != "HEAD":
        try:
            body = response.content
        except httpx.ResponseNotRead:  # a streamed response: read no more than we need
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) >= MAX_ERROR_BODY:
                    break
    code, message = parse_error_body(body)
    # Redirects to the registry API were followed (redirects.py): this one leads to a web site, e.g. docker.io
    # instead of registry-1.docker.io.
    if response.is_redirect:
        message = f"redirected to {clip(response.headers.get('Location', '?'))}: not a registry API endpoint"
    raise RegistryError(action, where, response.status_code, code, message)
