"""The values file: the seed's shape, the VPC host for every ACR endpoint form, and the helm line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from mirror.acr import vpc_host_for
from mirror.chart.archive import open_chart
from mirror.chart.images import image_blocks, pull_secret_paths
from mirror.chart.render import RenderRequest, render_images
from mirror.demo.samplechart import hami_chart
from mirror.demo.samplewebui import webui_chart
from mirror.engine.jobs import ChartJob, FetchedChart, InstallCharts, build_release_jobs
from mirror.naming import flat_name
from mirror.settings import ConfigError, MirrorSettings, load_settings
from mirror.values import ChartInstall, ChartSpec, PointedBlock, build_values, helm_command, render_values, write_values

GOLDEN = Path(__file__).parent / "golden" / "hami-ack-values.seed.yaml"
DEFAULT_CONFIG = Path(__file__).parents[1] / "config" / "mirror.yaml"


def seed_values(region: str, namespace: str) -> object:
    text = GOLDEN.read_text(encoding="utf-8")
    return yaml.safe_load(text.replace("<个人版实例所在的地域>", region).replace("<namespace>", namespace))


def settings_for(registry: str, namespace: str = "my-ns", **target: str) -> MirrorSettings:
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data["targets"] = [{"name": "t", "registry": registry, "namespace": namespace, **target}]
    data["registries"] = {}
    data.pop("chart")  # the seed's shape from HAMi's own keys, without reading a chart
    data["images"] = [
        {"name": "hami", "source": "projecthami/hami"},
        {"name": "kube-webhook-certgen", "source": "liangjw/kube-webhook-certgen", "tag": "v1.1.1"},
    ]
    return MirrorSettings(**data)


def release_chart(settings: MirrorSettings, version: str = "v2.10.0") -> tuple[list[PointedBlock], ChartJob]:
    """The release chart's blocks, each pointed at its copy (as if every copy verified byte for byte)."""
    (job,) = build_release_jobs(settings, [version])
    chart = job.charts[0]
    return [PointedBlock(use.block, job.images[use.copy].image.name, use.values_tag) for use in chart.uses], chart


def images_of(settings: MirrorSettings, version: str = "v2.10.0") -> list[PointedBlock]:
    return release_chart(settings, version)[0]


@pytest.mark.parametrize("region", ["hangzhou", "beijing", "shenzhen"])
def test_default_config_renders_the_seed_example(region: str) -> None:
    settings = settings_for(f"registry.cn-{region}.aliyuncs.com")
    values = build_values(settings.targets[0], images_of(settings), settings.values.extra)
    assert values == seed_values(region, "my-ns")
    assert yaml.safe_load(render_values(values, "header\nline two")) == values


@pytest.mark.parametrize(
    ("public", "vpc"),
    [
        ("registry.cn-hangzhou.aliyuncs.com", "registry-vpc.cn-hangzhou.aliyuncs.com"),
        ("registry.ap-southeast-1.aliyuncs.com", "registry-vpc.ap-southeast-1.aliyuncs.com"),
        (
            "crpi-abc123xyz.cn-shanghai.personal.cr.aliyuncs.com",
            "crpi-abc123xyz-vpc.cn-shanghai.personal.cr.aliyuncs.com",
        ),
        ("myinst-registry.cn-beijing.cr.aliyuncs.com", "myinst-registry-vpc.cn-beijing.cr.aliyuncs.com"),
        ("my-inst-2-registry.cn-beijing.cr.aliyuncs.com", "my-inst-2-registry-vpc.cn-beijing.cr.aliyuncs.com"),
        ("registry-intl.eu-central-1.aliyuncs.com", "registry-intl-vpc.eu-central-1.aliyuncs.com"),
        ("registry-vpc.cn-hangzhou.aliyuncs.com", "registry-vpc.cn-hangzhou.aliyuncs.com"),
        ("registry-intl-vpc.us-west-1.aliyuncs.com", "registry-intl-vpc.us-west-1.aliyuncs.com"),
        ("crpi-abc-vpc.cn-shanghai.personal.cr.aliyuncs.com", "crpi-abc-vpc.cn-shanghai.personal.cr.aliyuncs.com"),
        ("127.0.0.1:5000", "127.0.0.1:5000"),
        ("harbor.example.com", "harbor.example.com"),
    ],
)
def test_vpc_host_for_every_endpoint_form(public: str, vpc: str) -> None:
    assert vpc_host_for(public) == vpc
    settings = settings_for(public)
    values = build_values(settings.targets[0], images_of(settings), settings.values.extra)
    assert values["devicePlugin"]["image"]["registry"] == vpc
    assert values["scheduler"]["patch"]["imageNew"] == {"registry": vpc, "repository": "my-ns/kube-webhook-certgen"}


