"""The charts of the install, fetched before anything is copied: the release's chart for each release, and each
chart of `charts:` at its pinned version or its repository's newest. A chart that cannot be had or is not safe
to open stops the run with one line, and nothing is written. Each is read for its images; a tag its values leave
empty that no Helm render settled is checked at the source against its `v` twin (`settle_guessed_tags`)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from mirror.chart.archive import ChartArchive, ChartError
from mirror.chart.images import ImageBlock, image_blocks, tag_twin
from mirror.chart.merge import without_nulls
from mirror.chart.render import RenderRequest
from mirror.chart.source import ChartLocation, FetchLimits, every_chart, fetch_each_chart, published_versions
from mirror.chart.tags import resolve_tags
from mirror.engine.clients import Clients, retry_policy
from mirror.engine.jobs import FetchedChart, InstallCharts, copied_as_named, install_spec, release_spec
from mirror.engine.statecache import ManifestCache
from mirror.errors import MirrorError
from mirror.reference import Repository
from mirror.registry import RegistryClient
from mirror.release import VersionError, chart_version, normalise_version, version_key
from mirror.settings import NEWEST, InstallChartSettings, MirrorSettings
from mirror.values import ChartSpec

log = logging.getLogger("mirror")


def chart_location(settings: MirrorSettings) -> ChartLocation:
    assert settings.chart is not None
    return ChartLocation(settings.chart.repository, settings.chart.name)


def fetch_limits(settings: MirrorSettings) -> FetchLimits:
    assert settings.chart is not None
    transfer = settings.transfer
    policy = retry_policy(settings.retry)
    return FetchLimits(settings.chart.max_bytes, transfer.read_timeout, policy, transfer.deadline, transfer.min_rate)


def chart_client(location: ChartLocation, clients: Clients) -> RegistryClient | None:
    """An oci:// chart is read through the run's client for its host: the images' credentials and tokens."""
    return clients[location.oci_parts()[0]] if location.is_oci else None


async def fetch_install_charts(settings: MirrorSettings, versions: list[str], clients: Clients) -> InstallCharts:
    """Every chart of the install, each read for its images (`FetchedChart`). A release whose chart cannot be had
    or read is in `failed` with why, the others fetched, unless none can be had (the first reason raised)."""
    if settings.chart is None:
        return InstallCharts()
    location = chart_location(settings)
    limits = fetch_limits(settings)
    known = ManifestCache(settings.state_dir)  # an OCI chart's manifest, kept: its tag's HEAD tells if it moved
    client = chart_client(location, clients)
    versions_asked = [chart_version(v) for v in versions]
    charts = await fetch_each_chart(location, versions_asked, limits, client, known, clients.chart_indexes)
    release: dict[str, FetchedChart] = {}
    failed: dict[str, MirrorError] = {}
    for v in versions:  # a release whose chart cannot be had or read fails alone: the run's others go on
        archive = charts[chart_version(v)]
        if isinstance(archive, MirrorError):
            failed[v] = archive
            continue
        try:
            release[v] = await read_chart(settings, release_spec(settings), archive, clients)
        except MirrorError as exc:
            failed[v] = exc
    if failed and not release:
        raise next(iter(failed.values()))
    others = []
    for chart in settings.charts:
        fetched = await _fetch_other(chart, limits, clients, known)
        others.append(await read_chart(settings, install_spec(settings, chart), fetched, clients))
    return InstallCharts(release, tuple(others), failed)


