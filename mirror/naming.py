"""The one rule that names a source repository at a target: `<namespace>/<flat name>`.

ACR's personal edition takes exactly `<namespace>/<repository>`, so a source path of any depth is flattened
into one component, and the registry it came from is kept in the name unless it is the config's own
source registry (Docker Hub by default):

    docker.io/projecthami/hami                 -> projecthami_hami
    docker.io/nginx  (library/nginx)           -> library_nginx
    nvcr.io/nvidia/k8s/dcgm-exporter           -> nvcr.io_nvidia_k8s_dcgm-exporter
    registry.k8s.io/kube-state-metrics/kube-state-metrics
                                               -> registry.k8s.io_kube-state-metrics_kube-state-metrics
    127.0.0.1:5000/team/tool                   -> 127.0.0.1-5000_team_tool

Path components are joined by `_`; a port's `:` becomes `-` (an IPv6 literal's brackets and colons too). A name
longer than ACR's 64 characters keeps its first 55 and ends with `-` and 8 hex digits of the source's sha256, so
it stays unique. Two sources of one run that would still meet on one name (`a_b/c` and `a/b_c`) are refused
before anything is sent (`check_unique`), and a tag a copy of another source already holds is reported as drift,
never overwritten.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from mirror.errors import Kind, MirrorError
from mirror.reference import Repository, api_host

MAX_NAME = 64  # ACR's limit on a repository name
SEPARATOR = "_"


class NameClash(MirrorError, ValueError):
    """Two sources of one run would be copied to the same target repository."""

    kind = Kind.USAGE


def flat_name(source: Repository, home_registry: str) -> str:
    """The target repository name (under the namespace) for `source`; `home_registry` is the config's
    source registry, whose images are named by their path alone."""
    parts = source.name.split("/")
    if source.registry != api_host(home_registry):
        parts.insert(0, re.sub(r"[^a-z0-9.]+", "-", source.registry).strip("-"))  # `[::1]:5000`: `1-5000`
    name = SEPARATOR.join(parts)
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(str(source).encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9].rstrip('._-')}-{digest}"


def check_unique(named: Iterable[tuple[Repository, str]]) -> None:
    """Refuse two different sources meeting on one target name, naming both."""
    owners: dict[str, Repository] = {}
    for source, name in named:
        other = owners.setdefault(name, source)
        if other != source:
            raise NameClash(
                f"{other} and {source} would both be copied to <namespace>/{name}; give one of them its own "
                "name under images: (name: ...)"
            )


def check_chart_apart(images: Iterable[tuple[str, str]], chart: str, chart_tag: str) -> None:
    """Refuse an image copied to the repository and tag where the chart `chart` is published (`<namespace>/
    <chart>:<chart_tag>`): the chart's push would move the image's tag, and nodes would pull a chart."""
    for name, tag in images:
        if name == chart and tag == chart_tag:
            raise NameClash(
                f"an image is copied to <namespace>/{name}:{tag}, where the chart {chart} is published; give the "
                f"image another name under images: (name: ..., e.g. the flat source name) or a tag of its own"
            )
