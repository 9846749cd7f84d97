"""From settings, release versions and (when configured) each release's chart to the list of image copies to
make, with the values keys each image answers for. Pure: no network."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field

from mirror import hami
from mirror.chart.archive import ChartArchive
from mirror.chart.images import ImageBlock, image_blocks
from mirror.reference import Repository, api_host
from mirror.release import normalise_version
from mirror.settings import ACR_REGISTRIES, ImageSettings, MirrorSettings, TargetSettings
from mirror.values import require_nested_schema


@dataclass(frozen=True, slots=True)
class ReleaseImage:
    """An image of a release as the values see it: its repository name under each target namespace, the
    values keys that point at it, and a tag to write when the chart would not arrive at it by itself."""

    name: str
    values_keys: tuple[str, ...] = ()
    platforms: tuple[str, ...] | None = None
    values_tag: str | None = None


@dataclass(frozen=True, slots=True)
class TargetRef:
    """One image's place at one target."""

    target: TargetSettings
    repository: Repository

    @property
    def name(self) -> str:
        return self.target.name


@dataclass(frozen=True, slots=True)
class ImageJob:
    """Copy `source:tag` to every target."""

    image: ReleaseImage
    source: Repository
    tag: str
    targets: tuple[TargetRef, ...]

    @property
    def source_ref(self) -> str:
        return f"{self.source}:{self.tag}"


@dataclass(frozen=True)
class ReleaseJob:
    version: str
    images: tuple[ImageJob, ...]
    targets: tuple[TargetSettings, ...]
    chart: ChartArchive | None = field(default=None, repr=False)
    # image blocks the values will leave where they are (an image of the release nobody mirrors)
    unmirrored: tuple[ImageBlock, ...] = ()


@dataclass(frozen=True, slots=True)
class PlannedImage:
    image: ReleaseImage
    source: Repository
    tag: str


def source_repository(settings: MirrorSettings, image: ImageSettings) -> Repository:
    """Where a configured image lives: its own registry, or the config's source registry."""
    return Repository.of(image.registry or settings.source.registry, image.source)


def target_repository(target: TargetSettings, image: ReleaseImage) -> Repository:
    return Repository.of(target.registry, f"{target.namespace}/{image.name}")


def check_versions(settings: MirrorSettings, versions: list[str]) -> list[str]:
    """Normalised, de-duplicated versions; refuses charts whose values schema mirror does not write."""
    normalised = list(dict.fromkeys(normalise_version(v) for v in versions))
    for version in normalised:
        require_nested_schema(version)
    return normalised


def build_release_jobs(
    settings: MirrorSettings,
    versions: list[str],
    target_names: list[str] | None = None,
    charts: dict[str, ChartArchive] | None = None,
) -> list[ReleaseJob]:
    """Validate versions and target names and expand the config into jobs, before any network traffic
    (the charts, when configured, were fetched first and are passed in by version)."""
    normalised = check_versions(settings, versions)
    targets = tuple(settings.target(n) for n in target_names) if target_names else tuple(settings.targets)
    jobs = []
    for version in normalised:
        chart = (charts or {}).get(version)
        planned, unmirrored = release_images(settings, version, chart)
        images = tuple(
            ImageJob(p.image, p.source, p.tag, tuple(TargetRef(t, target_repository(t, p.image)) for t in targets))
            for p in planned
        )
        jobs.append(ReleaseJob(version, images, targets, chart, tuple(unmirrored)))
    return jobs


def release_images(
    settings: MirrorSettings, version: str, chart: ChartArchive | None
) -> tuple[list[PlannedImage], list[ImageBlock]]:
    """The images to mirror for a release, and the image blocks its values would leave on their registry.

    With a chart: the configured images (their keys taken from the chart's blocks for the same repository
    when not given), or else every image block of the chart outside the allowed registries. Without one:
    the configured images, their keys defaulting to HAMi's own."""
    blocks = _blocks(settings, version, chart)
    planned = [_configured(settings, image, version, blocks) for image in settings.images]
    if chart is not None and not settings.images:
        planned = _from_blocks(settings, blocks)
    covered = {key for p in planned for key in p.image.values_keys}
    unmirrored = [b for b in blocks if b.key not in covered and not _allowed(settings, b.registry)]
    return planned, unmirrored


def _blocks(settings: MirrorSettings, version: str, chart: ChartArchive | None) -> list[ImageBlock]:
    if chart is None:
        return hami.default_install_blocks(version)
    assert settings.chart is not None
    return image_blocks(chart.values(), settings.chart.kube_version)


def _configured(settings: MirrorSettings, image: ImageSettings, version: str, blocks: list[ImageBlock]) -> PlannedImage:
    source = source_repository(settings, image)
    keys = tuple(image.values_keys) or tuple(b.key for b in blocks if b.source == source)
    if not keys:
        keys = hami.VALUES_KEYS.get(source.name, ())
    platforms = tuple(image.platforms) if image.platforms else None
    return PlannedImage(ReleaseImage(image.name, keys, platforms), source, image.tag_for(version))


def _from_blocks(settings: MirrorSettings, blocks: list[ImageBlock]) -> list[PlannedImage]:
    """One image per (repository, tag) of the chart, with every key that names it; names are the
    repository's last component, or `<owner>-<name>` where two sources would meet on one tag."""
    assert settings.chart is not None
    grouped: dict[tuple[Repository, str], list[ImageBlock]] = {}
    for block in blocks:
        if _allowed(settings, block.registry) and not settings.chart.mirror_acr_images:
            continue
        grouped.setdefault((block.source, block.tag), []).append(block)
    planned: list[PlannedImage] = []
    taken: dict[tuple[str, str], Repository] = {}
    for (source, tag), group in grouped.items():
        name = source.name.rsplit("/", 1)[-1]
        if taken.get((name, tag), source) != source:
            name = source.name.replace("/", "-")
        taken[(name, tag)] = source
        values_tag = tag if any(b.tag_from_kube_version for b in group) else None
        image = ReleaseImage(name, tuple(b.key for b in group), None, values_tag)
        planned.append(PlannedImage(image, source, tag))
    return planned


def _allowed(settings: MirrorSettings, registry: str) -> bool:
    patterns = settings.chart.allowed_registries if settings.chart else ACR_REGISTRIES
    return any(fnmatch.fnmatch(api_host(registry), pattern) for pattern in patterns)


def registry_hosts(jobs: Iterable[ReleaseJob]) -> set[str]:
    hosts = set()
    for job in jobs:
        for image in job.images:
            hosts.add(image.source.registry)
            hosts.update(ref.repository.registry for ref in image.targets)
    return {api_host(h) for h in hosts}