async def read_chart(
    settings: MirrorSettings, spec: ChartSpec, archive: ChartArchive, clients: Clients
) -> FetchedChart:
    """The chart's image references with the user's values for it layered on, each empty tag as Helm resolves
    it (`chart/tags.py`, in a thread waiting on Helm's render child); where no Helm rendered it, as the source
    registry settles the guess (`settle_guessed_tags`, with the run's `clients`)."""
    assert settings.chart is not None
    overrides = without_nulls(dict(spec.extra))  # a null: the chart's own default, as the values file leaves it
    blocks = await asyncio.to_thread(
        image_blocks, archive, settings.chart.kube_version, overrides, settings.chart.max_images
    )
    request = RenderRequest(spec.release, spec.namespace, settings.chart.kube_version)
    resolved = await asyncio.to_thread(resolve_tags, archive, blocks, request, settings.chart.renderer, overrides)
    resolved = await settle_guessed_tags(settings, spec, resolved, clients, f"chart {archive.name} {archive.version}")
    return FetchedChart(archive, tuple(resolved))


async def settle_guessed_tags(
    settings: MirrorSettings, spec: ChartSpec, blocks: list[ImageBlock], clients: Clients, where: str
) -> list[ImageBlock]:
    """Each guessed tag no render settled (`2.13.0` from kube-state-metrics' appVersion, whose template renders
    `v2.13.0`), checked at the source where the run copies it: missing there while its `v` twin is present, the
    twin is taken (`tag_check="source"`) for the copy. Otherwise (both, neither, no answer) the guess
    stands and the render proof judges. One HEAD per candidate tag, the guesses all at once, each twin only after
    its guess was missing; nothing is sent where Helm rendered the chart or no tag was guessed."""
    guesses = sorted({(b.source, b.tag) for b in blocks if _unsettled(settings, spec, b)}, key=str)
    if not guesses:
        return blocks
    found = await asyncio.gather(*(_tag_at_source(clients, source, tag) for source, tag in guesses))
    taken = {guess: tag for guess, tag in zip(guesses, found, strict=True) if tag != guess[1]}
    settled: list[ImageBlock] = []
    keys: dict[tuple[Repository, str], list[str]] = {candidate: [] for candidate in taken}
    for block in blocks:
        candidate = (block.source, block.tag)
        if candidate in taken and _unsettled(settings, spec, block):
            keys[candidate].append(block.key)
            block = replace(block, tag=taken[candidate], tag_check="source")
        settled.append(block)
    for (source, guess), tag in taken.items():
        log.info(
            "%s: %s leave(s) the tag to the chart, which no Helm rendered: %s:%s is not at the source but %s is: "
            "taken instead",
            where,
            ", ".join(keys[(source, guess)]),
            source,
            guess,
            tag,
        )
    return settled


def _unsettled(settings: MirrorSettings, spec: ChartSpec, block: ImageBlock) -> bool:
    """A guessed tag (`images.py`) that no render settled, whose guess has a `v` twin to ask for, of a block the run
    copies as the chart names it (`jobs.copied_as_named`; the release chart's blocks are the configured images'
    where `images:` lists them)."""
    if not block.tag_inferred or block.tag_check or tag_twin(block.tag) is None:
        return False
    return not (spec.is_release_chart and settings.images) and copied_as_named(settings, spec, block)


async def _tag_at_source(clients: Clients, source: Repository, guess: str) -> str:
    """The guess where the source has it, else its `v` twin where the source has that, else the guess. Asked
    through the run's memo (`Clients.head_tag`): the copy of the tag taken asks nothing again."""
    twin = tag_twin(guess)
    try:
        if twin is None or await clients.head_tag(source.registry, source.name, guess) is not None:
            return guess
        if await clients.head_tag(source.registry, source.name, twin) is not None:
            return twin
    except MirrorError as exc:  # the copy asks again, and says why
        log.debug("%s:%s: tag not checked at the source: %s", source, guess, exc)
    return guess


async def _fetch_other(
    chart: InstallChartSettings, limits: FetchLimits, clients: Clients, known: ManifestCache
) -> ChartArchive:
    location = ChartLocation(chart.repository, chart.name)
    client = chart_client(location, clients)
    version = chart.version
    if version == NEWEST:
        version = newest(await published_versions(location, limits, client, clients.chart_indexes), str(location))
    fetched = await fetch_each_chart(location, [version], limits, client, known, clients.chart_indexes)
    return every_chart(fetched)[version]


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
