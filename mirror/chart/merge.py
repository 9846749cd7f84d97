"""Values layered the way Helm layers them: mappings merge key by key, anything else is replaced."""

from __future__ import annotations

import difflib
from typing import Any


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def without_nulls(values: dict[str, Any]) -> dict[str, Any]:
    """`values` without the keys set to null, at any depth of mappings (lists are left as they are). In a user's
    values Helm deletes such a key, the chart's default with it; mirror's documented meaning of a null (the
    chart's own default) is the key left out."""
    return {
        key: without_nulls(value) if isinstance(value, dict) else value
        for key, value in values.items()
        if value is not None
    }


def near_misses(given: dict[str, Any], known: dict[Any, Any], at: str = "") -> list[tuple[str, str]]:
    """Keys of `given` that `known` (a chart's values) lacks but has one spelt nearly alike: (the key's dotted
    path, the path it most likely meant). A key with no near match may be one the chart reads without declaring
    it, and is not named; nor is a key with a `/` in it, a label's or an annotation's (`kubernetes.io/arch` is
    not a misspelt `kubernetes.io/os`). Mappings are followed where both sides have one."""
    names = {str(key): key for key in known}
    found: list[tuple[str, str]] = []
    for key, value in given.items():
        path = f"{at}{key}"
        if key in names:
            inner = known[names[key]]
            if isinstance(value, dict) and isinstance(inner, dict):
                found += near_misses(value, inner, f"{path}.")
        elif "/" not in key and (near := difflib.get_close_matches(key, names, n=1, cutoff=0.8)):
            found.append((path, f"{at}{near[0]}"))
    return found
