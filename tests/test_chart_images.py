"""Reading a chart's images across its subcharts and every shape, writing each block back in its own shape, and
the one naming rule: no network, charts built as `helm package` lays them out."""

from __future__ import annotations

import pytest
import yaml

from mirror.chart.archive import ChartError, open_chart
from mirror.chart.images import image_blocks, pull_secret_paths
from mirror.chart.proof import NOT_MIRRORED, check_rendering
from mirror.chart.render import RenderedImage, Rendering, RenderRequest
from mirror.chart.tags import resolve_tags
from mirror.demo.samplechart import package
from mirror.engine.jobs import FetchedChart, InstallCharts, ReleaseJob, build_release_jobs
from mirror.naming import NameClash, check_unique, flat_name
from mirror.reference import Repository
from mirror.settings import MirrorSettings, TargetSettings
from mirror.values import PointedBlock, build_values

DIGEST = "sha256:" + "b4" * 32
OTHER = "sha256:" + "7e" * 32


def chart_yaml(
    name: str, version: str, app_version: str = "", dependencies: list[dict[str, object]] | None = None
) -> str:
    data: dict[str, object] = {"apiVersion": "v2", "name": name, "version": version}
    if app_version:
        data["appVersion"] = app_version
    if dependencies:
        data["dependencies"] = dependencies
    return yaml.safe_dump(data)


DCGM_VALUES = {
    "image": {"repository": "nvcr.io/nvidia/k8s/dcgm-exporter", "tag": "", "pullPolicy": "IfNotPresent"},
    "imagePullSecrets": [],
}
KPS_VALUES = {
    "global": {"imageRegistry": "", "imagePullSecrets": []},
    "prometheus": {
        "prometheusSpec": {"image": {"registry": "quay.io", "repository": "prometheus/prometheus", "tag": "v2.54.1"}}
    },
    "grafana": {"enabled": True},
}
GRAFANA_VALUES = {"image": {"registry": "docker.io", "repository": "grafana/grafana", "tag": "11.2.0"}}


def webui_like(fe_digest: str = DIGEST) -> bytes:
    grafana = package(
        {"Chart.yaml": chart_yaml("grafana", "8.5.0", "11.2.0"), "values.yaml": yaml.safe_dump(GRAFANA_VALUES)},
        "grafana",
    )
    kps = package(
        {
            "Chart.yaml": chart_yaml(
                "kube-prometheus-stack", "62.6.0", "v0.76.0", [{"name": "grafana", "condition": "grafana.enabled"}]
            ),
            "values.yaml": yaml.safe_dump(KPS_VALUES),
            "charts/grafana-8.5.0.tgz": grafana,
            "charts/crds/Chart.yaml": chart_yaml("crds", "0.0.0"),
            "charts/crds/crds/prometheus.yaml": "kind: CustomResourceDefinition\n",
        },
        "kube-prometheus-stack",
    )
    dcgm = package(
        {"Chart.yaml": chart_yaml("dcgm-exporter", "3.5.0", "3.3.5-3.4.1"), "values.yaml": yaml.safe_dump(DCGM_VALUES)},
        "dcgm-exporter",
    )
    values = {
        "image": {
            "frontend": {"repository": "projecthami/hami-webui-fe-oss", "tag": "v1.3.0", "digest": fe_digest},
            "backend": {"repository": "projecthami/hami-webui-be-oss", "tag": "v1.3.0", "digest": OTHER},
        },
        "imagePullSecrets": [],
        "dcgm-exporter": {"enabled": True},
        "kube-prometheus-stack": {"enabled": False},
        "tools": {"image": "ghcr.io/project-hami/tools:v1"},
    }
    dependencies: list[dict[str, object]] = [
        {"name": "dcgm-exporter", "version": "3.5.0", "condition": "dcgm-exporter.enabled"},
        {
            "name": "kube-prometheus-stack",
            "version": "62.6.0",
            "condition": "kps.enabled",
            "alias": "kps",
        },
    ]
    return package(
        {
            "Chart.yaml": chart_yaml("hami-webui", "1.3.0", "1.3.0", dependencies),
            "values.yaml": yaml.safe_dump(values).replace("kube-prometheus-stack:", "kps:"),
            "charts/dcgm-exporter-3.5.0.tgz": dcgm,
            "charts/kube-prometheus-stack-62.6.0.tgz": kps,
        },
        "hami-webui",
    )


