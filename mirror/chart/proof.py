"""The proof that a values file does what it claims: every image the rendered chart would pull is either a
copy verified at the target in this run, or in a registry the config allows (an ACR registry the chart
already uses, such as kube-scheduler's)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from mirror.chart.render import Rendering
from mirror.reference import ReferenceError, parse

MIRRORED, ALLOWED, NOT_MIRRORED = "mirrored", "allowed registry", "NOT MIRRORED"


@dataclass(frozen=True, slots=True)
class CheckedImage:
    reference: str
    source: str  # template or values key
    verdict: str

    def to_json(self) -> dict[str, str]:
        return {"image": self.reference, "from": self.source, "verdict": self.verdict}


@dataclass(frozen=True, slots=True)
class Proof:
    renderer: str
    images: tuple[CheckedImage, ...]

    @property
    def ok(self) -> bool:
        return all(image.verdict != NOT_MIRRORED for image in self.images)

    def failures(self) -> list[str]:
        return [f"{i.reference} ({i.source})" for i in self.images if i.verdict == NOT_MIRRORED]

    def to_json(self) -> dict[str, object]:
        return {"renderer": self.renderer, "ok": self.ok, "images": [i.to_json() for i in self.images]}


def check_rendering(rendering: Rendering, verified: set[str], allowed_registries: list[str]) -> Proof:
    """`verified`: references (`host/repository:tag`) of the copies verified at the target, as nodes pull
    them; `allowed_registries`: host patterns (`*.aliyuncs.com`) nodes may pull from as they are."""
    seen: dict[tuple[str, str], CheckedImage] = {}
    for image in rendering.images:
        key = (image.reference, image.source)
        if key not in seen:
            seen[key] = CheckedImage(
                image.reference, image.source, _verdict(image.reference, verified, allowed_registries)
            )
    return Proof(rendering.renderer, tuple(seen.values()))


def _verdict(reference: str, verified: set[str], allowed: list[str]) -> str:
    try:
        parsed = parse(reference)
    except ReferenceError:
        return NOT_MIRRORED
    if str(parsed) in verified:
        return MIRRORED
    if any(fnmatch.fnmatch(parsed.repository.registry, pattern) for pattern in allowed):
        return ALLOWED
    return NOT_MIRRORED
