"""Helm values for a verified target: every image key points at the target's VPC registry."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from mirror.acr import vpc_host_for
from mirror.chart.images import GLOBAL_SECRETS, ImageBlock, PullSecretPlace
from mirror.chart.merge import deep_merge, without_nulls
from mirror.output import write_all
from mirror.release import VersionError, chart_version, is_prerelease, version_key
from mirror.settings import MirrorSettings, TargetSettings, ValuesSettings

if TYPE_CHECKING:  # rendering is imported only where a chart is rendered
    from mirror.chart.proof import Proof

RBAC_FILE_NAME = "hami-scheduler-dra-rbac.yaml"
HEADER_LINE_CHARS = 1000  # of a values file's first line read back: its header names the release
RELEASE_IN_HEADER = re.compile(r"# (?:.* \(with )?HAMi ([^\s)]+)(?: images|\)) mirrored to ")
NESTED_SCHEMA_SINCE = (2, 7, 0)
log = logging.getLogger("mirror")


@dataclass(frozen=True, slots=True)
class ValuesFile:
    """One values file written for one chart at one target, and how to install with it."""

    target: str
    path: Path
    helm_command: str
    rbac_path: Path | None = None
    pull_secret: str | None = None
    kubectl_command: str | None = None  # how to create the pull secret, when the values need one
    text: str = field(default="", repr=False)  # what was written: the service keeps it with the job
    chart: str = ""  # what the `helm install` line installs: oci://..., the .tgz beside the values, a repo/name
    chart_note: str | None = None  # where the chart is, when it is not what was asked (a refused push)
    proof: Proof | None = None  # the rendered chart's images and their verdicts
    warnings: tuple[str, ...] = ()
    chart_name: str = "hami"  # which chart of the install these values are for
    chart_version: str = ""
    chart_anonymous_pull: bool | None = None  # can Helm pull the published chart without logging in?
    # written beside the values (the RBAC file, the chart's .tgz), by name: the service keeps them with the job
    beside: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class ChartInstall:
    """What `helm install` should install: a reference (oci://..., repo/name), or a `.tgz` written beside
    the values (file name and bytes), when the chart could not be published to the target. A chart published
    there says whether Helm can pull it without logging in (`anonymous_pull`; None: nothing was published)."""

    reference: str
    archive: tuple[str, bytes] | None = None
    note: str | None = None
    anonymous_pull: bool | None = None

    @property
    def private(self) -> bool:
        """Published where Helm cannot pull it without logging in."""
        return self.anonymous_pull is False


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


@dataclass(frozen=True, slots=True)
class PointedBlock:
    """A values block and the copy it now points at: `name` under the target's namespace."""

    block: ImageBlock
    name: str
    tag: str | None = None  # written where the chart would compute another tag (kube-scheduler's)
    digest: str | None = None  # written where the copy's digest is not the chart's (an index rewritten)


def build_values(
    target: TargetSettings,
    blocks: Iterable[PointedBlock],
    extra: Mapping[str, Any],
    pull_secret: str | None = None,
    pull_secret_places: Iterable[PullSecretPlace] = (),
) -> dict[str, Any]:
    """The user's values (`extra`) with each block pointed at its copy over them: an extra that set a mirrored
    block's repository or tag (the blocks were read with it, so the copy is of what it names) must not put that
    name back under the VPC host, where nothing was pushed; every other setting of it is kept.
    Each block in its own shape: `registry` and `repository` where the block has a `registry` key; `repository`
    carrying the VPC host where it has none; the whole reference for a string. A digest the chart pins stays as
    it is (the copy is byte-exact), unless the copy's differs. Tags are left to the chart, which arrives at the
    mirrored tag by itself, except where it would compute another.
    global.imageRegistry is not set: it would also move images nodes already pull from ACR (kube-scheduler);
    where the chart sets it, it is cleared.
    With a pull secret, it is added to `global.imagePullSecrets` and to each `imagePullSecrets` the charts have,
    after any the user's values list there, in the form each takes (`PullSecretPlace`).
    A key the extra sets to null is left out of the file, so the chart's own default applies (Helm would delete
    the key, default and all, given a null)."""
    pointed_blocks = list(blocks)
    pointers = _pointers(target, pointed_blocks)
    # the extra over the pointers, then the pointers again: the file keeps the pointers' order, every other
    # setting of the extra, and each pointer wins
    written = deep_merge(deep_merge(pointers, without_nulls(dict(extra))), pointers)
    if pull_secret:  # global: per-image pullSecrets are not honoured for every image of HAMi's chart
        for place in _with_global(list(pull_secret_places)):
            written = deep_merge(written, _nested(place.path, _secrets(written, place, pull_secret)))
    if any(pointed.block.registry_from_global for pointed in pointed_blocks):
        # the chart (or `values:`) sets global.imageRegistry, which its templates prefer to each block's
        # registry: cleared, since every block it moved now names the VPC host itself
        written["global"] = {**written.get("global", {}), "imageRegistry": ""}
    return written


def _pointers(target: TargetSettings, pointed_blocks: list[PointedBlock]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    registry = pull_registry(target)
    for pointed in pointed_blocks:
        repository = f"{target.namespace}/{pointed.name}"
        *parents, leaf = pointed.block.path
        node = values
        for part in parents:
            node = node.setdefault(part, {})
        if pointed.block.shape == "string":
            node[leaf] = _reference(
                f"{registry}/{repository}", pointed.block.tag, pointed.digest or pointed.block.digest
            )
            continue
        written = node.setdefault(leaf, {})
        if pointed.block.shape == "block":
            written.update({"registry": registry, "repository": repository})
        else:
            written["repository"] = f"{registry}/{repository}"
        if pointed.tag:
            written["tag"] = pointed.tag
        if pointed.digest:
            written["digest"] = pointed.digest
    return values


def _with_global(places: list[PullSecretPlace]) -> list[PullSecretPlace]:
    """`global.imagePullSecrets` is always written; without a chart to say its form, HAMi's (a plain name)."""
    if any(place.path == GLOBAL_SECRETS for place in places):
        return places
    return [PullSecretPlace(GLOBAL_SECRETS, "string"), *places]


def _secrets(values: dict[str, Any], place: PullSecretPlace, name: str) -> list[Any]:
    """The list at `place` (the user's entries, if any) with `name` added unless it already names it."""
    node: Any = values
    for part in place.path:
        node = node.get(part) if isinstance(node, dict) else None
    listed = list(node) if isinstance(node, list) else []
    if any(entry == name or (isinstance(entry, dict) and entry.get("name") == name) for entry in listed):
        return listed
    return [*listed, place.entry(name)]


def _reference(name: str, tag: str, digest: str | None) -> str:
    return name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


def _nested(path: tuple[str, ...], leaf: Any) -> dict[str, Any]:
    node: Any = leaf
    for part in reversed(path):
        node = {part: node}
    return dict(node)


def scheduler_service_account(release: str, values: Mapping[str, Any] | None = None, chart_name: str = "hami") -> str:
    """The chart's scheduler ServiceAccount as its `hami-vgpu.scheduler` helper names it: `<fullname>-scheduler`,
    the fullname being `fullnameOverride`, else the release name when it contains the chart's name
    (`nameOverride`, else `hami`), else `<release>-<name>`."""
    values = values or {}
    name = _helm_name(str(values.get("nameOverride") or chart_name))
    if values.get("fullnameOverride"):
        fullname = _helm_name(str(values["fullnameOverride"]))
    else:
        fullname = _helm_name(release if name in release else f"{release}-{name}")
    return _helm_name(f"{fullname}-scheduler")


def _helm_name(text: str) -> str:
    """`trunc 63 | trimSuffix "-"`, as the chart's helpers cut a name."""
    return text[:63].removesuffix("-")


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
                    "name": scheduler_service_account(settings.release, settings.extra),
                    "namespace": workloads_namespace(settings.extra, settings.kube_namespace),
                }
            ],
        },
    ]
    return "# kubectl apply -f this file before helm install\n" + yaml.safe_dump_all(documents, sort_keys=False)