def test_every_image_of_the_chart_and_its_subcharts_with_its_shape_and_key() -> None:
    blocks = image_blocks(open_chart(webui_like(), "webui"), "1.32.0")
    found = {(b.key, b.registry, b.repository, b.tag, b.digest, b.shape, b.enabled, b.chart) for b in blocks}
    assert found == {
        ("image.frontend", "docker.io", "projecthami/hami-webui-fe-oss", "v1.3.0", DIGEST, "repository", True, ""),
        ("image.backend", "docker.io", "projecthami/hami-webui-be-oss", "v1.3.0", OTHER, "repository", True, ""),
        ("tools.image", "ghcr.io", "project-hami/tools", "v1", None, "string", True, ""),
        # the host inside `repository`, the empty tag from the subchart's appVersion
        (
            "dcgm-exporter.image",
            "nvcr.io",
            "nvidia/k8s/dcgm-exporter",
            "3.3.5-3.4.1",
            None,
            "repository",
            True,
            "dcgm-exporter",
        ),
        # under the alias, switched off by its condition, and its own subchart with it
        (
            "kps.prometheus.prometheusSpec.image",
            "quay.io",
            "prometheus/prometheus",
            "v2.54.1",
            None,
            "block",
            False,
            "kps",
        ),
        ("kps.grafana.image", "docker.io", "grafana/grafana", "11.2.0", None, "block", False, "kps/grafana"),
    }


def test_the_users_values_switch_subcharts_and_move_registries_as_helm_would() -> None:
    archive = open_chart(webui_like(), "webui")
    overrides = {"kps": {"enabled": True, "grafana": {"enabled": False}}, "global": {"imageRegistry": "mirror.example"}}
    blocks = {b.key: b for b in image_blocks(archive, "1.32.0", overrides)}
    assert blocks["kps.prometheus.prometheusSpec.image"].enabled is True
    assert blocks["kps.grafana.image"].enabled is False
    # global.imageRegistry (the Bitnami convention) moves every block that has a registry key, only those
    assert blocks["kps.prometheus.prometheusSpec.image"].registry == "mirror.example"
    assert blocks["dcgm-exporter.image"].registry == "nvcr.io"


def test_tags_switch_a_subchart_when_no_condition_decides() -> None:
    sub = package(
        {
            "Chart.yaml": chart_yaml("extra", "1.0.0", "2.0.0"),
            "values.yaml": "image: {repository: quay.io/x/y, tag: ''}\n",
        },
        "extra",
    )
    parent = package(
        {
            "Chart.yaml": chart_yaml("p", "1.0.0", "", [{"name": "extra", "tags": ["monitoring"]}]),
            "values.yaml": "tags: {monitoring: false}\n",
            "charts/extra-1.0.0.tgz": sub,
        },
        "p",
    )
    (block,) = image_blocks(open_chart(parent, "p"), "1.32.0")
    assert (block.key, block.tag, block.enabled) == ("extra.image", "2.0.0", False)
    (block,) = image_blocks(open_chart(parent, "p"), "1.32.0", {"tags": {"monitoring": True}})
    assert block.enabled is True


def test_nested_archives_share_one_bound() -> None:
    inner = package({"Chart.yaml": chart_yaml("inner", "1.0.0"), "big.bin": bytes(600_000)}, "inner")
    outer = package(
        {"Chart.yaml": chart_yaml("outer", "1.0.0"), "big.bin": bytes(600_000), "charts/inner-1.0.0.tgz": inner},
        "outer",
    )
    assert open_chart(outer, "outer").subcharts[0].name == "inner"
    with pytest.raises(ChartError, match="with its subcharts"):
        open_chart(outer, "outer", max_unpacked_bytes=1_000_000)