def test_explicit_vpc_registry_wins() -> None:
    settings = settings_for("registry.cn-hangzhou.aliyuncs.com", vpc_registry="mirror.internal:5000")
    values = build_values(settings.targets[0], images_of(settings), settings.values.extra)
    assert values["scheduler"]["extender"]["image"]["registry"] == "mirror.internal:5000"


def test_written_atomically_per_version_and_latest(tmp_path: Path) -> None:
    settings = settings_for("registry.cn-hangzhou.aliyuncs.com").model_copy(update={"output_dir": tmp_path})
    values = build_values(settings.targets[0], images_of(settings), settings.values.extra)
    install = ChartInstall(settings.values.chart)
    older = write_values(settings, settings.targets[0], "v2.9.0", False, values, install)
    newest = write_values(settings, settings.targets[0], "v2.10.0", True, values, install)
    assert older.path == tmp_path / "t" / "v2.9.0" / "hami-ack-values.yaml"
    assert newest.path == tmp_path / "t" / "hami-ack-values.yaml"
    assert (tmp_path / "t" / "v2.10.0" / "hami-ack-values.yaml").read_text() == newest.path.read_text()
    assert yaml.safe_load(newest.path.read_text()) == seed_values("hangzhou", "my-ns")
    latest_path = tmp_path / "t" / "hami-ack-values.yaml"
    assert newest.helm_command == f"helm install hami hami-charts/hami -n kube-system --version 2.10.0 -f {latest_path}"
    assert [p.name for p in (tmp_path / "t").iterdir() if p.name.startswith(".")] == []


def test_default_config_file_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACR_PASSWORD", raising=False)
    with pytest.raises(
        ConfigError, match=r"registries\.registry\.cn-hangzhou\.aliyuncs\.com\.password_env: .*ACR_PASSWORD"
    ):
        load_settings(DEFAULT_CONFIG)  # the README's way to give the password: a variable the shell can export
    monkeypatch.setenv("ACR_PASSWORD", "from-the-environment")
    settings = load_settings(DEFAULT_CONFIG)
    assert settings.registry("registry.cn-hangzhou.aliyuncs.com").password_value() == "from-the-environment"
    assert settings.images == [] and settings.chart is not None  # the chart names the images
    assert (settings.chart.repository, settings.chart.name) == ("https://project-hami.github.io/HAMi", "hami")


def with_images(*images: dict[str, str]) -> MirrorSettings:
    target = {"name": "t", "registry": "registry.cn-hangzhou.aliyuncs.com", "namespace": "my-ns"}
    return MirrorSettings.model_validate({"targets": [target], "images": list(images)})


def test_hamis_own_keys_are_built_in_when_the_config_names_none() -> None:
    settings = with_images(
        {"name": "hami", "source": "projecthami/hami"},
        {"name": "kube-webhook-certgen", "source": "liangjw/kube-webhook-certgen", "tag": "v1.1.1"},
    )
    pointed, chart = release_chart(settings)
    assert chart.unmirrored == ()
    values = build_values(settings.targets[0], pointed, settings.values.extra)
    assert values == seed_values("hangzhou", "my-ns")


def test_an_image_of_the_release_left_on_docker_hub_is_named() -> None:
    _, chart = release_chart(with_images({"name": "hami", "source": "projecthami/hami"}))
    assert [(b.key, b.reference) for b in chart.unmirrored] == [
        ("scheduler.patch.imageNew", "docker.io/liangjw/kube-webhook-certgen:v1.1.1")
    ]


