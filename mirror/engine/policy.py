"""Which entries of an index a target gets: every one (a byte-exact copy), or a rewritten index without
attestations and other non-image entries, or only some platforms. A rewritten index keeps its media type,
its annotations and every kept child byte for byte, and records the source digest it came from and the policy
that chose its entries."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from mirror.engine.tree import ManifestTree
from mirror.oci import DOCKER_CONFIG, OCI_CONFIG, Descriptor, Manifest

SOURCE_DIGEST_ANNOTATION = "mirror.source.digest"
POLICY_ANNOTATION = "mirror.policy"
IMAGE_CONFIG_TYPES = frozenset({DOCKER_CONFIG, OCI_CONFIG})
ATTESTATION = "attestation-manifest"
# containerd's normalisation: an entry without a variant is this variant of its architecture
DEFAULT_VARIANTS = {"arm64": "v8", "arm": "v7"}

# The one class-refusal predicate is ACR's (mirror/acr.py); copy.py and referrers.py ask for it here.


@dataclass(frozen=True, slots=True)
class Dropped:
    digest: str
    platform: str | None
    reason: str

    def to_json(self) -> dict[str, str | None]:
        return {"digest": self.digest, "platform": self.platform, "reason": self.reason}


def describes_another(entry: Descriptor) -> bool:
    """A BuildKit attestation manifest (platform unknown/unknown, reference type attestation-manifest): data about
    another entry of the index, never an image, and never itself signed."""
    return entry.annotations.get("vnd.docker.reference.type") == ATTESTATION or entry.platform == "unknown/unknown"


def signable(entries: Iterable[Descriptor]) -> list[str]:
    """The digests among an index's entries that a signature or an SBOM may refer to: its images, not their
    attestation manifests."""
    return [entry.digest for entry in entries if not describes_another(entry)]


def is_runnable(entry: Descriptor, child: Manifest) -> bool:
    """An image a node can run: not an attestation manifest, and with an image config."""
    if describes_another(entry):
        return False
    return child.config is not None and child.config.media_type in IMAGE_CONFIG_TYPES


def platform_matches(wanted: str, offered: str | None) -> bool:
    """Whether an index entry's platform (`os/arch[/variant]`) is one the filter entry `wanted` asks for: a filter
    without a variant takes every variant of its os/arch (`linux/arm64` takes `linux/arm64/v8`); one with a
    variant takes that variant, or an entry without one where it is the architecture's default
    (`linux/arm64/v8` takes `linux/arm64`)."""
    if offered is None:
        return False
    wanted_os, wanted_arch, wanted_variant = _platform_parts(wanted)
    offered_os, offered_arch, offered_variant = _platform_parts(offered)
    if (wanted_os, wanted_arch) != (offered_os, offered_arch):
        return False
    return not wanted_variant or wanted_variant == (offered_variant or DEFAULT_VARIANTS.get(offered_arch))


def _platform_parts(platform: str) -> tuple[str, str, str]:
    os_name, _, rest = platform.partition("/")
    architecture, _, variant = rest.partition("/")
    return os_name, architecture, variant


def select(tree: ManifestTree, attestations: str, platforms: list[str] | None) -> tuple[list[Manifest], list[Dropped]]:
    """The children to copy, and those left out with the reason, by the policy known before any push:
    `drop` leaves out non-image entries, a platform list leaves out other platforms (attestations of a kept
    platform's image stay unless dropped)."""
    kept: list[tuple[Descriptor, Manifest]] = []
    dropped: list[Dropped] = []
    for entry, child in tree.entries():
        runnable = is_runnable(entry, child)
        if runnable and platforms is not None and not any(platform_matches(p, entry.platform) for p in platforms):
            dropped.append(Dropped(child.digest, entry.platform, "platform filter"))
        elif not runnable and attestations == "drop":
            dropped.append(Dropped(child.digest, entry.platform, "not an image (attestations: drop)"))
        else:
            kept.append((entry, child))
    if platforms is not None:  # an attestation describing a filtered-out image goes with it
        kept_images = {child.digest for entry, child in kept if is_runnable(entry, child)}
        for entry, child in list(kept):
            subject = entry.annotations.get("vnd.docker.reference.digest")
            if subject is not None and subject not in kept_images:
                kept.remove((entry, child))
                dropped.append(Dropped(child.digest, entry.platform, "describes a filtered platform"))
    return [child for _, child in kept], dropped


def policy_text(attestations: str, platforms: list[str] | None) -> str:
    """A target's policy as its rewrites record it: a rewrite made under another policy is not current."""
    return f"attestations={attestations}; platforms={','.join(sorted(platforms)) if platforms else 'all'}"


def rewrite_index(root: Manifest, keep: set[str], policy: str) -> Manifest:
    """The source index with only the `keep` children, everything else as it was, plus the source digest and the
    policy it was made under (`policy_text`)."""
    doc = json.loads(root.raw)
    doc["manifests"] = [entry for entry in doc.get("manifests", []) if entry.get("digest") in keep]
    annotations = dict(doc.get("annotations") or {})
    annotations[SOURCE_DIGEST_ANNOTATION] = root.digest
    annotations[POLICY_ANNOTATION] = policy
    doc["annotations"] = annotations
    raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    return Manifest.parse(raw, root.media_type)


def source_digest_of(manifest: Manifest) -> str | None:
    """For an index this project rewrote, the source digest it records."""
    return _annotation(manifest, SOURCE_DIGEST_ANNOTATION)


def policy_of(manifest: Manifest) -> str | None:
    """For an index this project rewrote, the policy it records (none on rewrites made before it was recorded)."""
    return _annotation(manifest, POLICY_ANNOTATION)


def _annotation(manifest: Manifest, key: str) -> str | None:
    if not manifest.is_index:
        return None
    try:
        annotations = json.loads(manifest.raw).get("annotations") or {}
    except ValueError:
        return None
    value = annotations.get(key) if isinstance(annotations, dict) else None
    return value if isinstance(value, str) else None