def test_subcharts_nested_past_the_depth_bound_are_refused() -> None:
    chart = package({"Chart.yaml": chart_yaml("c6", "1.0.0")}, "c6")
    for depth in range(5, -1, -1):
        chart = package(
            {"Chart.yaml": chart_yaml(f"c{depth}", "1.0.0"), f"charts/c{depth + 1}-1.0.0.tgz": chart}, f"c{depth}"
        )
    with pytest.raises(ChartError, match="nested more than"):
        open_chart(chart, "deep")


def test_a_broken_nested_archive_names_where_it_sits() -> None:
    outer = package({"Chart.yaml": chart_yaml("outer", "1.0.0"), "charts/inner-1.0.0.tgz": b"not gzip"}, "outer")
    with pytest.raises(ChartError, match=r"outer charts/inner-1\.0\.0\.tgz: not a readable chart archive"):
        open_chart(outer, "outer")


TARGET = TargetSettings(name="t", registry="registry.cn-hangzhou.aliyuncs.com", namespace="ns")
VPC = "registry-vpc.cn-hangzhou.aliyuncs.com"


def test_each_block_is_written_back_in_its_own_shape() -> None:
    archive = open_chart(webui_like(), "webui")
    blocks = image_blocks(archive, "1.32.0")
    rewritten = "sha256:" + "aa" * 32  # the frontend's index was rewritten at the target (attestations left out)
    pointed = [
        PointedBlock(b, flat_name(b.source, "docker.io"), digest=rewritten if b.key == "image.frontend" else None)
        for b in blocks
    ]
    values = build_values(TARGET, pointed, {}, "acr-pull", pull_secret_paths(archive))
    # no registry key: the repository carries the VPC host; the chart's own digest stays unless the copy's differs
    assert values["image"]["frontend"] == {
        "repository": f"{VPC}/ns/projecthami_hami-webui-fe-oss",
        "digest": "sha256:" + "aa" * 32,
    }
    assert values["image"]["backend"] == {"repository": f"{VPC}/ns/projecthami_hami-webui-be-oss"}
    assert values["dcgm-exporter"]["image"] == {"repository": f"{VPC}/ns/nvcr.io_nvidia_k8s_dcgm-exporter"}
    assert values["kps"]["prometheus"]["prometheusSpec"]["image"] == {
        "registry": VPC,
        "repository": "ns/quay.io_prometheus_prometheus",
    }
    assert values["tools"]["image"] == f"{VPC}/ns/ghcr.io_project-hami_tools:v1"
    # the pull secret reaches every place the charts take one: in `global` as a plain name (the Bitnami convention
    # HAMi's helper needs), elsewhere as the Kubernetes field's own `{name: ...}`, where values.yaml shows neither
    secrets = [{"name": "acr-pull"}]
    assert values["global"]["imagePullSecrets"] == ["acr-pull"] and values["imagePullSecrets"] == secrets
    assert values["dcgm-exporter"]["imagePullSecrets"] == secrets
    # read back with the chart's defaults: every image now names the target
    again = image_blocks(archive, "1.32.0", values)
    assert {b.registry for b in again} == {VPC}


