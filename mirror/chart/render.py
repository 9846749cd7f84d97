"""Render a chart with given values and list the images its workloads would pull. Real Helm is the ground
truth: Helm's Go SDK through `helm-python-sdk` (the `helm` extra), else a `helm` binary on PATH, else the
chart's values.yaml alone (`images.py`'s rules), and the result says which was used. Synchronous (Helm runs
in-process or as a subprocess): callers run it in a thread."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from mirror.chart.archive import ChartArchive, ChartError
from mirror.chart.images import every_subchart_on, image_blocks
from mirror.chart.merge import deep_merge
from mirror.untrusted import UntrustedInput, YamlLimits, clip, load_yaml_all

Renderer = Literal["auto", "sdk", "binary", "values"]
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
FREE_FORM = ("data", "stringData", "binaryData", "annotations", "labels")
HELM_TIMEOUT = 120.0
# what Helm renders, per template (the binary's: all of it): kube-prometheus-stack's is about 3 MB in all, its
# largest documents (CRDs, when a chart renders them) 1 MB, 100,000 nodes, 40 deep
MANIFEST_YAML_LIMITS = YamlLimits(max_bytes=32 * 1024 * 1024, max_depth=200, max_nodes=3_000_000)
log = logging.getLogger("mirror")


@dataclass(frozen=True, slots=True)
class RenderedImage:
    reference: str  # as the manifest gives it, e.g. registry-vpc.cn-hangzhou.aliyuncs.com/ns/hami:v2.10.0
    source: str  # the template (or values key) it came from


@dataclass(frozen=True, slots=True)
class Rendering:
    renderer: str  # what rendered it, for the report
    images: tuple[RenderedImage, ...]


@dataclass(frozen=True, slots=True)
class RenderRequest:
    release: str
    namespace: str
    kube_version: str


def render_images(
    archive: ChartArchive, values: dict[str, Any], request: RenderRequest, prefer: Renderer = "auto"
) -> Rendering:
    try:
        return _render(archive, values, request, prefer)
    except UntrustedInput as exc:
        raise ChartError(f"chart {archive.name} {archive.version}: what it renders: {exc}") from None


def _render(archive: ChartArchive, values: dict[str, Any], request: RenderRequest, prefer: Renderer) -> Rendering:
    if prefer in ("auto", "sdk") and _sdk_available():
        return _render_sdk(archive, values, request)
    if prefer == "sdk":
        raise ChartError("renderer 'sdk' asked for, but helm-python-sdk is not installed (pip install 'mirror[helm]')")
    helm = shutil.which("helm")
    if prefer in ("auto", "binary") and helm:
        return _render_binary(helm, archive, values, request)
    if prefer == "binary":
        raise ChartError("renderer 'binary' asked for, but there is no helm on PATH")
    return _render_values(archive, values, request)


def render_install(
    archive: ChartArchive, values: dict[str, Any], request: RenderRequest, prefer: Renderer, every_subchart: bool
) -> Rendering:
    """The chart rendered with the values; with `every_subchart`, rendered again with every subchart switched
    on and the images only that render shows added (their source marked), so a proof covers turning a
    subchart on later. A subchart that will not render switched on by itself is passed over with a warning."""
    first = render_images(archive, values, request, prefer)
    if not every_subchart:
        return first
    try:
        second = render_images(archive, deep_merge(values, every_subchart_on(archive)), request, prefer)
    except ChartError as exc:
        log.warning("chart %s %s: not rendered with every subchart on: %s", archive.name, archive.version, exc)
        return first
    seen = {image.reference for image in first.images}
    extra = tuple(
        RenderedImage(image.reference, f"{image.source} (every subchart on)")
        for image in second.images
        if image.reference not in seen
    )
    return Rendering(first.renderer, first.images + extra)


def _sdk_available() -> bool:
    try:
        import helm_python  # noqa: F401
    except (ImportError, OSError):  # OSError: the native library does not load on this platform
        return False
    return True


def _render_sdk(archive: ChartArchive, values: dict[str, Any], request: RenderRequest) -> Rendering:
    import helm_python
    from helm_python import _native

    options = {
        "name": request.release,
        "namespace": request.namespace,
        "is_install": True,
        # Chart.render() does not expose it; the library's render options take it (as `helm template
        # --kube-version` does), so .Capabilities.KubeVersion is the cluster's
        "kube_version": "v" + request.kube_version.removeprefix("v"),
    }
    try:
        with helm_python.Chart.load_archive(archive.raw) as chart:
            payload = _native.call_string("helm_render", chart._raw(), json.dumps(values), json.dumps(options))
    except helm_python.HelmError as exc:
        raise ChartError(
            f"chart {archive.name} {archive.version}: Helm could not render it: {clip(str(exc))}"
        ) from None
    manifests: dict[str, str] = json.loads(payload)
    return Rendering(f"Helm {helm_python.helm_sdk_version()} (helm-python-sdk)", tuple(_images(manifests)))


def _render_binary(helm: str, archive: ChartArchive, values: dict[str, Any], request: RenderRequest) -> Rendering:
    with tempfile.TemporaryDirectory(prefix="mirror-render-") as scratch:
        chart, values_file = Path(scratch) / "chart.tgz", Path(scratch) / "values.yaml"
        chart.write_bytes(archive.raw)
        values_file.write_text(yaml.safe_dump(values), encoding="utf-8")
        command = [helm, "template", request.release, str(chart), "--namespace", request.namespace]
        command += ["--kube-version", request.kube_version, "--values", str(values_file)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=HELM_TIMEOUT, check=False)
    if done.returncode != 0:
        raise ChartError(
            f"chart {archive.name} {archive.version}: helm template failed: {clip(done.stderr.strip(), 500)}"
        )
    return Rendering(f"helm binary ({helm})", tuple(_images({"helm template": done.stdout})))


def _render_values(archive: ChartArchive, values: dict[str, Any], request: RenderRequest) -> Rendering:
    blocks = image_blocks(archive, request.kube_version, values)
    images = tuple(RenderedImage(block.reference, f"values.yaml {block.key}") for block in blocks)
    return Rendering("values.yaml only (no Helm available: every image block counts, used or not)", images)


def _images(manifests: dict[str, str]) -> Iterator[RenderedImage]:
    for template, text in manifests.items():
        if not template.endswith((".yaml", ".yml", "helm template")):
            continue  # NOTES.txt and other text
        for document in load_yaml_all(text, clip(template, 200), MANIFEST_YAML_LIMITS):
            for reference in _container_images(document):
                yield RenderedImage(reference, template)


def _container_images(node: Any) -> Iterator[str]:
    """The images of every container list, and every other `image` field (a custom resource's `spec.image`,
    such as a Prometheus the operator runs), outside free-form data (ConfigMaps, annotations, labels)."""
    if isinstance(node, dict):
        for key, child in node.items():
            if key in CONTAINER_LISTS and isinstance(child, list):
                for container in child:
                    if isinstance(container, dict) and isinstance(container.get("image"), str):
                        yield container["image"]
            elif key == "image" and isinstance(child, str) and child.strip():
                yield child
            elif key not in FREE_FORM:
                yield from _container_images(child)
    elif isinstance(node, list):
        for child in node:
            yield from _container_images(child)
