"""Loading the config: the YAML file read within bounds (size, UTF-8, nesting, values with aliases expanded),
MIRROR_* applied, validated, then the files and variables it names checked; every error names its key, or
the variable that set it."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from yaml.composer import ComposerError
from yaml.error import Mark
from yaml.nodes import MappingNode, Node, ScalarNode

from mirror.settings.environment import blame_variable, format_validation_error, named_variables, variable_problems
from mirror.settings.fields import MAX_CONFIG_DEPTH, MAX_CONFIG_NODES, MAX_LINE, ConfigError
from mirror.settings.inputs import missing_inputs, undecodable
from mirror.settings.root import MirrorSettings
from mirror.untrusted import clip

DEFAULT_CONFIG_PATH = Path("config/mirror.yaml")
MAX_CONFIG_BYTES = 1024 * 1024  # a config file is a few KiB
MERGE_TAG = "tag:yaml.org,2002:merge"


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader with two bounds: nesting (the composer recurses once per level, so a file nested
    thousands deep would exhaust the stack) and the values the document stands for with every alias expanded
    (an alias bomb is a few lines that pydantic and the values writer would walk billions of times). A key
    written twice in one mapping is refused: YAML loaders keep the last silently, and a second `registries:`
    block would drop the first's logins without a word."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0
        self._anchored_sizes: dict[int, int] = {}  # id(node) -> its size, aliases in it expanded

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        mark = event.start_mark if isinstance(event.start_mark, Mark) else None
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            size = self._anchored_sizes.get(id(node))
            if size is None:
                raise ComposerError(None, None, f"alias *{event.anchor} is used inside its own anchor", mark)
            self._count(size, mark)
            return node
        self._depth += 1
        if self._depth > MAX_CONFIG_DEPTH:
            raise ComposerError(None, None, f"nested deeper than {MAX_CONFIG_DEPTH} levels", mark)
        before = self._nodes
        self._count(1, mark)
        node = super().compose_node(parent, index)
        self._depth -= 1
        if node is not None and getattr(event, "anchor", None) is not None:
            self._anchored_sizes[id(node)] = self._nodes - before
        return node

    def compose_mapping_node(self, anchor: Any) -> MappingNode:  # the anchor's name (typeshed says otherwise)
        """The mapping as written, checked before construction: merging (`<<:`) rewrites an anchored mapping's
        keys in place, its own overrides after the merged ones, which must not read as a key written twice."""
        node: MappingNode = super().compose_mapping_node(anchor)
        first_seen: dict[str, Mark] = {}
        for key, _ in node.value:
            if not isinstance(key, ScalarNode) or key.tag == MERGE_TAG:  # `<<:` merges, and keys of its own win
                continue
            earlier = first_seen.setdefault(key.value, key.start_mark)
            if earlier is not key.start_mark:
                raise ComposerError(
                    None,
                    None,
                    f"key {key.value!r} appears twice in one mapping (first on line {earlier.line + 1}): merge the two",
                    key.start_mark,
                )
        return node

    def _count(self, nodes: int, mark: Mark | None) -> None:
        self._nodes += nodes
        if self._nodes > MAX_CONFIG_NODES:
            raise ComposerError(None, None, f"more than {MAX_CONFIG_NODES} values, aliases expanded", mark)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        context = f"{exc.context}: " if exc.context else ""
        return f"line {mark.line + 1}, column {mark.column + 1}: {context}{exc.problem}"
    return " ".join(str(exc).split())


def config_path(environ: Mapping[str, str]) -> Path:
    """The config file when --config is not given: $MIRROR_CONFIG, else config/mirror.yaml."""
    named = environ.get("MIRROR_CONFIG")
    if named is not None and not named.strip():
        raise ConfigError("MIRROR_CONFIG is set but empty: name the config file, or unset it")
    return Path(named) if named is not None else DEFAULT_CONFIG_PATH


def read_config(path: Path) -> dict[str, Any]:
    """The config file's top-level mapping, read within bounds (size, nesting, aliases expanded)."""
    where = f"config file {clip(str(path))}"
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{where} not found") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{where}: larger than {MAX_CONFIG_BYTES // 1024} KiB (a config file is a few KiB)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where} {undecodable(raw, exc)}") from None
    try:
        data = yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 - a SafeLoader, with bounds
    except yaml.YAMLError as exc:
        raise ConfigError(clip(f"{where}: {_yaml_problem(exc)}", MAX_LINE)) from None
    except RecursionError:  # the bounds above should make this unreachable; a traceback would be worse
        raise ConfigError(f"{where}: nested too deeply to read") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level")
    # a key that is not a field would reach BaseSettings.__init__, whose _-prefixed keywords (_env_file,
    # _env_prefix, _cli_parse_args...) configure pydantic-settings itself: such keys are not settings
    odd = [key for key in data if not isinstance(key, str) or key.startswith("_")]
    if odd:
        raise ConfigError(
            f"{where}:\n" + "\n".join(f"  {clip(repr(k), 80)}: Extra inputs are not permitted" for k in odd)
        )
    return data


def load_settings(path: Path | None = None) -> MirrorSettings:
    """Read the YAML file, apply MIRROR_* overrides, validate, check the files and variables it names.
    Raises ConfigError naming each bad key (or the MIRROR_* variable that set it)."""
    environ = os.environ
    path = path or config_path(environ)
    data = read_config(path)
    where = f"config file {clip(str(path))}"
    variables = variable_problems(environ, named_variables(data, environ))
    if variables:
        raise ConfigError(f"{where}:\n" + _lines(variables))
    try:
        settings = MirrorSettings(**data)
    except ValidationError as exc:
        raise ConfigError(f"{where}:\n" + format_validation_error(exc, environ)) from None
    except ValueError as exc:  # raised by a settings source: a MIRROR_* variable that is not valid JSON
        raise ConfigError(blame_variable(str(exc), environ) or clip(f"{where}: {exc}", MAX_LINE)) from None
    except RecursionError:  # the bounds on the file and the variables should make this unreachable
        raise ConfigError(f"{where}: nested too deeply to check") from None
    problems = missing_inputs(settings, environ)
    if problems:
        raise ConfigError(f"{where}:\n" + _lines(problems))
    return settings


def _lines(problems: Iterable[str]) -> str:
    return "\n".join(f"  {clip(problem, MAX_LINE)}" for problem in problems)
