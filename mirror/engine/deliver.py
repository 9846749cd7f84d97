"""The last steps for one chart of a release at one target where every image the chart uses verified: point
its blocks at the copies, prove the values by rendering the chart with them, publish the chart next to the
images, then write them. A refused proof leaves nothing at the target and nothing written.

    values -> render check -> publish chart (and can Helm pull it anonymously?) -> write
    (or refuse, naming each image left behind)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mirror.chart.images import GLOBAL_SECRETS, ImageBlock, PullSecretPlace, pull_secret_paths
from mirror.chart.proof import REFERENCE_SHOWN, SHOWN_LINES, Proof, check_rendering, first_few
from mirror.chart.publish import publish_chart
from mirror.chart.render import RenderRequest, render_install
from mirror.chart.source import oci_tag
from mirror.engine.jobs import ChartJob, ImageUse, ReleaseJob
from mirror.engine.probes import pulls_anonymously
from mirror.reference import ReferenceError, parse
from mirror.registry import RegistryClient
from mirror.report import ReleaseResult, TargetResult
from mirror.settings import MirrorSettings, TargetSettings
from mirror.untrusted import clip
from mirror.values import ChartInstall, ChartSpec, PointedBlock, ValuesFile, build_values, pull_registry, write_values

PROBLEM_CHARS = 1000  # of one image left behind in a log line: it quotes the chart
log = logging.getLogger("mirror")


@dataclass(frozen=True, slots=True)
class Delivery:
    values: ValuesFile | None
    error: str | None = None


def outcomes_at(job: ReleaseJob, result: ReleaseResult, target: TargetSettings) -> dict[int, TargetResult]:
    """Each copy's result at this target, by its index in `job.images`, where the copy verified there."""
    found = {}
    for index, image_result in enumerate(result.images):
        if image_result.error is None:
            for outcome in image_result.targets:
                if outcome.target == target.name and outcome.verified:
                    found[index] = outcome
    return found


def unverified_images(job: ReleaseJob, chart: ChartJob, result: ReleaseResult, target: TargetSettings) -> list[str]:
    """The sources of the chart's copies not verified at this target (none: its values may be written)."""
    verified = outcomes_at(job, result, target).keys()
    return [job.images[index].source_ref for index in sorted(chart.copies - verified)]


def verified_references(job: ReleaseJob, outcomes: dict[int, TargetResult], target: TargetSettings) -> set[str]:
    """The copies verified at this target, as nodes pull them (the VPC host): by digest, and by the tag verified
    there (`outcome.reference`'s: a pinned copy whose tag at the target holds other bytes went to a `pinned-`
    tag, and the job's tag there is not the copy)."""
    verified = set()
    registry = pull_registry(target)
    for index, outcome in outcomes.items():
        name = f"{registry}/{target.namespace}/{job.images[index].image.name}"
        for text in (f"{name}:{_verified_tag(outcome)}", f"{name}@{outcome.digest}"):
            try:
                verified.add(str(parse(text)))
            except ReferenceError:
                continue
    return verified


def _verified_tag(outcome: TargetResult) -> str:
    """The tag the copy verified under at its target, as the target's result names it (`host/repository:tag`)."""
    try:
        verified = parse(outcome.reference)
    except ReferenceError:
        return ""
    return "" if verified.is_digest else verified.identifier


def _pointed(job: ReleaseJob, use: ImageUse, outcomes: dict[int, TargetResult]) -> PointedBlock:
    """A pinned digest stays as the chart wrote it, since the copy is byte-exact, unless the target holds a
    rewrite of the index (attestations left out): then the values pin the rewrite."""
    outcome = outcomes[use.copy]
    digest = outcome.digest if use.block.digest and outcome.digest != use.block.digest else None
    return PointedBlock(use.block, job.images[use.copy].image.name, use.values_tag, digest)


