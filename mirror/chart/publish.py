"""A chart published to a target registry as Helm stores it in OCI (`helm push`): a config blob holding
Chart.yaml as JSON, one layer holding the `.tgz` bytes unchanged, an image manifest tagged with the chart
version. Pushed with the same client, credentials and retries as the images."""

from __future__ import annotations

import json
from dataclasses import dataclass

from mirror.acr import refuses_manifest_class
from mirror.chart.archive import ChartArchive
from mirror.chart.source import HELM_CHART_CONTENT, HELM_CONFIG, oci_tag
from mirror.oci import OCI_MANIFEST, Manifest, sha256_digest
from mirror.registry import RegistryClient, RegistryError


@dataclass(frozen=True, slots=True)
class Published:
    reference: str | None  # host/repository:tag, when the registry took it
    refusal: str | None = None  # why not, when it refused the artifact


def chart_manifest(archive: ChartArchive) -> tuple[bytes, Manifest]:
    config = json.dumps(archive.metadata, separators=(",", ":"), sort_keys=True, default=str).encode()
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": HELM_CONFIG, "digest": sha256_digest(config), "size": len(config)},
        "layers": [{"mediaType": HELM_CHART_CONTENT, "digest": sha256_digest(archive.raw), "size": len(archive.raw)}],
        "annotations": {
            "org.opencontainers.image.title": archive.name,
            "org.opencontainers.image.version": archive.version,
        },
    }
    return config, Manifest.parse(json.dumps(doc, separators=(",", ":")).encode())


async def publish_chart(client: RegistryClient, repository: str, archive: ChartArchive) -> Published:
    """Push the chart unless the same manifest is already at the tag; verify the tag resolves to it."""
    config, manifest = chart_manifest(archive)
    tag = oci_tag(archive.version)
    where = f"{client.host}/{repository}:{tag}"
    current = await client.head_manifest(repository, tag)
    if current is None or current.digest != manifest.digest:
        for data in (config, archive.raw):
            digest = sha256_digest(data)
            if await client.head_blob(repository, digest) is None:
                await client.push_blob(repository, digest, data)
        try:
            await client.put_manifest(repository, tag, manifest)
        except RegistryError as exc:
            if refuses_manifest_class(exc):  # ACR's Personal Edition takes no chart artifact
                return Published(None, f"{client.host} refused the chart artifact: {exc.message or exc.code}")
            raise
    check = await client.head_manifest(repository, tag)
    if check is None or check.digest != manifest.digest:
        raise RegistryError("verify chart", where, 200, "", "the tag does not resolve to the pushed chart")
    return Published(where)