def test_the_naming_rule() -> None:
    hub = "docker.io"
    assert flat_name(Repository.of(hub, "projecthami/hami"), hub) == "projecthami_hami"
    assert flat_name(Repository.of(hub, "nginx"), hub) == "library_nginx"
    assert flat_name(Repository.of("nvcr.io", "nvidia/k8s/dcgm-exporter"), hub) == "nvcr.io_nvidia_k8s_dcgm-exporter"
    assert flat_name(Repository.of("127.0.0.1:5000", "a/b"), hub) == "127.0.0.1-5000_a_b"
    assert flat_name(Repository.of("127.0.0.1:5000", "a/b"), "127.0.0.1:5000") == "a_b"
    # a host as a chart may spell it: one registry whatever its case (`Quay.io_x_y` was no repository name),
    # and an IPv6 literal's brackets and colons are no part of one either
    assert flat_name(Repository.of("Quay.io", "x/y"), hub) == flat_name(Repository.of("quay.io", "x/y"), hub)
    assert flat_name(Repository.of("Quay.io", "x/y"), hub) == "quay.io_x_y"
    assert flat_name(Repository.of("[::1]:5000", "x/y"), hub) == "1-5000_x_y"
    assert Repository.of("Docker.io", "nginx") == Repository.of("docker.io", "nginx")  # Docker Hub's API host
    long = Repository.of("registry.k8s.io", "a" * 40 + "/" + "b" * 40)
    other = Repository.of("registry.k8s.io", "a" * 40 + "/" + "b" * 39 + "c")
    assert len(flat_name(long, hub)) == 64 and flat_name(long, hub) != flat_name(other, hub)
    with pytest.raises(NameClash, match=r"a_b/c and .*a/b_c would both be copied to <namespace>/a_b_c"):
        check_unique(
            (source, flat_name(source, hub)) for source in (Repository.of(hub, "a_b/c"), Repository.of(hub, "a/b_c"))
        )


def test_the_proof_names_an_image_no_block_explains_with_its_template() -> None:
    rendering = Rendering(
        "test",
        (
            RenderedImage(f"{VPC}/ns/projecthami_hami-webui-fe-oss:v1.3.0@{DIGEST}", "templates/web.yaml"),
            RenderedImage("busybox:1.36", "templates/init.yaml"),
            RenderedImage("docker.io/projecthami/hami-webui-be-oss:v1.3.0", "templates/web.yaml"),
        ),
    )
    verified = {f"{VPC}/ns/projecthami_hami-webui-fe-oss@{DIGEST}"}
    proof = check_rendering(
        rendering, verified, ["*.aliyuncs.com"], {"registry-1.docker.io/projecthami/hami-webui-be-oss"}
    )
    verdicts = {(i.reference, i.verdict, i.note) for i in proof.images}
    assert (f"{VPC}/ns/projecthami_hami-webui-fe-oss:v1.3.0@{DIGEST}", "mirrored", "") in verdicts
    assert ("busybox:1.36", NOT_MIRRORED, "no values block sets this image") in verdicts
    assert ("docker.io/projecthami/hami-webui-be-oss:v1.3.0", NOT_MIRRORED, "") in verdicts
    assert proof.failures()[0] == "busybox:1.36 (templates/init.yaml: no values block sets this image)"


def test_at_the_targets_namespace_only_a_verified_copy_passes_whatever_the_patterns_allow() -> None:
    """The target's VPC host is one of `*.aliyuncs.com`: a repository or tag there that was never verified (a
    user's values renaming a mirrored image, say) would pull nothing, and must not pass as an allowed
    registry; another namespace on the same host (ACR's google_containers for kube-scheduler) still may."""
    rendering = Rendering(
        "test",
        (
            RenderedImage(f"{VPC}/ns/projecthami_hami:v2.10.0", "templates/scheduler.yaml"),
            RenderedImage(f"{VPC}/ns/projecthami_hami-custom:v2.10.0-fix", "templates/device-plugin.yaml"),
            RenderedImage(f"{VPC}/ns/projecthami_hami:v2.9.0", "templates/monitor.yaml"),
            RenderedImage(f"{VPC}/google_containers/kube-scheduler:v1.32.0", "templates/scheduler.yaml"),
        ),
    )
    verified = {f"{VPC}/ns/projecthami_hami:v2.10.0"}
    proof = check_rendering(rendering, verified, ["*.aliyuncs.com"], None, frozenset({f"{VPC}/ns/"}))
    verdicts = {i.reference: i.verdict for i in proof.images}
    assert verdicts == {
        f"{VPC}/ns/projecthami_hami:v2.10.0": "mirrored",
        f"{VPC}/ns/projecthami_hami-custom:v2.10.0-fix": NOT_MIRRORED,
        f"{VPC}/ns/projecthami_hami:v2.9.0": NOT_MIRRORED,
        f"{VPC}/google_containers/kube-scheduler:v1.32.0": "allowed registry",
    }
    assert not proof.ok


