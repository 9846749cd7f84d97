"""The run report: what happened to each image at each target, and which values files were written."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mirror.registry.ratelimit import RateLimit
from mirror.settings import TargetSettings
from mirror.values import ValuesFile


@dataclass
class TargetResult:
    target: str
    reference: str
    action: str = "failed"  # up-to-date | copied | planned | failed
    digest: str | None = None
    verified: bool = False
    blobs: dict[str, int] = field(default_factory=dict)  # present / mounted / uploaded counts
    bytes_uploaded: int = 0
    plan: str | None = None
    error: str | None = None
    rewrite: dict[str, Any] | None = None  # source -> target digest and what was left out, when they differ
    anonymous_pull: bool | None = None  # can a node without credentials pull the copy?
    referrers: dict[str, Any] | None = None  # signatures, attestations, SBOMs: carried and left out

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
        if self.plan is not None:
            data["plan"] = self.plan
        if self.rewrite is not None:
            data["rewrite"] = self.rewrite
        if self.anonymous_pull is not None:
            data["anonymous_pull"] = self.anonymous_pull
        if self.referrers is not None:
            data["referrers"] = self.referrers
        if self.error is not None:
            data["error"] = self.error
        return data


@dataclass
class ImageResult:
    name: str
    source: str
    source_digest: str | None = None
    targets: list[TargetResult] = field(default_factory=list)
    error: str | None = None
    signature: dict[str, str] | None = None  # the signature policy's verdict, where a rule applies

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "source": self.source,
            "source_digest": self.source_digest,
            "targets": [t.to_json() for t in self.targets],
        }
        if self.signature is not None:
            data["signature"] = self.signature
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
                    **({"proof": v.proof} if v.proof is not None else {}),
                    **({"warnings": list(v.warnings)} if v.warnings else {}),
                }
                for v in self.values
            ],
            **({"errors": self.errors} if self.errors else {}),
            "source_rate_limit": self.source_rate_limit.to_json() if self.source_rate_limit else None,
        }
