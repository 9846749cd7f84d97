"""Release versions from outside (the command line, a webhook, a registry's tags, the discovery filter): bounded
before any regex or int(), refused with a short message that quotes a clipped copy of the text."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mirror.release import (
    MAX_FILTER_LENGTH,
    MAX_VERSION_LENGTH,
    VersionError,
    matches,
    normalise_version,
    parse_filter,
    version_key,
)

HUGE = "v" + "1" * 100_000 + ".0.0"  # past Python's 4300-digit limit on int(): a ValueError of its own
SHORT_MESSAGE = 300  # characters a refusal may take, whatever it was given


@pytest.mark.parametrize(
    "parse",
    [normalise_version, version_key, lambda text: parse_filter(f">={text}"), lambda text: parse_filter(f"{text},")],
    ids=["normalise_version", "version_key", "parse_filter", "parse_filter-bare"],
)
def test_a_version_with_100000_digits_is_a_short_version_error(parse: Callable[[str], object]) -> None:
    with pytest.raises(VersionError) as refused:
        parse(HUGE)
    message = str(refused.value)
    assert len(message) < SHORT_MESSAGE and "characters cut" in message, message


@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ("v999999999.999999999.999999999", True),  # 9 digits each: the most a number may have
        ("v1000000000.0.0", False),
        ("v0.1000000000.0", False),
        ("v0.0.1000000000", False),
        ("v1.2.3-" + "a" * 64, True),
        ("v1.2.3-" + "a" * 65, False),
    ],
)
def test_each_number_has_at_most_9_digits(text: str, accepted: bool) -> None:
    if accepted:
        assert version_key(text)[:3] == tuple(int(n) for n in text[1:].split("-")[0].split("."))
    else:
        with pytest.raises(VersionError, match="invalid version"):
            version_key(text)


def test_text_longer_than_the_bound_is_refused_before_it_is_parsed() -> None:
    padded = "v2.10.0" + " " * MAX_VERSION_LENGTH  # would strip to a fine version: the length is checked first
    with pytest.raises(VersionError, match=f"longer than {MAX_VERSION_LENGTH} characters"):
        normalise_version(padded)
    assert normalise_version(" v2.10.0 ") == "v2.10.0"


def test_a_filter_is_bounded_and_a_long_clause_is_clipped() -> None:
    with pytest.raises(VersionError, match=f"longer than {MAX_FILTER_LENGTH} characters"):
        parse_filter(",".join([">=2.7.0"] * 200))
    with pytest.raises(VersionError) as refused:
        parse_filter(">=" + "9" * 500 + ".0.0")
    assert len(str(refused.value)) < SHORT_MESSAGE and "expected e.g. >=2.7.0" in str(refused.value)


def test_control_characters_in_a_refused_version_are_escaped() -> None:
    with pytest.raises(VersionError) as refused:
        normalise_version("v2.10.0\n\x1b[31mforged line")
    assert "\n" not in str(refused.value) and "\x1b" not in str(refused.value)


def test_filters_still_match() -> None:
    clauses = parse_filter(">=2.7.0, <3.0.0, !=2.8.1")
    assert [v for v in ("v2.6.9", "v2.7.0", "v2.8.1", "v2.10.0", "v3.0.0") if matches(v, clauses)] == [
        "v2.7.0",
        "v2.10.0",
    ]


@pytest.mark.parametrize("text", ["v2.1\u0660.0", "v\u0662.10.0", "v2.10.0-rc\uff11", "v2.10.\U0001d7ce"])
def test_digits_of_other_scripts_are_not_a_version(text: str) -> None:
    """`\\d` takes any script's digits, and int() reads them: `v2.1٠.0` would sort as v2.10.0 under a release key
    of its own (a second job for one release, a tag no registry holds)."""
    for parse in (normalise_version, version_key, lambda t: parse_filter(f">={t}")):
        with pytest.raises(VersionError):
            parse(text)
