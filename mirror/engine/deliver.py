"""The last steps for a target where every image of a release verified: build the values, prove them by
rendering the chart with them, publish the chart next to the images, then write them. A refused proof leaves
nothing at the target and nothing written.

    values -> render check -> publish chart -> write (or refuse, naming each image left behind)
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from mirror.chart.proof import Proof, check_rendering
from mirror.chart.publish import publish_chart
from mirror.chart.render import RenderRequest, render_images
from mirror.engine.jobs import ReleaseJob
from mirror.reference import ReferenceError, parse
from mirror.registry import RegistryClient
from mirror.report import ReleaseResult
from mirror.settings import MirrorSettings, TargetSettings
from mirror.values import ChartInstall, ValuesFile, build_values, pull_registry, write_values

log = logging.getLogger("mirror")


@dataclass(frozen=True, slots=True)
class Delivery:
    values: ValuesFile | None
    error: str | None = None


def verified_references(job: ReleaseJob, result: ReleaseResult, target: TargetSettings) -> set[str]:
    """The copies verified at this target, as nodes pull them (the VPC host)."""
    verified = set()
    registry = pull_registry(target)
    for image_job, image_result in zip(job.images, result.images, strict=True):
        for ref, outcome in zip(image_job.targets, image_result.targets, strict=True):
            if ref.name == target.name and outcome.verified:
                try:
                    verified.add(str(parse(f"{registry}/{ref.repository.name}:{image_job.tag}")))
                except ReferenceError:
                    continue
    return verified


async def deliver(
    settings: MirrorSettings,
    job: ReleaseJob,
    target: TargetSettings,
    result: ReleaseResult,
    client: RegistryClient,
    latest: bool,
) -> Delivery:
    pull_secret = result.pull_secret_for(target)
    values = build_values(target, [image.image for image in job.images], settings.values, pull_secret)
    problems = [f"{block.key} would still pull {block.reference}" for block in job.unmirrored]
    install = ChartInstall(settings.values.chart)
    proof: Proof | None = None
    if job.chart is not None and settings.chart is not None:
        request = RenderRequest(settings.values.release, settings.values.kube_namespace, settings.chart.kube_version)
        rendering = await asyncio.to_thread(render_images, job.chart, values, request, settings.chart.renderer)
        proof = check_rendering(rendering, verified_references(job, result, target), settings.chart.allowed_registries)
        problems += [f"the rendered chart pulls {failure}" for failure in proof.failures()]
    problems = list(dict.fromkeys(problems))
    if problems and settings.values.unmirrored == "error":
        reason = "; ".join(problems)
        return Delivery(None, f"values for {target.name} not written: nodes would pull from the source: {reason}")
    for problem in problems:
        log.warning("%s -> %s: values written with an image left behind: %s", job.version, target.name, problem)
    if job.chart is not None and settings.chart is not None:
        install = await _publish(settings, job, target, client)
    written = write_values(
        settings,
        target,
        job.version,
        latest,
        values,
        install,
        pull_secret,
        proof.to_json() if proof else None,
        tuple(f"NOT MIRRORED: {p}" for p in problems),
    )
    return Delivery(written)


async def _publish(
    settings: MirrorSettings, job: ReleaseJob, target: TargetSettings, client: RegistryClient
) -> ChartInstall:
    """The chart at the target as OCI, or its .tgz beside the values where the target refuses it."""
    assert job.chart is not None and settings.chart is not None
    archive = (f"{job.chart.name}-{job.chart.version}.tgz", job.chart.raw)
    if not settings.chart.publish:
        return ChartInstall("", archive)
    repository = f"{target.namespace}/{job.chart.name}"
    published = await publish_chart(client, repository, job.chart)
    if published.reference is None:
        note = f"{published.refusal}; the chart's .tgz is written beside the values instead"
        log.warning("%s -> %s: %s", job.version, target.name, note)
        return ChartInstall("", archive, note)
    return ChartInstall(f"oci://{pull_registry(target)}/{repository}")
