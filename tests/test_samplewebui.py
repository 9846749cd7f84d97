"""The HAMi-WebUI-shaped chart (mirror/demo/samplewebui.py) rendered by real Helm (helm-python-sdk): what a
default install runs, what kube-prometheus-stack adds, `global.imageRegistry` moving only the images that honour
it, and the image table agreeing with the chart."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from typing import Any

import helm_python
import pytest
import yaml

from mirror import oci
from mirror.chart.archive import open_chart
from mirror.chart.merge import deep_merge
from mirror.chart.render import RenderRequest, render_images
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.samplewebui import (
    BACKEND,
    FRONTEND,
    REAL_DIGESTS,
    WEBUI_IMAGES,
    WebuiImage,
    seed_webui_images,
    webui_chart,
    webui_images,
)
from mirror.registry import RegistryClient
from tests.support import manifest_bytes, manifest_digest, with_client

KPS = "kube-prometheus-stack"
REQUEST = RenderRequest("hami-webui", "hami", "1.32.0")
FE = f"{FRONTEND}@{REAL_DIGESTS[FRONTEND + ':v1.3.0']}"
BE = f"{BACKEND}@{REAL_DIGESTS[BACKEND + ':v1.3.0']}"
DCGM = "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.7-3.5.0-ubuntu22.04"
PROMETHEUS = "quay.io/prometheus/prometheus:v2.54.1"
OPERATOR = "quay.io/prometheus-operator/prometheus-operator:v0.76.1"
RELOADER = "quay.io/prometheus-operator/prometheus-config-reloader:v0.76.1"
CERTGEN = "registry.k8s.io/ingress-nginx/kube-webhook-certgen:v20221220-controller-v1.5.1-58-g787ea74b6"
GRAFANA = "docker.io/grafana/grafana:11.2.0"
KSM = "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.13.0"
EVERYTHING_ON = {KPS: {"enabled": True, "grafana": {"enabled": True}, "prometheusOperator": {"enabled": True}}}


def mirror_lists(raw: bytes, values: dict[str, Any]) -> list[str]:
    """The images mirror's renderer lists (Helm's SDK through `render_images`), sorted."""
    rendering = render_images(open_chart(raw, "hami-webui test"), values, REQUEST, "sdk")
    assert rendering.renderer.startswith("Helm v")
    return sorted(image.reference for image in rendering.images)


def rendered(raw: bytes, values: dict[str, Any]) -> dict[str, list[str]]:
    """What the install makes the cluster pull, by Helm's SDK directly, sorted by where it is written: the
    workloads' containers, a `Prometheus` resource's `spec.image` (the operator runs it) and the config reloader
    the operator is told to inject (an argument)."""
    with helm_python.Chart.load_archive(raw) as chart:
        manifests = chart.render(values, name=REQUEST.release, namespace=REQUEST.namespace, is_install=True)
    found: dict[str, list[str]] = {"containers": [], "custom resources": [], "arguments": []}
    for path, text in manifests.items():
        if not path.endswith(".yaml"):
            continue
        for document in yaml.safe_load_all(text):
            if not isinstance(document, dict):
                continue
            if document.get("kind") == "Prometheus":
                found["custom resources"].append(document["spec"]["image"])
            for container in _containers(document):
                found["containers"].append(container["image"])
                for arg in container.get("args") or []:
                    if str(arg).startswith("--prometheus-config-reloader="):
                        found["arguments"].append(str(arg).partition("=")[2])
    return {kind: sorted(images) for kind, images in found.items()}


def everything_run(raw: bytes, values: dict[str, Any]) -> list[str]:
    """Every image the install makes the cluster pull, sorted."""
    return sorted(image for images in rendered(raw, values).values() for image in images)


def _containers(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        for key, child in node.items():
            if key in ("containers", "initContainers") and isinstance(child, list):
                yield from child
            else:
                yield from _containers(child)
    elif isinstance(node, list):
        for child in node:
            yield from _containers(child)


def members(raw: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]


def effective_values(raw: bytes, overrides: dict[str, Any]) -> dict[str, Any]:
    """The parent's values with each subchart's defaults under its name, then `overrides`: enough to read the
    switches the image table names."""
    files = members(raw)
    parent = yaml.safe_load(files["hami-webui/values.yaml"])
    for name, archive in files.items():
        if name.startswith("hami-webui/charts/") and name.endswith(".tgz"):
            sub = members(archive)
            (top,) = {path.split("/", 1)[0] for path in sub}
            parent[top] = deep_merge(yaml.safe_load(sub[f"{top}/values.yaml"]), parent.get(top, {}))
    return deep_merge(parent, overrides)


def switched_on(image: WebuiImage, values: dict[str, Any]) -> bool:
    def lookup(key: str) -> Any:
        node: Any = values
        for part in key.split("."):
            node = node[part]
        return node

    return all(lookup(key) is True for key in image.enabled_by)


def as_rendered(image: WebuiImage, digests: dict[str, str] = REAL_DIGESTS) -> str:
    """How the chart writes an image with the real hosts: HAMi-WebUI's own by bare name and digest."""
    return f"{image.repository}@{digests[image.name]}" if image.pinned else image.reference