def test_aliases_multiplied_at_every_depth_stop_at_a_bound() -> None:
    """Each alias is an instance of the subchart, at every level: 20 aliases 4 deep would be 168,000 readings."""
    chart = package(
        {"Chart.yaml": chart_yaml("c4", "1.0.0"), "values.yaml": "image: {repository: x/y, tag: '1'}\n"}, "c4"
    )
    for depth in range(3, -1, -1):
        aliases: list[dict[str, object]] = [{"name": f"c{depth + 1}", "alias": f"a{i}"} for i in range(20)]
        files: dict[str, str | bytes] = {
            "Chart.yaml": chart_yaml(f"c{depth}", "1.0.0", "", aliases),
            f"charts/c{depth + 1}-1.0.0.tgz": chart,
        }
        chart = package(files, f"c{depth}")
    archive = open_chart(chart, "aliases")
    for read in (lambda: image_blocks(archive, "1.32.0"), lambda: pull_secret_paths(archive)):
        with pytest.raises(ChartError, match="more than 256 subchart instances"):
            read()


def test_yaml_aliases_that_multiply_a_small_values_file_stop_at_a_bound() -> None:
    """A few hundred bytes of anchors, each level naming the last ten times: a million mappings by reference."""
    mapped = "\n".join(
        ["a0: &a0 {image: {repository: x/y, tag: '1'}}"]
        + [f"a{i}: &a{i} {{" + ", ".join(f"k{j}: *a{i - 1}" for j in range(10)) + "}" for i in range(1, 7)]
    )
    archive = open_chart(package({"Chart.yaml": chart_yaml("bomb", "1.0.0"), "values.yaml": mapped}, "bomb"), "bomb")
    with pytest.raises(ChartError, match=r"values\.yaml: more than 500000 YAML nodes with its aliases expanded"):
        image_blocks(archive, "1.32.0")


def test_a_condition_reads_the_subcharts_own_default() -> None:
    """Helm merges the subchart's values under its key before it evaluates the condition."""
    sub = package(
        {
            "Chart.yaml": chart_yaml("sub", "1.0.0"),
            "values.yaml": "enabled: false\nimage: {repository: quay.io/x/y, tag: '1'}\n",
        },
        "sub",
    )
    parent = package(
        {
            "Chart.yaml": chart_yaml("p", "1.0.0", "", [{"name": "sub", "condition": "sub.enabled"}]),
            "charts/sub-1.0.0.tgz": sub,
        },
        "p",
    )
    (block,) = image_blocks(open_chart(parent, "p"), "1.32.0")
    assert block.enabled is False
    (block,) = image_blocks(open_chart(parent, "p"), "1.32.0", {"sub": {"enabled": True}})
    assert block.enabled is True


def test_a_chart_that_sets_global_image_registry_gets_it_cleared() -> None:
    values = (
        "global: {imageRegistry: quay.io}\n"
        "prometheus: {image: {registry: docker.io, repository: prometheus/prometheus, tag: v2}}\n"
    )
    archive = open_chart(package({"Chart.yaml": chart_yaml("kps", "1.0.0"), "values.yaml": values}, "kps"), "kps")
    (block,) = image_blocks(archive, "1.32.0")
    assert (block.registry, block.registry_from_global) == ("quay.io", True)
    written = build_values(
        TARGET, [PointedBlock(block, flat_name(block.source, "docker.io"))], {"global": {"imageRegistry": "quay.io"}}
    )
    assert written["global"]["imageRegistry"] == ""  # else the templates would prefer it to the block's registry
    (again,) = image_blocks(archive, "1.32.0", written)
    assert again.registry == VPC


