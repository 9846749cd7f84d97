"""What in a run is worth a message: a release newly mirrored to a target (with its values and the `helm upgrade`
line), a failure (what, where, why) and drift (once per image, target and reason, naming every release it concerns:
releases share images). A run that changed nothing has no events."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mirror.engine.outcomes import Copied, Drift
from mirror.report import ReleaseResult


@dataclass(frozen=True, slots=True)
class Mirrored:
    """A release's images newly landed on a target, with the values that point at them."""

    release: str
    target: str
    images: tuple[str, ...]  # the images copied to the target in this run
    bytes_moved: int
    values: tuple[str, ...]  # the values files written (paths, or the job API's links in the service)
    helm_lines: tuple[str, ...]

    kind = "mirrored"


@dataclass(frozen=True, slots=True)
class Failure:
    """One image, chart or job that failed in a run (`what`), at which target or service (`where`), and why."""

    what: str
    where: str
    reason: str


@dataclass(frozen=True, slots=True)
class Failed:
    """Every failure of one release in a run: one message, not one per image and target."""

    release: str
    failures: tuple[Failure, ...]

    kind = "failed"


@dataclass(frozen=True, slots=True)
class Drifted:
    """A target's tag that points at another digest than the source's, left alone: one event however many of the
    run's releases use the image."""

    releases: tuple[str, ...]  # in the run's order
    image: str
    target: str
    reason: str

    kind = "drift"

    @property
    def release(self) -> str:
        return ", ".join(self.releases)


Event = Mirrored | Failed | Drifted


def stopped(versions: list[str] | None, what: str, where: str, reason: str) -> Failed:
    """A run or a job that ended before any release's result, as one failure of its releases (or discovery's)."""
    return Failed(", ".join(versions or []) or "discovery", (Failure(what, where, reason),))


def events_of(results: list[ReleaseResult], values_link: str | None = None) -> list[Event]:
    """The run's events, releases in order, then its drift. `values_link` (the service's job URL) stands for the
    values paths."""
    releases = [release for release in results if not release.dry_run]
    events: list[Event] = []
    for release in releases:
        events += _mirrored(release, values_link) + _failed(release)
    return events + _drifted(releases)


def _mirrored(release: ReleaseResult, values_link: str | None) -> list[Event]:
    copied: dict[str, list[tuple[str, int]]] = {}
    for image in release.images:
        for target in image.targets:
            if isinstance(target.outcome, Copied):
                copied.setdefault(target.target, []).append((image.name, target.outcome.bytes_uploaded))
    events: list[Event] = []
    for name, images in copied.items():
        written = [v for v in release.values if v.target == name]
        if not written:
            continue  # copied but not delivered: the failure says why
        values = (values_link,) if values_link else tuple(str(v.path) for v in written)
        helm = tuple(upgrade_line(v.helm_command) for v in written)
        events.append(
            Mirrored(release.version, name, tuple(n for n, _ in images), sum(b for _, b in images), values, helm)
        )
    return events


def _failed(release: ReleaseResult) -> list[Event]:
    failures: list[Failure] = []
    for image in release.images:
        if image.error:
            failures.append(Failure(image.name, image.source, image.error))
        for target in image.targets:
            if target.error and not isinstance(target.outcome, Drift):
                failures.append(Failure(image.name, target.target, target.error))
    failures += [Failure("values", "delivery", error) for error in release.errors]
    return [Failed(release.version, tuple(failures))] if failures else []


def _drifted(releases: list[ReleaseResult]) -> list[Event]:
    """One event per image, target and reason: an image shared by several releases drifts once, not once each."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for release in releases:
        for image in release.images:
            for target in image.targets:
                if isinstance(target.outcome, Drift):
                    concerned = found.setdefault((image.name, target.target, target.outcome.reason), [])
                    if release.version not in concerned:
                        concerned.append(release.version)
    return [Drifted(tuple(versions), image, target, reason) for (image, target, reason), versions in found.items()]


# `helm install` as the line's command, or as one after `&&` (a private target's line logs in to it first)
_HELM_INSTALL = re.compile(r"(^|&& )helm install ")


def upgrade_line(helm_install: str) -> str:
    """`helm install NAME CHART ...` as the upgrade people run on a cluster that has the release already."""
    return _HELM_INSTALL.sub(r"\1helm upgrade --install ", helm_install, count=1)
