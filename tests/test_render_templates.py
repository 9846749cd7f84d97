"""Which rendered templates the proof reads: every one Helm installs, whatever its file name ends in, and none of
those it does not (partials, NOTES.txt, empty output). And what they render (image references, template names)
reaches the terminal escaped. Real Helm (helm-python-sdk) renders a real chart; a sync runs against real
registries and a real chart repository."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.chart.archive import open_chart
from mirror.chart.proof import NOT_MIRRORED, check_rendering
from mirror.chart.render import RenderRequest, render_images
from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.samplechart import ChartRepository, chart_files, chart_repository, package
from tests.test_chart import CHART_VERSION, chart_config, seed_chart_images
from tests.test_sync import VERSION

REQUEST = RenderRequest("demo", "default", "1.30.0")
POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: main
    image: {image}
"""
POD_JSON = (
    '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "json"}, '
    '"spec": {"containers": [{"name": "main", "image": "json.example.com/pod:1"}]}}'
)
SUBCHART = {
    "charts/sub/Chart.yaml": "apiVersion: v2\nname: sub\nversion: 0.1.0\n",
    "charts/sub/templates/pod.txt": POD.format(name="sub", image="sub.example.com/pod:1"),
    "charts/sub/templates/NOTES.txt": "image: notes.example.com/sub:1\n",
}


def demo_chart() -> bytes:
    files = {
        "Chart.yaml": "apiVersion: v2\nname: demo\nversion: 1.0.0\n",
        "values.yaml": "image: docker.io/library/busybox:1.36\n",
        "templates/pod.yaml": POD.format(name="yaml", image="{{ .Values.image }}"),
        "templates/pod.tpl": POD.format(name="tpl", image="tpl.example.com/pod:1"),
        "templates/pod.json": POD_JSON,
        "templates/pod": POD.format(name="bare", image="bare.example.com/pod:1"),
        # not installed by Helm: a partial (its own output is never a manifest), NOTES.txt, nothing rendered
        "templates/_partial.yaml": POD.format(name="partial", image="partial.example.com/pod:1"),
        "templates/NOTES.txt": "image: notes.example.com/pod:1\n",
        "templates/empty.txt": "{{- if false }}image: off.example.com/pod:1{{ end }}\n",
        **SUBCHART,
    }
    return package(files, top="demo")


def test_every_template_helm_installs_is_read_whatever_its_name_ends_in() -> None:
    archive = open_chart(demo_chart(), "test")
    rendering = render_images(archive, archive.values(), REQUEST, "sdk")
    found = {image.source.removeprefix("demo/"): image.reference for image in rendering.images}
    assert found == {
        "templates/pod.yaml": "docker.io/library/busybox:1.36",
        "templates/pod.tpl": "tpl.example.com/pod:1",
        "templates/pod.json": "json.example.com/pod:1",
        "templates/pod": "bare.example.com/pod:1",
        "charts/sub/templates/pod.txt": "sub.example.com/pod:1",
    }
    assert {pod.name for pod in rendering.pods} == {"yaml", "tpl", "json", "bare", "sub"}
    proof = check_rendering(rendering, set(), ["*.aliyuncs.com"], named={"registry-1.docker.io/library/busybox"})
    refused = {image.reference for image in proof.images if image.verdict == NOT_MIRRORED}
    assert refused == set(found.values())


# A template that renders an image reference carrying terminal control sequences (clear the screen, ring the bell)
HOSTILE_POD = POD.format(name="hostile", image='"evil.example.com/x:1\\x1b[2J\\x07"')


@pytest.fixture
def hostile_repository(source: LocalRegistry) -> Iterator[ChartRepository]:
    files = chart_files(source.host, CHART_VERSION)
    files["templates/hostile.yaml"] = HOSTILE_POD
    with chart_repository() as served:
        served.add("hami", CHART_VERSION, package(files))
        yield served


@pytest.mark.parametrize("unmirrored", ["error", "warn"])
def test_what_a_chart_renders_reaches_the_terminal_escaped(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    hostile_repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    unmirrored: str,
) -> None:
    caplog.set_level(logging.INFO, logger="mirror")  # the progress events: log lines where stderr is no terminal
    seed_chart_images(source)
    chart = {"repository": hostile_repository.url}
    values = {"unmirrored": unmirrored, "extra": {"devicePlugin": {"nvidiaDriverRoot": "/"}}}
    config = chart_config(tmp_path, source, target, chart, values=values)
    code = main(["sync", VERSION, "--config", str(config)])
    printed = capsys.readouterr()
    shown = [printed.out, printed.err, *(record.getMessage() for record in caplog.records)]
    assert code == (1 if unmirrored == "error" else 0)
    assert any("evil.example.com/x:1\\x1b[2J\\x07" in text for text in shown)  # said, escaped
    assert not [text for text in shown if "\x1b" in text or "\x07" in text]
