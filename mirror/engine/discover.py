"""Release discovery: the versions the source publishes for every version-bearing image, kept by a
version filter (`>=2.7.0,<3`) and "newest N"."""

from __future__ import annotations

import logging

from mirror.chart.source import published_versions
from mirror.engine.charts import chart_client, chart_location, fetch_limits
from mirror.engine.clients import Clients
from mirror.engine.jobs import source_repository
from mirror.errors import Kind, MirrorError
from mirror.reference import Repository
from mirror.release import VersionError, is_prerelease, matches, normalise_version, parse_filter, version_key
from mirror.settings import VERSION_PLACEHOLDER, DiscoverySettings, ImageSettings, MirrorSettings
from mirror.values import NESTED_SCHEMA_SINCE

log = logging.getLogger("mirror")


class DiscoveryError(MirrorError):
    """The source's releases could not be listed; the message is one line naming the image and the cause."""

    kind = Kind.UNAVAILABLE


def select_versions(tags: list[str], discovery: DiscoverySettings) -> list[str]:
    """Tags that are release versions (pre-releases only when asked for, and only until their release is out),
    filtered, newest last. A release older than the charts mirror writes values for is left out with a warning:
    asked for, it would stop every run (`mirror sync v2.6.1` is refused as bad input)."""
    clauses = parse_filter(discovery.versions)
    versions = set()
    for tag in tags:
        try:
            version = normalise_version(tag)
        except VersionError:
            continue
        if version != tag:  # only tags spelled as the chart's image tags (`v2.10.0`)
            continue
        if is_prerelease(version) and not discovery.prereleases:
            continue
        if matches(version, clauses):
            versions.add(version)
    too_old = sorted((v for v in versions if version_key(v)[:3] < NESTED_SCHEMA_SINCE), key=version_key)
    if too_old:
        log.warning(
            "discovery: %s left out: HAMi charts before 2.7.0 use the flat values schema, which mirror does not"
            " write (narrow discovery.versions to >=2.7.0)",
            ", ".join(too_old),
        )
    released = {version for version in versions if not is_prerelease(version)}
    superseded = {version for version in versions - released if version.split("-", 1)[0] in released}
    ordered = sorted(versions - set(too_old) - superseded, key=version_key)
    return ordered[-discovery.newest :] if discovery.newest else ordered


def version_bearing_images(settings: MirrorSettings) -> list[tuple[ImageSettings, Repository]]:
    """The images whose tag follows the release, each with its source repository as the registry knows it;
    with only a chart configured, the chart's release image."""
    images = [i for i in settings.images if i.follows_release]
    if not images and settings.chart is not None:
        images = [ImageSettings(name="release", source=settings.chart.release_repository)]
    return [(image, source_repository(settings, image)) for image in images]


def from_chart(settings: MirrorSettings) -> bool:
    source = settings.discovery.source
    return source == "chart" or (source == "auto" and settings.chart is not None)


def versions_in(image: ImageSettings, tags: list[str]) -> set[str]:
    """The `{version}` part of each tag that fits the image's tag template."""
    prefix, suffix = image.tag.split(VERSION_PLACEHOLDER, 1)
    return {
        tag[len(prefix) : len(tag) - len(suffix)]
        for tag in tags
        if tag.startswith(prefix) and tag.endswith(suffix) and len(tag) > len(prefix) + len(suffix)
    }


async def discover(settings: MirrorSettings, clients: Clients) -> list[str]:
    """Versions published in the chart repository (a release exists when its chart does), or published for
    every image whose tag follows the release; with a chart configured, only those whose chart is out."""
    if from_chart(settings):
        return select_versions(await _chart_releases(settings, clients), settings.discovery)
    source = clients[settings.source.registry]
    published: set[str] | None = None
    for image, repository in version_bearing_images(settings):
        found = versions_in(image, await source.list_tags(repository.name))
        published = found if published is None else published & found
    if settings.chart is None:
        return select_versions(sorted(published or ()), settings.discovery)
    every = select_versions(sorted(published or ()), settings.discovery.model_copy(update={"newest": 0}))
    charted = set(await _chart_releases(settings, clients))
    waiting = [version for version in every if version not in charted]
    if waiting:  # its images are pushed before its chart is published: a later run takes it
        log.warning(
            "discovery: %s left for a later run: tagged at the source, its chart not published yet in %s",
            ", ".join(waiting),
            chart_location(settings).shown_repository,
        )
    versions = [version for version in every if version in charted]  # then the newest N of those
    return versions[-settings.discovery.newest :] if settings.discovery.newest else versions


async def _chart_releases(settings: MirrorSettings, clients: Clients) -> list[str]:
    """The release versions of the charts the repository publishes (`2.10.0` and `v2.10.0` alike)."""
    location = chart_location(settings)
    releases = []
    limits = fetch_limits(settings)
    for version in await published_versions(location, limits, chart_client(location, clients), clients.chart_indexes):
        try:
            releases.append(normalise_version(version))
        except VersionError:
            continue  # not a release version (e.g. build metadata Helm allows)
    return releases
