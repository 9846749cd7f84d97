"""The OCI 1.1 referrers API, answered in front of a real registry. Debian's distribution 2.8 has no such
API (it answers 404) and no registry here has one, so the answer is made as the spec says a registry makes it:
from the manifests the registry really stores in that repository, each one whose `subject` is the digest
asked for, as a descriptor with its `artifactType` (else its config's media type) and annotations. Every
other request goes to the registry unchanged, writes included."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import httpx

from mirror.demo.localregistry import LocalRegistry
from mirror.oci import OCI_INDEX, sha256_digest
from mirror.registry import RegistryClient

NOT_FOUND = {"errors": [{"code": "MANIFEST_UNKNOWN", "message": "manifest unknown"}]}


def stored_referrers(registry: LocalRegistry, repository: str, digest: str) -> list[dict[str, Any]]:
    revisions = registry.storage / "docker/registry/v2/repositories" / repository / "_manifests/revisions/sha256"
    found = []
    for revision in sorted(revisions.iterdir()) if revisions.is_dir() else []:
        raw = registry.blob_path(f"sha256:{revision.name}").read_bytes()
        if (json.loads(raw).get("subject") or {}).get("digest") == digest:
            found.append(_described(f"sha256:{revision.name}", raw))
    return found


def _described(digest: str, raw: bytes) -> dict[str, Any]:
    """A manifest as the referrers API lists it."""
    doc = json.loads(raw)
    entry = {
        "mediaType": doc.get("mediaType"),
        "digest": digest,
        "size": len(raw),
        "artifactType": doc.get("artifactType") or (doc.get("config") or {}).get("mediaType"),
    }
    if doc.get("annotations"):
        entry["annotations"] = doc["annotations"]
    return entry


class ReferrersFront:
    """`page_size`: the listing in pages of that many, each naming the next in a `Link` header, as the spec
    allows. `planted`: manifests the registry behind cannot store (distribution 2.8 refuses an OCI 1.1-rc artifact
    manifest), served by digest in every repository and listed as the API lists what it stores."""

    def __init__(
        self,
        registry: LocalRegistry,
        hidden_tags: Iterable[str] = (),
        page_size: int | None = None,
        planted: Iterable[bytes] = (),
    ) -> None:
        self.registry = registry
        self.hidden = set(hidden_tags)  # tags a registry with the API would not have (cosign writes none)
        self.page_size = page_size
        self.planted = {sha256_digest(raw): raw for raw in planted}
        self.asked: list[str] = []  # the paths of referrers requests
        self._upstream = httpx.AsyncClient(base_url=registry.url)

    def client(self) -> RegistryClient:
        front = httpx.AsyncClient(base_url=self.registry.url, transport=httpx.MockTransport(self._answer))
        return RegistryClient(self.registry.host, front)

    async def aclose(self) -> None:
        await self._upstream.aclose()

    async def _answer(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        repository, _, rest = path.removeprefix("/v2/").rpartition("/referrers/")
        if repository and rest:
            self.asked.append(path)
            return self._listing(repository, rest, int(request.url.params.get("page", "0")))
        ref = path.rsplit("/", 1)[-1] if "/manifests/" in path else None
        if ref in self.hidden:
            return httpx.Response(404, json=NOT_FOUND)
        if ref in self.planted:
            raw = self.planted[ref]
            headers = {"Content-Type": json.loads(raw)["mediaType"], "Docker-Content-Digest": ref}
            if request.method == "HEAD":
                return httpx.Response(200, headers={**headers, "Content-Length": str(len(raw))})
            return httpx.Response(200, headers=headers, content=raw)
        body = await request.aread()
        real = await self._upstream.request(
            request.method, request.url.raw_path.decode(), headers=request.headers, content=body
        )
        # a HEAD's Content-Length is the manifest's size: kept as the registry sent it
        headers = {k: v for k, v in real.headers.items() if k.lower() not in ("transfer-encoding", "content-encoding")}
        # an answer not yet read, as one off the wire (blob bytes are read raw, and httpx reads a Response made
        # with content= as it is made)
        return httpx.Response(real.status_code, headers=headers, stream=httpx.ByteStream(real.content))

    def _listing(self, repository: str, digest: str, page: int) -> httpx.Response:
        entries = stored_referrers(self.registry, repository, digest) + [
            _described(planted, raw)
            for planted, raw in self.planted.items()
            if (json.loads(raw).get("subject") or {}).get("digest") == digest
        ]
        headers = {"Content-Type": OCI_INDEX}
        if self.page_size is not None:
            start = page * self.page_size
            entries, more = entries[start : start + self.page_size], len(entries) > start + self.page_size
            if more:
                headers["Link"] = f'</v2/{repository}/referrers/{digest}?page={page + 1}>; rel="next"'
        doc = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
        return httpx.Response(200, headers=headers, content=json.dumps(doc).encode())