PRESENT_NAMESPACES = ("kube-system", "default")  # in every cluster: no need to make them


def secret_namespaces(proof: Proof | None, values: Mapping[str, Any], release_namespace: str) -> list[str]:
    """Where the pull secret must be: each namespace the render puts a pod that pulls from the target in; without
    such a render, the chart's `namespaceOverride` where the values set one (HAMi's workloads follow it), else
    the release's namespace."""
    if proof is not None and proof.pods:
        return proof.secret_namespaces(release_namespace)
    return [workloads_namespace(values, release_namespace)]


def workloads_namespace(values: Mapping[str, Any], release_namespace: str) -> str:
    """Where HAMi's chart puts its workloads: the `namespaceOverride` the values set, else the release's."""
    return str(values.get("namespaceOverride") or release_namespace)


def kubectl_secret_command(target: TargetSettings, name: str, namespaces: Iterable[str]) -> str:
    """The pull secret's kubectl lines, run before `helm install`, one per namespace: in a namespace that may
    not be there yet, the namespace is made first, as apply makes it (nothing if it is there)."""
    return " && ".join(_secret_in(target, name, namespace) for namespace in dict.fromkeys(namespaces))


def _secret_in(target: TargetSettings, name: str, namespace: str) -> str:
    secret = (
        f"kubectl create secret docker-registry {name} -n {namespace} --docker-server={pull_registry(target)} "
        "--docker-username=<your account name> --docker-password=<your registry password>"
    )
    if namespace in PRESENT_NAMESPACES:
        return secret
    return f"kubectl create namespace {namespace} --dry-run=client -o yaml | kubectl apply -f - && {secret}"


