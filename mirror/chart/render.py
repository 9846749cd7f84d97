"""Render a chart with given values and list the images its workloads would pull. Real Helm is the ground
truth: Helm's Go SDK through `helm-python-sdk` (the `helm` extra), else a `helm` binary on PATH, else the
chart's values.yaml alone (`images.py`'s rules), and the result says which was used.

A chart's templates are untrusted code: a loop can cost any time and memory. So Helm always runs in a child
process (`renderchild.py`: the SDK, or the `helm` binary exec'd there) under `RenderBounds` (address space; CPU
time; the wall clock, the child's process group killed at it) and its output is read up to RENDER_OUTPUT. A
render over a bound is a `RenderBoundExceeded`, one line. Synchronous: callers run it in a thread."""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import resource
import shutil
import signal
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from mirror.chart import renderchild
from mirror.chart.archive import ChartArchive, ChartError
from mirror.chart.images import PodPull, every_subchart_on, image_blocks, pod_pulls
from mirror.chart.merge import deep_merge
from mirror.untrusted import UntrustedInput, YamlLimits, clip, load_yaml_all

Renderer = Literal["auto", "sdk", "binary", "values"]
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
FREE_FORM = ("data", "stringData", "binaryData", "annotations", "labels")
NOTES = "NOTES.txt"  # Helm shows any template whose name ends so, and installs none of them
MiB = 1024 * 1024
# An image handed to a container as text: a registry host (a dot or a port in the first component), a path, and a
# tag or a digest; bare or after `--flag=`. Neither a URL (`https://...`: no scheme fits a host) nor a path
# (`/etc/...`), nor `host:port` alone, nor a name without a tag.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = rf"(?:{_LABEL}(?:\.{_LABEL})+(?::[0-9]+)?|{_LABEL}:[0-9]+)"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[A-Fa-f0-9]{32,}"
HANDED_ON_IMAGE = re.compile(
    rf"(?:--?[A-Za-z0-9][A-Za-z0-9_.-]*=)?(?P<image>{_HOST}(?:/{_COMPONENT})+(?::{_TAG}(?:@{_DIGEST})?|@{_DIGEST}))"
)
HANDED_ON_CHARS = 2048  # an argument longer than this is no image reference
# what Helm renders, per template (the binary's: all of it): kube-prometheus-stack's is about 3 MB in all, its
# largest documents (CRDs, when a chart renders them) 1 MB, 100,000 nodes, 40 deep
MANIFEST_YAML_LIMITS = YamlLimits(max_bytes=32 * MiB, max_depth=200, max_nodes=3_000_000)
# One render's bounds (the defaults of RenderBounds). A real chart renders in well under a second.
RENDER_SECONDS = 120.0  # wall clock; the child's CPU time is limited to renderchild.THREADS times it
# Address space of the render's process. Go's runtime reserves about 1.44 GiB of it as it starts (65 MB of it
# resident); under a lower limit it reserves less, and the sample charts (HAMi's, HAMi-WebUI's with every
# subchart on) still render under 1 GiB, not under 900 MB. The rest, about 600 MB, is Helm's heap: 40 MB of
# manifests still render (RENDER_OUTPUT refuses them), a loop making 100 MB does not (in-process: 3.2 GB).
RENDER_MEMORY = 2048 * MiB
RENDER_OUTPUT = MANIFEST_YAML_LIMITS.max_bytes  # bytes of manifests one render may produce
log = logging.getLogger("mirror")


@dataclass(frozen=True, slots=True)
class RenderBounds:
    """What one render may cost: `seconds` of wall clock, `memory` bytes of address space."""

    seconds: float = RENDER_SECONDS
    memory: int = RENDER_MEMORY


DEFAULT_BOUNDS = RenderBounds()


class RenderBoundExceeded(ChartError):
    """Helm's render went over a bound (time, memory, output): a template loops. Unlike a chart Helm refuses,
    it is never passed over with a warning (the tags render, the proof's render with every subchart on)."""


@dataclass(frozen=True, slots=True)
class RenderedImage:
    reference: str  # as the manifest gives it, e.g. registry-vpc.cn-hangzhou.aliyuncs.com/ns/hami:v2.10.0
    source: str  # the template (or values key) it came from


@dataclass(frozen=True, slots=True)
class Rendering:
    renderer: str  # what rendered it, for the report
    images: tuple[RenderedImage, ...]
    pods: tuple[PodPull, ...] = ()  # each rendered pod with its pull secrets (none from values.yaml alone)


@dataclass(frozen=True, slots=True)
class RenderRequest:
    release: str
    namespace: str
    kube_version: str


def render_images(
    archive: ChartArchive,
    values: dict[str, Any],
    request: RenderRequest,
    prefer: Renderer = "auto",
    bounds: RenderBounds = DEFAULT_BOUNDS,
) -> Rendering:
    try:
        return _render(archive, values, request, prefer, bounds)
    except UntrustedInput as exc:
        raise ChartError(f"{_chart(archive)}: what it renders: {exc}") from None


