"""Helm values for a verified target: every image key points at the target's VPC registry."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from mirror.acr import vpc_host_for
from mirror.chart.merge import deep_merge
from mirror.release import VersionError, chart_version, version_key
from mirror.settings import MirrorSettings, TargetSettings, ValuesSettings

RBAC_FILE_NAME = "hami-scheduler-dra-rbac.yaml"
NESTED_SCHEMA_SINCE = (2, 7, 0)


@dataclass(frozen=True, slots=True)
class ValuesFile:
    target: str
    path: Path
    helm_command: str
    rbac_path: Path | None = None
    pull_secret: str | None = None
    kubectl_command: str | None = None  # how to create the pull secret, when the values need one
    text: str = field(default="", repr=False)  # what was written: the service keeps it with the job
    chart: str = ""  # what the `helm install` line installs: oci://..., the .tgz beside the values, a repo/name
    chart_note: str | None = None  # where the chart is, when it is not what was asked (a refused push)
    proof: dict[str, Any] | None = None  # the rendered chart's images and their verdicts
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ChartInstall:
    """What `helm install` should install: a reference (oci://..., repo/name), or a `.tgz` written beside
    the values (file name and bytes), when the chart could not be published to the target."""

    reference: str
    archive: tuple[str, bytes] | None = None
    note: str | None = None


def require_nested_schema(version: str) -> None:
    """Charts before 2.7.0 use a flat values schema (`scheduler.extender.image: "projecthami/hami"`,
    `devicePlugin.monitorimage`, a top-level `imagePullSecrets`), which this tool does not write."""
    if version_key(version)[:3] < NESTED_SCHEMA_SINCE:
        raise VersionError(
            f"{version}: HAMi charts before 2.7.0 use the flat values schema; mirror writes values for "
            "charts 2.7.0 and later"
        )


def pull_registry(target: TargetSettings) -> str:
    return target.vpc_registry or vpc_host_for(target.registry)


class ValuesImage(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def values_keys(self) -> tuple[str, ...]: ...

    @property
    def values_tag(self) -> str | None: ...


def build_values(
    target: TargetSettings,
    images: Iterable[ValuesImage],
    settings: ValuesSettings,
    pull_secret: str | None = None,
) -> dict[str, Any]:
    """Set `registry` and `repository` on each image's keys one by one (and `tag`, where the chart would
    compute another one). global.imageRegistry is not used: it would also move the kube-scheduler image,
    which already comes from an ACR mirror."""
    values: dict[str, Any] = {}
    registry = pull_registry(target)
    for image in images:
        for key in image.values_keys:
            node = values
            for part in key.split("."):
                node = node.setdefault(part, {})
            node.update({"registry": registry, "repository": f"{target.namespace}/{image.name}"})
            if image.values_tag:
                node["tag"] = image.values_tag
    if pull_secret:  # global: per-image pullSecrets are not honoured for every image of the chart
        values["global"] = {"imagePullSecrets": [{"name": pull_secret}]}
    return deep_merge(values, settings.extra)


def scheduler_service_account(release: str, chart_name: str = "hami") -> str:
    """The chart's scheduler ServiceAccount: `<fullname>-scheduler`, where the fullname is the release name
    when it contains the chart name, else `<release>-hami` (Helm's usual fullname rule)."""
    fullname = release if chart_name in release else f"{release}-{chart_name}"
    return f"{fullname}-scheduler"[:63].rstrip("-")


def dra_rbac(settings: ValuesSettings) -> str:
    """Lets the scheduler's kube-scheduler watch DRA resources, which ACK's system:kube-scheduler role
    does not grant: without it the scheduler never takes the leader lease."""
    documents = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "hami-scheduler-dra"},
            "rules": [
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceclaims", "resourceslices", "deviceclasses"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "hami-scheduler-dra"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "hami-scheduler-dra"},
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": scheduler_service_account(settings.release),
                    "namespace": settings.kube_namespace,
                }
            ],
        },
    ]
    return "# kubectl apply -f this file before helm install\n" + yaml.safe_dump_all(documents, sort_keys=False)


def kubectl_secret_command(target: TargetSettings, settings: ValuesSettings, name: str) -> str:
    return (
        f"kubectl create secret docker-registry {name} -n {settings.kube_namespace} "
        f"--docker-server={pull_registry(target)} --docker-username=<your account name> "
        "--docker-password=<your registry password>"
    )


def render_values(values: dict[str, Any], header: str) -> str:
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + yaml.safe_dump(values, sort_keys=False, default_flow_style=False)


def helm_command(settings: ValuesSettings, version: str, chart: str, path: Path) -> str:
    version_flag = "" if chart.endswith(".tgz") else f" --version {chart_version(version)}"  # a file has one
    return f"helm install {settings.release} {chart} -n {settings.kube_namespace}{version_flag} -f {path}"


def write_atomically(path: Path, content: str | bytes) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content.encode() if isinstance(content, str) else content)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_values(
    settings: MirrorSettings,
    target: TargetSettings,
    version: str,
    latest: bool,
    values: dict[str, Any],
    install: ChartInstall,
    pull_secret: str | None = None,
    proof: dict[str, Any] | None = None,
    warnings: tuple[str, ...] = (),
) -> ValuesFile:
    """Write the values, the DRA RBAC file (and the chart's .tgz when it goes beside them) to
    `<output_dir>/<target>/<version>/`, and to `<output_dir>/<target>/` for the newest release of the run."""
    header = (
        f"HAMi {version} images mirrored to {target.registry}/{target.namespace} (target {target.name}),\n"
        f"pulled from {pull_registry(target)}. Written by mirror after verifying every image."
    )
    header += "".join(f"\nWARNING: {warning}" for warning in warnings)
    text = render_values(values, header)
    rbac = dra_rbac(settings.values)
    directories = [settings.output_dir / target.name / version]
    if latest:
        directories.append(settings.output_dir / target.name)
    for directory in directories:
        write_atomically(directory / RBAC_FILE_NAME, rbac)
        if install.archive is not None:
            write_atomically(directory / install.archive[0], install.archive[1])
        write_atomically(directory / settings.values.file_name, text)
    path = directories[-1] / settings.values.file_name
    chart = str(directories[-1] / install.archive[0]) if install.archive else install.reference
    kubectl = kubectl_secret_command(target, settings.values, pull_secret) if pull_secret else None
    return ValuesFile(
        target.name,
        path,
        helm_command(settings.values, version, chart, path),
        directories[-1] / RBAC_FILE_NAME,
        pull_secret,
        kubectl,
        text,
        chart,
        install.note,
        proof,
        warnings,
    )