async def deliver(
    settings: MirrorSettings,
    job: ReleaseJob,
    chart: ChartJob,
    target: TargetSettings,
    result: ReleaseResult,
    client: RegistryClient,
    latest: bool,
    anonymous: Callable[[str], RegistryClient],
) -> Delivery:
    outcomes = outcomes_at(job, result, target)
    pull_secret = result.pull_secret_for(target)
    values, proof = await _proven_values(settings, job, chart, target, outcomes, pull_secret)
    label = f"{job.version} {chart.spec.name} -> {target.name}"
    refusing = settings.values.unmirrored == "error"
    problems, notes = _left_behind_all(chart, proof, label, refusing)
    if problems and refusing:
        return Delivery(None, _withheld(settings, chart, target, problems))
    for problem in (*problems, *notes):
        log.warning("%s: values written with an image left behind: %s", label, clip(problem, PROBLEM_CHARS))
    install = ChartInstall(chart.spec.default_reference)
    if chart.archive is not None and settings.chart is not None:
        install = await _publish(settings, chart, target, client, anonymous, label)
    written = write_values(
        settings,
        target,
        job.version,
        latest,
        values,
        install,
        pull_secret,
        proof,
        tuple(f"NOT MIRRORED: {p}" for p in (*problems, *notes)),
        chart.spec,
        chart.version,
    )
    return Delivery(written)


def _left_behind_all(chart: ChartJob, proof: Proof | None, label: str, refusing: bool) -> tuple[list[str], list[str]]:
    """(the images the values would leave behind, the notes): each block nobody mirrors, then the first few
    images the render pulls from elsewhere, each clipped. The rest stay in the proof's rows; where the values are
    refused (no proof is kept), they are logged, one bounded line each."""
    # an image inside a list that no template renders (its feature off) is named, not refused: the proof shows
    # nodes would not pull it; one that renders fails the proof itself
    unrendered = proof is not None and proof.ok
    problems: list[str] = []
    notes: list[str] = []
    for block in chart.unmirrored:
        (notes if block.in_list and unrendered else problems).append(_left_behind(block, chart.spec))
    pulled = list(dict.fromkeys(f"the rendered chart pulls {f}" for f in (proof.failures() if proof else [])))
    if refusing:
        for failure in pulled[SHOWN_LINES:]:
            log.warning("%s: values not written: also %s", label, clip(failure, PROBLEM_CHARS))
    return list(dict.fromkeys([*problems, *first_few(pulled)])), notes


def _withheld(settings: MirrorSettings, chart: ChartJob, target: TargetSettings, problems: list[str]) -> str:
    """Why a chart's values are not written: each image nodes would still pull from the source; where the config
    lists `images:`, that the chart's others are not taken, and what to do."""
    what = "values" if chart.spec.is_release_chart else f"{chart.spec.name} values"
    hint = ""
    if chart.spec.is_release_chart and settings.images and chart.unmirrored:
        hint = (
            " (with images: set, the chart's other images are not mirrored: list them under images: too, "
            "remove images: to mirror every image the chart runs, or set values.unmirrored: warn)"
        )
    return f"{what} for {target.name} not written: nodes would pull from the source{hint}: {'; '.join(problems)}"


def _left_behind(block: ImageBlock, spec: ChartSpec) -> str:
    """One image block nobody mirrors; for one inside a list, why and what the user can do about it."""
    problem = f"{clip(block.key)} would still pull {clip(block.reference, REFERENCE_SHOWN)}"
    if not block.in_list:
        return problem
    setting = "values.extra" if spec.is_release_chart else f"the values of the charts: entry {spec.name}"
    return (
        f"{problem}: an image inside the list {block.list_key}, which values cannot point at a copy without "
        f"replacing the whole list (mirror does not write lists): set the whole {block.list_key} list in "
        f"{setting}, with this image at a registry nodes can pull (chart.allowed_registries), or without it"
    )


