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


def near_misses(given: dict[str, Any], known: dict[str, Any], at: str = "") -> list[tuple[str, str]]:
    """Keys of `given` that `known` (a chart's values) lacks but has one spelt nearly alike: (the key's dotted
    path, the path it most likely meant). A key with no near match may be one the chart reads without declaring
    it, and is not named; mappings are followed where both sides have one."""
    found: list[tuple[str, str]] = []
    for key, value in given.items():
        path = f"{at}{key}"
        if key in known:
            if isinstance(value, dict) and isinstance(known[key], dict):
                found += near_misses(value, known[key], f"{path}.")
        elif near := difflib.get_close_matches(key, [str(k) for k in known], n=1, cutoff=0.8):
            found.append((path, f"{at}{near[0]}"))
    return found
