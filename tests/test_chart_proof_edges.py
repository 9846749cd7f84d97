"""Edges of the render proof and of the values it proves, each against the real parts: the sample charts rendered
by Helm's Go SDK (helm-python-sdk), and Debian's registry where a sync runs.

- A null in `values.extra` gives the chart's own default (Helm would delete the key, default and all).
- A pinned copy moved to a `pinned-<hex>` tag at a target is not proved under the tag that holds other bytes.
- What a render puts into one error is bounded, however many images it names and however long.
- An image handed to a container as an argument or an environment value is judged like any image.
- A guessed tag whose repository the render never showed is not settled by the render."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from mirror.chart.archive import ChartArchive, open_chart
from mirror.chart.images import image_blocks
from mirror.chart.proof import MIRRORED, NOT_MIRRORED, check_rendering
from mirror.chart.render import RenderRequest, render_images, render_install
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import push_single
from mirror.demo.samplechart import chart_files, chart_repository, hami_chart, package
from mirror.demo.samplewebui import webui_chart
from mirror.engine.charts import read_chart
from mirror.engine.clients import Clients
from mirror.engine.jobs import release_spec
from mirror.naming import flat_name
from mirror.settings import ACR_REGISTRIES, MirrorSettings, TargetSettings
from mirror.values import PointedBlock, build_values, pull_registry
from tests.support import manifest_digest, sync_json, with_client
from tests.test_chart import CHART_VERSION, chart_config, seed_chart_images
from tests.test_sync import VERSION

TARGET = TargetSettings(name="t", registry="registry.cn-hangzhou.aliyuncs.com", namespace="ns")
VPC = pull_registry(TARGET)
RELOADER = "quay.io/prometheus-operator/prometheus-config-reloader:v0.76.1"


def pointed_everywhere(archive: ChartArchive, extra: dict[str, Any]) -> list[PointedBlock]:
    """Every block of the chart not already at ACR, pointed at its copy under the target's namespace."""
    blocks = image_blocks(archive, "1.32.0", extra)
    return [
        PointedBlock(b, flat_name(b.source, "docker.io")) for b in blocks if not b.registry.endswith("aliyuncs.com")
    ]


# --- a null in values.extra ------------------------------------------------------------------------------------


def driver_root(extra: dict[str, Any]) -> str | None:
    """The device plugin's DRIVER_ROOT as Helm renders the sample HAMi chart with values built over `extra`."""
    raw = hami_chart("docker.io")
    values = build_values(TARGET, pointed_everywhere(open_chart(raw, "hami"), extra), extra)
    with helm_python.Chart.load_archive(raw) as chart:
        rendered = chart.render(values, name="hami", namespace="kube-system", is_install=True)
    daemonset = yaml.safe_load(rendered["hami/templates/device-plugin.yaml"])
    (plugin,) = [c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == "device-plugin"]
    return next((e["value"] for e in plugin["env"] if e["name"] == "DRIVER_ROOT"), None)


def extra_of(extra: dict[str, Any]) -> dict[str, Any]:
    settings = MirrorSettings.model_validate(
        {"source": {"registry": "docker.io"}, "targets": [TARGET.model_dump()], "values": {"extra": extra}}
        | {"chart": {"name": "hami"}}
    )
    return dict(settings.values.extra)


def test_a_null_in_values_extra_gives_the_charts_own_driver_root() -> None:
    chart_default = extra_of({"devicePlugin": {"nvidiaDriverRoot": None}})
    assert chart_default == {"devicePlugin": {"nvidiaDriverRoot": None}}  # as settings keep it
    assert driver_root(chart_default) == "/usr/local/nvidia"  # the sample chart's default, as the real 2.10's
    assert "nvidiaDriverRoot" not in build_values(TARGET, [], chart_default).get("devicePlugin", {})
    assert driver_root(extra_of({})) == "/"  # ACK's, the default of values.extra
    assert driver_root(extra_of({"devicePlugin": {"nvidiaDriverRoot": "/run/nvidia/driver"}})) == "/run/nvidia/driver"


# --- a pinned copy moved to a pinned- tag ----------------------------------------------------------------------

CERTGEN = "liangjw/kube-webhook-certgen"


