"""From settings and release versions to the list of image copies to make. Pure: no network."""

from __future__ import annotations

from dataclasses import dataclass

from mirror.reference import Repository, api_host
from mirror.release import normalise_version
from mirror.settings import ImageSettings, MirrorSettings, TargetSettings
from mirror.values import require_nested_schema


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

    image: ImageSettings
    source: Repository
    tag: str
    targets: tuple[TargetRef, ...]

    @property
    def source_ref(self) -> str:
        return f"{self.source}:{self.tag}"


@dataclass(frozen=True, slots=True)
class ReleaseJob:
    version: str
    images: tuple[ImageJob, ...]
    targets: tuple[TargetSettings, ...]


def target_repository(target: TargetSettings, image: ImageSettings) -> Repository:
    return Repository.of(target.registry, f"{target.namespace}/{image.name}")


def build_release_jobs(
    settings: MirrorSettings, versions: list[str], target_names: list[str] | None = None
) -> list[ReleaseJob]:
    """Validate versions and target names and expand the config into jobs, before any network traffic."""
    normalised = list(dict.fromkeys(normalise_version(v) for v in versions))
    for version in normalised:
        require_nested_schema(version)
    targets = tuple(settings.target(n) for n in target_names) if target_names else tuple(settings.targets)
    jobs = []
    for version in normalised:
        images = tuple(
            ImageJob(
                image=image,
                source=Repository.of(settings.source.registry, image.source),
                tag=image.tag_for(version),
                targets=tuple(TargetRef(t, target_repository(t, image)) for t in targets),
            )
            for image in settings.images
        )
        jobs.append(ReleaseJob(version, images, targets))
    return jobs


def registry_hosts(jobs: list[ReleaseJob]) -> set[str]:
    hosts = set()
    for job in jobs:
        for image in job.images:
            hosts.add(image.source.registry)
            hosts.update(ref.repository.registry for ref in image.targets)
    return {api_host(h) for h in hosts}
