"""Before anything is copied: the namespace of each target whose registry is an ACR Enterprise instance mirror logs
in to with a RAM identity (`registries.<host>.aliyun`), found, created, or explained (`aliyun/provision.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mirror.engine.clients import Clients
from mirror.engine.jobs import ReleaseJob
from mirror.errors import MirrorError
from mirror.progress import Progress
from mirror.reference import api_host
from mirror.registry import RegistryError
from mirror.registry.credentials import CredentialError
from mirror.settings import MirrorSettings, TargetSettings

if TYPE_CHECKING:
    from mirror.aliyun.login import AcrLogin


async def prepare_namespaces(
    settings: MirrorSettings, jobs: list[ReleaseJob], clients: Clients, dry_run: bool, progress: Progress
) -> dict[str, MirrorError]:
    """Each target's namespace ready (those that need it), or why not, by target name: a target that is not
    ready leaves the others to go on."""
    targets = {target.name: target for job in jobs for target in job.targets}
    unready: dict[str, MirrorError] = {}
    for target in targets.values():
        try:
            await _prepare(settings, target, jobs, clients, dry_run, progress)
        except MirrorError as exc:
            unready[target.name] = exc
    return unready


async def _prepare(
    settings: MirrorSettings,
    target: TargetSettings,
    jobs: list[ReleaseJob],
    clients: Clients,
    dry_run: bool,
    progress: Progress,
) -> None:
    login_settings = settings.registry(target.registry).aliyun
    if login_settings is None:
        return
    from mirror.aliyun.login import AcrLogin  # only where a registry logs in with a RAM identity
    from mirror.aliyun.provision import ensure_namespace, ensure_repositories

    login = clients.login(target.registry)
    assert isinstance(login, AcrLogin)
    provision = login_settings.provision
    instance = login_settings.instance_id
    # with provision, a configured id is checked against the registry's own before anything is created on it
    if instance is None or (provision and not dry_run):
        instance = await _instance(clients, target, jobs, login) or instance
    if instance is None:
        raise CredentialError(f"{target.registry}: no Enterprise instance id known; set aliyun.instance_id")
    namespace = acr_namespace(target)
    state = await ensure_namespace(login, instance, namespace, provision, dry_run)
    progress.event(state.note)
    if not state.creates_on_push:
        names = repositories_at(settings, target, jobs)
        for note in await ensure_repositories(login, instance, namespace, names, provision, dry_run):
            progress.event(note)


def acr_namespace(target: TargetSettings) -> str:
    """The Enterprise namespace of the target's: its first part (`team/gpu`: `team`, the rest the repositories'
    path), which the OpenAPI knows; the whole was looked up, and never found."""
    return target.namespace.split("/", 1)[0]


def repositories_at(settings: MirrorSettings, target: TargetSettings, jobs: list[ReleaseJob]) -> list[str]:
    """The repositories (names within the ACR namespace, a path of the target's namespace kept) the run pushes to
    at `target`: each image's, and each chart's where charts are published there."""
    within = f"{acr_namespace(target)}/"
    names = [
        ref.repository.name.removeprefix(within)
        for release in jobs
        for image in release.images
        for ref in image.targets
        if ref.name == target.name
    ]
    if settings.chart is not None and settings.chart.publish:
        charts = [chart.archive.name for release in jobs for chart in release.charts if chart.archive is not None]
        names += [f"{target.namespace}/{name}".removeprefix(within) for name in charts]
    return list(dict.fromkeys(names))


async def _instance(clients: Clients, target: TargetSettings, jobs: list[ReleaseJob], login: AcrLogin) -> str | None:
    """The instance the registry names in its challenge: learned by the login its first request makes (a HEAD of
    a tag this run asks for anyway), which refuses an `instance_id` the challenge contradicts. A registry out of
    reach is said as itself (RegistryUnreachable); an error it answered with is said beside the want of an
    instance id only when no login came of it and none is configured."""
    job = next((image for release in jobs for image in release.images), None)
    if job is None:
        return login.instance
    ref = next(r for r in job.targets if r.name == target.name)
    try:
        await clients[api_host(target.registry)].head_manifest(ref.repository.name, job.tag)
    except RegistryError as exc:  # a missing namespace may refuse it: the login came first
        if login.instance is None and login.options.instance_id is None:
            raise CredentialError(
                f"{target.registry}: no Enterprise instance id known (the registry answered {exc}); "
                "set aliyun.instance_id"
            ) from None
    return login.instance
