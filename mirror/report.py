"""The run report: what happened to each image at each target, and which values files were written."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mirror.engine.outcomes import Copied, Drift, Failed, Outcome, Planned, Refused, Rewrite, UpToDate
from mirror.engine.referrers import Carried
from mirror.registry.ratelimit import RateLimit
from mirror.settings import TargetSettings
from mirror.values import ValuesFile

if TYPE_CHECKING:  # sigstore is imported only where a signature rule applies
    from mirror.engine.signatures import SignatureCheck


@dataclass(frozen=True, slots=True)
class TargetResult:
    """One image at one target: the stages' outcome, and what was learnt beside it."""

    target: str
    reference: str
    outcome: Outcome
    anonymous_pull: bool | None = None  # can a node without credentials pull the copy?
    referrers: Carried | None = None  # signatures, attestations, SBOMs: carried and left out

    @property
    def action(self) -> str:
        """up-to-date | copied | planned | failed"""
        match self.outcome:
            case UpToDate():
                return "up-to-date"
            case Copied() | Failed(copied=Copied()):
                return "copied"
            case Planned():
                return "planned"
        return "failed"

    @property
    def verified(self) -> bool:
        return isinstance(self.outcome, (UpToDate, Copied))

    @property
    def copied(self) -> Copied | None:
        match self.outcome:
            case Copied():
                return self.outcome
            case Failed(copied=copied):
                return copied
        return None

    @property
    def digest(self) -> str | None:
        if isinstance(self.outcome, UpToDate):
            return self.outcome.digest
        return self.copied.digest if self.copied else None

    @property
    def blobs(self) -> dict[str, int]:
        """present / mounted / uploaded counts of a copy"""
        return dict(self.copied.blobs) if self.copied else {}

    @property
    def bytes_uploaded(self) -> int:
        return self.copied.bytes_uploaded if self.copied else 0

    @property
    def error(self) -> str | None:
        return self.outcome.reason if isinstance(self.outcome, (Drift, Refused, Failed)) else None

    @property
    def plan(self) -> str | None:
        return None if isinstance(self.outcome, (UpToDate, Drift)) else self.outcome.plan

    @property
    def rewrite(self) -> Rewrite | None:
        if isinstance(self.outcome, UpToDate):
            return self.outcome.rewrite
        return self.copied.rewrite if self.copied else None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "target": self.target,
            "reference": self.reference,
            "digest": self.digest,
            "verified": self.verified,
            "action": self.action,
            "blobs": self.blobs,
            "bytes_uploaded": self.bytes_uploaded,
        }
        optional = {
            "plan": self.plan,
            "rewrite": self.rewrite.to_json() if self.rewrite else None,
            "anonymous_pull": self.anonymous_pull,
            "referrers": self.referrers.to_json() if self.referrers else None,
            "error": self.error,
        }
        return data | {key: value for key, value in optional.items() if value is not None}


@dataclass
class ImageResult:
    name: str
    source: str
    source_digest: str | None = None
    targets: list[TargetResult] = field(default_factory=list)
    error: str | None = None
    signature: SignatureCheck | None = None  # the signature policy's verdict, where a rule applies

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "source": self.source,
            "source_digest": self.source_digest,
            "targets": [t.to_json() for t in self.targets],
        }
        if self.signature is not None:
            data["signature"] = self.signature.to_json()
        if self.error is not None:
            data["error"] = self.error
        return data


@dataclass
class ReleaseResult:
    version: str
    dry_run: bool = False
    images: list[ImageResult] = field(default_factory=list)
    values: list[ValuesFile] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # values that could not be written, and why
    # values not attempted because some image of their chart is not verified at the target (its own error says why)
    withheld: list[str] = field(default_factory=list)
    source_rate_limit: RateLimit | None = None

    def pull_secret_for(self, target: TargetSettings) -> str | None:
        """The declared pull secret, or the default one when a node could not pull some image anonymously."""
        if target.pull_secret:
            return target.pull_secret
        results = [t for image in self.images for t in image.targets if t.target == target.name]
        return target.pull_secret_name if any(t.anonymous_pull is False for t in results) else None

    def failures(self) -> list[str]:
        lines = []
        for image in self.images:
            if image.error:
                lines.append(f"{self.version} {image.name}: {image.error}")
            for target in image.targets:
                if target.error:
                    lines.append(f"{self.version} {image.name} -> {target.target}: {target.error}")
                elif not target.verified and not self.dry_run:
                    lines.append(f"{self.version} {image.name} -> {target.target}: not verified")
        return lines + [f"{self.version}: {error}" for error in self.errors]

    @property
    def ok(self) -> bool:
        return not self.failures()

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "ok": self.ok,
            "dry_run": self.dry_run,
            "images": [i.to_json() for i in self.images],
            "values": [
                {
                    "target": v.target,
                    "chart_name": v.chart_name,
                    "chart_version": v.chart_version,
                    "path": str(v.path),
                    "helm": v.helm_command,
                    "rbac": str(v.rbac_path) if v.rbac_path else None,
                    "pull_secret": v.pull_secret,
                    "kubectl": v.kubectl_command,
                    "chart": v.chart,
                    **({"chart_note": v.chart_note} if v.chart_note else {}),
                    # a chart published to the target: can Helm pull it without logging in?
                    **({"chart_anonymous_pull": v.chart_anonymous_pull} if v.chart_anonymous_pull is not None else {}),
                    **({"proof": v.proof.to_json()} if v.proof is not None else {}),
                    **({"warnings": list(v.warnings)} if v.warnings else {}),
                }
                for v in self.values
            ],
            **({"errors": self.errors} if self.errors else {}),
            **({"withheld": self.withheld} if self.withheld else {}),
            "source_rate_limit": self.source_rate_limit.to_json() if self.source_rate_limit else None,
        }
