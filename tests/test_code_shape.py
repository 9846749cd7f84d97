"""The house rules on size: no function over 50 lines and no class over 250 in mirror/, so a reader sees a
function whole and a class stays one concern."""

from __future__ import annotations

import ast
from pathlib import Path

import mirror

MAX_FUNCTION_LINES = 50
MAX_CLASS_LINES = 250


def _sizes() -> list[tuple[str, int, int]]:
    """Each function and class: where it is, its length, and the most it may have."""
    found = []
    for path in sorted(Path(mirror.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                assert node.end_lineno is not None
                limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
                where = f"{path.relative_to(path.parents[1])}:{node.lineno} {node.name}"
                found.append((where, node.end_lineno - node.lineno + 1, limit))
    return found


def test_no_function_over_50_lines_and_no_class_over_250() -> None:
    sizes = _sizes()
    assert len(sizes) > 500  # every module was read
    assert [(where, lines) for where, lines, limit in sizes if lines > limit] == []
