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
    note: str = ""

    def to_json(self) -> dict[str, str]:
        data = {"image": self.reference, "from": self.source, "verdict": self.verdict}
        return {**data, "note": self.note} if self.note else data


@dataclass(frozen=True, slots=True)
class Proof:
    renderer: str
    images: tuple[CheckedImage, ...]

    @property
    def ok(self) -> bool:
        return all(image.verdict != NOT_MIRRORED for image in self.images)

    def failures(self) -> list[str]:
        return [
            f"{i.reference} ({i.source}{': ' + i.note if i.note else ''})"
            for i in self.images
            if i.verdict == NOT_MIRRORED
        ]

    def to_json(self) -> dict[str, object]:
        return {"renderer": self.renderer, "ok": self.ok, "images": [i.to_json() for i in self.images]}


def check_rendering(
    rendering: Rendering,
    verified: set[str],
    allowed_registries: list[str],
    named: set[str] | None = None,
    target_prefixes: frozenset[str] = frozenset(),
) -> Proof:
    """`verified`: references (`host/repository:tag` and `host/repository@digest`) of the copies verified at
    the target, as nodes pull them; `allowed_registries`: host patterns (`*.aliyuncs.com`) nodes may pull
    from as they are; `named`: the source repositories the chart's values blocks name; `target_prefixes`: the
    target's namespace at each of its hosts (`host/namespace/`), where only a verified copy passes, whatever the
    patterns allow (the target's VPC host is one of `*.aliyuncs.com`: a wrong repository or tag there would
    otherwise pass as allowed; kube-scheduler's google_containers on the same host is another namespace). An image left
    on another registry that no block names (written into a template) is said to be so, with its template."""
    seen: dict[tuple[str, str], CheckedImage] = {}
    targets = {_repository(reference) for reference in verified}
    for image in rendering.images:
        key = (image.reference, image.source)
        if key not in seen:
            verdict = _verdict(image.reference, verified, allowed_registries, target_prefixes)
            note = ""
            if verdict == NOT_MIRRORED and named is not None and _repository(image.reference) not in {*named, *targets}:
                note = "no values block sets this image"
            seen[key] = CheckedImage(image.reference, image.source, verdict, note)
    return Proof(rendering.renderer, tuple(seen.values()))


def _repository(reference: str) -> str | None:
    try:
        return str(parse(reference).repository)
    except ReferenceError:
        return None


def _verdict(reference: str, verified: set[str], allowed: list[str], target_prefixes: frozenset[str]) -> str:
    try:
        parsed = parse(reference)
    except ReferenceError:
        return NOT_MIRRORED
    if str(parsed) in verified:
        return MIRRORED
    if any(str(parsed.repository).startswith(prefix) for prefix in target_prefixes):
        return NOT_MIRRORED
    if any(fnmatch.fnmatch(parsed.repository.registry, pattern) for pattern in allowed):
        return ALLOWED
    return NOT_MIRRORED
