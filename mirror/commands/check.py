"""`mirror check`: the config read as `mirror sync` and `mirror serve` read it (the file, MIRROR_* variables,
secret files, placeholders), and what it says in plain lines: where each target pushes and where nodes pull
from, what a release mirrors, the schedule's next runs. Nothing is sent anywhere: it is for a config's review
in CI, or before a CronJob's first run. Exit 0, or 2 naming the problem."""

from __future__ import annotations

import argparse
import datetime
import itertools
from collections.abc import Iterator

from mirror.engine.jobs import check_versions, select_targets, source_repository, target_repository
from mirror.errors import MirrorError
from mirror.reference import without_userinfo
from mirror.registry.proxy import environment_proxies
from mirror.settings import MirrorSettings, load_settings
from mirror.settings.registries import TargetSettings
from mirror.values import pull_registry

EXIT_OK, EXIT_USAGE = 0, 2
NEXT_TICKS = 3


def run(args: argparse.Namespace) -> int:
    from mirror.commands.sync import say

    try:
        settings = load_settings(args.config)
        versions = check_versions(settings, args.versions)
        targets = select_targets(settings, args.target)
        environment_proxies()  # a proxy variable a run cannot use stops it before any request: say so here
        problem = _service_problem(settings, args.port) if args.serve else None
    except MirrorError as exc:
        say(exc)
        return exc.exit_code
    if problem is not None:
        say(problem)
        return EXIT_USAGE
    for line in describe(settings, versions, targets):
        print(line)
    return EXIT_OK


def _service_problem(settings: MirrorSettings, port: int) -> str | None:
    """What `mirror serve --port PORT` would refuse before it listens, short of binding a port or opening the
    state directory and the job store (which `mirror check` never does)."""
    from mirror.service.app import nothing_to_serve, same_port

    return nothing_to_serve(settings) or same_port(settings, port)


def describe(settings: MirrorSettings, versions: list[str], targets: tuple[TargetSettings, ...]) -> Iterator[str]:
    yield "config: valid"
    yield "targets:"
    for target in targets:
        yield f"  {target.name}: push to {target.registry}/{target.namespace}"
        yield f"    nodes pull from {pull_registry(target)}/{target.namespace}"
        yield f"    login: {_login(settings, target.registry)}"
    yield from _what_a_release_mirrors(settings, versions, targets)
    if settings.schedule:
        yield f"schedule: {settings.schedule} (UTC); next: {', '.join(_next_ticks(settings.schedule))}"


def _what_a_release_mirrors(
    settings: MirrorSettings, versions: list[str], targets: tuple[TargetSettings, ...]
) -> Iterator[str]:
    charts = [settings.chart] if settings.chart is not None else []
    for chart in charts:
        named = "; the images the config names below take their values keys from it" if settings.images else ""
        shown = without_userinfo(chart.repository)  # a login in the URL stays out of a CI log
        yield f"chart: {chart.name} from {shown}: its images are read from it at each sync{named}"
    for other in settings.charts:
        shown = without_userinfo(other.repository)
        yield f"chart: {other.name} {other.version} from {shown}, installed with the release"
    if not settings.images:
        return
    for version in versions or ["{version}"]:
        yield f"release {version}:"
        for image in settings.images:
            tag = image.tag_for(version) if versions else image.tag
            yield f"  {image.name}: {source_repository(settings, image)}:{tag}"
            for target in targets:
                yield f"    -> {target.name}: {target_repository(target, image.name)}:{tag}"


def _login(settings: MirrorSettings, host: str) -> str:
    """How the run will log in to `host`, never a secret."""
    registry = settings.registry(host)
    if registry.aliyun is not None:
        return f"Alibaba Cloud RAM identity ({registry.aliyun.credentials}), ACR's GetAuthorizationToken"
    if registry.username is not None:
        return registry.login_origin(host)
    where = str(settings.docker_config) if settings.docker_config else "$DOCKER_CONFIG or ~/.docker/config.json"
    return f"a docker config ({where}) if it holds {host}, else anonymous"


def _next_ticks(schedule: str) -> list[str]:
    """The schedule's next runs, from the service's own trigger."""
    from mirror.cron import cron_trigger, fire_times

    ticks = fire_times(cron_trigger(schedule), datetime.datetime.now(datetime.UTC))
    return [tick.strftime("%Y-%m-%d %H:%M UTC") for tick in itertools.islice(ticks, NEXT_TICKS)]