def _render(
    archive: ChartArchive, values: dict[str, Any], request: RenderRequest, prefer: Renderer, bounds: RenderBounds
) -> Rendering:
    if prefer in ("auto", "sdk") and _sdk_installed():
        try:
            return _render_sdk(archive, values, request, bounds)
        except _SdkUnavailable as exc:
            if prefer == "sdk":
                raise ChartError(f"renderer 'sdk' asked for, but helm-python-sdk does not load: {exc}") from None
            log.warning("helm-python-sdk does not load, so it does not render: %s", exc)
    elif prefer == "sdk":
        raise ChartError("renderer 'sdk' asked for, but helm-python-sdk is not installed (pip install 'mirror[helm]')")
    helm = shutil.which("helm")
    if prefer in ("auto", "binary") and helm:
        return _render_binary(helm, archive, values, request, bounds)
    if prefer == "binary":
        raise ChartError("renderer 'binary' asked for, but there is no helm on PATH")
    return _render_values(archive, values, request)


def render_install(
    archive: ChartArchive,
    values: dict[str, Any],
    request: RenderRequest,
    prefer: Renderer,
    every_subchart: bool,
    bounds: RenderBounds = DEFAULT_BOUNDS,
) -> Rendering:
    """The chart rendered with the values; with `every_subchart`, rendered again with every subchart switched
    on and the images only that render shows added (their source marked), so a proof covers turning a
    subchart on later. A subchart that will not render switched on by itself is passed over with a warning
    (one over a bound is not)."""
    first = render_images(archive, values, request, prefer, bounds)
    if not every_subchart:
        return first
    try:
        second = render_images(archive, deep_merge(values, every_subchart_on(archive)), request, prefer, bounds)
    except RenderBoundExceeded:
        raise
    except ChartError as exc:
        log.warning("chart %s %s: not rendered with every subchart on: %s", archive.name, archive.version, exc)
        return first
    seen = {image.reference for image in first.images}
    extra = tuple(
        RenderedImage(image.reference, f"{image.source} (every subchart on)")
        for image in second.images
        if image.reference not in seen
    )
    more_pods = tuple(
        replace(pod, source=f"{pod.source} (every subchart on)") for pod in second.pods if pod not in first.pods
    )
    return Rendering(first.renderer, first.images + extra, first.pods + more_pods)


class _SdkUnavailable(Exception):
    """helm-python-sdk is installed but its native library does not load here (the child said why)."""


def _sdk_installed() -> bool:
    """Without importing it: that would start Go's runtime in this process, which the child is there to avoid."""
    return importlib.util.find_spec("helm_python") is not None


def _render_sdk(
    archive: ChartArchive, values: dict[str, Any], request: RenderRequest, bounds: RenderBounds
) -> Rendering:
    options = {
        "name": request.release,
        "namespace": request.namespace,
        "is_install": True,
        # Chart.render() does not expose it; the library's render options take it (as `helm template
        # --kube-version` does), so .Capabilities.KubeVersion is the cluster's
        "kube_version": "v" + request.kube_version.removeprefix("v"),
    }
    header = {"values": values, "options": options, "max_output": RENDER_OUTPUT}
    message = json.dumps(header).encode() + b"\n" + archive.raw
    # the answer: Helm's JSON of at most RENDER_OUTPUT bytes (the child checks) in a small envelope
    ended = renderchild.run(message, bounds.seconds, bounds.memory, RENDER_OUTPUT + MiB)
    _check_bounds(archive, ended, bounds)
    try:
        answer = json.loads(ended.stdout) if ended.returncode == 0 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ChartError(f"{_chart(archive)}: Helm's render failed: {_failure(ended)}")
    if "unavailable" in answer:
        raise _SdkUnavailable(clip(str(answer["unavailable"])))
    if "over" in answer:
        raise RenderBoundExceeded(f"{_chart(archive)}: Helm's render {_over_output()}; a template loops?")
    if "error" in answer:
        raise ChartError(f"{_chart(archive)}: Helm could not render it: {clip(str(answer['error']))}")
    manifests: dict[str, str] = answer["manifests"]
    return _read(f"Helm {answer['helm']} (helm-python-sdk)", manifests)


def _render_binary(
    helm: str, archive: ChartArchive, values: dict[str, Any], request: RenderRequest, bounds: RenderBounds
) -> Rendering:
    with tempfile.TemporaryDirectory(prefix="mirror-render-") as scratch:
        chart, values_file = Path(scratch) / "chart.tgz", Path(scratch) / "values.yaml"
        chart.write_bytes(archive.raw)
        values_file.write_text(yaml.safe_dump(values), encoding="utf-8")
        command = [helm, "template", request.release, str(chart), "--namespace", request.namespace]
        command += ["--kube-version", request.kube_version, "--values", str(values_file)]
        ended = renderchild.run(b"", bounds.seconds, bounds.memory, RENDER_OUTPUT, command)
    _check_bounds(archive, ended, bounds)
    if ended.returncode != 0:
        stderr = ended.stderr.decode("utf-8", "replace").strip()
        raise ChartError(f"{_chart(archive)}: helm template failed: {clip(stderr, 500)}")
    return _read(f"helm binary ({helm})", {"helm template": ended.stdout.decode("utf-8", "replace")})


