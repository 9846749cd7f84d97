"""Blob uploads to one registry host, the push side of the OCI distribution API: a session started (or the
blob mounted from another repository), the bytes sent in one PUT or in PATCH chunks, a session asked how much
it holds, a session abandoned. `RegistryClient` is this and the read side.

An https registry's upload session must be on https: a registry behind a proxy that ends TLS, building its
URLs from the plain request it was handed, answers with an `http://` Location on its own host name. That is
refused: the blob would go in clear (auth.py keeps the credentials off it either way)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, Awaitable
from dataclasses import dataclass

import httpx

from mirror.errors import MirrorError
from mirror.registry.cancelsafe import retrieved_when_done
from mirror.registry.cutoff import send_cuttable
from mirror.registry.errors import RegistryError, raise_for_response, without_query
from mirror.registry.host import RegistryHost
from mirror.untrusted import clip, is_number

CANCEL_TIMEOUT = 10.0
# A caller cancelled (a run abandoned at shutdown, a sibling's failure) lets the registry drop the session it
# opened, waiting this long at most for each answer (the POST's, the DELETE's): it is past its grace period.
CANCELLED_WAIT = 2.0
# The actions of the requests on an upload session, as errors name them: a 416 from one of these is the
# session out of step with what was sent (see engine/upload.py's is_transient).
UPLOAD_STEPS = frozenset({"start upload", "upload blob", "upload chunk", "check upload"})
log = logging.getLogger("mirror")


@dataclass(frozen=True, slots=True)
class UploadSession:
    """Where to send the bytes of a started blob upload (absolute URL, query parameters kept)."""

    url: httpx.URL


def _left_for_purge(where: str, status: int) -> None:
    """Named by repository only: the session's URL carries the registry's state token in its query."""
    log.warning(
        "%s: the registry refused to cancel an upload session (%d: cancelling needs the delete permission,"
        " which pushing does not give); the session is left for the registry's purge of unfinished uploads",
        where,
        status,
    )


def _range_end(value: str | None) -> int | None:
    """`Range: 0-1023` -> 1024 bytes received. (A registry says `0-0` for both 0 and 1 byte: read as 0.)"""
    if not value:
        return None
    _, _, end = value.partition("-")
    if not is_number(end.strip()):
        return None
    last = int(end)
    return 0 if last == 0 else last + 1


class BlobUploads(RegistryHost):
    async def start_upload(
        self, repository: str, mount_digest: str | None = None, mount_from: str | None = None
    ) -> UploadSession | None:
        """Start a blob upload. With a mount, None means the registry mounted the blob from `mount_from`
        (201); otherwise (202) the returned session takes the bytes. A caller cancelled while the POST is under
        way leaves no session behind: the answer is awaited briefly and the session it names cancelled (a run
        abandoned at shutdown has many POSTs under way, each a session the registry would keep for a week)."""
        started = asyncio.ensure_future(self._start_upload(repository, mount_digest, mount_from))
        try:
            return await asyncio.shield(started)
        except asyncio.CancelledError:
            await self._cancel_when_answered(repository, started)
            raise

    async def _cancel_when_answered(self, repository: str, started: asyncio.Future[UploadSession | None]) -> None:
        retrieved_when_done(started)  # whether or not the wait below sees it through (cancelled again, say)
        try:
            async with asyncio.timeout(CANCELLED_WAIT):
                session = await asyncio.shield(started)
        except (Exception, TimeoutError):  # no session, or not known in time: the registry's purge takes it
            return
        if session is not None:
            await self.cancel_upload(repository, session, CANCELLED_WAIT)

    async def _start_upload(
        self, repository: str, mount_digest: str | None, mount_from: str | None
    ) -> UploadSession | None:
        where = self.where(repository)
        params = {"mount": mount_digest, "from": mount_from} if mount_digest and mount_from else None
        response = await self._send("start upload", where, "POST", f"/v2/{repository}/blobs/uploads/", params=params)
        await raise_for_response(response, "start upload", where)
        if response.status_code == 201 and params:
            return None
        location = response.headers.get("Location")
        if not location:
            raise RegistryError("start upload", where, response.status_code, "", "no Location in the answer")
        return self._session_at(location, response, "start upload", where)

    async def finish_upload(
        self,
        repository: str,
        session: UploadSession,
        digest: str,
        size: int,
        body: bytes | AsyncIterable[bytes],
    ) -> None:
        """Send all the bytes in one PUT. Content-Length is always set: not every registry or proxy takes
        chunked transfer encoding."""
        where = self.where(repository, digest)
        response = await self._send_body(
            "upload blob",
            where,
            "PUT",
            session.url.copy_merge_params({"digest": digest}),
            body,
            {"Content-Type": "application/octet-stream", "Content-Length": str(size)},
        )
        await raise_for_response(response, "upload blob", where)

    async def upload_chunk(
        self, repository: str, session: UploadSession, offset: int, size: int, body: AsyncIterable[bytes]
    ) -> tuple[UploadSession, int]:
        """PATCH `size` bytes at `offset`; returns the next session URL and the registry's new offset."""
        where = self.where(repository)
        response = await self._send_body(
            "upload chunk",
            where,
            "PATCH",
            session.url,
            body,
            {
                "Content-Type": "application/octet-stream",
                "Content-Length": str(size),
                "Content-Range": f"{offset}-{offset + size - 1}",
            },
        )
        await raise_for_response(response, "upload chunk", where)
        next_session = self._next_session(session, response, "upload chunk", where)
        received = _range_end(response.headers.get("Range"))
        return next_session, received if received is not None else offset + size

    async def _send_body(
        self,
        action: str,
        where: str,
        method: str,
        url: httpx.URL,
        body: bytes | AsyncIterable[bytes],
        headers: dict[str, str],
    ) -> httpx.Response:
        """An upload step with its bytes. A streamed body is cut off if the caller is cancelled (cutoff.py), so
        the session can be cancelled once the request has ended."""

        def send(content: bytes | AsyncIterable[bytes]) -> Awaitable[httpx.Response]:
            return self._send(action, where, method, url, content=content, headers=headers)

        return await (send(body) if isinstance(body, bytes) else send_cuttable(send, body, CANCELLED_WAIT))

    async def upload_status(self, repository: str, session: UploadSession) -> tuple[UploadSession, int] | None:
        """How many bytes the upload session holds, or None when the registry no longer knows it."""
        where = self.where(repository)
        response = await self._send("check upload", where, "GET", session.url)
        if response.status_code == 404:
            return None
        await raise_for_response(response, "check upload", where)
        next_session = self._next_session(session, response, "check upload", where)
        return next_session, _range_end(response.headers.get("Range")) or 0

    async def cancel_upload(self, repository: str, session: UploadSession, within: float = CANCEL_TIMEOUT) -> bool:
        """Abandon an upload session so the registry can drop what it holds (best effort: a registry may not
        allow it, and the session may be gone already), waiting `within` seconds at most. True when the
        registry confirmed. A refusal is a warning: distribution wants the `delete` action for this DELETE,
        which a login that may push need not have, and the session then stays until the registry purges
        unfinished uploads (a week by default). No scope asks for `delete`: only this DELETE's challenge does."""
        where = self.where(repository)
        try:
            async with asyncio.timeout(within):  # retries and waits for Retry-After included
                response = await self._send("cancel upload", where, "DELETE", session.url)
        except RegistryError as exc:  # a token the realm refused for the DELETE, too
            if exc.status in (401, 403):
                _left_for_purge(where, exc.status)
            return False
        except (httpx.HTTPError, TimeoutError, MirrorError):
            return False
        if response.status_code in (401, 403):
            _left_for_purge(where, response.status_code)
        return response.status_code in (200, 202, 204)

    def _next_session(self, session: UploadSession, response: httpx.Response, action: str, where: str) -> UploadSession:
        location = response.headers.get("Location")
        return self._session_at(location, response, action, where) if location else session

    def _session_at(self, location: str, response: httpx.Response, action: str, where: str) -> UploadSession:
        """The session a Location names, relative to the URL of the request it answers (RFC 9110 10.2.2: a
        session on an upload host names its next state on that host, and `u2?_state=1` is beside the request's
        path, not at the host's root); refused when it would take an https registry's blob over plain HTTP."""
        try:
            url = response.request.url.join(location)
        except httpx.InvalidURL:
            raise RegistryError(action, where, response.status_code, "", "a Location that is no URL") from None
        if self.http.base_url.scheme == "https" and url.scheme != "https":
            shown = clip(without_query(str(url)))
            message = (
                f"the upload session is at {shown}, not https: refused, the blob would go in clear"
                " (a proxy ending TLS without sending X-Forwarded-Proto: https?)"
            )
            raise RegistryError(action, where, response.status_code, "", message)
        return UploadSession(url)

    async def push_blob(self, repository: str, digest: str, data: bytes) -> None:
        session = await self.start_upload(repository)
        assert session is not None
        await self.finish_upload(repository, session, digest, len(data), data)
