"""The charts of the install, fetched before anything is copied: the release's chart for each release, and each
chart of `charts:` at its pinned version or its repository's newest. A chart that cannot be had or is not safe
to open stops the run with one line, and nothing is written."""

from __future__ import annotations

from mirror.chart.archive import ChartArchive, ChartError
from mirror.chart.source import ChartLocation, FetchLimits, fetch_charts, published_versions
from mirror.engine.clients import Clients, retry_policy
from mirror.engine.jobs import InstallCharts
from mirror.registry import RegistryClient
from mirror.release import VersionError, chart_version, normalise_version, version_key
from mirror.settings import NEWEST, InstallChartSettings, MirrorSettings


def chart_location(settings: MirrorSettings) -> ChartLocation:
    assert settings.chart is not None
    return ChartLocation(settings.chart.repository, settings.chart.name)


def fetch_limits(settings: MirrorSettings) -> FetchLimits:
    assert settings.chart is not None
    return FetchLimits(settings.chart.max_bytes, settings.transfer.read_timeout, retry_policy(settings.retry))


def _client(location: ChartLocation, clients: Clients) -> RegistryClient | None:
    """An oci:// chart is read through the run's client for its host: the images' credentials and tokens."""
    return clients[location.oci_parts()[0]] if location.is_oci else None


async def fetch_install_charts(settings: MirrorSettings, versions: list[str], clients: Clients) -> InstallCharts:
    if settings.chart is None:
        return InstallCharts()
    location = chart_location(settings)
    limits = fetch_limits(settings)
    charts = await fetch_charts(location, [chart_version(v) for v in versions], limits, _client(location, clients))
    others = [await _fetch_other(chart, limits, clients) for chart in settings.charts]
    return InstallCharts({version: charts[chart_version(version)] for version in versions}, tuple(others))


async def _fetch_other(chart: InstallChartSettings, limits: FetchLimits, clients: Clients) -> ChartArchive:
    location = ChartLocation(chart.repository, chart.name)
    client = _client(location, clients)
    version = chart.version
    if version == NEWEST:
        version = newest(await published_versions(location, limits, client), str(location))
    return (await fetch_charts(location, [version], limits, client))[version]


def newest(versions: list[str], where: str) -> str:
    """The highest release version (pre-releases and build metadata are passed over)."""
    releases = []
    for version in versions:
        try:
            key = version_key(normalise_version(version))
        except VersionError:
            continue
        if key[3] == 1:  # not a pre-release
            releases.append((key, version))
    if not releases:
        raise ChartError(f"chart {where}: no released version published")
    return max(releases)[1]