CUSTOM = {"repository": "projecthami/hami-custom", "tag": "v2.10.0-fix", "pullPolicy": "Always"}


def test_a_users_values_keep_every_setting_but_cannot_move_a_mirrored_image_back() -> None:
    """`values:` that set a mirrored block's repository and tag: the blocks are read with them, so the copy is
    of what they name, and the written values point at that copy under the target's namespace (the user's
    repository under the VPC host was never pushed), keeping every other setting and the user's pull secrets."""
    target = settings_for("crpi-abc123.cn-hangzhou.personal.cr.aliyuncs.com").targets[0]
    vpc = "crpi-abc123-vpc.cn-hangzhou.personal.cr.aliyuncs.com"
    extra = {"devicePlugin": {"nvidiaDriverRoot": "/", "image": CUSTOM}, "global": {"imagePullSecrets": ["team"]}}
    archive = open_chart(hami_chart("docker.io"), "hami")
    blocks = [b for b in image_blocks(archive, "1.32.0", extra) if b.registry == "docker.io"]
    pointed = [PointedBlock(b, flat_name(b.source, "docker.io")) for b in blocks]
    values = build_values(target, pointed, extra, "acr-pull", pull_secret_paths(archive))
    assert values["devicePlugin"]["image"] == {**CUSTOM, "registry": vpc, "repository": "my-ns/projecthami_hami-custom"}
    assert values["devicePlugin"]["nvidiaDriverRoot"] == "/"
    assert values["global"]["imagePullSecrets"] == ["team", "acr-pull"]
    rendering = render_images(archive, values, RenderRequest("hami", "kube-system", "1.32.0"), "sdk")
    device_plugin = {i.reference for i in rendering.images if i.source.endswith("device-plugin.yaml")}
    assert device_plugin == {
        f"{vpc}/my-ns/projecthami_hami-custom:v2.10.0-fix",
        f"{vpc}/my-ns/projecthami_hami:v2.10.0",
    }


def test_an_acr_target_publishes_the_chart_at_its_push_host_where_helm_runs() -> None:
    """Nodes pull images from the VPC host; Helm, run from an operator's machine, fetches the chart itself, so
    the install line names the host the chart was pushed to, logged in where the repository is private."""
    spec = ChartSpec("hami", "hami", "kube-system", "hami-ack-values.yaml")
    chart = "oci://registry.cn-hangzhou.aliyuncs.com/ns/hami"
    line = helm_command(spec, "2.10.0", chart, Path("out/hz/hami-ack-values.yaml"), private=True)
    assert line == (
        "helm registry login registry.cn-hangzhou.aliyuncs.com --username <your account name> && helm install hami "
        f"{chart} -n kube-system --version 2.10.0 -f out/hz/hami-ack-values.yaml"
    )
    public = helm_command(spec, "2.10.0", chart, Path("v.yaml"))
    assert public == f"helm install hami {chart} -n kube-system --version 2.10.0 -f v.yaml"
    beside = helm_command(spec, "2.10.0", "out/hz/hami-2.10.0.tgz", Path("v.yaml"), private=True)
    assert beside == "helm install hami out/hz/hami-2.10.0.tgz -n kube-system -f v.yaml"  # a file needs no login


def near_miss_warnings(
    settings: MirrorSettings, charts: InstallCharts, prefix: str, caplog: pytest.LogCaptureFixture
) -> list[str]:
    """The warnings starting with `prefix` that building v2.10.0's jobs from `charts` logs, sorted."""
    with caplog.at_level(logging.WARNING, logger="mirror"):
        build_release_jobs(settings, ["v2.10.0"], charts=charts)
    return sorted(r.getMessage() for r in caplog.records if r.getMessage().startswith(prefix))


