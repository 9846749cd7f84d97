"""The MIRROR_* environment variables: each must name a setting (pydantic-settings would ignore a misspelt
one), and a value that is refused is blamed on the variable that set it."""

from __future__ import annotations

import difflib
import json
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic_core import ErrorDetails

from mirror.settings.fields import MAX_CONFIG_DEPTH, MAX_LINE, SHOWN_VALUE, union_members
from mirror.settings.root import ENV_PREFIX, MirrorSettings
from mirror.untrusted import clip

# MIRROR_* variables that are not settings, and where each is read. Any other MIRROR_* variable must name a
# setting: pydantic-settings would ignore a misspelt one, so it is refused at load instead.
# Each with what it is, as a misspelling's `did you mean` says it.
NOT_SETTINGS = {
    "MIRROR_CONFIG": "the config file when --config is not given",  # loading.config_path
}
# Kubernetes gives every pod <SERVICE>_SERVICE_HOST, <SERVICE>_PORT_80_TCP_ADDR... for each Service in its
# namespace (enableServiceLinks): deploy/base/service.yaml's `mirror` yields MIRROR_SERVICE_HOST, MIRROR_PORT...
_SERVICE_LINK = re.compile(
    r"MIRROR(_[A-Z0-9]+)*?_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9]+)*|PORT(_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)"
)


def named_variables(data: Mapping[str, Any], environ: Mapping[str, str]) -> set[str]:
    """The variables the config names as password sources (password_env, in the file or set by a MIRROR_*
    variable): they may be called MIRROR_* too without being settings."""
    registries = data.get("registries")
    named = {
        entry["password_env"]
        for entry in (registries.values() if isinstance(registries, dict) else ())
        if isinstance(entry, dict) and isinstance(entry.get("password_env"), str)
    }
    prefix = ENV_PREFIX + "REGISTRIES__"
    return named | {
        value
        for name, value in environ.items()
        if name.upper().startswith(prefix) and name.upper().endswith("__PASSWORD_ENV")
    }


def variable_problems(environ: Mapping[str, str], named: Iterable[str] = ()) -> list[str]:
    """The MIRROR_* variables that set no setting (pydantic-settings would ignore a misspelt one), each with
    the nearest valid name, and those whose JSON value is nested deeper than MAX_CONFIG_DEPTH. Variables in
    NOT_SETTINGS, Kubernetes service links and the variables the config names (`named`) are left alone."""
    allowed = set(NOT_SETTINGS) | set(named)
    problems = []
    for name in sorted(environ):
        if not name.upper().startswith(ENV_PREFIX) or name in allowed or _SERVICE_LINK.fullmatch(name):
            continue
        problem = _variable_problem(name, environ[name])
        if problem:
            problems.append(f"{name}: {problem}")
    return problems


def _variable_problem(name: str, value: str) -> str | None:
    """Why the variable `name` sets nothing, read as pydantic-settings reads it (case-insensitively, `__`
    between nested keys), or None when it names a setting."""
    parts = name[len(ENV_PREFIX) :].split("__")
    if len(parts) > MAX_CONFIG_DEPTH:
        return f"nested deeper than {MAX_CONFIG_DEPTH} keys"
    node: Any = MirrorSettings
    for index, part in enumerate(parts):
        model, mapping = _model_of(node), _mapping_value(node)
        if model is not None:
            field = model.model_fields.get(part.lower())
            if field is None:
                return "not a setting" + _nearest(name, parts[:index], model)
            node = field.annotation
        elif mapping is Any:
            return _below_free_form(parts, index)
        elif mapping is not None:
            node = mapping  # `part` is a key of the mapping: a registry host
        else:
            whole = ENV_PREFIX + "__".join(parts[:index])
            return f"not a setting: {whole} is set whole (JSON for a list or a mapping), not part by part"
    if _structured(node) and _json_depth(value) > MAX_CONFIG_DEPTH:
        return f"its JSON value is nested deeper than {MAX_CONFIG_DEPTH} levels"
    return None


def _below_free_form(parts: list[str], index: int) -> str:
    """Why a variable may not point below free-form Helm values (values.extra): pydantic-settings reads variable
    names without case, so `devicePlugin` would reach Helm as `deviceplugin`, a key the chart never reads."""
    whole = ENV_PREFIX + "__".join(parts[:index]).upper()
    leaf: Any = "<value>"  # never the value itself: a Helm value may be a password (grafana.adminPassword)
    for key in reversed(parts[index:]):
        leaf = {key: leaf}
    example = json.dumps(leaf, separators=(",", ":"))
    said = f"a variable's name loses the case of the Helm keys below {whole}: set it whole, as JSON: "
    said += f"{whole}='{example}'"
    if any(key.isupper() for key in parts[index:]):  # written as variable names are, not as the chart spells them
        said += " (each key as the chart spells it: devicePlugin, not DEVICEPLUGIN)"
    return said


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for member in union_members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def _mapping_value(annotation: Any) -> Any:
    """X for a dict[str, X] field, else None."""
    for member in union_members(annotation):
        if typing.get_origin(member) is dict:
            return typing.get_args(member)[1]
    return None


