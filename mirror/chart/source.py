"""Where a release's chart comes from: a classic Helm repository (`index.yaml` + `.tgz`, checked against the
digest the index gives) or an `oci://host/path/name` reference (the chart layer of an OCI artifact, checked
against its descriptor). Every read is bounded; index.yaml is read with `untrusted.load_yaml`'s limits and its
entry for the chart checked for Helm's shapes; what arrives is opened by `archive.open_chart`."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from mirror import fetch
from mirror.chart.archive import MAX_FIELD_CHARS, ChartArchive, ChartError, open_chart
from mirror.errors import MirrorError
from mirror.oci import Manifest
from mirror.reference import without_userinfo
from mirror.registry import RegistryClient, RegistryError, RegistryUnreachable
from mirror.registry.errors import IntegrityError
from mirror.registry.retry import RetryPolicy
from mirror.untrusted import UntrustedInput, YamlLimits, clip, load_yaml

HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART_CONTENT = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
MAX_INDEX_BYTES = 32 * 1024 * 1024
# a 20 MB index (Bitnami's, the largest public one, before it was trimmed) is about 1.5 million nodes, 6 deep
INDEX_YAML_LIMITS = YamlLimits(max_bytes=MAX_INDEX_BYTES, max_depth=64, max_nodes=5_000_000)
MAX_URL_CHARS = 2048  # a chart's download URL (a release asset's, the longest seen, is about 150)
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

    @property
    def shown_repository(self) -> str:
        """The repository as a message, a log line or a job record shows it: without the credentials a classic
        repository's URL may carry (`https://user:token@host/...`)."""
        return without_userinfo(self.repository)

    def __str__(self) -> str:
        return f"{self.shown_repository.rstrip('/')}/{self.name}"


def oci_tag(version: str) -> str:
    """Helm stores a chart version as a tag with `+` written as `_`."""
    return version.replace("+", "_")


@dataclass(frozen=True, slots=True)
class FetchLimits:
    max_bytes: int
    timeout: float  # the longest wait for the next bytes
    retry: RetryPolicy
    deadline: float = 300.0  # a whole request, its retries and its body included
    min_rate: int = 64 * 1024


def http_client(limits: FetchLimits) -> httpx.AsyncClient:
    return fetch.http_client(limits.timeout, limits.retry, limits.deadline, limits.min_rate)


async def read_capped(client: httpx.AsyncClient, url: str, limit: int, what: str, *, stored: bool = False) -> bytes:
    try:
        return await fetch.read_capped(client, url, limit, what, stored=stored)
    except fetch.FetchError as exc:
        raise ChartError(clip(str(exc), 600)) from None


async def read_index(client: httpx.AsyncClient, location: ChartLocation) -> list[dict[str, Any]]:
    """The index entries of the chart, one per published version (entries whose version is not a short string
    are passed over)."""
    url = location.repository.rstrip("/") + "/index.yaml"
    raw = await read_capped(client, url, MAX_INDEX_BYTES, f"chart repository {location.shown_repository}")
    where = f"chart repository {location.shown_repository}: index.yaml"
    try:
        # parsed in a thread: a large index takes seconds, and the service's loop answers webhooks meanwhile
        index = await asyncio.to_thread(load_yaml, raw, where, INDEX_YAML_LIMITS)
    except UntrustedInput as exc:
        raise ChartError(str(exc)) from None
    charts = index.get("entries") if isinstance(index, dict) else None
    if not isinstance(charts, dict):
        raise ChartError(f"{where}: entries is not a mapping of chart names")
    entries = charts.get(location.name)
    if entries is None:
        raise ChartError(f"chart repository {location.shown_repository} has no chart named {location.name!r}")
    if not isinstance(entries, list):
        raise ChartError(f"{where}: entries.{location.name} is a {type(entries).__name__}, not a list")
    return [e for e in entries if isinstance(e, dict) and _version(e) is not None]


def _version(entry: dict[str, Any]) -> str | None:
    """An index entry's version as Helm writes it (a string; an unquoted `1.0` reads as a number)."""
    version = entry.get("version")
    if isinstance(version, bool) or not isinstance(version, (str, int, float)):
        return None
    text = str(version)
    return text if text and len(text) <= MAX_FIELD_CHARS else None


