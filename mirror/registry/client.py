"""One registry host over the OCI distribution API: manifests, blobs, uploads, mounts and tags."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from mirror.oci import (
    MANIFEST_ACCEPT,
    MAX_MANIFEST_BYTES,
    OCI_INDEX,
    Descriptor,
    Manifest,
    ManifestError,
    sha256_digest,
)
from mirror.reference import api_host, is_valid_digest
from mirror.registry.body import BodyTooLarge, read_limited
from mirror.registry.budget import PullBudget
from mirror.registry.errors import IntegrityError, RegistryError, RegistryUnreachable, raise_for_response
from mirror.registry.options import ClientOptions
from mirror.registry.ratelimit import RateLimit, read_rate_limit
from mirror.registry.redirects import Redirects
from mirror.registry.transport import open_http_client

log = logging.getLogger("mirror")

MAX_TAG_PAGE_BYTES = 4 * 1024 * 1024
MAX_TAG_PAGES = 1000
CANCEL_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class UploadSession:
    """Where to send the bytes of a started blob upload (absolute URL, query parameters kept)."""

    url: httpx.URL


def _range_end(value: str | None) -> int | None:
    """`Range: 0-1023` -> 1024 bytes received. (A registry says `0-0` for both 0 and 1 byte: read as 0.)"""
    if not value:
        return None
    _, _, end = value.partition("-")
    if not end.strip().isdigit():
        return None
    last = int(end)
    return 0 if last == 0 else last + 1


@dataclass(frozen=True, slots=True)
class BlobBody:
    chunks: AsyncIterator[bytes]
    start: int  # the offset of the first byte


class RegistryClient:
    """Registry I/O for one host. Every method names the repository it acts on; nothing is cached here but
    the anonymous tokens of the hosts it is redirected to (redirects.py)."""

    def __init__(
        self, host: str, http: httpx.AsyncClient, chunk_size: int = 1024 * 1024, budget: PullBudget | None = None
    ) -> None:
        self.host = host
        self.http = http
        self.redirects = Redirects(http)
        self.chunk_size = chunk_size
        self.budget = budget or PullBudget(floor=0, max_wait=0, poll_interval=1)

    @property
    def rate_limit(self) -> RateLimit | None:
        """The latest pull budget the registry announced (Docker Hub does), or None."""
        return self.budget.known

    def _note_rate_limit(self, response: httpx.Response) -> None:
        budget = read_rate_limit(response)
        if budget is not None:
            if self.rate_limit is None or budget.remaining != self.rate_limit.remaining:
                log.info("%s: %s", self.host, budget)
            self.budget.note(budget)

    @classmethod
    def open(cls, host: str, options: ClientOptions | None = None) -> RegistryClient:
        """A client for `host` (a name as configured: Docker Hub's aliases are sent to its API host)."""
        host = api_host(host)
        options = options or ClientOptions()
        pull = options.pull_budget
        budget = PullBudget(pull.floor, pull.max_wait, pull.poll_interval)
        return cls(host, open_http_client(host, options), options.chunk_size, budget)

    async def aclose(self) -> None:
        await self.http.aclose()

    def where(self, repository: str, ref: str = "") -> str:
        sep = "@" if is_valid_digest(ref) else ":"
        return f"{self.host}/{repository}" + (f"{sep}{ref}" if ref else "")

    async def _send(self, action: str, where: str, method: str, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        try:
            return await self.http.request(method, url, **kwargs)
        except httpx.TransportError as exc:
            raise RegistryUnreachable(action, where, exc) from exc

    async def _head(
        self, action: str, where: str, url: str, headers: dict[str, str] | None = None, any_location: bool = False
    ) -> httpx.Response:
        """A HEAD that follows redirects to the registry API (`any_location`: anywhere, for blobs), other hosts
        never getting our credentials: see redirects.py."""
        async with self.redirects.stream(action, where, "HEAD", url, headers, any_location) as response:
            return response  # a HEAD has no body: its headers outlive the connection

    # -- manifests ---------------------------------------------------------------------------------

    async def head_manifest(self, repository: str, ref: str) -> Descriptor | None:
        """The manifest's descriptor, or None when the registry does not have it. A HEAD is not a counted
        pull on Docker Hub, so this is the cheap way to learn a tag's digest."""
        where = self.where(repository, ref)
        response = await self._head("resolve", where, f"/v2/{repository}/manifests/{ref}", {"Accept": MANIFEST_ACCEPT})
        self._note_rate_limit(response)
        if response.status_code == 404:
            return None
        await raise_for_response(response, "resolve", where)
        digest = response.headers.get("Docker-Content-Digest", "")
        if not is_valid_digest(digest):
            manifest = await self.get_manifest(repository, ref)
            return Descriptor(manifest.media_type, manifest.digest, len(manifest.raw))
        media_type = response.headers.get("Content-Type", "").split(";", 1)[0].strip()
        return Descriptor(media_type, digest, int(response.headers.get("Content-Length", "0")))

    async def get_manifest(self, repository: str, ref: str) -> Manifest:
        """The manifest's exact bytes, checked against the digest asked for (or the one the registry named).
        A GET is a counted pull on Docker Hub: it waits while the pull budget is at its floor."""
        where = self.where(repository, ref)
        started = time.monotonic()
        while True:
            await self.budget.wait_for_pull(where, lambda: self.head_manifest(repository, ref))
            try:
                return await self._get_manifest(repository, ref, where)
            except RegistryError as exc:
                if exc.status != 429 or time.monotonic() - started >= self.budget.max_wait:
                    raise
                self.budget.spent()

    async def _get_manifest(self, repository: str, ref: str, where: str) -> Manifest:
        url = f"/v2/{repository}/manifests/{ref}"
        accept = {"Accept": MANIFEST_ACCEPT}
        raw, response = await self._get_document("fetch manifest", where, url, MAX_MANIFEST_BYTES, accept)
        # the last hop's answer: a redirected manifest is checked like any other
        expected = ref if is_valid_digest(ref) else response.headers.get("Docker-Content-Digest") or None
        try:
            return Manifest.parse(raw, response.headers.get("Content-Type"), expected)
        except ManifestError as exc:
            raise RegistryError("fetch manifest", where, response.status_code, "MANIFEST_INVALID", str(exc)) from exc

    async def put_manifest(self, repository: str, ref: str, manifest: Manifest) -> None:
        """Push the manifest's original bytes, by digest or by tag."""
        where = self.where(repository, ref)
        response = await self._send(
            "push manifest",
            where,
            "PUT",
            f"/v2/{repository}/manifests/{ref}",
            content=manifest.raw,
            headers={"Content-Type": manifest.media_type},
        )
        await raise_for_response(response, "push manifest", where)
        stored = response.headers.get("Docker-Content-Digest")
        if stored and stored != manifest.digest:
            raise RegistryError(
                "push manifest",
                where,
                response.status_code,
                "DIGEST_INVALID",
                f"registry stored {stored}, pushed {manifest.digest}",
            )

    async def list_referrers(self, repository: str, digest: str) -> list[dict[str, Any]] | None:
        """The descriptors of the manifests whose `subject` is `digest` (OCI 1.1 referrers API), or None when
        the registry has no referrers API (the caller then reads the `sha256-<hex>` fallback tag)."""
        where = self.where(repository, digest)
        url = f"/v2/{repository}/referrers/{digest}"
        try:
            body, response = await self._get_document(
                "list referrers", where, url, MAX_MANIFEST_BYTES, {"Accept": OCI_INDEX}
            )
        except RegistryError as exc:
            if exc.status in (404, 405):
                return None
            raise
        if OCI_INDEX not in response.headers.get("Content-Type", ""):
            return None  # an answer, but not the API's
        try:
            entries = json.loads(body).get("manifests") or []
        except (ValueError, AttributeError) as exc:
            raise RegistryError("list referrers", where, 200, "", f"not an index: {exc}") from exc
        return [e for e in entries if isinstance(e, dict)]

    # -- blobs -------------------------------------------------------------------------------------

    async def head_blob(self, repository: str, digest: str) -> int | None:
        """The blob's size, or None when the repository does not have it."""
        where = self.where(repository, digest)
        response = await self._head("check blob", where, f"/v2/{repository}/blobs/{digest}", any_location=True)
        if response.status_code == 404:
            return None
        await raise_for_response(response, "check blob", where)
        return int(response.headers.get("Content-Length", "-1"))

    @asynccontextmanager
    async def _blob_response(self, repository: str, digest: str, start: int = 0) -> AsyncIterator[httpx.Response]:
        """A blob GET's answer, redirects followed (Docker Hub answers blob GETs with a CDN redirect), from
        `start` on where the server honours Range."""
        where = self.where(repository, digest)
        # identity: the bytes must hash to the digest as they arrive, with no transport compression
        headers = {"Accept-Encoding": "identity"}
        if start:
            headers["Range"] = f"bytes={start}-"
        url = f"/v2/{repository}/blobs/{digest}"
        async with self.redirects.stream("fetch blob", where, "GET", url, headers, any_location=True) as response:
            await raise_for_response(response, "fetch blob", where)
            yield response

    @asynccontextmanager
    async def open_blob(self, repository: str, digest: str, start: int = 0) -> AsyncIterator[BlobBody]:
        """Stream a blob's bytes. With `start`, ask for the rest from that offset; `BlobBody.start` says where
        the bytes really begin (0 when the server ignored the Range header)."""
        async with self._blob_response(repository, digest, start) as response:
            served_from = start if start and response.status_code == 206 else 0
            yield BlobBody(response.aiter_bytes(self.chunk_size), served_from)

    async def read_blob(self, repository: str, descriptor: Descriptor) -> bytes:
        """A small blob's bytes (a chart, a config), read up to its descriptor's size and checked against its
        digest."""
        where = self.where(repository, descriptor.digest)
        async with self._blob_response(repository, descriptor.digest) as response:
            try:
                data = await read_limited(response, descriptor.size)
            except BodyTooLarge:
                raise IntegrityError(f"{where}: more than the {descriptor.size} bytes its descriptor says") from None
        if len(data) != descriptor.size or sha256_digest(data) != descriptor.digest:
            raise IntegrityError(f"{where}: {len(data)} bytes that do not hash to the digest")
        return data

    async def start_upload(
        self, repository: str, mount_digest: str | None = None, mount_from: str | None = None
    ) -> UploadSession | None:
        """Start a blob upload. With a mount, None means the registry mounted the blob from `mount_from`
        (201); otherwise (202) the returned session takes the bytes."""
        where = self.where(repository)
        params = {"mount": mount_digest, "from": mount_from} if mount_digest and mount_from else None
        response = await self._send("start upload", where, "POST", f"/v2/{repository}/blobs/uploads/", params=params)
        await raise_for_response(response, "start upload", where)
        if response.status_code == 201 and params:
            return None
        location = response.headers.get("Location")
        if not location:
            raise RegistryError("start upload", where, response.status_code, "", "no Location in the answer")
        return UploadSession(self.http.base_url.join(location))

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
        response = await self._send(
            "upload blob",
            where,
            "PUT",
            session.url.copy_merge_params({"digest": digest}),
            content=body,
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
        )
        await raise_for_response(response, "upload blob", where)

    async def upload_chunk(
        self, repository: str, session: UploadSession, offset: int, size: int, body: AsyncIterable[bytes]
    ) -> tuple[UploadSession, int]:
        """PATCH `size` bytes at `offset`; returns the next session URL and the registry's new offset."""
        where = self.where(repository)
        response = await self._send(
            "upload chunk",
            where,
            "PATCH",
            session.url,
            content=body,
            headers={
                "Content-Type": "application/octet-stream",
                "Content-Length": str(size),
                "Content-Range": f"{offset}-{offset + size - 1}",
            },
        )
        await raise_for_response(response, "upload chunk", where)
        next_session = self._next_session(session, response)
        received = _range_end(response.headers.get("Range"))
        return next_session, received if received is not None else offset + size

    async def upload_status(self, repository: str, session: UploadSession) -> tuple[UploadSession, int] | None:
        """How many bytes the upload session holds, or None when the registry no longer knows it."""
        where = self.where(repository)
        response = await self._send("check upload", where, "GET", session.url)
        if response.status_code == 404:
            return None
        await raise_for_response(response, "check upload", where)
        return self._next_session(session, response), _range_end(response.headers.get("Range")) or 0

    async def cancel_upload(self, repository: str, session: UploadSession) -> bool:
        """Abandon an upload session so the registry can drop what it holds (best effort: a registry may not
        allow it, and the session may be gone already). True when the registry confirmed."""
        try:
            response = await self.http.request("DELETE", session.url, timeout=CANCEL_TIMEOUT)
        except httpx.HTTPError:
            return False
        return response.status_code in (200, 202, 204)

    def _next_session(self, session: UploadSession, response: httpx.Response) -> UploadSession:
        location = response.headers.get("Location")
        return UploadSession(self.http.base_url.join(location)) if location else session

    async def push_blob(self, repository: str, digest: str, data: bytes) -> None:
        session = await self.start_upload(repository)
        assert session is not None
        await self.finish_upload(repository, session, digest, len(data), data)

    async def _get_document(
        self, action: str, where: str, url: str | httpx.URL, limit: int, headers: dict[str, str] | None = None
    ) -> tuple[bytes, httpx.Response]:
        """GET a small document (a manifest, a tag page, a referrers list), refusing a body over `limit` bytes;
        returns the body and the last hop's response (its headers: the content type, the digest, the next-page
        link)."""
        async with self.redirects.stream(action, where, "GET", url, headers) as response:
            self._note_rate_limit(response)
            await raise_for_response(response, action, where)
            try:
                return await read_limited(response, limit), response
            except BodyTooLarge as exc:
                raise RegistryError(action, where, response.status_code, "", f"answer {exc}") from None

    # -- tags --------------------------------------------------------------------------------------

    async def list_tags(self, repository: str) -> list[str]:
        """Every tag, following `Link: <...>; rel="next"` pages as given."""
        where = self.where(repository)
        tags: list[str] = []
        url: str | httpx.URL = f"/v2/{repository}/tags/list"
        for _ in range(MAX_TAG_PAGES):
            page, response = await self._get_document("list tags", where, url, MAX_TAG_PAGE_BYTES)
            next_link = response.links.get("next", {}).get("url")
            try:
                tags.extend(json.loads(page).get("tags") or [])
            except (ValueError, AttributeError) as exc:
                raise RegistryError("list tags", where, 200, "", f"not a tag list: {exc}") from exc
            if not next_link:
                return tags
            url = response.url.join(next_link)  # relative to the page that named it, wherever that was
        raise RegistryError("list tags", where, 200, "", f"more than {MAX_TAG_PAGES} pages")
