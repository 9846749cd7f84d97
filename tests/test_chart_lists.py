"""Images inside lists in a chart's values (`sidecars: [{image: ...}]`): found and named by their key
(`sidecars[0].image`), never pointed at a copy (values cannot change one entry of a list without replacing the
whole list, which mirror does not write), and left behind with a line that says why and how to set the list in
`values:`. Against real registries, a real chart repository and real Helm."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.chart.archive import open_chart
from mirror.chart.images import image_blocks
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.samplechart import ChartRepository, chart_files, chart_repository, package
from tests.support import sync_json
from tests.test_chart import CHART_VERSION, chart_config, seed_chart_images
from tests.test_sync import VERSION

LISTS = """
sidecars:
  - name: log
    image: {host}/library/busybox:1.36
extraInitContainers:
  - name: init
    image: {{registry: {host}, repository: prometheus/busybox, tag: latest}}
"""
SIDECARS = """apiVersion: v1
kind: Pod
metadata:
  name: sidecars
spec:
  containers:
  {{- range .Values.sidecars }}
  - name: {{ .name }}
    image: {{ .image }}
  {{- end }}
"""


def chart_with_lists(host: str) -> bytes:
    files = chart_files(host, CHART_VERSION)
    files["values.yaml"] += LISTS.format(host=host)
    files["templates/sidecars.yaml"] = SIDECARS
    return package(files)


@pytest.fixture
def repository(source: LocalRegistry) -> Iterator[ChartRepository]:
    with chart_repository() as served:
        served.add("hami", CHART_VERSION, chart_with_lists(source.host))
        yield served


def test_images_inside_lists_are_found_under_their_key() -> None:
    archive = open_chart(chart_with_lists("docker.io"), "test")
    listed = {(b.key, b.reference, b.list_key) for b in image_blocks(archive, "1.32.0") if b.in_list}
    assert listed == {
        ("sidecars[0].image", "docker.io/library/busybox:1.36", "sidecars"),
        ("extraInitContainers[0].image", "docker.io/prometheus/busybox:latest", "extraInitContainers"),
    }


def test_an_image_inside_a_list_is_named_with_the_way_to_set_it(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_chart_images(source)
    config = chart_config(tmp_path, source, target, {"repository": repository.url})
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 1
    assert f"sidecars[0].image would still pull {source.host}/library/busybox:1.36: an image inside the list" in err
    assert f"extraInitContainers[0].image would still pull {source.host}/prometheus/busybox:latest" in err
    assert "set the whole sidecars list in values.extra" in err
    assert "no values block sets this image" not in err
    assert not (tmp_path / "out" / "t0" / "hami-ack-values.yaml").exists()

    # done as the line says (here: the lists emptied), the release is delivered
    emptied = {"sidecars": [], "extraInitContainers": [], "devicePlugin": {"nvidiaDriverRoot": "/"}}
    config = chart_config(tmp_path, source, target, {"repository": repository.url}, values={"extra": emptied})
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert report["values"][0]["proof"]["ok"] is True


def test_an_image_inside_a_list_no_template_renders_is_a_warning_not_a_refusal(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """extraInitContainers is in the chart's defaults but no template renders it (a feature that is off): the
    proof shows nodes would not pull it, so the values are written, naming it, rather than refused."""
    seed_chart_images(source)
    extra = {"sidecars": [], "devicePlugin": {"nvidiaDriverRoot": "/"}}
    config = chart_config(tmp_path, source, target, {"repository": repository.url}, values={"extra": extra})
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert report["values"][0]["proof"]["ok"] is True
    written = (tmp_path / "out" / "t0" / "hami-ack-values.yaml").read_text()
    assert f"NOT MIRRORED: extraInitContainers[0].image would still pull {source.host}/prometheus/busybox" in written
