"""One registry host over the OCI distribution API: manifests, blobs and tags here, uploads and mounts in
`uploads.py`."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
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
from mirror.reference import api_host, is_valid_digest, is_valid_tag
from mirror.registry.body import BodyTooLarge, read_limited
from mirror.registry.budget import PullBudget
from mirror.registry.errors import IntegrityError, RegistryError, RegistryUnreachable, raise_for_response
from mirror.registry.options import ClientOptions
from mirror.registry.ratelimit import RateLimit, read_rate_limit
from mirror.registry.redirects import Redirects
from mirror.registry.transport import open_http_client
from mirror.registry.uploads import BlobUploads
from mirror.untrusted import load_json

log = logging.getLogger("mirror")

MAX_TAG_PAGE_BYTES = 4 * 1024 * 1024
MAX_TAG_PAGES = 1000
MAX_TAGS = 100_000  # Docker Hub's busiest repositories hold a few thousand
MAX_REFERRER_PAGES = 100
MAX_REFERRERS = 10_000  # an image has a handful: a signature, an attestation or an SBOM per build or scan


@dataclass(frozen=True, slots=True)
class BlobBody:
    chunks: AsyncIterator[bytes]
    start: int  # the offset of the first byte


async def regrouped(pieces: AsyncIterator[bytes], size: int) -> AsyncIterator[bytes]:
    """`pieces`, as they came off the connection, joined into chunks of at least `size` bytes (the last one
    excepted). Each byte is copied once; httpx's own chunker (`aiter_bytes(size)`) copies it three or four times
    (4-6% of a cold copy's CPU under the profiler, against 2% for the join)."""
    held: list[bytes] = []
    count = 0
    async for piece in pieces:
        held.append(piece)
        count += len(piece)
        if count >= size:
            yield held[0] if len(held) == 1 else b"".join(held)
            held, count = [], 0
    if held:
        yield b"".join(held)


async def failures_named(chunks: AsyncIterator[bytes], where: str) -> AsyncIterator[bytes]:
    """A blob's bytes, the connection they come over failing (a reset, a timeout, the deadline) raised as this
    registry's `fetch blob`: a target's PUT or PATCH that streams them would take an httpx error for its own
    (`upload blob <target>: registry unreachable`, blaming the target for the source's fault)."""
    try:
        async for chunk in chunks:
            yield chunk
    except httpx.TransportError as exc:
        raise RegistryUnreachable("fetch blob", where, exc) from exc


class RegistryClient(BlobUploads):
    """Registry I/O for one host. Every method names the repository it acts on; nothing is cached here but
    the anonymous tokens of the hosts it is redirected to (redirects.py)."""

    def __init__(
        self, host: str, http: httpx.AsyncClient, chunk_size: int = 1024 * 1024, budget: PullBudget | None = None
    ) -> None:
        super().__init__(host, http)
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
        client = cls(host, open_http_client(host, options), options.chunk_size, budget)
        client.retry = options.retry
        return client

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _head(
        self, action: str, where: str, url: str, headers: dict[str, str] | None = None, any_location: bool = False
    ) -> httpx.Response:
        """A HEAD that follows redirects to the registry API (`any_location`: anywhere, for blobs), other hosts
        never getting our credentials: see redirects.py."""
        async with self.redirects.stream(action, where, "HEAD", url, headers, any_location) as response:
            # A HEAD has no body, but its end must be read: a response closed before it takes its connection
            # down with it, and the next request would pay for a new one (a handshake round trip, or two).
            await response.aread()
            return response

    # -- manifests ---------------------------------------------------------------------------------

    async def head_manifest(self, repository: str, ref: str) -> Descriptor | None:
        """The manifest's descriptor, or None when the registry does not have it. A HEAD is not a counted
        pull on Docker Hub, so this is the cheap way to learn a tag's digest. Where the HEAD names no digest,
        or for a digest asked names another, the manifest is read (and checked against the digest asked for)."""
        where = self.where(repository, ref)
        response = await self._manifest_head(repository, ref, where)
        if response.status_code == 404:
            return None
        await raise_for_response(response, "resolve", where)
        digest = response.headers.get("Docker-Content-Digest", "")
        if not is_valid_digest(digest) or (is_valid_digest(ref) and digest != ref):
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
            await self.budget.wait_for_pull(where, lambda: self._read_budget(repository, ref))
            try:
                return await self._get_manifest(repository, ref, where)
            except RegistryError as exc:
                # a 429 spends the budget of a registry that announces one (Docker Hub); from any other it is an
                # error like the rest, already retried, and a budget that no answer refills would stop every GET
                announced = self.budget.known is not None
                if exc.status != 429 or not announced or time.monotonic() - started >= self.budget.max_wait:
                    raise
                self.budget.spent()

    async def _read_budget(self, repository: str, ref: str) -> None:
        """The budget a manifest HEAD announces (not a pull). Unlike head_manifest, never a GET in its place:
        that GET would wait on the budget being read."""
        await self._manifest_head(repository, ref, self.where(repository, ref))

    async def _manifest_head(self, repository: str, ref: str, where: str) -> httpx.Response:
        """A manifest's HEAD, the pull budget it announces noted."""
        response = await self._head("resolve", where, f"/v2/{repository}/manifests/{ref}", {"Accept": MANIFEST_ACCEPT})
        self._note_rate_limit(response)
        return response

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
        """The descriptors of the manifests whose `subject` is `digest` (OCI 1.1 referrers API), every page of
        them (`Link: <...>; rel="next"`, as the spec allows), or None when the registry has no referrers API
        (the caller then reads the `sha256-<hex>` fallback tag)."""
        where = self.where(repository, digest)
        url: str | httpx.URL = f"/v2/{repository}/referrers/{digest}"
        entries: list[dict[str, Any]] = []
        for page_number in range(MAX_REFERRER_PAGES):
            try:
                body, response = await self._get_document(
                    "list referrers", where, url, MAX_MANIFEST_BYTES, {"Accept": OCI_INDEX}
                )
            except RegistryError as exc:
                if page_number == 0 and exc.status in (404, 405):
                    return None
                raise
            if page_number == 0 and OCI_INDEX not in response.headers.get("Content-Type", ""):
                return None  # an answer, but not the API's
            entries.extend(_referrers_in(body, where))
            if len(entries) > MAX_REFERRERS:
                raise RegistryError("list referrers", where, 200, "", f"more than {MAX_REFERRERS} referrers")
            next_link = response.links.get("next", {}).get("url")
            if not next_link:
                return entries
            url = response.url.join(next_link)  # relative to the page that named it, wherever that was
        raise RegistryError("list referrers", where, 200, "", f"more than {MAX_REFERRER_PAGES} pages")

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
        # identity: the bytes must hash to the digest as they arrive, with no transport compression. An answer
        # that names a Content-Encoding all the same is read raw: a storage host labelling a stored .tar.gz
        # `gzip` (its object metadata) sends the stored bytes, which httpx would unpack.
        headers = {"Accept-Encoding": "identity"}
        if start:
            headers["Range"] = f"bytes={start}-"
        url = f"/v2/{repository}/blobs/{digest}"
        async with self.redirects.stream("fetch blob", where, "GET", url, headers, any_location=True) as response:
            await raise_for_response(response, "fetch blob", where)
            yield response

    @asynccontextmanager
    async def open_blob(self, repository: str, digest: str, start: int = 0) -> AsyncIterator[BlobBody]:
        """Stream a blob's bytes, as stored (never decoded). With `start`, ask for the rest from that offset;
        `BlobBody.start` says where the bytes really begin (0 when the server ignored the Range header)."""
        async with self._blob_response(repository, digest, start) as response:
            served_from = start if start and response.status_code == 206 else 0
            chunks = regrouped(response.aiter_raw(), self.chunk_size)
            yield BlobBody(failures_named(chunks, self.where(repository, digest)), served_from)

    async def read_blob(self, repository: str, descriptor: Descriptor) -> bytes:
        """A small blob's bytes (a chart, a config), as stored (never decoded), read up to its descriptor's size
        and checked against its digest."""
        where = self.where(repository, descriptor.digest)
        async with self._blob_response(repository, descriptor.digest) as response:
            try:
                data = await read_limited(response, descriptor.size, raw=True)
            except BodyTooLarge:
                raise IntegrityError(f"{where}: more than the {descriptor.size} bytes its descriptor says") from None
        if len(data) != descriptor.size or sha256_digest(data) != descriptor.digest:
            raise IntegrityError(f"{where}: {len(data)} bytes that do not hash to the digest")
        return data

    async def _get_document(
        self, action: str, where: str, url: str | httpx.URL, limit: int, headers: dict[str, str] | None = None
    ) -> tuple[bytes, httpx.Response]:
        """GET a small document (a manifest, a tag page, a referrers list), refusing a body over `limit` bytes;
        returns the body and the last hop's response (its headers: the content type, the digest, the next-page
        link). Unlike a blob's, its answer is decoded: gzip and deflate are asked for, and a document is stored
        as JSON, so a Content-Encoding on it is a coding over the stored bytes (a manifest's digest, checked
        after, is over the decoded ones)."""
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
            tags.extend(_tags_in(page, where))
            if len(tags) > MAX_TAGS:
                raise RegistryError("list tags", where, 200, "", f"more than {MAX_TAGS} tags")
            if not next_link:
                return tags
            url = response.url.join(next_link)  # relative to the page that named it, wherever that was
        raise RegistryError("list tags", where, 200, "", f"more than {MAX_TAG_PAGES} pages")

    async def has_repository(self, repository: str) -> bool:
        """Whether the registry knows the repository, from the first page of its tag list, one tag long (a
        manifest HEAD's 404 has no body to tell an unknown repository from an unknown tag): False on a 404
        (NAME_UNKNOWN). Any other failure raises, as a tag list's would."""
        url = f"/v2/{repository}/tags/list?n=1"
        try:
            await self._get_document("list tags", self.where(repository), url, MAX_TAG_PAGE_BYTES)
        except RegistryError as exc:
            if exc.status == 404:
                return False
            raise
        return True


def _tags_in(page: bytes, where: str) -> list[str]:
    """The tags of one page of a tag list, each a valid tag name; anything else refuses the page."""
    try:
        tags = load_json(page).get("tags") or []
    except (ValueError, AttributeError) as exc:
        raise RegistryError("list tags", where, 200, "", f"not a tag list: {exc}") from exc
    if not isinstance(tags, list) or not all(isinstance(tag, str) and is_valid_tag(tag) for tag in tags):
        raise RegistryError("list tags", where, 200, "", "not a tag list: its tags are not all tag names")
    return tags


def _referrers_in(page: bytes, where: str) -> list[dict[str, Any]]:
    """The descriptors of one page of a referrers listing (an image index)."""
    try:
        entries = load_json(page).get("manifests") or []
    except (ValueError, AttributeError) as exc:
        raise RegistryError("list referrers", where, 200, "", f"not an index: {exc}") from exc
    if not isinstance(entries, list):
        raise RegistryError("list referrers", where, 200, "", "not an index: its manifests are not a list")
    return [e for e in entries if isinstance(e, dict)]
