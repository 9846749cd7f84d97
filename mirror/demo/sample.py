"""Build sample images and push them: multi-arch OCI indexes with BuildKit-style attestations, Docker
manifest lists and single manifests, with random layers. Manifests are written with unusual JSON
whitespace on purpose: a copy that re-serialises them would change their digests."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from mirror import oci
from mirror.oci import sha256_digest
from mirror.registry import RegistryClient

MiB = 1024 * 1024
IN_TOTO = "application/vnd.in-toto+json"


@dataclass
class SampleImage:
    repository: str
    tag: str
    digest: str
    media_type: str
    manifests: dict[str, bytes] = field(default_factory=dict)  # digest -> bytes, root included
    blobs: dict[str, int] = field(default_factory=dict)  # digest -> size

    @property
    def blob_bytes(self) -> int:
        return sum(self.blobs.values())


def odd_json(doc: dict[str, Any]) -> bytes:
    """Valid JSON no serializer would produce by default: three-space indent, spaces before colons."""
    return (json.dumps(doc, indent=3).replace('": ', '" :  ') + "\n").encode()


class SampleBuilder:
    """Pushes blobs and manifests of made-up images into one registry repository."""

    def __init__(self, client: RegistryClient, repository: str, seed: int = 0) -> None:
        self.client = client
        self.repository = repository
        self.random = random.Random(seed)
        self.image = SampleImage(repository, "", "", "")

    async def blob(self, data: bytes, media_type: str) -> dict[str, Any]:
        digest = sha256_digest(data)
        if digest not in self.image.blobs and await self.client.head_blob(self.repository, digest) is None:
            await self.client.push_blob(self.repository, digest, data)
        self.image.blobs[digest] = len(data)
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    def random_layer(self, size: int) -> bytes:
        return self.random.randbytes(size)

    async def manifest(self, doc: dict[str, Any], ref: str | None = None) -> dict[str, Any]:
        raw = odd_json(doc)
        manifest = oci.Manifest.parse(raw)
        await self.client.put_manifest(self.repository, ref or manifest.digest, manifest)
        self.image.manifests[manifest.digest] = raw
        return {"mediaType": manifest.media_type, "digest": manifest.digest, "size": len(raw)}

    async def image_manifest(self, platform: str, layers: list[bytes], docker: bool = False) -> dict[str, Any]:
        os_name, arch = platform.split("/")[:2]
        config_type = oci.DOCKER_CONFIG if docker else oci.OCI_CONFIG
        layer_type = (
            "application/vnd.docker.image.rootfs.diff.tar.gzip"
            if docker
            else "application/vnd.oci.image.layer.v1.tar+gzip"
        )
        config = json.dumps({"architecture": arch, "os": os_name, "rootfs": {"type": "layers", "diff_ids": []}})
        doc = {
            "schemaVersion": 2,
            "mediaType": oci.DOCKER_MANIFEST if docker else oci.OCI_MANIFEST,
            "config": await self.blob(config.encode(), config_type),
            "layers": [await self.blob(layer, layer_type) for layer in layers],
        }
        descriptor = await self.manifest(doc)
        descriptor["platform"] = {"architecture": arch, "os": os_name}
        return descriptor

    async def attestation(self, subject_digest: str) -> dict[str, Any]:
        statement = json.dumps({"_type": "https://in-toto.io/Statement/v0.1", "subject": subject_digest})
        doc = {
            "schemaVersion": 2,
            "mediaType": oci.OCI_MANIFEST,
            "config": await self.blob(b"{}", oci.OCI_EMPTY),
            "layers": [await self.blob(statement.encode(), IN_TOTO)],
        }
        descriptor = await self.manifest(doc)
        descriptor["platform"] = {"architecture": "unknown", "os": "unknown"}
        descriptor["annotations"] = {
            "vnd.docker.reference.digest": subject_digest,
            "vnd.docker.reference.type": "attestation-manifest",
        }
        return descriptor

    async def finish(self, tag: str, root: dict[str, Any]) -> SampleImage:
        self.image.tag = tag
        self.image.digest = root["digest"]
        self.image.media_type = root["mediaType"]
        return self.image


async def push_multiarch(
    client: RegistryClient,
    repository: str,
    tag: str,
    *,
    platforms: tuple[str, ...] = ("linux/amd64", "linux/arm64"),
    layer_sizes: tuple[int, ...] = (2 * MiB, 1 * MiB),
    shared_layers: tuple[bytes, ...] = (),
    attestations: bool = True,
    docker: bool = False,
    seed: int = 0,
) -> SampleImage:
    """An index (OCI, or a Docker manifest list with docker=True) with one image per platform. Every
    platform gets `shared_layers` first, then its own random layers; OCI indexes get an attestation
    manifest per platform unless attestations=False."""
    builder = SampleBuilder(client, repository, seed)
    entries = []
    for platform in platforms:
        layers = [*shared_layers, *(builder.random_layer(size) for size in layer_sizes)]
        entry = await builder.image_manifest(platform, layers, docker)
        entries.append(entry)
    if attestations and not docker:
        entries += [await builder.attestation(entry["digest"]) for entry in list(entries)]
    index = {
        "schemaVersion": 2,
        "mediaType": oci.DOCKER_MANIFEST_LIST if docker else oci.OCI_INDEX,
        "manifests": entries,
    }
    return await builder.finish(tag, await builder.manifest(index, tag))


async def push_single(
    client: RegistryClient,
    repository: str,
    tag: str,
    *,
    layer_sizes: tuple[int, ...] = (1 * MiB,),
    shared_layers: tuple[bytes, ...] = (),
    docker: bool = True,
    seed: int = 0,
) -> SampleImage:
    """One single-platform image manifest, tagged."""
    builder = SampleBuilder(client, repository, seed)
    layers = [*shared_layers, *(builder.random_layer(size) for size in layer_sizes)]
    descriptor = await builder.image_manifest("linux/amd64", layers, docker)
    raw = builder.image.manifests[descriptor["digest"]]
    await client.put_manifest(repository, tag, oci.Manifest.parse(raw))
    return await builder.finish(tag, descriptor)
