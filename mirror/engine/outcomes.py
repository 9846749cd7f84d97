"""What each stage of a copy returns, as types: what a target tag needs (`Decision`), and how one image ended
at one target (`Outcome`). The report is built from these at the edge; nothing fills a result in as it goes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mirror.engine.policy import Dropped
from mirror.errors import Kind, MirrorError
from mirror.oci import Descriptor

# -- what a target tag needs ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Current:
    """The tag is a verified copy of the source, or of mirror's rewrite of it (`digest`)."""

    digest: str
    children: tuple[Descriptor, ...] | None = None  # the index's entries, when verification read them


@dataclass(frozen=True, slots=True)
class Missing:
    """The tag is absent or its copy incomplete: copy. `incomplete`: the tag's tree is there but the verification
    found a part of it missing (a blob under a manifest still present, say), so the copy looks at every part."""

    incomplete: bool = False


@dataclass(frozen=True, slots=True)
class Drifted:
    """The tag points at something else: leave it alone."""

    reason: str


Decision = Current | Missing | Drifted


# -- how an image ended at a target ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rewrite:
    """The target holds a rewrite of the source index (entries the target refuses, or the policy drops, left
    out); `dropped` is known when this run made it."""

    source_digest: str
    target_digest: str
    dropped: tuple[Dropped, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"source_digest": self.source_digest, "target_digest": self.target_digest}
        if self.dropped is not None:
            data["dropped"] = [d.to_json() for d in self.dropped]
        return data


def rewrite_of(source_digest: str, target_digest: str, dropped: tuple[Dropped, ...] | None = None) -> Rewrite | None:
    return Rewrite(source_digest, target_digest, dropped) if target_digest != source_digest else None


@dataclass(frozen=True, slots=True)
class UpToDate:
    """The target already held the source's tree under the tag, and it verified: nothing was sent."""

    digest: str
    rewrite: Rewrite | None = None


@dataclass(frozen=True, slots=True)
class Copied:
    """Copied in this run and verified at the target: what moved, and how each blob got there."""

    digest: str
    plan: str
    blobs: Mapping[str, int]  # present / mounted / uploaded counts
    bytes_uploaded: int
    rewrite: Rewrite | None = None


@dataclass(frozen=True, slots=True)
class Planned:
    """A dry run: what a copy would do."""

    plan: str


@dataclass(frozen=True, slots=True)
class Drift:
    """The target's tag points at another digest than the source's: left alone, since release tags should not move
    (`--force` overwrites)."""

    reason: str


@dataclass(frozen=True, slots=True)
class NotLanded:
    """What stopped a copy, and the plan it had where it got that far."""

    reason: str
    plan: str | None = None


@dataclass(frozen=True, slots=True)
class Refused(NotLanded):
    """The target registry (or a policy) refused the copy, and would refuse it again."""


@dataclass(frozen=True, slots=True)
class Failed(NotLanded):
    """Anything else that stopped it: the wire, the source, or a copy pushed and then not verified (`copied`)."""

    copied: Copied | None = None


def not_landed(exc: MirrorError, reason: str, plan: str | None = None) -> Refused | Failed:
    """The outcome of a copy stopped by `exc`: refused where the registry will refuse it again, else failed."""
    return Refused(reason, plan) if exc.kind is Kind.REFUSED else Failed(reason, plan)


Outcome = UpToDate | Copied | Planned | Drift | Refused | Failed