# A classic repository's index entries of one chart, read once in a run by whoever asks first (discovery, the
# chart's fetch, `newest`): each read is a round trip across the border. Kept by the run (`Clients`), never
# across runs: the index changes when a release is published.
IndexMemo = dict[tuple[str, str], list[dict[str, Any]]]


async def _index_entries(
    location: ChartLocation, indexes: IndexMemo | None, client: httpx.AsyncClient | None, limits: FetchLimits
) -> list[dict[str, Any]]:
    """The chart's index entries: the run's where it read them already, else read (over `client`, or one of its
    own where the caller has none open)."""
    key = (location.repository, location.name)
    if indexes is not None and key in indexes:
        return indexes[key]
    if client is None:
        async with http_client(limits) as own:
            entries = await read_index(own, location)
    else:
        entries = await read_index(client, location)
    if indexes is not None:
        indexes[key] = entries
    return entries


async def published_versions(
    location: ChartLocation, limits: FetchLimits, source: RegistryClient | None, indexes: IndexMemo | None = None
) -> list[str]:
    """Every version of the chart its repository publishes."""
    if location.is_oci:
        assert source is not None
        try:
            return [t.replace("_", "+") for t in await source.list_tags(location.oci_parts()[1])]
        except (RegistryError, RegistryUnreachable) as exc:
            raise ChartError(f"chart {location}: {clip(str(exc))}") from None
    return [str(_version(e)) for e in await _index_entries(location, indexes, None, limits)]


class KnownManifests(Protocol):
    """Manifests kept by digest from earlier runs (`engine/statecache.ManifestCache`)."""

    def get(self, digest: str) -> Manifest | None: ...

    def put(self, manifest: Manifest) -> None: ...


def every_chart(fetched: dict[str, ChartArchive | MirrorError]) -> dict[str, ChartArchive]:
    """`fetch_each_chart`'s answer where every version must be had: the first that could not raises."""
    charts = {}
    for version, archive in fetched.items():
        if isinstance(archive, MirrorError):
            raise archive
        charts[version] = archive
    return charts


async def fetch_each_chart(
    location: ChartLocation,
    versions: list[str],
    limits: FetchLimits,
    source: RegistryClient | None = None,
    known: KnownManifests | None = None,
    indexes: IndexMemo | None = None,
) -> dict[str, ChartArchive | MirrorError]:
    """The chart archive of each version (the repository's index read once, or taken from `indexes` where the
    run read it already), verified against its digest and opened safely; an OCI chart's manifest taken from
    `known` where the tag's digest is there. A version that cannot be had (not published, its bytes not what the
    index says, no chart Helm takes) is answered by why; the index out of reach raises (`every_chart`: the
    first why raised too)."""
    raws: dict[str, bytes | MirrorError] = {}
    if location.is_oci:
        assert source is not None, "an OCI chart needs a registry client for its host"
        for version in versions:
            where = f"chart {location} {version}"
            raws[version] = await _or_why(_fetch_oci(source, location, version, limits, where, known))
    else:
        async with http_client(limits) as client:
            entries = await _index_entries(location, indexes, client, limits) if versions else []
            for version in versions:
                raws[version] = await _or_why(_fetch_classic(client, location, entries, version, limits))
    return {version: await _opened(location, version, raw) for version, raw in raws.items()}


async def _or_why(fetching: Awaitable[bytes]) -> bytes | MirrorError:
    try:
        return await fetching
    except (ChartError, fetch.FetchError, RegistryError, IntegrityError) as exc:  # this version's, not the source's
        return exc


async def _opened(location: ChartLocation, version: str, raw: bytes | MirrorError) -> ChartArchive | MirrorError:
    if isinstance(raw, MirrorError):
        return raw
    where = f"chart {location} {version}"
    try:
        archive = await asyncio.to_thread(open_chart, raw, where)
    except ChartError as exc:
        return exc
    if archive.name != location.name or archive.version.removeprefix("v") != version.removeprefix("v"):
        return ChartError(f"{where}: the archive holds {archive.name} {archive.version}")
    return archive