def _check_bounds(archive: ChartArchive, ended: renderchild.Ended, bounds: RenderBounds) -> None:
    """`RenderBoundExceeded` when the child went over a bound: killed at the wall clock or for its output, killed
    by its CPU limit, or ended out of address space."""
    cpu_seconds = renderchild.effective_limit(resource.RLIMIT_CPU, renderchild.cpu_seconds(bounds.seconds))
    memory = f"{_mb(renderchild.effective_limit(resource.RLIMIT_AS, bounds.memory))} MB"
    if ended.killed == "time":
        over = f"took longer than {bounds.seconds:g} s"
    elif ended.killed == "output":
        over = _over_output()
    elif ended.returncode == -signal.SIGXCPU:
        over = f"took more than {cpu_seconds} s of CPU"
    elif ended.returncode == -signal.SIGKILL:  # not by us: the CPU limit's hard one, or the kernel's OOM killer
        over = f"was killed (more than {cpu_seconds} s of CPU, or out of memory)"
    elif ended.out_of_memory:
        over = f"needed more than {memory} of address space"
    else:
        return
    raise RenderBoundExceeded(f"{_chart(archive)}: Helm's render {over}; a template loops?")


def _over_output() -> str:
    return f"made more than {_mb(RENDER_OUTPUT)} MB of manifests"


def _failure(ended: renderchild.Ended) -> str:
    """The exit and the first line of the child's stderr, cut short: never its whole stderr (a Go dump)."""
    return f"exit {ended.returncode}: {clip(ended.first_line, 200)}" if ended.first_line else f"exit {ended.returncode}"


def _chart(archive: ChartArchive) -> str:
    return f"chart {archive.name} {archive.version}"


def _mb(size: int) -> int:
    return size // MiB


def _render_values(archive: ChartArchive, values: dict[str, Any], request: RenderRequest) -> Rendering:
    blocks = image_blocks(archive, request.kube_version, values)
    images = tuple(RenderedImage(block.reference, f"values.yaml {block.key}") for block in blocks)
    return Rendering("values.yaml only (no Helm available: every image block counts, used or not)", images)


def _read(renderer: str, manifests: dict[str, str]) -> Rendering:
    """Every image the manifests pull, and each pod that pulls them, with its pull secrets."""
    images: list[RenderedImage] = []
    pods: list[PodPull] = []
    for template, text in manifests.items():
        if not _installed(template, text):
            continue
        for document in load_yaml_all(text, clip(template, 200), MANIFEST_YAML_LIMITS):
            images += (RenderedImage(reference, template) for reference in _container_images(document))
            pods += pod_pulls(document, template)
    return Rendering(renderer, tuple(images), tuple(pods))


def _installed(template: str, text: str) -> bool:
    """Whether Helm installs what this template rendered: every template does, whatever its name ends in
    (`pod.tpl`, `pod.json`, `pod`), except a partial (its file name starts with `_`), a NOTES.txt, and one
    that rendered nothing but white space."""
    name = template.rsplit("/", 1)[-1]
    return not (name.startswith("_") or template.endswith(NOTES) or not text.strip())


def _container_images(node: Any) -> Iterator[str]:
    """The images of every container list, and every other `image` field (a custom resource's `spec.image`,
    such as a Prometheus the operator runs), outside free-form data (ConfigMaps, annotations, labels); and each
    image a container is given to run elsewhere, as an argument or an environment value (`_handed_on`)."""
    if isinstance(node, dict):
        for key, child in node.items():
            if key in CONTAINER_LISTS and isinstance(child, list):
                for container in child:
                    if isinstance(container, dict) and isinstance(container.get("image"), str):
                        yield container["image"]
                    if isinstance(container, dict):
                        yield from _handed_on(container)
            elif key == "image" and isinstance(child, str) and child.strip():
                yield child
            elif key not in FREE_FORM:
                yield from _container_images(child)
    elif isinstance(node, list):
        for child in node:
            yield from _container_images(child)


def _handed_on(container: dict[str, Any]) -> Iterator[str]:
    """Images a container passes on rather than runs: prometheus-operator's `--prometheus-config-reloader=<image>`,
    which the Prometheus pods it makes pull. An item of `command` or `args`, or an `env` value, that is an image
    reference with a registry host and a tag or a digest, bare or as `--flag=<image>` (`HANDED_ON_IMAGE`)."""
    texts = [item for key in ("command", "args") for item in _list(container.get(key))]
    texts += [entry.get("value") for entry in _list(container.get("env")) if isinstance(entry, dict)]
    for text in texts:
        if isinstance(text, str) and len(text) <= HANDED_ON_CHARS and (found := HANDED_ON_IMAGE.fullmatch(text)):
            yield found["image"]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