def render_values(values: dict[str, Any], header: str) -> str:
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + yaml.safe_dump(values, sort_keys=False, default_flow_style=False)


def helm_command(spec: ChartSpec, chart_version: str, chart: str, path: Path, private: bool = False) -> str:
    """The install line. A chart published to a target where it needs credentials (`private`: its own anonymous
    pull failed there, or the images need a pull secret there) needs Helm logged in to that registry first: Helm
    fetches the chart itself."""
    version_flag = "" if chart.endswith(".tgz") else f" --version {chart_version}"  # a file has one
    create = "" if spec.namespace == "kube-system" else " --create-namespace"
    install = f"helm install {spec.release} {chart} -n {spec.namespace}{create}{version_flag} -f {path}"
    if private and chart.startswith("oci://"):
        host = chart.removeprefix("oci://").split("/", 1)[0]
        return f"helm registry login {host} --username <your account name> && {install}"
    return install


@dataclass(frozen=True, slots=True)
class ChartSpec:
    """One chart of the install as a release needs it: how it is installed and where its values go."""

    name: str
    release: str  # the Helm release name
    namespace: str
    file_name: str
    extra: Mapping[str, Any] = field(default_factory=dict)  # values merged into what mirror writes
    subcharts: str = "all"
    is_release_chart: bool = True  # HAMi's: follows the release, gets the DRA RBAC file
    default_reference: str = "hami-charts/hami"  # what `helm install` installs when the chart is not published


def _header(
    spec: ChartSpec, target: TargetSettings, version: str, chart_version_: str, warnings: tuple[str, ...]
) -> str:
    mirrored = f"mirrored to {target.registry}/{target.namespace} (target {target.name})"
    what = f"HAMi {version} images" if spec.is_release_chart else f"{spec.name} {chart_version_} (with HAMi {version})"
    header = f"{what} {mirrored},\npulled from {pull_registry(target)}. Written by mirror after verifying every image."
    return header + "".join(f"\nWARNING: {warning}" for warning in warnings)


