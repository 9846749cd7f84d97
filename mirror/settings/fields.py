"""What one value of the config must be: the checks the sections share (names, hosts, platforms, Kubernetes
names, free-form Helm values), strict scalars, and `Section`, the base of every section."""

# No `from __future__ import annotations` in a module of models: pydantic would compile each field's annotation
# from its string at import, a tenth of the config's import time.
import datetime
import math
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator

from mirror import reference
from mirror.errors import Kind, MirrorError
from mirror.untrusted import clip

# Every pattern here is used whole (fullmatch): `$` would also match before a final newline, which a YAML block
# scalar (`namespace: |`) or a variable read from a file ends with.
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CHART_REPOSITORY = re.compile(r"(https?|oci)://[^/\s]+(/\S*)?")
# Kubernetes names a rendered install uses, checked as Helm and the API server check them.
HELM_RELEASE_MAX = 53
KUBE_LABEL_MAX = 63
KUBE_SUBDOMAIN_MAX = 253
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

# Bounds on the config itself: a hostile or broken file is refused in one line, never a traceback or a hang.
MAX_CONFIG_DEPTH = 64  # nested mappings and lists: in the file, in a MIRROR_* JSON value, in values.extra
MAX_CONFIG_NODES = 100_000  # values in the file with every alias expanded: an alias bomb is refused unbuilt
MAX_LINE = 400  # characters of one error line: a long value in it is cut in the middle
SHOWN_VALUE = 80  # characters of a refused value an error message quotes


def shown(value: object) -> str:
    """A value in an error message: quoted, control characters escaped, the middle of a long one cut out."""
    return clip(repr(value), SHOWN_VALUE)


# Architecture names of `uname -m` and Debian that OCI indexes never use: a filter naming one matches nothing
_NOT_OCI_ARCHITECTURES = {
    "x86_64": "amd64",
    "x86-64": "amd64",
    "aarch64": "arm64",
    "armhf": "arm/v7",
    "armel": "arm/v6",
    "i386": "386",
    "i686": "386",
}


def _platform(value: str) -> str:
    parts = value.split("/")
    if len(parts) >= 2 and (oci := _NOT_OCI_ARCHITECTURES.get(parts[1].lower())):
        raise ValueError(f"{shown(value)}: OCI indexes name that architecture {oci}: {parts[0]}/{oci}")
    if len(parts) == 3 and parts[2].isdigit():
        raise ValueError(f"{shown(value)}: a variant is written v{parts[2]}: {parts[0]}/{parts[1]}/v{parts[2]}")
    if not 2 <= len(parts) <= 3 or not all(p and p.replace("_", "").isalnum() for p in parts):
        raise ValueError(f"{shown(value)} is not a platform like linux/amd64 or linux/arm64/v8")
    return value


def _plain_file_name(value: str) -> str:
    if "/" in value or value in {"", ".", ".."} or not value.isprintable():
        raise ValueError(f"{shown(value)} must be a plain file name (no '/', no line breaks or control characters)")
    return value


def _chart_repository(value: str) -> str:
    public = reference.without_userinfo(value)  # credentials in the URL stay out of every message
    named = shown(public)
    if not _CHART_REPOSITORY.fullmatch(value):
        raise ValueError(f"{named}: expected https://host/path (a Helm repository) or oci://host/path")
    if "@" in value and "@" not in urlsplit(value).netloc:
        raise ValueError(
            f"{named}: an '@' after the host part (a login whose password holds '/', '?' or '#', which end the "
            "host part?): percent-encode them in a login (%2F, %3F, %23), and an '@' in a path (%40)"
        )
    if value.startswith("oci://") and public != value:
        raise ValueError(
            f"{named}: an oci:// chart is read with its registry's login: give the credentials under registries: "
            "<host> (password_env or password_file), not in the URL"
        )
    return value.rstrip("/")


def is_label(value: str, limit: int) -> bool:
    """A DNS-1123 label of at most `limit` characters, as Helm names releases and Kubernetes namespaces."""
    return len(value) <= limit and _DNS_LABEL.fullmatch(value) is not None


def _label_of(what: str, limit: int) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not is_label(value, limit):
            raise ValueError(
                f"{shown(value)} is not a {what}: lower-case letters, digits and '-', starting and ending with a "
                f"letter or digit, at most {limit} characters"
            )
        return value

    return check