def release_job(values: str, images: list[dict[str, str]] | None = None) -> ReleaseJob:
    archive = open_chart(package({"Chart.yaml": chart_yaml("hami", "2.10.0"), "values.yaml": values}, "hami"), "hami")
    settings = MirrorSettings.model_validate(
        {"targets": [TARGET.model_dump()], "chart": {}, "images": images or [], "values": {"unmirrored": "warn"}}
    )
    fetched = FetchedChart(archive, tuple(image_blocks(archive, "1.32.0")))
    (job,) = build_release_jobs(settings, ["v2.10.0"], charts=InstallCharts({"v2.10.0": fetched}))
    return job


def test_copies_of_different_digests_never_share_a_target_tag() -> None:
    job = release_job(
        f"a: {{image: 'quay.io/x/y:1.0@{DIGEST}'}}\n"
        "b: {image: 'quay.io/x/y:1.0'}\n"
        f"c: {{image: 'quay.io/x/y:1.0@{OTHER}'}}\n"
    )
    tags = sorted((image.tag, image.digest) for image in job.images)
    assert tags == sorted([("1.0", None), ("pinned-" + DIGEST[7:39], DIGEST), ("pinned-" + OTHER[7:39], OTHER)])
    assert {image.image.name for image in job.images} == {"quay.io_x_y"}


def test_a_configured_image_keeps_the_charts_block_shape_and_pin() -> None:
    values = (
        "devicePlugin: {image: 'docker.io/projecthami/hami:v2.10.0'}\n"
        f"scheduler: {{extender: {{image: {{repository: projecthami/hami, tag: v2.10.0, digest: '{DIGEST}'}}}}}}\n"
    )
    job = release_job(values, [{"name": "hami", "source": "projecthami/hami"}])
    shapes = {use.block.key: (use.block.shape, job.images[use.copy].digest) for use in job.charts[0].uses}
    assert shapes == {"devicePlugin.image": ("string", None), "scheduler.extender.image": ("repository", DIGEST)}
    pointed = [PointedBlock(use.block, job.images[use.copy].image.name) for use in job.charts[0].uses]
    written = build_values(TARGET, pointed, {})
    assert written["devicePlugin"]["image"] == f"{VPC}/ns/hami:v2.10.0"
    assert written["scheduler"]["extender"]["image"] == {"repository": f"{VPC}/ns/hami"}


DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
        - name: main
          image: "{{{{ .Values.{name}.image.repository }}}}:v{{{{ .Chart.AppVersion }}}}"
"""


def test_every_block_of_a_repository_takes_the_tag_helm_renders_for_it() -> None:
    """Two blocks of one image whose tags the values leave empty, rendered as `v` + appVersion by real Helm:
    each takes `v2.10.0`, where the guess is the bare appVersion (the second kept the guess once the first had
    taken the rendered tag out of the shared set)."""
    values = {name: {"image": {"repository": "projecthami/hami", "tag": ""}} for name in ("scheduler", "plugin")}
    archive = open_chart(
        package(
            {
                "Chart.yaml": chart_yaml("two-blocks", "2.10.0", "2.10.0"),
                "values.yaml": yaml.safe_dump(values),
                "templates/scheduler.yaml": DEPLOYMENT.format(name="scheduler"),
                "templates/plugin.yaml": DEPLOYMENT.format(name="plugin"),
            },
            "two-blocks",
        ),
        "two-blocks",
    )
    blocks = image_blocks(archive, "1.32.0")
    assert [(b.tag, b.tag_inferred) for b in blocks] == [("2.10.0", True), ("2.10.0", True)]  # the guess
    resolved = resolve_tags(archive, blocks, RenderRequest("two-blocks", "kube-system", "1.32.0"), "sdk")
    assert [b.tag for b in resolved] == ["v2.10.0", "v2.10.0"]
