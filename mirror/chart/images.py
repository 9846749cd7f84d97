"""The images a chart can run, read from its values.yaml: every image block (`registry`, `repository`,
`tag`), wherever it sits, including blocks used only with a feature enabled or on an older Kubernetes.

An empty tag is resolved as HAMi's templates resolve it: `global.imageTag` (the release tag, hard-coded in
each chart's values.yaml), except kube-scheduler's, which is the cluster's Kubernetes version. Rendering
with real Helm (`render.py`) is the ground truth; this is what it is checked against, and the fallback.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mirror.reference import Repository, is_valid_tag, normalise_repository

DEFAULT_REGISTRY = "docker.io"


@dataclass(frozen=True, slots=True)
class ImageBlock:
    """One image block of values.yaml: its dotted key and what it names, with the tag the chart will use."""

    key: str  # e.g. scheduler.extender.image
    registry: str
    repository: str
    tag: str  # resolved
    tag_from_kube_version: bool = False  # the chart takes it from .Capabilities.KubeVersion

    @property
    def source(self) -> Repository:
        return Repository.of(self.registry, self.repository)

    @property
    def reference(self) -> str:
        return f"{self.registry}/{normalise_repository(self.registry, self.repository)}:{self.tag}"


def kube_tag(kube_version: str) -> str:
    return "v" + kube_version.removeprefix("v")


def image_blocks(values: dict[str, Any], kube_version: str) -> list[ImageBlock]:
    """Every image block in the chart's values, in file order, with its effective tag."""
    global_tag = str((values.get("global") or {}).get("imageTag") or "")
    blocks = []
    for key, node in _walk(values, ()):
        repository = str(node.get("repository") or "").strip()
        if not repository:
            continue  # an optional image left empty (e.g. another vendor's device plugin)
        registry = str(node.get("registry") or DEFAULT_REGISTRY).strip()
        tag = str(node.get("tag") or "").strip()
        from_kube = not tag and repository.rsplit("/", 1)[-1] == "kube-scheduler"
        if from_kube:
            tag = kube_tag(kube_version)
        tag = tag or global_tag
        if not tag or not is_valid_tag(tag):
            continue  # no tag the chart could pull with: not an image block
        blocks.append(ImageBlock(".".join(key), registry, repository, tag, from_kube))
    return blocks


def _walk(node: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    if not isinstance(node, dict):
        return
    if isinstance(node.get("repository"), str) and ("registry" in node or "tag" in node):
        yield path, node
        return
    for key, child in node.items():
        if isinstance(key, str) and key.isidentifier():
            yield from _walk(child, (*path, key))