def _kube_object_name(value: str) -> str:
    if len(value) > KUBE_SUBDOMAIN_MAX or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(
            f"{shown(value)} is not a Kubernetes object name: lower-case letters, digits, '-' and '.', starting and "
            "ending with a letter or digit"
        )
    return value


def not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty")
    return value


def matching(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{shown(value)} is not {what}")
        return value

    return check


_PLAIN_SCALARS = (str, int, float, bool, type(None), datetime.date)  # what a Helm values file holds


def _plain_data(value: dict[str, Any]) -> dict[str, Any]:
    """Free-form Helm values (values.extra, charts[].values): strings, finite numbers, booleans, null, dates,
    lists and string-keyed mappings, at most MAX_CONFIG_DEPTH deep and MAX_CONFIG_NODES in all (YAML aliases
    counted each time they are used): they are written to a values file and read by Helm."""
    pending: list[tuple[object, int]] = [(value, 1)]
    seen = 0
    while pending:
        item, depth = pending.pop()
        seen += 1
        if seen > MAX_CONFIG_NODES:
            raise ValueError(f"more than {MAX_CONFIG_NODES} values")
        if depth > MAX_CONFIG_DEPTH:
            raise ValueError(f"nested deeper than {MAX_CONFIG_DEPTH} levels")
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise ValueError(f"key {clip(repr(key), 60)} is not a string")
                pending.append((child, depth + 1))
        elif isinstance(item, list):
            pending.extend((child, depth + 1) for child in item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{item} is not a finite number")
        elif not isinstance(item, _PLAIN_SCALARS):
            raise ValueError(
                f"{type(item).__name__} value {clip(repr(item), 60)}: expected a string, number, boolean, null, "
                "list or mapping"
            )
    return value


# Values checked the same way wherever they appear
FileName = Annotated[str, AfterValidator(_plain_file_name)]
Host = Annotated[str, AfterValidator(reference.validate_host)]
PlainName = Annotated[str, AfterValidator(matching(_NAME, "a plain name: lower-case letters, digits, '.', '_' or '-'"))]
RepositoryComponent = Annotated[str, AfterValidator(matching(_NAME, "one repository component (lower-case, no '/')"))]
ChartName = Annotated[str, AfterValidator(matching(_NAME, "a chart name"))]
EnvName = Annotated[str, AfterValidator(matching(_ENV_NAME, "an environment variable name (letters, digits and '_')"))]
KubeObjectName = Annotated[str, AfterValidator(_kube_object_name)]
Platform = Annotated[str, AfterValidator(_platform)]
NotBlank = Annotated[str, AfterValidator(not_blank)]
HelmRelease = Annotated[str, AfterValidator(_label_of("Helm release name", HELM_RELEASE_MAX))]
KubeNamespace = Annotated[str, AfterValidator(_label_of("Kubernetes namespace", KUBE_LABEL_MAX))]
ChartRepository = Annotated[str, AfterValidator(_chart_repository)]
PlainData = Annotated[dict[str, Any], AfterValidator(_plain_data)]


def union_members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return (annotation,)


def strict_scalar(value: object, annotation: Any) -> object:
    """YAML's `true` is not a count, `1` is not a yes, and an empty path is not the current directory, though
    lax pydantic takes each of them. Strings (what MIRROR_* variables hold) are still parsed by pydantic."""
    kinds = set(union_members(annotation))
    if isinstance(value, bool) and kinds & {int, float}:
        raise ValueError("expected a number, not true/false")
    if bool in kinds and isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError("expected true or false, not a number")
    if Path in kinds and isinstance(value, str) and not value.strip():
        raise ValueError("an empty path (it would mean the current directory)")
    return value


class ConfigError(MirrorError):
    """The configuration is unusable; the message names each offending key."""

    kind = Kind.USAGE


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_scalars(cls, value: object, info: ValidationInfo) -> object:
        return strict_scalar(value, cls.model_fields[info.field_name].annotation) if info.field_name else value


def one_source(kind: str, **sources: object) -> None:
    given = [name for name, value in sources.items() if value is not None]
    if len(given) > 1:
        raise ValueError(f"{kind}: give one of {', '.join(given)}, not several")
