"""Release discovery: the versions the source publishes for every version-bearing image, kept by a
version filter (`>=2.7.0,<3`) and "newest N"."""

from __future__ import annotations

import re

from mirror.reference import Repository
from mirror.registry import RegistryClient
from mirror.release import VersionError, normalise_version, version_key
from mirror.settings import VERSION_PLACEHOLDER, DiscoverySettings, MirrorSettings

_CLAUSE = re.compile(r"^(>=|<=|==|>|<|!=)?\s*(v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)$")


def parse_filter(text: str) -> list[tuple[str, tuple[int, int, int, int, str]]]:
    """`>=2.7.0,<3.0.0` -> [(">=", key), ("<", key)]; raises VersionError on anything else."""
    clauses = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        match = _CLAUSE.match(part)
        if not match:
            raise VersionError(f"version filter clause {part!r}: expected e.g. >=2.7.0")
        clauses.append((match[1] or "==", version_key(match[2])))
    return clauses


def matches(version: str, clauses: list[tuple[str, tuple[int, int, int, int, str]]]) -> bool:
    key = version_key(version)
    for op, bound in clauses:
        ok = {
            ">=": key >= bound,
            "<=": key <= bound,
            ">": key > bound,
            "<": key < bound,
            "==": key == bound,
            "!=": key != bound,
        }[op]
        if not ok:
            return False
    return True


def select_versions(tags: list[str], discovery: DiscoverySettings) -> list[str]:
    """Tags that are release versions (pre-releases only when asked for), filtered, newest last."""
    clauses = parse_filter(discovery.versions)
    versions = set()
    for tag in tags:
        try:
            version = normalise_version(tag)
        except VersionError:
            continue
        if version != tag:  # only tags spelled as the chart's image tags (`v2.10.0`)
            continue
        if "-" in version and not discovery.prereleases:
            continue
        if matches(version, clauses):
            versions.add(version)
    ordered = sorted(versions, key=version_key)
    return ordered[-discovery.newest :] if discovery.newest else ordered


async def discover(settings: MirrorSettings, source: RegistryClient) -> list[str]:
    """Versions published for every image whose tag follows the release."""
    published: set[str] | None = None
    for image in settings.images:
        if not image.follows_release:
            continue
        prefix, suffix = image.tag.split(VERSION_PLACEHOLDER, 1)
        tags = await source.list_tags(Repository.of(settings.source.registry, image.source).name)
        found = {
            tag[len(prefix) : len(tag) - len(suffix)]
            for tag in tags
            if tag.startswith(prefix) and tag.endswith(suffix) and len(tag) > len(prefix) + len(suffix)
        }
        published = found if published is None else published & found
    return select_versions(sorted(published or ()), settings.discovery)