def written_release(path: Path) -> str | None:
    """The HAMi release a values file was written for, as its header's first line names it (`# HAMi v2.10.0
    images mirrored to ...`, `# hami-webui 1.3.0 (with HAMi v2.10.0) mirrored to ...`); None where there is no
    file or its first line names none (written by hand)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as file:
            first = file.readline(HEADER_LINE_CHARS)
    except OSError:
        return None
    match = RELEASE_IN_HEADER.match(first)
    return match[1] if match else None


def _directories(target_dir: Path, version: str, latest: bool, file_name: str) -> list[Path]:
    """Where `version`'s values go: its own folder, and with `latest` the target's folder too, unless the file
    there holds a newer release (an older release synced later, a backport, goes to its own folder only). A
    pre-release goes to its own folder only: in the newest folder it would outrank every later patch release
    (v2.11.0-rc.1 > v2.10.1) and stay there until v2.11.0, abandoned or not."""
    own = [target_dir / version]
    if is_prerelease(version):
        return own
    return [*own, target_dir] if latest and _may_replace_newest(target_dir / file_name, version) else own


def _may_replace_newest(path: Path, version: str) -> bool:
    """Whether the newest release's file may take `version`'s values: it is not there, names no release, names
    a pre-release (an older mirror wrote those there), or names one that is not newer."""
    written = written_release(path)
    try:
        newer = written is not None and not is_prerelease(written) and version_key(written) > version_key(version)
    except VersionError:
        return True  # a release mirror cannot read is no newer one to keep
    if newer:
        log.info("%s holds HAMi %s, newer than %s: left as it is", path, written, version)
    return not newer


def _drop_older_archives(newest: Path, chart: str, install: ChartInstall) -> None:
    """In the newest folder, the chart's .tgz files of other versions (and all of them once the chart is
    published to the target): beside values whose `helm install` line names another chart, they only mislead,
    and one more came with each release the target refused the chart for."""
    kept = install.archive[0] if install.archive is not None else None
    named = re.compile(rf"{re.escape(chart)}-v?[0-9]+\.[0-9]+\.[0-9][^/]*\.tgz")
    for path in newest.iterdir():
        if path.name != kept and named.fullmatch(path.name) and path.is_file() and not path.is_symlink():
            with contextlib.suppress(OSError):
                path.unlink()


def _bundle(
    directories: list[Path], file_name: str, text: str, rbac: str | None, install: ChartInstall
) -> dict[Path, str | bytes]:
    """Every file of one chart's values in each of its folders: the values, the RBAC file, the chart's .tgz."""
    files: dict[Path, str | bytes] = {}
    for directory in directories:
        if rbac is not None:
            files[directory / RBAC_FILE_NAME] = rbac
        if install.archive is not None:
            files[directory / install.archive[0]] = install.archive[1]
        files[directory / file_name] = text
    return files


def write_values(
    settings: MirrorSettings,
    target: TargetSettings,
    version: str,
    latest: bool,
    values: dict[str, Any],
    install: ChartInstall,
    pull_secret: str | None = None,
    proof: Proof | None = None,
    warnings: tuple[str, ...] = (),
    spec: ChartSpec | None = None,
    chart_version_: str | None = None,
) -> ValuesFile:
    """Write one chart's values (the release chart's with the DRA RBAC file; the chart's .tgz when it goes
    beside them; a warning per pod the proof found without the pull secret; the kubectl line creating the
    secret in every namespace the rendered pods run in) to `<output_dir>/<target>/<version>/`,
    and to `<output_dir>/<target>/` for the newest release of the run, unless the file there holds a newer one.
    `spec` defaults to the release chart."""
    spec = spec or ChartSpec("hami", settings.values.release, settings.values.kube_namespace, settings.values.file_name)
    chart_version_ = chart_version_ or chart_version(version)
    namespaces = secret_namespaces(proof, values, spec.namespace)
    warnings = (*warnings, *(proof.secret_warnings(spec.namespace) if proof is not None else ()))
    text = render_values(values, _header(spec, target, version, chart_version_, warnings))
    rbac = dra_rbac(settings.values) if spec.is_release_chart else None
    directories = _directories(settings.output_dir / target.name, version, latest, spec.file_name)
    write_all(_bundle(directories, spec.file_name, text, rbac, install))  # both folders together, or neither
    if settings.output_dir / target.name in directories:
        _drop_older_archives(settings.output_dir / target.name, spec.name, install)
    path = directories[-1] / spec.file_name
    chart = str(directories[-1] / install.archive[0]) if install.archive else install.reference
    kubectl = kubectl_secret_command(target, pull_secret, namespaces) if pull_secret else None
    return ValuesFile(
        target.name,
        path,
        helm_command(spec, chart_version_, chart, path, private=pull_secret is not None or install.private),
        directories[-1] / RBAC_FILE_NAME if rbac is not None else None,
        pull_secret,
        kubectl,
        text,
        chart,
        install.note,
        proof,
        warnings,
        spec.name,
        chart_version_,
        install.anonymous_pull,
        _beside(rbac, install),
    )


def _beside(rbac: str | None, install: ChartInstall) -> tuple[tuple[str, bytes], ...]:
    rbac_file = ((RBAC_FILE_NAME, rbac.encode()),) if rbac is not None else ()
    return rbac_file + ((install.archive,) if install.archive is not None else ())
