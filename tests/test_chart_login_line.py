"""The `helm install` line of a chart published to a target logs Helm in exactly when the chart cannot be pulled
anonymously there, whatever the images' repositories allow: an ACR namespace creates a pushed repository private
by default, so the chart's repository may be private beside public image repositories.

The target is Debian's `docker-registry` with token auth (tests/tokenserver.py): the pusher may do anything,
anyone may pull the repositories the token server lists as public."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from mirror.chart.source import HELM_CONFIG
from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.samplechart import ChartRepository, chart_repository, hami_chart
from mirror.registry import RegistryClient, RegistryError
from tests.support import with_client
from tests.test_chart import CHART_VERSION, chart_config, seed_chart_images
from tests.test_sync import VERSION
from tests.tokenserver import TokenServer, token_server

USER, PASSWORD = "pusher", "Tr0ub4dor&3-chart-secret"
# the target repositories of the sample chart's images (`mirrored/<flat source name>`), public as in
# HAMi-WebUI's case; the chart's own repository, mirrored/hami, is not among them
IMAGE_REPOSITORIES = (
    "mirrored/projecthami_hami",
    "mirrored/liangjw_kube-webhook-certgen",
    "mirrored/jettech_kube-webhook-certgen",
    "mirrored/projecthami_mock-device-plugin",
)
CHART_REPOSITORY = "mirrored/hami"
CHART_MANIFEST = f"/v2/{CHART_REPOSITORY}/manifests/{CHART_VERSION}"
LOGIN = "helm registry login {host} --username <your account name> && "


@dataclass
class World:
    tmp: Path
    tokens: TokenServer
    source: LocalRegistry
    target: LocalRegistry
    charts: ChartRepository

    def config(self, chart: dict[str, Any] | None = None) -> Path:
        """Only the chart and a target that wants the pusher's login for anything but an anonymous pull."""
        path = chart_config(self.tmp, self.source, self.target, {"repository": self.charts.url, **(chart or {})})
        data = yaml.safe_load(path.read_text())
        data["registries"][self.target.host].update({"username": USER, "password": PASSWORD})
        path.write_text(yaml.safe_dump(data))
        return path

    def anonymous_chart_requests(self) -> list[str]:
        """The scopes of the token requests made without credentials for the chart's repository."""
        return [
            scope
            for request in self.tokens.requests
            if request.user is None
            for scope in request.scopes
            if scope.startswith(f"repository:{CHART_REPOSITORY}:")
        ]


def make_world(tmp_path: Path, source: LocalRegistry, public: tuple[str, ...]) -> Iterator[World]:
    with (
        token_server(tmp_path / "tokens", users={USER: PASSWORD}, public=public) as tokens,
        chart_repository() as charts,
    ):
        target = start_registry(tmp_path / "target", auth=tokens.registry_auth("target-registry"))
        try:
            seed_chart_images(source)
            charts.add("hami", CHART_VERSION, hami_chart(source.host, CHART_VERSION))
            yield World(tmp_path, tokens, source, target, charts)
        finally:
            target.stop()


@pytest.fixture
def private_chart(tmp_path: Path, source: LocalRegistry) -> Iterator[World]:
    """Every image repository at the target public, the chart's repository (created by its push) private."""
    yield from make_world(tmp_path, source, IMAGE_REPOSITORIES)


@pytest.fixture
def public_chart(tmp_path: Path, source: LocalRegistry) -> Iterator[World]:
    """The whole namespace public: the chart's repository too."""
    yield from make_world(tmp_path, source, ("mirrored",))


def sync(config: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["sync", VERSION, "--config", str(config), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def report_of(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = sync(config, capsys, "--json")
    assert code == 0, err
    release = json.loads(out)
    assert all(t["anonymous_pull"] is True for i in release["images"] for t in i["targets"])  # the images: public
    return dict(release)


def anonymous_read(registry: LocalRegistry) -> Any:
    """The chart's manifest as Helm reads it without logging in, or the registry's refusal."""

    async def read(client: RegistryClient) -> Any:
        try:
            manifest = await client.get_manifest(CHART_REPOSITORY, CHART_VERSION)
        except RegistryError as exc:
            return exc.status
        return manifest.config.media_type if manifest.config else None

    return with_client(registry, read)


def test_a_private_chart_beside_public_images_gets_the_login_on_every_run(
    private_chart: World, capsys: pytest.CaptureFixture[str]
) -> None:
    world, host = private_chart, private_chart.target.host
    config = world.config()
    release = report_of(config, capsys)
    (values,) = release["values"]
    assert values["pull_secret"] is None and values["kubectl"] is None  # the nodes need no secret
    assert values["helm"] == (
        LOGIN.format(host=host) + f"helm install hami oci://{host}/{CHART_REPOSITORY} -n kube-system "
        f"--version {CHART_VERSION} -f {values['path']}"
    )
    assert values["chart"] == f"oci://{host}/{CHART_REPOSITORY}" and values["chart_anonymous_pull"] is False
    assert "global" not in yaml.safe_load(Path(values["path"]).read_text())
    # mirror asked once without credentials, as Helm would, after the push: refused
    assert world.anonymous_chart_requests() == [f"repository:{CHART_REPOSITORY}:pull"]
    heads = [e for e in world.target.access_log() if e.path == CHART_MANIFEST and e.method == "HEAD"]
    assert [e.status for e in heads] == [404, 200, 401]  # before the push, after it, and the anonymous one
    assert anonymous_read(world.target) == 401  # Helm without a login is indeed refused the chart
    # a run that finds the chart published already says the same, on the terminal too
    code, out, err = sync(config, capsys)
    assert code == 0, err
    assert f"    {LOGIN.format(host=host)}helm install hami oci://{host}/{CHART_REPOSITORY} -n kube-system " in out
    assert PASSWORD not in out + err


def test_a_public_chart_installs_without_a_login(public_chart: World, capsys: pytest.CaptureFixture[str]) -> None:
    world, host = public_chart, public_chart.target.host
    release = report_of(world.config(), capsys)
    (values,) = release["values"]
    assert values["pull_secret"] is None and values["chart_anonymous_pull"] is True
    assert values["helm"].startswith(f"helm install hami oci://{host}/{CHART_REPOSITORY} -n kube-system ")
    assert world.anonymous_chart_requests() == [f"repository:{CHART_REPOSITORY}:pull"]
    assert anonymous_read(world.target) == HELM_CONFIG  # Helm pulls it as the line says


def test_a_chart_not_published_is_not_asked_about(private_chart: World, capsys: pytest.CaptureFixture[str]) -> None:
    """`chart.publish: false`: the .tgz beside the values, as before, and no request for a chart repository."""
    world = private_chart
    release = report_of(world.config({"publish": False}), capsys)
    (values,) = release["values"]
    assert "chart_anonymous_pull" not in values
    tgz = Path(values["path"]).parent / f"hami-{CHART_VERSION}.tgz"
    assert values["helm"] == f"helm install hami {tgz} -n kube-system -f {values['path']}"
    assert not [e for e in world.target.access_log() if e.path.startswith(f"/v2/{CHART_REPOSITORY}/")]
    assert world.anonymous_chart_requests() == []