def test_the_package_is_laid_out_as_the_real_chart() -> None:
    raw = webui_chart()
    files = members(raw)
    assert {"hami-webui/charts/dcgm-exporter-3.5.0.tgz", "hami-webui/charts/kube-prometheus-stack-62.6.0.tgz"} <= set(
        files
    )
    chart = yaml.safe_load(files["hami-webui/Chart.yaml"])
    assert (chart["name"], chart["version"], chart["appVersion"]) == ("hami-webui", "1.3.0", "1.3.0")
    assert [(d["name"], d["version"], d["condition"]) for d in chart["dependencies"]] == [
        ("dcgm-exporter", "3.5.0", "dcgm-exporter.enabled"),
        (KPS, "62.6.0", "kube-prometheus-stack.enabled"),
    ]
    values = yaml.safe_load(files["hami-webui/values.yaml"])
    assert values["image"]["frontend"] == {
        "repository": FRONTEND,  # no registry key, Docker Hub's bare name
        "pullPolicy": "IfNotPresent",
        "tag": "v1.3.0",
        "digest": REAL_DIGESTS[f"{FRONTEND}:v1.3.0"],
    }
    assert values["imagePullSecrets"] == [] and values["dcgm-exporter"]["enabled"] is True
    assert values[KPS]["enabled"] is False
    stack = members(files["hami-webui/charts/kube-prometheus-stack-62.6.0.tgz"])
    assert {
        "kube-prometheus-stack/charts/grafana-8.5.1.tgz",
        "kube-prometheus-stack/charts/kube-state-metrics-5.25.1.tgz",
        "kube-prometheus-stack/charts/crds/Chart.yaml",
    } <= set(stack)
    dcgm = members(files["hami-webui/charts/dcgm-exporter-3.5.0.tgz"])
    assert (
        yaml.safe_load(dcgm["dcgm-exporter/values.yaml"])["image"]["repository"] == "nvcr.io/nvidia/k8s/dcgm-exporter"
    )


def test_a_default_install_runs_the_pinned_webui_images_and_dcgm_exporter() -> None:
    raw = webui_chart()
    assert mirror_lists(raw, {}) == sorted([FE, BE, DCGM])
    assert rendered(raw, {}) == {"containers": sorted([FE, BE, DCGM]), "custom resources": [], "arguments": []}


def test_dcgm_exporter_falls_back_to_its_app_version_and_an_unpinned_chart_to_tags() -> None:
    emptied = rendered(webui_chart(), {"dcgm-exporter": {"image": {"tag": ""}}})["containers"]
    assert DCGM.replace("3.3.7-3.5.0-ubuntu22.04", "3.5.0") in emptied
    older = webui_chart(version="1.2.0")  # no pin known for 1.2.0: no digest key at all
    assert "digest" not in yaml.safe_load(members(older)["hami-webui/values.yaml"])["image"]["frontend"]
    assert mirror_lists(older, {}) == sorted([f"{FRONTEND}:v1.2.0", f"{BACKEND}:v1.2.0", DCGM])


