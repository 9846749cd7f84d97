"""From settings, release versions and the install's charts to the copies to make and, per chart, the values
blocks each copy answers for. Pure: no network.

A release installs one or more charts: the release's own (HAMi, following the version given to `mirror sync`),
then each chart of `charts:` (HAMi-WebUI), each with its subcharts. Every image reference any of them can run
becomes a use of one copy; a copy shared by several blocks or charts is made once. Chart images and configured
images become the same `ImageJob`: the copy code does not know where its list came from.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from mirror import hami
from mirror.chart.archive import ChartArchive
from mirror.chart.images import ImageBlock
from mirror.chart.merge import near_misses
from mirror.chart.source import oci_tag
from mirror.errors import MirrorError
from mirror.naming import check_chart_apart, check_unique, flat_name
from mirror.reference import Repository, without_userinfo
from mirror.release import chart_version, normalise_version
from mirror.settings import (
    ImageSettings,
    InstallChartSettings,
    MirrorSettings,
    TargetSettings,
)
from mirror.values import ChartSpec, require_nested_schema

log = logging.getLogger("mirror")

PINNED_TAG_PREFIX = "pinned-"  # the target tag of an image the chart names by digest alone


@dataclass(frozen=True, slots=True)
class ReleaseImage:
    """A copy as the targets see it: its repository name under each target namespace."""

    name: str
    platforms: tuple[str, ...] | None = None


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
    """Copy `source:tag` (or the pinned `source@digest`, tagged `tag` at the targets) to every target."""

    image: ReleaseImage
    source: Repository
    tag: str
    targets: tuple[TargetRef, ...]
    digest: str | None = None  # pinned by the chart: copied by digest, whatever the source tag says now

    def platforms_at(self, ref: TargetRef) -> list[str] | None:
        """The platforms `ref`'s copy keeps: the image's own filter, else its target's, else all (None)."""
        return list(self.image.platforms or ref.target.platforms or []) or None

    @property
    def source_ref(self) -> str:
        tag = "" if self.tag.startswith(PINNED_TAG_PREFIX) else f":{self.tag}"  # a tag of the target's only
        return f"{self.source}{tag}" + (f"@{self.digest}" if self.digest else "")

    @property
    def source_identifier(self) -> str:
        """What the source is asked for: the pinned digest, else the tag."""
        return self.digest or self.tag


@dataclass(frozen=True, slots=True)
class ImageUse:
    """One values block of one chart, pointed at one copy (`ReleaseJob.images[copy]`)."""

    block: ImageBlock
    copy: int
    values_tag: str | None = None  # written when the chart would compute another tag (kube-scheduler's)


@dataclass(frozen=True)
class ChartJob:
    spec: ChartSpec
    version: str  # the chart's version: 2.10.0, 1.3.0
    archive: ChartArchive | None = field(default=None, repr=False)
    uses: tuple[ImageUse, ...] = ()
    # image blocks the values will leave where they are (an image of the chart nobody mirrors)
    unmirrored: tuple[ImageBlock, ...] = ()

    @property
    def copies(self) -> frozenset[int]:
        return frozenset(use.copy for use in self.uses)


@dataclass(frozen=True)
class ReleaseJob:
    version: str
    images: tuple[ImageJob, ...]
    targets: tuple[TargetSettings, ...]
    charts: tuple[ChartJob, ...] = ()


@dataclass(frozen=True)
class FetchedChart:
    """A chart as fetched and read: its archive and every image reference it and its subcharts can run."""

    archive: ChartArchive = field(repr=False)
    blocks: tuple[ImageBlock, ...]


@dataclass(frozen=True)
class InstallCharts:
    """The charts a run fetched: the release chart per release version, and each `charts:` entry (fetched
    once per run: pinned, or its newest version)."""

    release: Mapping[str, FetchedChart] = field(default_factory=dict)
    others: tuple[FetchedChart, ...] = ()
    failed: Mapping[str, MirrorError] = field(default_factory=dict)  # a release whose chart could not be had: why