def test_a_pinned_copy_moved_off_a_tag_holding_other_bytes_is_not_proved_under_that_tag(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chart pins certgen by digest in its values but its template renders `repository:tag` alone; the
    target's `v1.1.1` holds another image, so the copy goes to `pinned-<hex>`. Nodes would pull the other image:
    the proof refuses the values."""
    digest = seed_chart_images(source)[CERTGEN].digest
    copy = f"mirrored/{CERTGEN.replace('/', '_')}"
    with_client(target, lambda client: push_single(client, copy, "v1.1.1", layer_sizes=(1024,), seed=99))
    other = manifest_digest(target, copy, "v1.1.1")
    files = chart_files(source.host, CHART_VERSION)
    pin = f"repository: {CERTGEN}\n      tag: v1.1.1\n"
    files["values.yaml"] = files["values.yaml"].replace(pin, f"{pin}      digest: {digest}\n")
    with chart_repository() as served:
        served.add("hami", CHART_VERSION, package(files))
        code, report, err = sync_json(
            chart_config(tmp_path, source, target, {"repository": served.url}), capsys, VERSION
        )
    (certgen,) = [i for i in report["images"] if CERTGEN in i["source"]]
    (moved,) = certgen["targets"]
    assert moved["verified"] and moved["reference"].endswith(f"{copy}:pinned-{digest.removeprefix('sha256:')[:32]}")
    assert manifest_digest(target, copy, "v1.1.1") == other  # left alone
    assert code != 0 and report["values"] == [], err
    (error,) = report["errors"]
    assert f"the rendered chart pulls {target.host}/{copy}:v1.1.1 (hami/templates/patch-job.yaml)" in error


# --- what a render puts into one error -------------------------------------------------------------------------

MANY = 500
LONG_PODS = """{{- range $i := until %d }}
---
apiVersion: v1
kind: Pod
metadata: {name: pod-{{ $i }}}
spec:
  containers: [{name: c, image: "example.invalid/{{ repeat 2000 "a" }}:{{ $i }}"}]
{{- end }}
"""


def test_an_error_carries_a_bounded_few_of_the_images_a_render_left_behind(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed_chart_images(source)
    files = chart_files(source.host, CHART_VERSION)
    files["templates/many.yaml"] = LONG_PODS % MANY
    with chart_repository() as served:
        served.add("hami", CHART_VERSION, package(files))
        code, report, err = sync_json(
            chart_config(tmp_path, source, target, {"repository": served.url}), capsys, VERSION
        )
    assert code != 0 and report["values"] == [], err
    (error,) = report["errors"]
    assert len(error) < 15_000, len(error)  # it was 1 MB: every reference, whole
    assert error.count("the rendered chart pulls example.invalid/aaa") == 10
    assert error.endswith(f"; and {MANY - 10} more images the rendered chart pulls from elsewhere")
    assert "characters cut" in error
    # the rest are not lost: no proof is kept for values not written, so each is logged, one bounded line each
    logged = [
        r.getMessage() for r in caplog.records if "values not written: also the rendered chart pulls" in r.message
    ]
    assert len(logged) == MANY - 10 and max(map(len, logged)) < 1200


def test_the_proofs_rows_keep_every_reference_whole_and_its_failures_are_clipped() -> None:
    files = {"Chart.yaml": "apiVersion: v2\nname: many\nversion: 1.0.0\n", "templates/many.yaml": LONG_PODS % 20}
    rendering = render_images(open_chart(package(files, "many"), "many"), {}, RenderRequest("m", "d", "1.32.0"), "sdk")
    proof = check_rendering(rendering, set(), [], set())
    assert len(proof.images) == 20 and all(len(image.reference) > 2000 for image in proof.images)
    failures = proof.failures()
    assert len(failures) == 20 and all(len(line) < 1000 for line in failures)


# --- images handed on as arguments and environment values ------------------------------------------------------

OPERATOR_ON = {"kube-prometheus-stack": {"enabled": True, "prometheusOperator": {"enabled": True}}}


def test_the_config_reloader_passed_as_an_argument_is_proven_like_any_image() -> None:
    """kube-prometheus-stack's operator is given the config reloader's image as `--prometheus-config-reloader=`;
    the Prometheus pods it makes pull it. Left on quay.io, the proof refuses the values; pointed, it passes."""
    archive = open_chart(webui_chart(), "hami-webui")
    values = build_values(TARGET, pointed_everywhere(archive, OPERATOR_ON), OPERATOR_ON)
    request = RenderRequest("my-hami-webui", "hami", "1.32.0")
    rendering = render_install(archive, values, request, "sdk", False)
    pointed = f"{VPC}/ns/quay.io_prometheus-operator_prometheus-config-reloader:v0.76.1"
    operator = "hami-webui/charts/kube-prometheus-stack/templates/prometheus-operator/deployment.yaml"
    assert (pointed, operator) in {(image.reference, image.source) for image in rendering.images}
    at_target = {image.reference for image in rendering.images if image.reference.startswith(VPC + "/ns/")}
    ours = frozenset({f"{VPC}/ns/"})
    proven = check_rendering(rendering, at_target, list(ACR_REGISTRIES), None, ours)
    assert proven.ok and (pointed, MIRRORED) in {(i.reference, i.verdict) for i in proven.images}

    del values["kube-prometheus-stack"]["prometheusOperator"]["prometheusConfigReloader"]
    left = render_install(archive, values, request, "sdk", False)
    proof = check_rendering(left, at_target, list(ACR_REGISTRIES), None, ours)
    assert not proof.ok
    assert [(i.reference, i.source) for i in proof.images if i.verdict == NOT_MIRRORED] == [(RELOADER, operator)]


HANDED_ON = """apiVersion: apps/v1
kind: Deployment
metadata: {name: tool}
spec:
  template:
    spec:
      containers:
        - name: tool
          image: reg.example.com/tools/tool:1.0
          command: [/bin/tool, "quay.io/tools/runner:v2", "--config=/etc/tool/tool.yaml"]
          args:
            - --sidecar-image=reg.example.com:5000/tools/sidecar:3.1
            - --upstream=https://quay.io/tools/page:1
            - --listen=0.0.0.0:9090
            - --template=quay.io/tools/untagged
            - busybox:1.36
            - --doc=example.com/guide/file.txt
          env:
            - {name: HELPER, value: "ghcr.io/tools/helper@sha256:%s"}
            - {name: HOME_URL, value: "http://example.com/a/b:c"}
            - {name: DATA, value: /var/lib/tool:ro}
"""


def test_images_in_arguments_and_environment_values_are_read_and_nothing_else_is() -> None:
    digest = "ab" * 32
    files = {"Chart.yaml": "apiVersion: v2\nname: tool\nversion: 1.0.0\n", "templates/tool.yaml": HANDED_ON % digest}
    rendering = render_images(open_chart(package(files, "tool"), "tool"), {}, RenderRequest("t", "d", "1.32.0"), "sdk")
    assert [image.reference for image in rendering.images] == [
        "reg.example.com/tools/tool:1.0",
        "quay.io/tools/runner:v2",
        "reg.example.com:5000/tools/sidecar:3.1",
        f"ghcr.io/tools/helper@sha256:{digest}",
    ]


# --- a guessed tag the render never showed ---------------------------------------------------------------------

UNRENDERED = """tools:
  image:
    registry: {registry}
    repository: tools/unrendered
    tag: ""
"""


@pytest.fixture
def unrendered_source(source: LocalRegistry) -> Iterator[LocalRegistry]:
    """The guess (`v2.10.0`, from global.imageTag) is not at the source; its twin `2.10.0` is."""
    with_client(source, lambda client: push_single(client, "tools/unrendered", "2.10.0", layer_sizes=(1024,)))
    yield source


def test_a_guess_the_render_never_showed_is_settled_at_the_source(unrendered_source: LocalRegistry) -> None:
    source = unrendered_source
    files = chart_files(source.host, CHART_VERSION)
    files["values.yaml"] += UNRENDERED.format(registry=source.host)  # no template uses it
    settings = MirrorSettings.model_validate(
        {
            "source": {"registry": source.host},
            "targets": [TARGET.model_dump()],
            "chart": {"name": "hami", "renderer": "sdk"},
            "registries": {source.host: {"plain_http": True}},
        }
    )

    async def read() -> Any:
        async with Clients(settings) as clients:
            return await read_chart(settings, release_spec(settings), open_chart(package(files), "hami"), clients)

    blocks = {block.key: block for block in asyncio.run(read()).blocks}
    assert (blocks["tools.image"].tag, blocks["tools.image"].tag_check) == ("2.10.0", "source")
    assert (blocks["devicePlugin.image"].tag, blocks["devicePlugin.image"].tag_check) == ("v2.10.0", "render")
