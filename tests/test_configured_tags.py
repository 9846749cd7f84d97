"""A configured image's tag reaches the values wherever the chart would render another one: a tag other than the
release's (`{version}-custom`), or another tag than the chart's own block names (certgen v1.5.0 over the chart's
v1.1.1). Where the chart already renders the configured tag, none is written (the seed's shape). The values are
rendered by real Helm (helm-python-sdk) with the sample HAMi chart. And a configured name the command line gets
wrong (`--target typo`) is refused before anything is asked of a chart repository or a registry."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mirror.chart.archive import open_chart
from mirror.chart.images import image_blocks
from mirror.chart.render import RenderRequest, render_images
from mirror.chart.tags import resolve_tags
from mirror.cli import main
from mirror.demo.samplechart import chart_repository, hami_chart
from mirror.engine.jobs import FetchedChart, InstallCharts, build_release_jobs
from mirror.settings import MirrorSettings
from mirror.values import PointedBlock, build_values
from tests.support import write_config

VERSION = "v2.10.0"
VPC = "registry-vpc.cn-hangzhou.aliyuncs.com"
TARGET = {"name": "t", "registry": "registry.cn-hangzhou.aliyuncs.com", "namespace": "my-ns"}
CUSTOM = [
    {"name": "hami", "source": "projecthami/hami", "tag": "{version}-custom"},
    {"name": "certgen", "source": "liangjw/kube-webhook-certgen", "tag": "v1.5.0"},
]
DEFAULTS = [
    {"name": "hami", "source": "projecthami/hami"},
    {"name": "certgen", "source": "liangjw/kube-webhook-certgen", "tag": "v1.1.1"},
]
REQUEST = RenderRequest("hami", "kube-system", "1.32.0")


def settings(images: list[dict[str, Any]], chart: bool) -> MirrorSettings:
    data: dict[str, Any] = {"targets": [TARGET], "images": images}
    if chart:
        data["chart"] = {"repository": "https://charts.example.com/hami", "renderer": "sdk"}
    return MirrorSettings.model_validate(data)


def fetched_sample() -> InstallCharts:
    archive = open_chart(hami_chart("docker.io"), "test")
    blocks = resolve_tags(archive, image_blocks(archive, REQUEST.kube_version), REQUEST, "sdk")
    return InstallCharts({VERSION: FetchedChart(archive, tuple(blocks))})


def values_for(config: MirrorSettings, charts: InstallCharts | None = None) -> dict[str, Any]:
    (job,) = build_release_jobs(config, [VERSION], charts=charts)
    chart = job.charts[0]
    pointed = [PointedBlock(use.block, job.images[use.copy].image.name, use.values_tag) for use in chart.uses]
    return build_values(config.targets[0], pointed, config.values.extra)


@pytest.mark.parametrize("chart", [False, True], ids=["hami's known keys", "the chart's blocks"])
def test_a_configured_tag_the_chart_would_not_render_is_written(chart: bool) -> None:
    charts = fetched_sample() if chart else None
    values = values_for(settings(CUSTOM, chart), charts)
    assert values["scheduler"]["extender"]["image"] == {
        "registry": VPC,
        "repository": "my-ns/hami",
        "tag": "v2.10.0-custom",
    }
    assert values["devicePlugin"]["monitor"]["image"]["tag"] == "v2.10.0-custom"
    assert values["scheduler"]["patch"]["imageNew"] == {"registry": VPC, "repository": "my-ns/certgen", "tag": "v1.5.0"}
    defaults = values_for(settings(DEFAULTS, chart), charts)
    assert "tag" not in defaults["scheduler"]["extender"]["image"]  # the chart renders v2.10.0 by itself
    assert "tag" not in defaults["scheduler"]["patch"]["imageNew"]  # and its own v1.1.1


def test_a_key_the_chart_lacks_gets_the_tag_since_what_the_chart_renders_there_is_unknown() -> None:
    mock = {"name": "mock", "source": "projecthami/mock-device-plugin", "values_keys": ["mockDevicePlugin.image"]}
    values = values_for(settings([*DEFAULTS, mock], chart=False))
    assert values["mockDevicePlugin"]["image"] == {"registry": VPC, "repository": "my-ns/mock", "tag": "v2.10.0"}


def test_helm_renders_the_configured_tags_from_the_values() -> None:
    charts = fetched_sample()
    values = values_for(settings(CUSTOM, chart=True), charts)
    rendering = render_images(charts.release[VERSION].archive, values, REQUEST, "sdk")
    ours = {image.reference for image in rendering.images if image.reference.startswith(VPC + "/my-ns/")}
    assert ours == {f"{VPC}/my-ns/hami:v2.10.0-custom", f"{VPC}/my-ns/certgen:v1.5.0"}


@dataclass(frozen=True)
class Host:
    host: str


@pytest.mark.parametrize("discover", [False, True], ids=["sync", "discover"])
def test_a_mistyped_target_exits_2_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], discover: bool
) -> None:
    with chart_repository() as repository:
        repository.add("hami", "2.10.0", hami_chart("docker.io"))
        nowhere = Host("127.0.0.1:9")  # the registries: never asked either
        config = write_config(tmp_path / "mirror.yaml", nowhere, [nowhere], chart={"repository": repository.url})
        args = ["sync", "--discover"] if discover else ["sync", VERSION]
        code = main([*args, "--config", str(config), "--target", "typo"])
        assert code == 2
        assert "mirror: --target 'typo': no such target (configured: t0)" in capsys.readouterr().err
        assert repository.requests == []  # the charts were not fetched first
