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
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from mirror.settings.environment import (
    Written,
    blame_variable,
    format_validation_error,
    misspelt_cli_variables,
    named_variables,
    variable_problems,
)
from mirror.settings.fields import MAX_CONFIG_DEPTH, MAX_CONFIG_NODES, MAX_LINE, ConfigError
from mirror.settings.inputs import missing_inputs, undecodable
from mirror.settings.root import MirrorSettings
from mirror.untrusted import clip

DEFAULT_CONFIG_PATH = Path("config/mirror.yaml")
MAX_CONFIG_BYTES = 1024 * 1024  # a config file is a few KiB
MERGE_TAG = "tag:yaml.org,2002:merge"
NOTHING_IN_IT = (
    "holds no settings (it is empty, or only comments): a config holds at least source: (the registry to copy "
    "from) and targets: (where to), with images: or chart: (what to copy); start from the example in README.md "
    '("Real use: Docker Hub -> ACR") or from config/mirror.yaml'
)


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
    return _parse(path, _read_text(path))


def _read_text(path: Path, missing: str = "") -> str:
    """The config file's text, read within bounds (size, UTF-8); `missing` is added to the line saying it is not
    there."""
    where = f"config file {clip(str(path))}"
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{where} not found{missing}") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{where}: larger than {MAX_CONFIG_BYTES // 1024} KiB (a config file is a few KiB)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where} {undecodable(raw, exc)}") from None


def _parse(path: Path, text: str) -> dict[str, Any]:
    """The top-level mapping of the config file's text, read within bounds (nesting, aliases expanded)."""
    where = f"config file {clip(str(path))}"
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
        raise ConfigError(f"{where}:\n" + "\n".join(f"  {clip(repr(k), 80)}: unknown key" for k in odd))
    return data


def _written_at(text: str) -> Written:
    """What the config file's text has at a key path, as typed (`1.30`, not the 1.3 YAML reads), where that is a
    scalar written there (not through an alias's merge), else None."""
    root = yaml.compose(text, Loader=_ConfigLoader)  # a SafeLoader's composer, with bounds; read once already

    def at(loc: tuple[int | str, ...]) -> str | None:
        node = root
        for part in loc:
            if isinstance(node, MappingNode):
                node = next((v for k, v in node.value if isinstance(k, ScalarNode) and k.value == part), None)
            elif isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = node.value[part]
            else:
                return None
        return node.value if isinstance(node, ScalarNode) else None

    return at


def _missing_default(environ: Mapping[str, str]) -> str:
    """What to add to `config/mirror.yaml not found` when a variable set is spelt nearly like MIRROR_CONFIG."""
    strays = misspelt_cli_variables(environ)
    return "".join(f" ({name} is set: did you mean {meant}?)" for name, meant in strays[:1])


def load_settings(path: Path | None = None) -> MirrorSettings:
    """Read the YAML file, apply MIRROR_* overrides, validate, check the files and variables it names.
    Raises ConfigError naming each bad key (or the MIRROR_* variable that set it)."""
    environ = os.environ
    missing = _missing_default(environ) if path is None and "MIRROR_CONFIG" not in environ else ""
    path = path or config_path(environ)
    text = _read_text(path, missing)
    data = _parse(path, text)
    where = f"config file {clip(str(path))}"
    variables = variable_problems(environ, named_variables(data, environ))
    if variables:
        raise ConfigError(f"{where}:\n" + _lines(variables))
    try:
        settings = MirrorSettings(**data)
    except ValidationError as exc:
        said = format_validation_error(exc, environ, _written_at(text))
        if not data:  # only pydantic's `targets: Field required` would say so otherwise
            only_missing = all(error["type"] == "missing" for error in exc.errors(include_url=False))
            raise ConfigError(f"{where} {NOTHING_IN_IT}" + ("" if only_missing else ":\n" + said)) from None
        raise ConfigError(f"{where}:\n{said}") from None
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
