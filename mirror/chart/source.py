"""Where a release's chart comes from: a classic Helm repository (`index.yaml` + `.tgz`, checked against the
digest the index gives) or an `oci://host/path/name` reference (the chart layer of an OCI artifact, checked
against its descriptor). Every read is bounded; what arrives is opened by `archive.open_chart`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import httpx
import yaml

from mirror import fetch
from mirror.chart.archive import ChartArchive, ChartError, open_chart
from mirror.registry import RegistryClient, RegistryError, RegistryUnreachable
from mirror.registry.errors import IntegrityError
from mirror.registry.retry import RetryPolicy

HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART_CONTENT = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
MAX_INDEX_BYTES = 32 * 1024 * 1024
OCI_SCHEME = "oci://"


@dataclass(frozen=True, slots=True)
class ChartLocation:
    """A chart by name in a repository: `https://project-hami.github.io/HAMi` + `hami`, or
    `oci://registry-1.docker.io/projecthami` + `hami`."""

    repository: str
    name: str

    @property
    def is_oci(self) -> bool:
        return self.repository.startswith(OCI_SCHEME)

    def oci_parts(self) -> tuple[str, str]:
        """(registry host, repository path) of an OCI chart."""
        host, _, path = self.repository.removeprefix(OCI_SCHEME).rstrip("/").partition("/")
        return host, f"{path}/{self.name}" if path else self.name

    def __str__(self) -> str:
        return f"{self.repository.rstrip('/')}/{self.name}"


def oci_tag(version: str) -> str:
    """Helm stores a chart version as a tag with `+` written as `_`."""
    return version.replace("+", "_")


@dataclass(frozen=True, slots=True)
class FetchLimits:
    max_bytes: int
    timeout: float
    retry: RetryPolicy


def http_client(limits: FetchLimits) -> httpx.AsyncClient:
    return fetch.http_client(limits.timeout, limits.retry)


async def read_capped(client: httpx.AsyncClient, url: str, limit: int, what: str) -> bytes:
    try:
        return await fetch.read_capped(client, url, limit, what)
    except fetch.FetchError as exc:
        raise ChartError(str(exc)) from None


async def read_index(client: httpx.AsyncClient, location: ChartLocation) -> list[dict[str, Any]]:
    """The index entries of the chart, one per published version."""
    url = location.repository.rstrip("/") + "/index.yaml"
    raw = await read_capped(client, url, MAX_INDEX_BYTES, f"chart repository {location.repository}")
    try:
        index = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ChartError(f"chart repository {location.repository}: index.yaml is not YAML: {exc}") from None
    entries = index.get("entries", {}).get(location.name) if isinstance(index, dict) else None
    if not isinstance(entries, list):
        raise ChartError(f"chart repository {location.repository} has no chart named {location.name!r}")
    return [e for e in entries if isinstance(e, dict) and e.get("version")]


async def published_versions(location: ChartLocation, limits: FetchLimits, source: RegistryClient | None) -> list[str]:
    """Every version of the chart its repository publishes."""
    if location.is_oci:
        assert source is not None
        try:
            return [t.replace("_", "+") for t in await source.list_tags(location.oci_parts()[1])]
        except (RegistryError, RegistryUnreachable) as exc:
            raise ChartError(f"chart {location}: {exc}") from None
    async with http_client(limits) as client:
        return [str(e["version"]) for e in await read_index(client, location)]


async def fetch_charts(
    location: ChartLocation, versions: list[str], limits: FetchLimits, source: RegistryClient | None = None
) -> dict[str, ChartArchive]:
    """The chart archive of each version (the repository's index read once), verified against its digest and
    opened safely."""
    raws: dict[str, bytes] = {}
    if location.is_oci:
        assert source is not None, "an OCI chart needs a registry client for its host"
        for version in versions:
            raws[version] = await _fetch_oci(source, location, version, limits, f"chart {location} {version}")
    else:
        async with http_client(limits) as client:
            entries = await read_index(client, location) if versions else []
            for version in versions:
                raws[version] = await _fetch_classic(client, location, entries, version, limits)
    charts = {}
    for version, raw in raws.items():
        where = f"chart {location} {version}"
        archive = open_chart(raw, where)
        if archive.name != location.name or archive.version != version:
            raise ChartError(f"{where}: the archive holds {archive.name} {archive.version}")
        charts[version] = archive
    return charts


async def _fetch_classic(
    client: httpx.AsyncClient, location: ChartLocation, entries: list[dict[str, Any]], version: str, limits: FetchLimits
) -> bytes:
    where = f"chart {location} {version}"
    entry = next((e for e in entries if str(e["version"]) == version), None)
    if entry is None:
        raise ChartError(f"{where}: not published in {location.repository}/index.yaml")
    urls, digest = entry.get("urls") or [], str(entry.get("digest") or "")
    if not urls or len(digest) != 64:
        raise ChartError(f"{where}: the index gives no download URL or no sha256 digest for it")
    url = str(httpx.URL(location.repository.rstrip("/") + "/").join(str(urls[0])))
    raw = await read_capped(client, url, limits.max_bytes, where)
    actual = hashlib.sha256(raw).hexdigest()
    if actual != digest.lower():
        raise ChartError(f"{where}: {url} has sha256 {actual}, the index says {digest}")
    return raw


async def _fetch_oci(
    source: RegistryClient, location: ChartLocation, version: str, limits: FetchLimits, where: str
) -> bytes:
    _, repository = location.oci_parts()
    try:
        manifest = await source.get_manifest(repository, oci_tag(version))
        layer = next((d for d in manifest.layers if d.media_type == HELM_CHART_CONTENT), None)
        if layer is None:
            raise ChartError(f"{where}: the artifact has no {HELM_CHART_CONTENT} layer")
        if layer.size > limits.max_bytes:
            raise ChartError(f"{where}: the chart layer is {layer.size} bytes (limit {limits.max_bytes})")
        return await source.read_blob(repository, layer)
    except (RegistryError, RegistryUnreachable, IntegrityError) as exc:
        raise ChartError(f"{where}: {exc}") from None
