"""The charts of the install, fetched before anything is copied: the release's chart for each release, and each
chart of `charts:` at its pinned version or its repository's newest. A chart that cannot be had or is not safe
to open stops the run with one line, and nothing is written."""

from __future__ import annotations

import asyncio

from mirror.chart.archive import ChartArchive, ChartError
from mirror.chart.images import image_blocks
from mirror.chart.render import RenderRequest
from mirror.chart.source import ChartLocation, FetchLimits, fetch_charts, published_versions
from mirror.chart.tags import resolve_tags
from mirror.engine.clients import Clients, retry_policy
from mirror.engine.jobs import FetchedChart, InstallCharts, install_spec, release_spec
from mirror.registry import RegistryClient
from mirror.release import VersionError, chart_version, normalise_version, version_key
from mirror.settings import NEWEST, InstallChartSettings, MirrorSettings
from mirror.values import ChartSpec


def chart_location(settings: MirrorSettings) -> ChartLocation:
    assert settings.chart is not None
    return ChartLocation(settings.chart.repository, settings.chart.name)


def fetch_limits(settings: MirrorSettings) -> FetchLimits:
    assert settings.chart is not None
    transfer = settings.transfer
    policy = retry_policy(settings.retry)
    return FetchLimits(settings.chart.max_bytes, transfer.read_timeout, policy, transfer.deadline, transfer.min_rate)


def _client(location: ChartLocation, clients: Clients) -> RegistryClient | None:
    """An oci:// chart is read through the run's client for its host: the images' credentials and tokens."""
    return clients[location.oci_parts()[0]] if location.is_oci else None


async def fetch_install_charts(settings: MirrorSettings, versions: list[str], clients: Clients) -> InstallCharts:
    """Every chart of the install, each read for its images (`FetchedChart`)."""
    if settings.chart is None:
        return InstallCharts()
    location = chart_location(settings)
    limits = fetch_limits(settings)
    charts = await fetch_charts(location, [chart_version(v) for v in versions], limits, _client(location, clients))
    release = {v: await read_chart(settings, release_spec(settings), charts[chart_version(v)]) for v in versions}
    others = []
    for chart in settings.charts:
        others.append(
            await read_chart(settings, install_spec(settings, chart), await _fetch_other(chart, limits, clients))
        )
    return InstallCharts(release, tuple(others))


async def read_chart(settings: MirrorSettings, spec: ChartSpec, archive: ChartArchive) -> FetchedChart:
    """The chart's image references with the user's values for it layered on, each empty tag as Helm resolves
    it (`chart/tags.py`, in a thread waiting on Helm's render child)."""
    assert settings.chart is not None
    overrides = dict(spec.extra)
    blocks = await asyncio.to_thread(
        image_blocks, archive, settings.chart.kube_version, overrides, settings.chart.max_images
    )
    request = RenderRequest(spec.release, spec.namespace, settings.chart.kube_version)
    resolved = await asyncio.to_thread(resolve_tags, archive, blocks, request, settings.chart.renderer, overrides)
    return FetchedChart(archive, tuple(resolved))


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
