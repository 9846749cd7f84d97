"""What in a run is worth a message: a release newly mirrored to a target (with its values and the `helm upgrade`
line), failures (what, where, why; one message for the releases that share them) and drift (one message for the
run, a line per image, target and reason naming every release it concerns: releases share images). A run that
changed nothing has no events.

In the service each event also carries `page`, the job on the status page (`JobLinks`): where the person who reads
the message lands. The job API's URLs (JSON, and values downloads that answer 401 to a browser without the page's
session) are for programs: a Mirrored event's `values` are each values file's download there, which the generic
webhook's JSON carries and the chats do not show."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from mirror.engine.outcomes import Copied, Drift
from mirror.notify.ledger import key
from mirror.report import ReleaseResult


@dataclass(frozen=True, slots=True)
class Mirrored:
    """A release's images newly landed on a target, with the values that point at them."""

    release: str
    target: str
    images: tuple[str, ...]  # the images copied to the target in this run (none: in an earlier one)
    bytes_moved: int
    values: tuple[str, ...]  # the values files written: paths, or in the service each one's download (job API)
    helm_lines: tuple[str, ...]
    page: str | None = None  # the service's job on the status page, which the chats show for the values

    kind = "mirrored"


@dataclass(frozen=True, slots=True)
class Failure:
    """One image, chart or job that failed in a run (`what`), at which target or service (`where`), and why."""

    what: str
    where: str
    reason: str


@dataclass(frozen=True, slots=True)
class Failed:
    """Every failure of one release in a run, or the failures several of its releases share (`release` names each,
    comma-separated): one message, not one per image and target."""

    release: str
    failures: tuple[Failure, ...]
    page: str | None = None  # the service's job on the status page

    kind = "failed"


@dataclass(frozen=True, slots=True)
class DriftSeen:
    """One target's tag that points at another digest than the source's, left alone, with every release of the
    run that uses the image."""

    releases: tuple[str, ...]  # in the run's order
    image: str
    target: str
    reason: str


@dataclass(frozen=True, slots=True)
class Drifted:
    """Every drift of the run, in one message: drift is not mended by the next run, so one message per image and
    target came again each run, and a chat's robot refuses past 20 messages a minute (DingTalk, WeCom)."""

    drifts: tuple[DriftSeen, ...]
    page: str | None = None  # the service's job on the status page

    kind = "drift"

    @property
    def release(self) -> str:
        """Every release the drift concerns, in the run's order."""
        return ", ".join(dict.fromkeys(version for drift in self.drifts for version in drift.releases))


Event = Mirrored | Failed | Drifted


@dataclass(frozen=True, slots=True)
class JobLinks:
    """Where a service job's results are reached from a message, `notify.public_url` in front: the job on the
    status page (for people), and each values file's download on the job API by release, target and chart (for
    programs: it takes the bearer token)."""

    page: str
    values: Callable[[str, str, str], str]  # (release, target, chart) -> URL


def stopped(versions: list[str] | None, what: str, where: str, reason: str, page: str | None = None) -> Failed:
    """A run or a job that ended before any release's result, as one failure of its releases (or discovery's)."""
    return Failed(", ".join(versions or []) or "discovery", (Failure(what, where, reason),), page)


def events_of(results: list[ReleaseResult], job: JobLinks | None = None, owed: set[str] | None = None) -> list[Event]:
    """The run's events, releases in order, then its drift. `job` (the service's) gives each event the job's page,
    and the values their downloads in place of paths on the service's disk. `owed`: releases and targets owed an
    announcement (`mirror.notify.ledger`), announced as mirrored where the run wrote their values, though their
    images were copied by an earlier run."""
    releases = [release for release in results if not release.dry_run]
    page = job.page if job else None
    events: list[Event] = []
    for release in releases:
        events += _mirrored(release, job, owed or set())
    return events + _failed(releases, page) + _drifted(releases, page)


def _mirrored(release: ReleaseResult, job: JobLinks | None, owed: set[str]) -> list[Event]:
    copied: dict[str, list[tuple[str, int]]] = {}
    for image in release.images:
        for target in image.targets:
            if isinstance(target.outcome, Copied):
                copied.setdefault(target.target, []).append((image.name, target.outcome.bytes_uploaded))
    settled = sorted({v.target for v in release.values if key(release.version, v.target) in owed})
    events: list[Event] = []
    for name in dict.fromkeys([*copied, *settled]):
        written = [v for v in release.values if v.target == name]
        if not written:
            continue  # copied but not delivered: the failure says why
        if job is None:
            values = tuple(str(v.path) for v in written)
        else:
            values = tuple(job.values(release.version, v.target, v.chart_name) for v in written)
        helm = tuple(upgrade_line(v.helm_command) for v in written)
        images = copied.get(name, [])
        moved = sum(b for _, b in images)
        page = job.page if job else None
        events.append(Mirrored(release.version, name, tuple(n for n, _ in images), moved, values, helm, page))
    return events


def _failed(releases: list[ReleaseResult], page: str | None) -> list[Event]:
    """One event per set of releases failing alike: a failure several of the run's releases share (an image they
    all use, discovery's `newest: 3`) is said once, naming each of them, as drift is; the rest per release."""
    found: dict[Failure, list[str]] = {}
    for release in releases:
        for failure in _failures_of(release):
            concerned = found.setdefault(failure, [])
            if release.version not in concerned:
                concerned.append(release.version)
    grouped: dict[tuple[str, ...], list[Failure]] = {}
    for failure, versions in found.items():
        grouped.setdefault(tuple(versions), []).append(failure)
    return [Failed(", ".join(versions), tuple(failures), page) for versions, failures in grouped.items()]


def _failures_of(release: ReleaseResult) -> list[Failure]:
    failures: list[Failure] = []
    for image in release.images:
        if image.error:
            failures.append(Failure(image.name, image.source, image.error))
        for target in image.targets:
            if target.error and not isinstance(target.outcome, Drift):
                failures.append(Failure(image.name, target.target, target.error))
    return failures + [Failure("values", "delivery", error) for error in release.errors]


def _drifted(releases: list[ReleaseResult], page: str | None) -> list[Event]:
    """The run's drift as one event, a line per image, target and reason: an image shared by several releases
    drifts once, not once each."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for release in releases:
        for image in release.images:
            for target in image.targets:
                if isinstance(target.outcome, Drift):
                    concerned = found.setdefault((image.name, target.target, target.outcome.reason), [])
                    if release.version not in concerned:
                        concerned.append(release.version)
    drifts = tuple(DriftSeen(tuple(versions), *seen) for seen, versions in found.items())
    return [Drifted(drifts, page)] if drifts else []


# `helm install` as the line's command, or as one after `&&` (a private target's line logs in to it first)
_HELM_INSTALL = re.compile(r"(^|&& )helm install ")


def upgrade_line(helm_install: str) -> str:
    """`helm install NAME CHART ...` as the upgrade people run on a cluster that has the release already."""
    return _HELM_INSTALL.sub(r"\1helm upgrade --install ", helm_install, count=1)