@pytest.mark.parametrize("images", [None, [{"name": "hami", "source": "projecthami/hami"}]])
def test_a_values_extra_key_spelt_like_one_of_the_charts_is_warned_of(
    caplog: pytest.LogCaptureFixture, images: list[dict[str, str]] | None
) -> None:
    """Helm ignores a key the chart does not read: `devicePlugn:` leaves every setting under it unapplied while the
    render proof passes. A key the chart lacks with nothing like it is not named (charts read keys they do not
    declare), nor is one the chart has. With the chart's images or `images:` of the config's own alike."""
    archive = open_chart(hami_chart("docker.io", "2.10.0"), "hami")
    charts = InstallCharts({"v2.10.0": FetchedChart(archive, tuple(image_blocks(archive, "1.32.0")))})
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data["targets"] = [{"name": "t", "registry": "registry.cn-hangzhou.aliyuncs.com", "namespace": "my-ns"}]
    data.setdefault("values", {})["extra"] = {
        "devicePlugn": {"deviceSplitCount": 4},
        "devicePlugin": {"nvidiaDriverRot": "/", "nvidiaDriverRoot": "/"},
        "global": {"imagePullSecret": ["acr"]},
        "someSettingOfItsOwn": 1,
    }
    if images is not None:
        data["images"] = images
    warned = near_miss_warnings(MirrorSettings(**data), charts, "values.extra", caplog)
    said = "is not a key of chart hami 2.10.0's values: did you mean"
    assert warned == [
        f"values.extra: devicePlugin.nvidiaDriverRot {said} devicePlugin.nvidiaDriverRoot?",
        f"values.extra: devicePlugn {said} devicePlugin?",
        f"values.extra: global.imagePullSecret {said} global.imagePullSecrets?",
    ]


def test_a_subcharts_own_keys_count_and_labels_are_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    """HAMi-WebUI's values name its subcharts (to switch them on) without their keys: the subcharts' own keys,
    at any depth, are keys of the chart too (kube-prometheus-stack's kubeStateMetrics is not a misspelt
    kube-state-metrics); a label or annotation key is nobody's typo (kubernetes.io/arch next to
    kubernetes.io/os); a misspelt key of a subchart's own is still one."""
    archive = open_chart(webui_chart(), "hami-webui")
    charts = InstallCharts(others=(FetchedChart(archive, tuple(image_blocks(archive, "1.32.0"))),))
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data["targets"] = [{"name": "t", "registry": "registry.cn-hangzhou.aliyuncs.com", "namespace": "my-ns"}]
    webui = {
        "kube-prometheus-stack": {"kubeStateMetrics": {"enabled": False}, "kube-state-metrics": {"imagee": {}}},
        "dcgm-exporter": {"imag": {"tag": "x"}, "nodeSelector": {"kubernetes.io/arch": "amd64"}},
    }
    data["charts"] = [{"repository": "https://project-hami.github.io/HAMi-WebUI", "name": "hami-webui"}]
    data["charts"][0]["values"] = webui
    warned = near_miss_warnings(MirrorSettings(**data), charts, "charts: ", caplog)
    said = "is not a key of chart hami-webui 1.3.0's values: did you mean"
    assert warned == [
        f"charts: hami-webui: values: dcgm-exporter.imag {said} dcgm-exporter.image?",
        f"charts: hami-webui: values: kube-prometheus-stack.kube-state-metrics.imagee {said} "
        "kube-prometheus-stack.kube-state-metrics.image?",
    ]


def test_a_values_key_spelt_like_one_of_the_charts_images_is_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    """A key the chart has no image at is written as given (an image the chart lacks may be pointed at that
    way), but one spelt like the chart's own is most likely a typo: Helm would ignore it."""
    settings = settings_for("registry.cn-hangzhou.aliyuncs.com")
    keys = ["scheduler.extender.imagez", "devicePlugin.image", "devicePlugin.monitor.image", "sidecar.image"]
    settings = settings.model_copy(
        update={"images": [settings.images[0].model_copy(update={"values_keys": keys}), settings.images[1]]}
    )
    with caplog.at_level(logging.WARNING, logger="mirror"):
        build_release_jobs(settings, ["v2.10.0"])
    warned = [r.getMessage() for r in caplog.records if "values_keys" in r.getMessage()]
    assert warned == [
        "values_keys: scheduler.extender.imagez is not an image in chart hami 2.10.0: "
        "did you mean scheduler.extender.image?"
    ]