def _structured(annotation: Any) -> bool:
    """Whether pydantic-settings reads the variable's value as JSON: a model, a list, a mapping, free-form."""
    return annotation is Any or any(
        typing.get_origin(m) in (list, dict) or _model_of(m) is not None for m in union_members(annotation)
    )


def _setting_paths(model: type[BaseModel]) -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []
    for name, field in model.model_fields.items():
        paths.append((name,))
        inner = _model_of(field.annotation)
        if inner is not None:
            paths += [(name, *rest) for rest in _setting_paths(inner)]
    return paths


def _nearest(name: str, prefix: list[str], model: type[BaseModel]) -> str:
    """`; did you mean MIRROR_...?` with the closest setting below the part of `name` that was found, or ""; at
    the top, the variables the CLI reads (NOT_SETTINGS) are candidates too, with what each is for."""
    lead = ENV_PREFIX + "".join(f"{part}__" for part in prefix)
    tails = {"__".join(path).upper() for path in _setting_paths(model)}
    if not prefix:
        tails |= {other.removeprefix(ENV_PREFIX) for other in NOT_SETTINGS}
    found = difflib.get_close_matches(name[len(lead) :].upper(), tails, n=1)  # the shared lead would match anything
    if found and lead + found[0] in NOT_SETTINGS:
        return f"; did you mean {lead}{found[0]} ({NOT_SETTINGS[lead + found[0]]})?"
    if found:
        return f"; did you mean {lead}{found[0]}?"
    return " (a setting's variable is MIRROR_ and its key path joined with __, e.g. MIRROR_TRANSFER__READ_TIMEOUT)"


