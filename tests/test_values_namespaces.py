"""The pull secret goes where the pods run. HAMi's real chart puts its workloads in `namespaceOverride` (its
`hami-vgpu.namespace` helper), as HAMi-WebUI's and its subcharts' do with theirs: the printed `kubectl create
secret` line names each namespace the rendered pods that pull from the target are in, or, without such a render,
the override the values set; a pod in a namespace the line does not reach is named. Charts rendered by real Helm
(helm-python-sdk); the sync runs against Debian's registry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from mirror.chart.archive import ChartArchive, open_chart
from mirror.chart.images import image_blocks, pull_secret_paths
from mirror.chart.proof import check_rendering
from mirror.chart.render import RenderRequest, render_install
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.samplechart import ChartRepository, chart_files, chart_repository, package
from mirror.demo.samplewebui import webui_chart
from mirror.engine.jobs import install_spec
from mirror.naming import flat_name
from mirror.settings import InstallChartSettings, MirrorSettings
from mirror.values import ChartInstall, PointedBlock, build_values, pull_registry, write_values
from tests.support import sync_json
from tests.test_chart import CHART_VERSION, chart_config, seed_chart_images
from tests.test_sync import VERSION

OVERRIDE = "hami-system"
SECRET = "acr-pull"
CRPI = "crpi-abc123.cn-hangzhou.personal.cr.aliyuncs.com"  # an Enterprise host: never an anonymous pull


def made_in(namespace: str, server: str) -> str:
    """The kubectl line for one namespace the cluster may not have yet."""
    return (
        f"kubectl create namespace {namespace} --dry-run=client -o yaml | kubectl apply -f - && "
        f"kubectl create secret docker-registry {SECRET} -n {namespace} --docker-server={server} "
        "--docker-username=<your account name> --docker-password=<your registry password>"
    )


def with_namespace_override(registry: str) -> bytes:
    """The sample HAMi chart with the real chart's `hami-vgpu.namespace` helper on every workload."""
    files = chart_files(registry, CHART_VERSION)
    files["values.yaml"] += 'namespaceOverride: ""\n'
    helper = (
        '{{- define "sample.namespace" -}}{{ .Values.namespaceOverride | default .Release.Namespace }}{{- end -}}\n'
    )
    files["templates/_helpers.tpl"] += helper
    placed = 'namespace: {{ include "sample.namespace" . }}'
    for template in ("templates/scheduler.yaml", "templates/device-plugin.yaml"):
        files[template] = files[template].replace("-hami-scheduler}", f"-hami-scheduler, {placed}}}")
        files[template] = files[template].replace("-hami-device-plugin}", f"-hami-device-plugin, {placed}}}")
    files["templates/patch-job.yaml"] = files["templates/patch-job.yaml"].replace(
        "-hami-admission-create\n", f"-hami-admission-create\n  {placed}\n"
    )
    return package(files)


@pytest.fixture
def overriding_repository(source: LocalRegistry) -> Iterator[ChartRepository]:
    with chart_repository() as served:
        served.add("hami", CHART_VERSION, with_namespace_override(source.host))
        yield served


def test_a_sync_creates_the_pull_secret_in_hamis_namespace_override(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    overriding_repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_chart_images(source)
    config = chart_config(
        tmp_path,
        source,
        target,
        {"repository": overriding_repository.url},
        target_options={"pull_secret": SECRET},
        values={"extra": {"namespaceOverride": OVERRIDE}},
    )
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    (entry,) = report["values"]
    pods = entry["proof"]["pods"]
    assert len(pods) == 3 and {pod["verdict"] for pod in pods} == {"pull secret"}
    # the pods run in the override, the release in kube-system: the secret goes where the pods are
    assert entry["kubectl"] == made_in(OVERRIDE, target.host)
    assert " -n kube-system " in entry["helm"] and "warnings" not in entry
    rbac = yaml.safe_load_all(Path(entry["path"]).with_name("hami-scheduler-dra-rbac.yaml").read_text())
    assert [d["subjects"][0]["namespace"] for d in rbac if d["kind"] == "ClusterRoleBinding"] == [OVERRIDE]


def test_without_a_render_the_secret_follows_the_override_the_values_set(tmp_path: Path) -> None:
    settings = MirrorSettings.model_validate(
        {
            "source": {"registry": "docker.io"},
            "targets": [{"name": "t", "registry": CRPI, "namespace": "ns"}],
            "images": [{"name": "hami", "source": "projecthami/hami"}],  # no chart: nothing renders
            "values": {"extra": {"namespaceOverride": OVERRIDE}},
            "output_dir": str(tmp_path),
        }
    )
    target = settings.targets[0]
    values = build_values(target, [], settings.values.extra, SECRET)
    written = write_values(settings, target, VERSION, True, values, ChartInstall("hami-charts/hami"), SECRET)
    assert written.kubectl_command == made_in(OVERRIDE, pull_registry(target))


def pointed_everywhere(archive: ChartArchive) -> list[PointedBlock]:
    return [PointedBlock(block, flat_name(block.source, "docker.io")) for block in image_blocks(archive, "1.32.0")]


def test_a_charts_entrys_override_and_its_subcharts_own_namespace_each_get_the_secret(tmp_path: Path) -> None:
    """HAMi-WebUI with `namespaceOverride: monitoring`: its Deployment runs there, dcgm-exporter (whose own
    override is empty) in the release's namespace `hami`. Both are named, each made first."""
    settings = MirrorSettings.model_validate(
        {
            "source": {"registry": "docker.io"},
            "targets": [{"name": "t", "registry": CRPI, "namespace": "ns"}],
            "chart": {"name": "hami"},
            "output_dir": str(tmp_path),
        }
    )
    target = settings.targets[0]
    entry = InstallChartSettings(
        repository="https://charts.invalid/",
        name="hami-webui",
        namespace="hami",
        values={"namespaceOverride": "monitoring"},
    )
    spec = install_spec(settings, entry)
    raw = webui_chart()
    archive = open_chart(raw, "hami-webui")
    values = build_values(target, pointed_everywhere(archive), spec.extra, SECRET, pull_secret_paths(archive))
    rendering = render_install(archive, values, RenderRequest(spec.release, spec.namespace, "1.32.0"), "sdk", False)
    at_target = frozenset({f"{pull_registry(target)}/ns/"})
    proof = check_rendering(rendering, set(), [], None, at_target, rendering.pods, SECRET)
    assert {(c.pod.workload, c.pod.namespace) for c in proof.pods} == {
        ("Deployment hami-webui", "monitoring"),
        ("DaemonSet hami-webui-dcgm-exporter", "hami"),
    }
    written = write_values(settings, target, VERSION, True, values, ChartInstall("x"), SECRET, proof, (), spec, "1.3.0")
    server = pull_registry(target)
    assert written.kubectl_command == f"{made_in('hami', server)} && {made_in('monitoring', server)}"