@dataclass(frozen=True, slots=True)
class _Copy:
    """One image of a job before its targets are known: the source tag, pinned to a digest when the chart pins
    it."""

    image: ReleaseImage
    source: Repository
    tag: str
    digest: str | None = None


def source_repository(settings: MirrorSettings, image: ImageSettings) -> Repository:
    """Where a configured image lives: its own registry, or the config's source registry."""
    return Repository.of(image.registry or settings.source.registry, image.source)


def target_repository(target: TargetSettings, name: str) -> Repository:
    """Where an image of this name goes at `target`: under its namespace."""
    return Repository.of(target.registry, f"{target.namespace}/{name}")


def check_versions(settings: MirrorSettings, versions: list[str]) -> list[str]:
    """Normalised, de-duplicated versions; refuses charts whose values schema mirror does not write."""
    normalised = list(dict.fromkeys(normalise_version(v) for v in versions))
    for version in normalised:
        require_nested_schema(version)
    return normalised


def release_spec(settings: MirrorSettings) -> ChartSpec:
    values = settings.values
    name = settings.chart.name if settings.chart else "hami"
    subcharts = settings.chart.subcharts if settings.chart else "all"
    return ChartSpec(
        name, values.release, values.kube_namespace, values.file_name, values.extra, subcharts, True, values.chart
    )


def install_spec(settings: MirrorSettings, chart: InstallChartSettings) -> ChartSpec:
    return ChartSpec(
        chart.name,
        chart.release or chart.name,
        chart.namespace or settings.values.kube_namespace,
        chart.values_file,
        chart.values,
        chart.subcharts,
        is_release_chart=False,
        default_reference=f"{chart.name} {helm_repo_flags(chart.repository)}",  # helm install <release> <this>
    )


def helm_repo_flags(repository: str) -> str:
    """`--repo` for a printed `helm install`: a login in the URL becomes Helm's own flags, the password left for
    the operator to fill in (the line reaches logs and chat channels)."""
    user = urlsplit(repository).username
    flags = f"--repo {without_userinfo(repository)}"
    return f"{flags} --username {user} --password '<password>'" if user else flags


def select_targets(settings: MirrorSettings, names: list[str] | None) -> tuple[TargetSettings, ...]:
    """The targets `--target` names, each once (every target without one); a name the config lacks is a
    ConfigError."""
    return tuple(settings.target(name) for name in dict.fromkeys(names)) if names else tuple(settings.targets)


def build_release_jobs(
    settings: MirrorSettings,
    versions: list[str],
    target_names: list[str] | None = None,
    charts: InstallCharts | None = None,
) -> list[ReleaseJob]:
    """Validate versions and target names and expand the config into jobs, before any copy is made (the
    charts, when configured, were fetched first and are passed in)."""
    charts = charts or InstallCharts()
    normalised = check_versions(settings, versions)
    targets = select_targets(settings, target_names)
    jobs = [_release_job(settings, version, targets, charts) for version in normalised]
    _warn_default_kube_version(settings, jobs)
    return jobs


def _release_job(
    settings: MirrorSettings, version: str, targets: tuple[TargetSettings, ...], charts: InstallCharts
) -> ReleaseJob:
    copies: dict[_Copy, int] = {}
    chart_jobs = [_release_chart_job(settings, version, charts.release.get(version), copies)]
    for chart, fetched in zip(settings.charts, charts.others, strict=True):
        spec = install_spec(settings, chart)
        chart_jobs.append(_chart_job(settings, spec, fetched.archive, list(fetched.blocks), copies))
    for chart_job in chart_jobs:
        _warn_values_near_misses(chart_job.spec, chart_job.archive)
    check_unique((copy.source, copy.image.name) for copy in copies)
    images = tuple(
        ImageJob(
            copy.image,
            copy.source,
            copy.tag,
            tuple(TargetRef(t, target_repository(t, copy.image.name)) for t in targets),
            copy.digest,
        )
        for copy in _one_digest_per_tag(list(copies))
    )
    if settings.chart is not None and settings.chart.publish:
        for chart_job in chart_jobs:
            if chart_job.archive is not None:
                archive = chart_job.archive
                check_chart_apart(((i.image.name, i.tag) for i in images), archive.name, oci_tag(archive.version))
    return ReleaseJob(version, images, targets, tuple(chart_jobs))