def misspelt_cli_variables(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The MIRROR_* variables set that are not settings but are spelt nearly like one the CLI reads (MIRROR_CONIFG
    for MIRROR_CONFIG), each with the one it is nearest: (set, meant)."""
    settings = {"__".join(path).upper() for path in _setting_paths(MirrorSettings)}
    readers = {name.removeprefix(ENV_PREFIX): name for name in NOT_SETTINGS}
    found = []
    for name in sorted(environ):
        tail = name.upper().removeprefix(ENV_PREFIX)
        if not name.upper().startswith(ENV_PREFIX) or name in NOT_SETTINGS or tail in settings or "__" in tail:
            continue
        if _SERVICE_LINK.fullmatch(name):
            continue
        nearest = difflib.get_close_matches(tail, settings | set(readers), n=1)
        if nearest and nearest[0] in readers:
            found.append((name, readers[nearest[0]]))
    return found


def _json_depth(text: str) -> int:
    """How deep brackets nest in `text`, outside JSON strings: checked before json.loads, which would recurse."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def variable_for(loc: tuple[int | str, ...], environ: Mapping[str, str]) -> str | None:
    """The MIRROR_* variable that set the value at `loc`, if one did (the longest matching prefix)."""
    names = {name.upper(): name for name in environ if name.upper().startswith(ENV_PREFIX)}
    for length in range(len(loc), 0, -1):
        wanted = ENV_PREFIX + "__".join(str(part) for part in loc[:length]).upper()
        if wanted in names:
            return names[wanted]
    return None


def blame_variable(message: str, environ: Mapping[str, str]) -> str | None:
    """The variable whose JSON the settings could not read, from pydantic-settings' message, which names only
    the top-level field: `MIRROR_VALUES`, or one of the `MIRROR_VALUES__...` below it (those meant as JSON
    first: a value that opens with `{` or `[`)."""
    match = re.search(r'error parsing value for field "(\w+)" from source "EnvSettingsSource"', message)
    if match is None:
        return None
    field = match[1]
    variable = variable_for((field,), environ)
    if variable is not None:
        return f"{variable}: not valid JSON for {field}"
    below = sorted(name for name in environ if name.upper().startswith(f"{ENV_PREFIX}{field.upper()}__"))
    meant = [name for name in below if environ[name].lstrip()[:1] in ("{", "[") and not _is_json(environ[name])]
    named = meant or below
    return f"{' or '.join(named)}: not valid JSON for a part of {field}" if named else None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


# Where the config file's text is at hand: what was written at a key path (a scalar as typed), else None
Written = Callable[[tuple[int | str, ...]], str | None]


def format_validation_error(
    exc: ValidationError, environ: Mapping[str, str] | None = None, written: Written | None = None
) -> str:
    """One line per error, naming the key (and the variable that set it), in plain words rather than pydantic's."""
    lines = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        key = ".".join(str(part) for part in loc)
        variable = variable_for(loc, environ) if environ is not None else None
        where = f"{key} (set by the environment variable {variable})" if variable else key
        said = _plain_words(error, None if variable or written is None else written(loc))
        lines.append("  " + clip(f"{where}: {said}" if where else said, MAX_LINE))  # at the top, it names its key
    return "\n".join(lines)


def _plain_words(error: ErrorDetails, written: str | None) -> str:
    """pydantic's message for `error` said as a config's reader would say it, without pydantic's own words (its
    "Value error, " prefix, model class names, "Extra inputs")."""
    kind, loc, given = error["type"], tuple(error["loc"]), error.get("input")
    if kind in ("value_error", "assertion_error"):
        return str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind == "extra_forbidden":
        return "unknown key" + _nearest_key(loc)
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping{_mapping_example(loc)}, got {_kind_of(given)}"
    if kind == "list_type":
        return f"expected a list, got {_kind_of(given)}"
    if kind == "string_type" and isinstance(given, int | float):
        return _quote_it(given, written, secret=_is_secret(loc))
    return str(error["msg"])


def _quote_it(given: float, written: str | None, secret: bool) -> str:
    """`1.32 is read as a number: quote it ("1.32")` for a string field YAML read as a number or true/false: as
    written in the file where it is at hand (YAML reads 1.30 as 1.3 and 0755 as 493), never a secret's value."""
    read = "true/false" if isinstance(given, bool) else "a number"
    if secret:
        return f"the value is read as {read}: quote it"
    if written is None and isinstance(given, bool):
        written = "true" if given else "false"
    elif written is None:
        try:
            written = repr(given)
        except ValueError:  # an int of more digits than Python turns into text
            return f"the value is read as {read}: quote it"
    text = clip(written, SHOWN_VALUE)
    return f'{text} is read as {read}: quote it ("{text}")'


def _kind_of(value: object) -> str:
    """What a value given where another kind was expected is, in YAML's words (never the value: it may be a secret)."""
    kinds = {bool: "true/false", str: "a string", int: "a number", float: "a number", list: "a list", dict: "a mapping"}
    if value is None:
        return "nothing (an empty value)"
    return kinds.get(type(value), f"a {type(value).__name__}")


def _mapping_example(loc: tuple[int | str, ...]) -> str:
    """` (registry: ...)`: the keys a mapping expected at `loc` needs (or its first), where a settings model is."""
    model = _model_at(loc)
    if model is None or not model.model_fields:
        return ""
    needed = [name for name, field in model.model_fields.items() if field.is_required()]
    return " (" + ", ".join(f"{name}: ..." for name in (needed or list(model.model_fields)[:1])[:3]) + ")"


def _is_secret(loc: tuple[int | str, ...]) -> bool:
    """Whether the field at `loc` holds a secret (a SecretStr): its value stays out of every message."""
    model = _model_at(loc[:-1]) if loc else None
    field = model.model_fields.get(str(loc[-1])) if model is not None else None
    return field is None or SecretStr in union_members(field.annotation)


def _nearest_key(loc: tuple[int | str, ...]) -> str:
    """`; did you mean output_dir?` for a key the settings lack at `loc`, spelt like one they have there."""
    model = _model_at(loc[:-1])
    if model is None or not isinstance(loc[-1], str):
        return ""
    found = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1)
    return f"; did you mean {found[0]}?" if found else ""


def _model_at(path: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The settings model a key path leads to, through list items and mapping values; None off the models."""
    annotation: Any = MirrorSettings
    for part in path:
        model = _model_of(annotation)
        if model is not None:
            field = model.model_fields.get(str(part))
            if field is None:
                return None
            annotation = field.annotation
            continue
        annotation = _item(annotation)
        if annotation is None:
            return None
    return _model_of(annotation)


def _item(annotation: Any) -> Any:
    """X for a list[X] or a dict[str, X], else None."""
    for member in union_members(annotation):
        if typing.get_origin(member) in (list, tuple) and typing.get_args(member):
            return typing.get_args(member)[0]
    return _mapping_value(annotation)
