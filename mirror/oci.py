"""Content types: media types, descriptors and manifests kept as their original bytes plus a parsed view."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from mirror.errors import Kind, MirrorError
from mirror.reference import is_valid_digest
from mirror.untrusted import clip, load_json

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"

DOCKER_FOREIGN_LAYER = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
OCI_NONDISTRIBUTABLE_LAYER = "application/vnd.oci.image.layer.nondistributable.v1.tar"

INDEX_TYPES = frozenset({DOCKER_MANIFEST_LIST, OCI_INDEX})
# Layers whose bytes are at their descriptor's `urls` (Windows base layers), not in the registry: the source
# answers 404 for them, so they are neither copied nor checked at a target (skopeo leaves them out too).
FOREIGN_LAYER_TYPES = frozenset(
    {DOCKER_FOREIGN_LAYER, *(OCI_NONDISTRIBUTABLE_LAYER + suffix for suffix in ("", "+gzip", "+zstd"))}
)
IMAGE_MANIFEST_TYPES = frozenset({DOCKER_MANIFEST, OCI_MANIFEST})
MANIFEST_TYPES = INDEX_TYPES | IMAGE_MANIFEST_TYPES
# Sent on every manifest request: without the OCI types some registries answer 404 for an OCI manifest.
MANIFEST_ACCEPT = ", ".join(sorted(MANIFEST_TYPES))

MAX_MANIFEST_BYTES = 4 * 1024 * 1024


class ManifestError(MirrorError, ValueError):
    """Manifest bytes that are not what they claim to be."""

    kind = Kind.SOURCE


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    platform: str | None = None  # "os/arch[/variant]" for index entries
    annotations: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Descriptor:
        try:
            platform = data.get("platform")
            descriptor = cls(
                media_type=str(data.get("mediaType", "")),
                digest=str(data["digest"]),
                size=int(data["size"]),
                platform=_platform_string(platform) if isinstance(platform, dict) else None,
                annotations={str(k): str(v) for k, v in (data.get("annotations") or {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ManifestError(f"invalid descriptor {clip(repr(data), 200)}: {exc}") from exc
        if not is_valid_digest(descriptor.digest) or descriptor.size < 0:
            # what the copy asks for by this digest, and what it keeps by it, must be a digest
            raise ManifestError(f"invalid descriptor {clip(repr(data), 200)}: not a sha256 digest and a size")
        return descriptor


def _platform_string(platform: dict[str, Any]) -> str:
    parts = [str(platform.get("os", "")), str(platform.get("architecture", ""))]
    if platform.get("variant"):
        parts.append(str(platform["variant"]))
    return "/".join(parts)


@dataclass(frozen=True, slots=True)
class Manifest:
    """A manifest or index exactly as the registry stored it. `raw` is what gets pushed: never re-serialise."""

    media_type: str
    digest: str
    raw: bytes
    manifests: tuple[Descriptor, ...] = ()  # children of an index
    config: Descriptor | None = None  # image manifests only
    layers: tuple[Descriptor, ...] = ()

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES

    @property
    def blobs(self) -> tuple[Descriptor, ...]:
        """Config first, then layers: every blob an image manifest needs from its registry. Foreign layers are
        not among them: the manifest's bytes still name them, unchanged."""
        layers = tuple(layer for layer in self.layers if layer.media_type not in FOREIGN_LAYER_TYPES)
        return ((self.config,) if self.config else ()) + layers

    @classmethod
    def parse(cls, raw: bytes, content_type: str | None = None, expected_digest: str | None = None) -> Manifest:
        if len(raw) > MAX_MANIFEST_BYTES:
            raise ManifestError(f"manifest of {len(raw)} bytes is over the {MAX_MANIFEST_BYTES} byte limit")
        digest = sha256_digest(raw)
        if expected_digest and digest != expected_digest:
            raise ManifestError(f"manifest bytes hash to {digest}, expected {expected_digest}")
        try:
            doc = load_json(raw)
        except ValueError as exc:
            raise ManifestError(f"manifest is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise ManifestError("manifest is not a JSON object")
        media_type = str(doc.get("mediaType") or _strip_params(content_type) or "")
        if media_type not in MANIFEST_TYPES:
            # An OCI manifest may omit mediaType; tell an index from an image by its fields.
            media_type = OCI_INDEX if "manifests" in doc else OCI_MANIFEST if "config" in doc else media_type
        if media_type not in MANIFEST_TYPES:
            raise ManifestError(f"unsupported manifest media type {media_type!r}")
        if media_type in INDEX_TYPES:
            children = tuple(Descriptor.from_json(d) for d in doc.get("manifests") or [])
            return cls(media_type, digest, raw, manifests=children)
        if not isinstance(doc.get("config"), dict):
            raise ManifestError("image manifest has no config descriptor")
        return cls(
            media_type,
            digest,
            raw,
            config=Descriptor.from_json(doc["config"]),
            layers=tuple(Descriptor.from_json(d) for d in doc.get("layers") or []),
        )


def _strip_params(content_type: str | None) -> str | None:
    return content_type.split(";", 1)[0].strip() if content_type else None