def _release_chart_job(
    settings: MirrorSettings, version: str, fetched: FetchedChart | None, copies: dict[_Copy, int]
) -> ChartJob:
    """HAMi's chart: its blocks (or, with no chart configured, HAMi's known keys); configured `images:` take
    the blocks of their repository, and the rest of the chart's blocks are left where they are."""
    spec = release_spec(settings)
    archive = fetched.archive if fetched is not None else None
    blocks = list(fetched.blocks) if fetched is not None else hami.default_install_blocks(version)
    if not settings.images:
        return _chart_job(settings, spec, archive, blocks, copies, chart_version(version))
    uses = []
    pointable = [block for block in blocks if not block.in_list]
    by_key = {block.key: block for block in pointable}
    for image in settings.images:
        source, tag = source_repository(settings, image), image.tag_for(version)
        release_image = ReleaseImage(image.name, _platforms(image))
        copy = _index(copies, _Copy(release_image, source, tag))  # even with no key
        keys = tuple(image.values_keys) or tuple(b.key for b in pointable if b.source == source)
        _warn_near_misses(image.values_keys, by_key, f"chart {spec.name} {chart_version(version)}")
        for key in keys or hami.VALUES_KEYS.get(source.name, ()):
            # the chart's own block keeps its shape and its pinned digest (copied as pinned); a key the chart
            # does not have is written as a registry/repository block
            own = by_key.get(key)
            block = own or ImageBlock.at(key, source.registry, source.name, tag)
            pinned = _Copy(release_image, source, tag, block.digest) if block.digest else None
            use = replace(block, registry=source.registry, repository=source.name, tag=tag)
            uses.append(ImageUse(use, _index(copies, pinned) if pinned else copy, _tag_to_write(own, tag)))
    covered = {use.block.key for use in uses}
    unmirrored = tuple(b for b in blocks if b.key not in covered and not settings.pulled_as_is(b.registry))
    return ChartJob(spec, chart_version(version), archive, tuple(uses), unmirrored)


def _warn_near_misses(keys: list[str], chart_keys: Mapping[str, ImageBlock], chart: str) -> None:
    """A configured key the chart has no image at, spelt like one it has: most likely a typo, which would write
    a key Helm ignores and leave the chart's image where it is."""
    for key in keys:
        if key not in chart_keys and (near := difflib.get_close_matches(key, chart_keys, n=1, cutoff=0.8)):
            log.warning("values_keys: %s is not an image in %s: did you mean %s?", key, chart, near[0])


def _warn_values_near_misses(spec: ChartSpec, archive: ChartArchive | None) -> None:
    """A key of the user's values (values.extra, a `charts:` entry's values) the chart does not have, spelt like
    one it has: most likely a typo, which Helm would ignore while the render proof still passed."""
    if archive is None or not spec.extra:
        return
    setting = "values.extra" if spec.is_release_chart else f"charts: {spec.name}: values"
    for path, meant in near_misses(dict(spec.extra), archive.values_declared()):
        chart = f"chart {archive.name} {archive.version}"
        log.warning("%s: %s is not a key of %s's values: did you mean %s?", setting, path, chart, meant)


def _warn_default_kube_version(settings: MirrorSettings, jobs: list[ReleaseJob]) -> None:
    """A copy tagged with the cluster's Kubernetes version (kube-scheduler's) pins the values to it: the default
    version may be far from the cluster's own, and a scheduler minor versions behind its API server is outside
    Kubernetes' version skew policy. Said once per run, however many releases it has."""
    if settings.chart is None or "kube_version" in settings.chart.model_fields_set:
        return
    uses = [use for job in jobs for chart in job.charts for use in chart.uses]
    for key, tag in sorted({(use.block.key, use.block.tag) for use in uses if use.block.tag_from_kube_version}):
        log.warning(
            "chart.kube_version is not set: %s is pinned to %s, the default; set it to your cluster's version "
            "(kubectl version), or leave the image where it is (chart.mirror_acr_images: false)",
            key,
            tag,
        )


