"""Helm values for a verified target: every image key points at the target's VPC registry."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mirror.acr import vpc_host_for
from mirror.release import chart_version
from mirror.settings import ImageSettings, MirrorSettings, TargetSettings, ValuesSettings


@dataclass(frozen=True, slots=True)
class ValuesFile:
    target: str
    path: Path
    helm_command: str


def pull_registry(target: TargetSettings) -> str:
    return target.vpc_registry or vpc_host_for(target.registry)


def build_values(target: TargetSettings, images: Iterable[ImageSettings], settings: ValuesSettings) -> dict[str, Any]:
    """Set `registry` and `repository` on each image's keys one by one. global.imageRegistry is not used:
    it would also move the kube-scheduler image, which already comes from an ACR mirror."""
    values: dict[str, Any] = {}
    registry = pull_registry(target)
    for image in images:
        for key in image.values_keys:
            node = values
            for part in key.split("."):
                node = node.setdefault(part, {})
            node.update({"registry": registry, "repository": f"{target.namespace}/{image.name}"})
    return _deep_merge(values, settings.extra)


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def render_values(values: dict[str, Any], header: str) -> str:
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + yaml.safe_dump(values, sort_keys=False, default_flow_style=False)


def helm_command(settings: ValuesSettings, version: str, path: Path) -> str:
    return (
        f"helm install {settings.release} {settings.chart} -n {settings.kube_namespace} "
        f"--version {chart_version(version)} -f {path}"
    )


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_values(settings: MirrorSettings, target: TargetSettings, version: str, latest: bool) -> ValuesFile:
    """Write `<output_dir>/<target>/<version>/<file>`, and `<output_dir>/<target>/<file>` for the newest
    release of the run."""
    values = build_values(target, settings.images, settings.values)
    header = (
        f"HAMi {version} images mirrored to {target.registry}/{target.namespace} (target {target.name}),\n"
        f"pulled from {pull_registry(target)}. Written by mirror after verifying every image."
    )
    text = render_values(values, header)
    versioned = settings.output_dir / target.name / version / settings.values.file_name
    write_atomically(versioned, text)
    path = versioned
    if latest:
        path = settings.output_dir / target.name / settings.values.file_name
        write_atomically(path, text)
    return ValuesFile(target.name, path, helm_command(settings.values, version, path))
