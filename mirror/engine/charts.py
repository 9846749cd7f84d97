"""The charts of the releases a run mirrors, fetched before anything is copied: a chart that cannot be had
or is not safe to open stops the run with one line, and nothing is written."""

from __future__ import annotations

from mirror.chart.archive import ChartArchive
from mirror.chart.source import ChartLocation, FetchLimits, fetch_charts
from mirror.registry import RegistryClient
from mirror.registry.retry import RetryPolicy
from mirror.release import chart_version
from mirror.settings import MirrorSettings


def chart_location(settings: MirrorSettings) -> ChartLocation:
    assert settings.chart is not None
    return ChartLocation(settings.chart.repository, settings.chart.name)


def fetch_limits(settings: MirrorSettings) -> FetchLimits:
    assert settings.chart is not None
    return FetchLimits(
        settings.chart.max_bytes, settings.transfer.read_timeout, RetryPolicy.from_settings(settings.retry)
    )


def chart_client(settings: MirrorSettings) -> RegistryClient | None:
    """A registry client for an oci:// chart's host, with that host's settings and credentials."""
    location = chart_location(settings)
    return RegistryClient.open(location.oci_parts()[0], settings) if location.is_oci else None


async def fetch_release_charts(settings: MirrorSettings, versions: list[str]) -> dict[str, ChartArchive]:
    """Release version -> its chart, when a chart is configured."""
    if settings.chart is None:
        return {}
    location, limits, client = chart_location(settings), fetch_limits(settings), chart_client(settings)
    try:
        charts = await fetch_charts(location, [chart_version(v) for v in versions], limits, client)
        return {version: charts[chart_version(version)] for version in versions}
    finally:
        if client is not None:
            await client.aclose()