def _tag_to_write(chart_block: ImageBlock | None, tag: str) -> str | None:
    """A configured image's tag, where the values must carry it: the chart's block renders another tag (its own
    default, another release's), or the chart has no block at that key, so what it renders there is unknown.
    None where the chart already renders `tag`, or pulls the image by the digest it pins."""
    if chart_block is None:
        return tag
    return tag if chart_block.tag != tag and not chart_block.digest else None


def _chart_job(
    settings: MirrorSettings,
    spec: ChartSpec,
    archive: ChartArchive | None,
    blocks: list[ImageBlock],
    copies: dict[_Copy, int],
    version: str | None = None,
) -> ChartJob:
    """Every block of the chart outside the allowed registries becomes a use of its copy; one inside a list, which
    values cannot point at a copy, is left where it is (`unmirrored`)."""
    uses: list[ImageUse] = []
    unmirrored: list[ImageBlock] = []
    for block in blocks:
        if not copied_as_named(settings, spec, block):
            if block.in_list and _in_the_install(spec, block) and not settings.pulled_as_is(block.registry):
                unmirrored.append(block)
            continue
        name = flat_name(block.source, settings.source.registry)
        tag = block.tag or pinned_tag(block.digest or "")
        copy = _index(copies, _Copy(ReleaseImage(name), block.source, tag, block.digest))
        # a tag the template would not infer as copied (the Kubernetes version's, or the source's `v` twin of the
        # guess) is written into the values
        written = block.tag_from_kube_version or block.tag_check == "source"
        uses.append(ImageUse(block, copy, block.tag if written else None))
    chart_version_ = version or (archive.version if archive is not None else "")
    return ChartJob(spec, chart_version_, archive, tuple(uses), tuple(unmirrored))


def _one_digest_per_tag(copies: list[_Copy]) -> list[_Copy]:
    """Where copies of different digests would share one target tag (a chart pinning an image another block
    names by tag, or two pins of one tag), each pinned one takes its own `pinned-<digest>` tag: nodes pull it by
    digest, and no two copies race for one tag."""
    digests: dict[tuple[str, str], set[str | None]] = {}
    for copy in copies:
        digests.setdefault((copy.image.name, copy.tag), set()).add(copy.digest)
    return [
        replace(copy, tag=pinned_tag(copy.digest))
        if copy.digest and len(digests[(copy.image.name, copy.tag)]) > 1
        else copy
        for copy in copies
    ]


def pinned_tag(digest: str) -> str:
    """The target tag of a copy made by digest that no tag of the chart can carry."""
    return PINNED_TAG_PREFIX + digest.removeprefix("sha256:")[:32]


def _index(copies: dict[_Copy, int], copy: _Copy) -> int:
    return copies.setdefault(copy, len(copies))


def _platforms(image: ImageSettings) -> tuple[str, ...] | None:
    return tuple(image.platforms) if image.platforms else None


def copied_as_named(settings: MirrorSettings, spec: ChartSpec, block: ImageBlock) -> bool:
    """Whether the run copies `block` as the chart names it: not in a subchart left off under `subcharts: enabled`
    (turning it on later needs another run), not inside a list (values cannot point it at a copy without
    replacing the whole list), not at a registry nodes pull from as it is (kube-scheduler from ACR) unless
    `chart.mirror_acr_images`."""
    if not _in_the_install(spec, block) or block.in_list:
        return False
    mirror_allowed = settings.chart is not None and settings.chart.mirror_acr_images
    return mirror_allowed or not settings.pulled_as_is(block.registry)


def _in_the_install(spec: ChartSpec, block: ImageBlock) -> bool:
    return block.enabled or spec.subcharts != "enabled"
