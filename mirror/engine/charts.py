"""The charts of the releases a run mirrors, fetched before anything is copied: a chart that cannot be had
or is not safe to open stops the run with one line, and nothing is written."""

from __future__ import annotations

from mirror.chart.archive import ChartArchive
from mirror.chart.source import ChartLocation, FetchLimits, fetch_charts
from mirror.engine.clients import Clients, retry_policy
from mirror.release import chart_version
from mirror.settings import MirrorSettings


def chart_location(settings: MirrorSettings) -> ChartLocation:
    assert settings.chart is not None
    return ChartLocation(settings.chart.repository, settings.chart.name)


def fetch_limits(settings: MirrorSettings) -> FetchLimits:
    assert settings.chart is not None
    return FetchLimits(settings.chart.max_bytes, settings.transfer.read_timeout, retry_policy(settings.retry))


async def fetch_release_charts(
    settings: MirrorSettings, versions: list[str], clients: Clients
) -> dict[str, ChartArchive]:
    """Release version -> its chart, when a chart is configured (an oci:// chart through the run's client for
    its host: the same credentials and token cache as the images)."""
    if settings.chart is None:
        return {}
    location = chart_location(settings)
    client = clients[location.oci_parts()[0]] if location.is_oci else None
    charts = await fetch_charts(location, [chart_version(v) for v in versions], fetch_limits(settings), client)
    return {version: charts[chart_version(version)] for version in versions}