def test_kube_prometheus_stack_adds_its_images_as_far_as_the_parents_values_let_it() -> None:
    raw = webui_chart()
    # the parent's values turn off grafana and the operator: Prometheus (a custom resource) and kube-state-metrics
    assert rendered(raw, {KPS: {"enabled": True}}) == {
        "containers": sorted([FE, BE, DCGM, KSM]),
        "custom resources": [PROMETHEUS],
        "arguments": [],
    }
    assert rendered(raw, EVERYTHING_ON) == {
        "containers": sorted([FE, BE, DCGM, KSM, GRAFANA, OPERATOR, CERTGEN]),
        "custom resources": [PROMETHEUS],
        "arguments": [RELOADER],
    }
    # mirror's renderer lists no image the install does not run, and every container's
    seen = mirror_lists(raw, EVERYTHING_ON)
    assert set(rendered(raw, EVERYTHING_ON)["containers"]) <= set(seen) <= set(everything_run(raw, EVERYTHING_ON))


@pytest.mark.parametrize("overrides", [{}, {KPS: {"enabled": True}}, EVERYTHING_ON], ids=["default", "kps", "all"])
def test_the_image_table_says_what_each_install_runs(overrides: dict[str, Any]) -> None:
    raw = webui_chart()
    values = effective_values(raw, overrides)
    expected = sorted(as_rendered(image) for image in WEBUI_IMAGES if switched_on(image, values))
    assert everything_run(raw, overrides) == expected
    assert len(WEBUI_IMAGES) == 9 and {i.source for i in WEBUI_IMAGES} == {"hub", "nvcr", "quay", "k8s"}


def test_global_image_registry_moves_the_images_that_honour_it_and_no_others() -> None:
    raw = webui_chart()
    values = deep_merge(EVERYTHING_ON, {"global": {"imageRegistry": "registry-vpc.cn-hangzhou.aliyuncs.com"}})
    moved = [
        ref.replace("quay.io", "registry-vpc.cn-hangzhou.aliyuncs.com", 1)
        .replace("registry.k8s.io", "registry-vpc.cn-hangzhou.aliyuncs.com", 1)
        .replace("docker.io", "registry-vpc.cn-hangzhou.aliyuncs.com", 1)
        for ref in (KSM, GRAFANA, OPERATOR, CERTGEN, PROMETHEUS, RELOADER)
    ]
    assert everything_run(raw, values) == sorted([FE, BE, DCGM, *moved])  # HAMi-WebUI's and dcgm-exporter's stay


def test_other_hosts_go_inside_repository_or_into_registry() -> None:
    host = "127.0.0.1:5000"
    raw = webui_chart(hub=host, nvcr=host, quay=host, k8s=host)
    run = everything_run(raw, EVERYTHING_ON)
    assert f"{host}/{FE}" in run and f"{host}/{BE}" in run
    assert all(ref.startswith(f"{host}/") for ref in run), run
    values = yaml.safe_load(members(raw)["hami-webui/values.yaml"])
    assert values["image"]["backend"]["repository"] == f"{host}/{BACKEND}"


async def _seed(client: RegistryClient) -> dict[str, str]:
    return await seed_webui_images(dict.fromkeys(("hub", "nvcr", "quay", "k8s"), client), ("1.2.0", "1.3.0"))


def test_the_seeded_images_are_what_the_chart_runs(source: LocalRegistry) -> None:
    digests = with_client(source, _seed)
    images = {image.name: image for version in ("1.2.0", "1.3.0") for image in webui_images(version)}
    assert set(digests) == set(images) and len(digests) == 11
    for name, image in images.items():
        assert manifest_digest(source, image.repository, image.tag) == digests[name], name
        media_type = json.loads(manifest_bytes(source, image.repository, image.tag))["mediaType"]
        assert (media_type in (oci.OCI_INDEX, oci.DOCKER_MANIFEST_LIST)) is image.multiarch, name
    host = source.host
    raw = webui_chart(digests, hub=host, nvcr=host, quay=host, k8s=host)
    expected = sorted(
        f"{host}/{as_rendered(i, digests)}" if i.pinned else f"{host}/{i.repository}:{i.tag}" for i in WEBUI_IMAGES
    )
    assert everything_run(raw, EVERYTHING_ON) == expected
    pin = digests[f"{FRONTEND}:v1.3.0"]
    assert manifest_digest(source, FRONTEND, pin) == pin  # the pin resolves there
    assert digests[f"{FRONTEND}:v1.2.0"] != pin  # each version's own images