async def _proven_values(
    settings: MirrorSettings,
    job: ReleaseJob,
    chart: ChartJob,
    target: TargetSettings,
    outcomes: dict[int, TargetResult],
    pull_secret: str | None,
) -> tuple[dict[str, Any], Proof | None]:
    """The values and their proof. Where a rendered pod names the pull secret in a form its chart does not take
    (`name: map[name:acr-pull]`), the values are built and proven once more with each list's other form, and
    the ones that reach more pods are kept; where a pod carries it twice (its chart adds the global list to its
    own), once more without that chart's own list, kept if no pod loses it: a render more only then."""
    pointed = [_pointed(job, use, outcomes) for use in chart.uses]

    async def proven(places: list[PullSecretPlace]) -> tuple[dict[str, Any], Proof | None]:
        values = build_values(target, pointed, chart.spec.extra, pull_secret, places)
        return values, await _prove(settings, job, chart, target, values, outcomes, pull_secret)

    places = pull_secret_paths(chart.archive) if chart.archive is not None else []
    values, proof = await proven(places)
    if proof is not None and proof.secret_in_another_form:
        other_places = [place.other_form() for place in places]
        other, second = await proven(other_places)
        if second is not None and len(second.pods_without_secret) < len(proof.pods_without_secret):
            values, proof, places = other, second, other_places
    if proof is not None and (doubled := _lists_doubling(places, proof)):
        fewer, third = await proven([place for place in places if place not in doubled])
        if third is not None and len(third.pods_without_secret) <= len(proof.pods_without_secret):
            values, proof = fewer, third
    return values, proof


def _lists_doubling(places: list[PullSecretPlace], proof: Proof) -> list[PullSecretPlace]:
    """The charts' own lists (never the global one) of the charts whose pods carry the secret twice."""
    charts = {pod.chart_keys for pod in proof.secret_twice}
    return [place for place in places if place.path != GLOBAL_SECRETS and place.path[:-1] in charts]


async def _prove(
    settings: MirrorSettings,
    job: ReleaseJob,
    chart: ChartJob,
    target: TargetSettings,
    values: dict[str, Any],
    outcomes: dict[int, TargetResult],
    pull_secret: str | None = None,
) -> Proof | None:
    """Render the chart with the values (every subchart on too, where their images were mirrored) and judge
    every image it would pull, and with a pull secret every pod that pulls from the target; None without a
    chart to render."""
    if chart.archive is None or settings.chart is None:
        return None
    spec = chart.spec
    request = RenderRequest(spec.release, spec.namespace, settings.chart.kube_version)
    every_subchart = any(not use.block.enabled for use in chart.uses)
    rendering = await asyncio.to_thread(
        render_install, chart.archive, values, request, settings.chart.renderer, every_subchart
    )
    named = {str(use.block.source) for use in chart.uses} | {str(b.source) for b in chart.unmirrored}
    verified = verified_references(job, {i: o for i, o in outcomes.items() if i in chart.copies}, target)
    ours = frozenset(f"{host}/{target.namespace}/" for host in (target.registry, pull_registry(target)))
    allowed = settings.chart.allowed_registries
    return check_rendering(rendering, verified, allowed, named, ours, rendering.pods, pull_secret)


async def _publish(
    settings: MirrorSettings,
    chart: ChartJob,
    target: TargetSettings,
    client: RegistryClient,
    anonymous: Callable[[str], RegistryClient],
    label: str,
) -> ChartInstall:
    """The chart at the target as OCI, and whether Helm can pull it there without logging in (a repository
    created by the push may be private where the images' are public), or its .tgz beside the values where the
    target refuses it. `anonymous`: the run's client without credentials for a host."""
    assert chart.archive is not None and settings.chart is not None
    archive = (f"{chart.archive.name}-{chart.archive.version}.tgz", chart.archive.raw)
    if not settings.chart.publish:
        return ChartInstall("", archive)
    repository = f"{target.namespace}/{chart.archive.name}"
    published = await publish_chart(client, repository, chart.archive)
    if published.reference is None:
        note = f"{published.refusal}; the chart's .tgz is written beside the values instead"
        log.warning("%s: %s", label, note)
        return ChartInstall("", archive, note)
    anonymous_pull = await pulls_anonymously(client, anonymous, repository, oci_tag(chart.archive.version))
    # Helm fetches it where it runs: the public host
    return ChartInstall(f"oci://{target.registry}/{repository}", anonymous_pull=anonymous_pull)
