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
from mirror.oci import OCI_INDEX
from mirror.registry import RegistryClient

NOT_FOUND = {"errors": [{"code": "MANIFEST_UNKNOWN", "message": "manifest unknown"}]}


def stored_referrers(registry: LocalRegistry, repository: str, digest: str) -> list[dict[str, Any]]:
    revisions = registry.storage / "docker/registry/v2/repositories" / repository / "_manifests/revisions/sha256"
    found = []
    for revision in sorted(revisions.iterdir()) if revisions.is_dir() else []:
        raw = registry.blob_path(f"sha256:{revision.name}").read_bytes()
        doc = json.loads(raw)
        if (doc.get("subject") or {}).get("digest") != digest:
            continue
        entry = {
            "mediaType": doc.get("mediaType"),
            "digest": f"sha256:{revision.name}",
            "size": len(raw),
            "artifactType": doc.get("artifactType") or (doc.get("config") or {}).get("mediaType"),
        }
        if doc.get("annotations"):
            entry["annotations"] = doc["annotations"]
        found.append(entry)
    return found


class ReferrersFront:
    def __init__(self, registry: LocalRegistry, hidden_tags: Iterable[str] = ()) -> None:
        self.registry = registry
        self.hidden = set(hidden_tags)  # tags a registry with the API would not have (cosign writes none)
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
            doc = {
                "schemaVersion": 2,
                "mediaType": OCI_INDEX,
                "manifests": stored_referrers(self.registry, repository, rest),
            }
            return httpx.Response(200, headers={"Content-Type": OCI_INDEX}, content=json.dumps(doc).encode())
        if "/manifests/" in path and path.rsplit("/", 1)[-1] in self.hidden:
            return httpx.Response(404, json=NOT_FOUND)
        body = await request.aread()
        real = await self._upstream.request(
            request.method, request.url.raw_path.decode(), headers=request.headers, content=body
        )
        # a HEAD's Content-Length is the manifest's size: kept as the registry sent it
        headers = {k: v for k, v in real.headers.items() if k.lower() not in ("transfer-encoding", "content-encoding")}
        return httpx.Response(real.status_code, headers=headers, content=real.content)
