"""Release versions as given to `mirror sync VERSION`: `v2.10.0` or `2.10.0`, normalised to `v2.10.0`."""

from __future__ import annotations

import re

from mirror.errors import Kind, MirrorError
from mirror.untrusted import clip

MAX_VERSION_LENGTH = 127  # the longest version text looked at; longer text is refused before any regex
MAX_FILTER_LENGTH = 1024  # a version filter: a handful of clauses
SHOWN = 80  # characters of a refused version a message carries
# each number at most 9 digits: int() stays cheap, far from Python's 4300-digit limit on int("...")
_NUMBER = r"(0|[1-9][0-9]{0,8})"
_VERSION = re.compile(rf"v?{_NUMBER}\.{_NUMBER}\.{_NUMBER}(-[0-9A-Za-z][0-9A-Za-z.-]{{0,63}})?")
_CLAUSE = re.compile(r"(>=|<=|==|>|<|!=)?\s*(v?[0-9]{1,9}\.[0-9]{1,9}\.[0-9]{1,9}(?:-[0-9A-Za-z.-]{1,64})?)")
# One dot-separated pre-release identifier: (0, its number, text) when all digits, else (1, 0, text), so
# numbers sort numerically and before words, words in ASCII order (SemVer 2.0, section 11). The text breaks a
# tie between spellings of one number (`01`, `1`), which SemVer does not allow but the pattern above lets by.
Identifier = tuple[int, int, str]
VersionKey = tuple[int, int, int, int, tuple[Identifier, ...]]
VersionFilter = list[tuple[str, VersionKey]]


class VersionError(MirrorError, ValueError):
    kind = Kind.USAGE

    pass


def _shown(text: str) -> str:
    return repr(clip(text, SHOWN))


def normalise_version(text: str) -> str:
    """`2.10.0` -> `v2.10.0`; anything that is not `v` + a semver-like version is refused."""
    if len(text) > MAX_VERSION_LENGTH:
        raise VersionError(f"invalid version {_shown(text)}: longer than {MAX_VERSION_LENGTH} characters")
    match = _VERSION.fullmatch(text.strip())
    if not match:
        raise VersionError(
            f"invalid version {_shown(text)}: expected v<major>.<minor>.<patch> (each at most 9 digits), e.g. v2.10.0"
        )
    return "v" + text.strip().removeprefix("v")


def is_prerelease(version: str) -> bool:
    """`v2.11.0-rc.1`: a release candidate, which the newest folder of values never holds."""
    return "-" in normalise_version(version)


def chart_version(version: str) -> str:
    """The Helm chart version a release tag belongs to: `v2.10.0` -> `2.10.0`."""
    return normalise_version(version).removeprefix("v")


def version_key(version: str) -> VersionKey:
    """Sort key, in SemVer 2.0's precedence: the numbers, a release after its pre-releases, pre-releases by
    their dot-separated identifiers (`rc.2` < `rc.10` < `rc.10.1` < `rc.a`)."""
    core, _, pre = normalise_version(version).removeprefix("v").partition("-")
    major, minor, patch = (int(p) for p in core.split("."))
    return major, minor, patch, 0 if pre else 1, tuple(_identifier(part) for part in pre.split(".") if pre)


def _identifier(part: str) -> Identifier:
    return (0, int(part), part) if part.isdigit() else (1, 0, part)


def parse_filter(text: str) -> VersionFilter:
    """`>=2.7.0,<3.0.0` -> [(">=", key), ("<", key)]; raises VersionError on anything else."""
    if len(text) > MAX_FILTER_LENGTH:
        raise VersionError(f"version filter {_shown(text)}: longer than {MAX_FILTER_LENGTH} characters")
    clauses = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        match = _CLAUSE.fullmatch(part) if len(part) <= MAX_VERSION_LENGTH + 2 else None
        if not match:
            raise VersionError(f"version filter clause {_shown(part)}: expected e.g. >=2.7.0")
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
