"""The shipped `config/mirror.yaml`, read as a user turns on one of its commented blocks (`charts:`,
`signatures:`): the demo and the tests start from the same text a user edits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SHIPPED_CONFIG = Path(__file__).resolve().parents[2] / "config" / "mirror.yaml"


def uncomment_block(text: str, key: str) -> str:
    """The config text with the commented top-level block `# <key>:` (up to the next uncommented line)
    turned on."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"# {key}:")), None)
    if start is None:
        raise ValueError(f"the config has no commented {key}: block")
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("#")), len(lines))
    lines[start:end] = [line.removeprefix("# ") for line in lines[start:end]]
    return "\n".join(lines) + "\n"


def shipped_config(*turned_on: str, path: Path = SHIPPED_CONFIG) -> dict[str, Any]:
    """The shipped config with the named commented blocks turned on."""
    text = path.read_text(encoding="utf-8")
    for key in turned_on:
        text = uncomment_block(text, key)
    return dict(yaml.safe_load(text))