async def _fetch_classic(
    client: httpx.AsyncClient, location: ChartLocation, entries: list[dict[str, Any]], version: str, limits: FetchLimits
) -> bytes:
    where = f"chart {location} {version}"
    # a chart versioned `v2.11.0` (Helm takes it) is the release v2.11.0's as `2.11.0` is: the exact one first
    named = [e for e in entries if _version(e) == version] + [e for e in entries if _version(e) == f"v{version}"]
    entry = named[0] if named else None
    if entry is None:
        raise ChartError(f"{where}: not published in {location.shown_repository}/index.yaml")
    url = _download_url(location, entry, where)
    digest = entry.get("digest")
    if not isinstance(digest, str) or len(digest) != 64 or not all(c in "0123456789abcdefABCDEF" for c in digest):
        raise ChartError(f"{where}: the index gives no sha256 digest for it (digest is not 64 hex digits)")
    raw = await read_capped(client, url, limits.max_bytes, where, stored=True)
    actual = hashlib.sha256(raw).hexdigest()
    if actual != digest.lower():
        raise ChartError(f"{where}: {clip(without_userinfo(url))} has sha256 {actual}, the index says {digest}")
    return raw


def _download_url(location: ChartLocation, entry: dict[str, Any], where: str) -> str:
    """The entry's first URL, relative to the repository or absolute, as Helm takes it; with the repository's
    login where it is on the repository's own origin."""
    urls = entry.get("urls")
    if not isinstance(urls, list) or not urls or not isinstance(urls[0], str) or not urls[0].strip():
        raise ChartError(f"{where}: the index gives no download URL for it (urls is not a list of URLs)")
    if len(urls[0]) > MAX_URL_CHARS:
        raise ChartError(f"{where}: the index's download URL is {len(urls[0])} characters (limit {MAX_URL_CHARS})")
    shown = clip(without_userinfo(urls[0]))
    try:
        url = httpx.URL(location.repository.rstrip("/") + "/").join(urls[0])
    except (httpx.InvalidURL, ValueError) as exc:
        reason = clip(without_userinfo(str(exc)))
        raise ChartError(f"{where}: the index's download URL {shown!r} is not a URL: {reason}") from None
    if url.scheme not in ("http", "https"):
        raise ChartError(f"{where}: the index's download URL {shown!r} is not http or https")
    return str(_with_repository_login(url, httpx.URL(location.repository)))


def _with_repository_login(url: httpx.URL, repository: httpx.URL) -> httpx.URL:
    """`url` with the repository's login when it has the repository's scheme, host and port, as Helm sends it
    (ChartMuseum's --chart-url writes absolute URLs on its own host); never to another host. A URL carrying a
    login of its own keeps it."""
    if url.userinfo or not repository.userinfo:
        return url
    if (url.scheme, url.host, url.port) != (repository.scheme, repository.host, repository.port):
        return url
    return url.copy_with(userinfo=repository.userinfo)


async def _fetch_oci(
    source: RegistryClient,
    location: ChartLocation,
    version: str,
    limits: FetchLimits,
    where: str,
    known: KnownManifests | None,
) -> bytes:
    _, repository = location.oci_parts()
    try:
        manifest = await _chart_manifest(source, repository, oci_tag(version), known)
        layer = next((d for d in manifest.layers if d.media_type == HELM_CHART_CONTENT), None)
        if layer is None:
            raise ChartError(f"{where}: the artifact has no {HELM_CHART_CONTENT} layer")
        if layer.size > limits.max_bytes:
            raise ChartError(f"{where}: the chart layer is {layer.size} bytes (limit {limits.max_bytes})")
        return await source.read_blob(repository, layer)
    except (RegistryError, RegistryUnreachable, IntegrityError) as exc:
        raise ChartError(f"{where}: {clip(str(exc))}") from None


async def _chart_manifest(source: RegistryClient, repository: str, tag: str, known: KnownManifests | None) -> Manifest:
    """The tag's manifest: its digest from a HEAD, then the bytes an earlier run kept under it, or one GET by
    digest. A GET is a counted pull on Docker Hub, and a chart's tag rarely moves: a run that changed nothing
    sends its source HEADs only, the chart's included. Without `known`, one GET by tag."""
    if known is None:
        return await source.get_manifest(repository, tag)
    found = await source.head_manifest(repository, tag)
    if found is None:
        raise RegistryError("resolve", source.where(repository, tag), 404, "MANIFEST_UNKNOWN", "no such tag")
    manifest = known.get(found.digest) or await source.get_manifest(repository, found.digest)
    known.put(manifest)
    return manifest
