"""Release versions as given to `mirror sync VERSION`: `v2.10.0` or `2.10.0`, normalised to `v2.10.0`."""

from __future__ import annotations

import re

_VERSION = re.compile(r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z][0-9A-Za-z.-]{0,63})?$")
_CLAUSE = re.compile(r"^(>=|<=|==|>|<|!=)?\s*(v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)$")
VersionKey = tuple[int, int, int, int, str]
VersionFilter = list[tuple[str, VersionKey]]


class VersionError(ValueError):
    pass


def normalise_version(text: str) -> str:
    """`2.10.0` -> `v2.10.0`; anything that is not `v` + a semver-like version is refused."""
    match = _VERSION.match(text.strip())
    if not match:
        raise VersionError(f"invalid version {text!r}: expected v<major>.<minor>.<patch>, e.g. v2.10.0")
    return "v" + text.strip().removeprefix("v")


def chart_version(version: str) -> str:
    """The Helm chart version a release tag belongs to: `v2.10.0` -> `2.10.0`."""
    return normalise_version(version).removeprefix("v")


def version_key(version: str) -> VersionKey:
    """Sort key: numeric parts, and a release after its pre-releases."""
    core, _, pre = normalise_version(version).removeprefix("v").partition("-")
    major, minor, patch = (int(p) for p in core.split("."))
    return major, minor, patch, 0 if pre else 1, pre


def parse_filter(text: str) -> VersionFilter:
    """`>=2.7.0,<3.0.0` -> [(">=", key), ("<", key)]; raises VersionError on anything else."""
    clauses = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        match = _CLAUSE.match(part)
        if not match:
            raise VersionError(f"version filter clause {part!r}: expected e.g. >=2.7.0")
        clauses.append((match[1] or "==", version_key(match[2])))
    return clauses


def matches(version: str, clauses: VersionFilter) -> bool:
    key = version_key(version)
    checks = {
        ">=": lambda bound: key >= bound,
        "<=": lambda bound: key <= bound,
        ">": lambda bound: key > bound,
        "<": lambda bound: key < bound,
        "==": lambda bound: key == bound,
        "!=": lambda bound: key != bound,
    }
    return all(checks[op](bound) for op, bound in clauses)
