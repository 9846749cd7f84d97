"""Pre-releases ordered as SemVer 2.0 (section 11) orders them: identifier by identifier, numbers as numbers."""

from __future__ import annotations

import random

import pytest

from mirror.release import matches, parse_filter, version_key

# SemVer 2.0's own example, lowest first, with the numeric cases a one-string comparison gets wrong
IN_ORDER = [
    "v1.0.0-1",
    "v1.0.0-2",
    "v1.0.0-10",
    "v1.0.0-alpha",
    "v1.0.0-alpha.1",
    "v1.0.0-alpha.beta",
    "v1.0.0-beta",
    "v1.0.0-beta.2",
    "v1.0.0-beta.11",
    "v1.0.0-rc.1",
    "v1.0.0-rc.2",
    "v1.0.0-rc.10",
    "v1.0.0-rc.10.1",
    "v1.0.0",
    "v1.0.1-rc.1",
]


def test_versions_sort_by_semver_precedence() -> None:
    shuffled = IN_ORDER[:]
    random.Random(7).shuffle(shuffled)
    assert sorted(shuffled, key=version_key) == IN_ORDER


def test_the_newest_release_candidate_is_the_one_with_the_highest_number() -> None:
    assert max(["v2.10.0-rc.9", "v2.10.0-rc.10", "v2.10.0-rc.2"], key=version_key) == "v2.10.0-rc.10"


@pytest.mark.parametrize(
    ("version", "clauses", "expected"),
    [
        ("v2.10.0-rc.10", ">=2.10.0-rc.9", True),
        ("v2.10.0-rc.10", "<2.10.0-rc.9", False),
        ("v2.10.0-rc.9", "<2.10.0-rc.10", True),
        ("v2.10.0-rc.10", ">2.10.0-rc.10,<2.10.0", False),
        ("v2.10.0-rc.10.1", ">2.10.0-rc.10,<2.10.0", True),
        ("v2.10.0-beta.11", ">=2.10.0-beta.2", True),
    ],
)
def test_filters_compare_prerelease_numbers_as_numbers(version: str, clauses: str, expected: bool) -> None:
    assert matches(version, parse_filter(clauses)) is expected
