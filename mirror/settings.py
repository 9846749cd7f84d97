"""Configuration: one YAML file (default config/mirror.yaml), overridden by MIRROR_* environment variables."""

# No `from __future__ import annotations` here: pydantic would compile each field's annotation from its string
# at import, a tenth of this module's import time.
import datetime
import difflib
import fnmatch
import importlib.util
import json
import math
import os
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from yaml.composer import ComposerError
from yaml.error import Mark
from yaml.nodes import Node

from mirror import acr, reference
from mirror.errors import Kind, MirrorError
from mirror.release import VersionError, normalise_version, parse_filter
from mirror.untrusted import clip

DEFAULT_CONFIG_PATH = Path("config/mirror.yaml")
VERSION_PLACEHOLDER = "{version}"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_VALUES_KEY_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")  # subcharts' keys have dashes: dcgm-exporter.image
_CHART_VERSION = re.compile(r"^\d{1,9}\.\d{1,9}\.\d{1,9}([-+][0-9A-Za-z.+-]{1,64})?$")  # as an index lists it
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENV_PREFIX = "MIRROR_"
MIN_SECRET_BYTES = 16  # an HMAC key or bearer token shorter than this is guessable, an empty one signs anything
CRON_FIELDS = ("minute", "hour", "day", "month", "day_of_week")
ACR_REGISTRIES = ("*.aliyuncs.com",)  # registries nodes in mainland China pull from as they are

# Bounds on the config itself: a hostile or broken file is refused in one line, never a traceback or a hang.
MAX_CONFIG_BYTES = 1024 * 1024  # a config file is a few KiB
MAX_CONFIG_DEPTH = 64  # nested mappings and lists: in the file, in a MIRROR_* JSON value, in values.extra
MAX_CONFIG_NODES = 100_000  # values in the file with every alias expanded: an alias bomb is refused unbuilt
MAX_SECRET_FILE_BYTES = 64 * 1024  # a password, key or token file
MAX_DOCUMENT_FILE_BYTES = 4 * 1024 * 1024  # docker_config, signatures.trusted_root
MAX_SCHEDULE_LENGTH = 256
MAX_LINE = 400  # characters of one error line: a long value in it is cut in the middle
SHOWN_VALUE = 80  # characters of a refused value an error message quotes

# Kubernetes names a rendered install uses, checked as Helm and the API server check them.
HELM_RELEASE_MAX = 53
KUBE_LABEL_MAX = 63
KUBE_SUBDOMAIN_MAX = 253
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$")  # the OCI distribution spec's
# ACR's own namespace rules: Personal Edition 2-30 of [a-z0-9_-]; Enterprise 2-120 of [a-z0-9._-]; both
# start and end with a letter or a digit
_ACR_PERSONAL_NAMESPACE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,28}[a-z0-9]$")
_ACR_ENTERPRISE_NAMESPACE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,118}[a-z0-9]$")

# MIRROR_* variables that are not settings, and where each is read. Any other MIRROR_* variable must name a
# setting: pydantic-settings would ignore a misspelt one, so it is refused at load instead.
NOT_SETTINGS = {
    "MIRROR_CONFIG": "the config file's path when --config is not given (load_settings, below)",
}
# Kubernetes gives every pod <SERVICE>_SERVICE_HOST, <SERVICE>_PORT_80_TCP_ADDR... for each Service in its
# namespace (enableServiceLinks): deploy/base/service.yaml's `mirror` yields MIRROR_SERVICE_HOST, MIRROR_PORT...
_SERVICE_LINK = re.compile(
    r"^MIRROR(_[A-Z0-9]+)*?_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9]+)*|PORT(_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$"
)


def _shown(value: object) -> str:
    """A value in an error message: quoted, control characters escaped, the middle of a long one cut out."""
    return clip(repr(value), SHOWN_VALUE)


def _platform(value: str) -> str:
    parts = value.split("/")
    if not 2 <= len(parts) <= 3 or not all(p and p.replace("_", "").isalnum() for p in parts):
        raise ValueError(f"{_shown(value)} is not a platform like linux/amd64 or linux/arm64/v8")
    return value


def _plain_file_name(value: str) -> str:
    if "/" in value or value in {"", ".", ".."}:
        raise ValueError("must be a plain file name")
    return value


def _chart_repository(value: str) -> str:
    if not re.match(r"^(https?|oci)://[^/\s]+", value):
        raise ValueError(f"{_shown(value)}: expected https://host/path (a Helm repository) or oci://host/path")
    return value.rstrip("/")


def _is_label(value: str, limit: int) -> bool:
    """A DNS-1123 label of at most `limit` characters, as Helm names releases and Kubernetes namespaces."""
    return len(value) <= limit and _DNS_LABEL.match(value) is not None


def _label_of(what: str, limit: int) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not _is_label(value, limit):
            raise ValueError(
                f"{_shown(value)} is not a {what}: lower-case letters, digits and '-', starting and ending with a "
                f"letter or digit, at most {limit} characters"
            )
        return value

    return check


def _kube_object_name(value: str) -> str:
    if len(value) > KUBE_SUBDOMAIN_MAX or not _DNS_SUBDOMAIN.match(value):
        raise ValueError(
            f"{_shown(value)} is not a Kubernetes object name: lower-case letters, digits, '-' and '.', starting and "
            "ending with a letter or digit"
        )
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty")
    return value


def _matching(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(f"{_shown(value)} is not {what}")
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
PlainName = Annotated[
    str, AfterValidator(_matching(_NAME, "a plain name: lower-case letters, digits, '.', '_' or '-'"))
]
RepositoryComponent = Annotated[str, AfterValidator(_matching(_NAME, "one repository component (lower-case, no '/')"))]
ChartName = Annotated[str, AfterValidator(_matching(_NAME, "a chart name"))]
EnvName = Annotated[str, AfterValidator(_matching(_ENV_NAME, "an environment variable name (letters, digits and '_')"))]
KubeObjectName = Annotated[str, AfterValidator(_kube_object_name)]
Platform = Annotated[str, AfterValidator(_platform)]
NotBlank = Annotated[str, AfterValidator(_not_blank)]
HelmRelease = Annotated[str, AfterValidator(_label_of("Helm release name", HELM_RELEASE_MAX))]
KubeNamespace = Annotated[str, AfterValidator(_label_of("Kubernetes namespace", KUBE_LABEL_MAX))]
ChartRepository = Annotated[str, AfterValidator(_chart_repository)]
PlainData = Annotated[dict[str, Any], AfterValidator(_plain_data)]


def _union_members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return (annotation,)


def _strict_scalar(value: object, annotation: Any) -> object:
    """YAML's `true` is not a count, `1` is not a yes, and an empty path is not the current directory, though
    lax pydantic takes each of them. Strings (what MIRROR_* variables hold) are still parsed by pydantic."""
    kinds = set(_union_members(annotation))
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


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_scalars(cls, value: object, info: ValidationInfo) -> object:
        return _strict_scalar(value, cls.model_fields[info.field_name].annotation) if info.field_name else value


def _one_source(kind: str, **sources: object) -> None:
    given = [name for name, value in sources.items() if value is not None]
    if len(given) > 1:
        raise ValueError(f"{kind}: give one of {', '.join(given)}, not several")


ALIYUN_CREDENTIALS = ("default", "oidc_role_arn", "access_key", "ecs_ram_role")
InstanceId = Annotated[
    str, AfterValidator(_matching(re.compile(r"^cri-[a-z0-9]+$"), "an ACR Enterprise instance id (cri-...)"))
]
RegionId = Annotated[
    str, AfterValidator(_matching(re.compile(r"^[a-z]{2}-[a-z0-9-]+$"), "a region id like cn-hangzhou"))
]


class AliyunLoginSettings(_Model):
    """A temporary ACR login from a RAM identity (ACR's GetAuthorizationToken) instead of a stored password:
    RRSA on ACK, an AccessKey pair in CI, an ECS instance's RAM role."""

    # default: the official alibabacloud-credentials chain (AccessKey variables, RRSA's variables, the CLI's
    # profile, then the ECS RAM role); or one of them alone
    credentials: Literal["default", "oidc_role_arn", "access_key", "ecs_ram_role"] = "default"
    instance_id: InstanceId | None = None  # Enterprise's cri-...; default: named by the registry's token challenge
    region: RegionId | None = None  # default: from the registry host
    endpoint: Host | None = None  # the ACR OpenAPI host; default: cr.<region>.aliyuncs.com
    provision: bool = False  # create a namespace the run needs (Enterprise), instead of explaining how
    timeout: float = Field(default=30.0, gt=0, le=600)  # each OpenAPI and STS call

    @model_validator(mode="after")
    def _sdk_installed(self) -> Self:
        if importlib.util.find_spec("alibabacloud_cr20181201") is None:
            raise ValueError("needs the Alibaba Cloud SDKs: pip install 'mirror[aliyun]'")
        return self


class RegistrySettings(_Model):
    """Transport settings for one registry host[:port]."""

    plain_http: bool = False
    username: NotBlank | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    password_env: EnvName | None = None  # the name of an environment variable that holds the password
    # HTTP/1.1 asks one thing per connection at a time: a no-op verifies two three-platform images (30 HEADs)
    # in one round trip with 32, in two with 16 (across the border: 0.66 s to 0.54 s, cold and fan-out no slower)
    max_connections: int = Field(default=32, ge=1, le=256)
    # HTTP/2 over TLS: every request to the host multiplexed on one connection (no handshake per connection
    # opened); a host that does not offer h2 is spoken to in HTTP/1.1 as before
    http2: bool = False

    @field_validator("password")
    @classmethod
    def _password(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            _not_blank(value.get_secret_value())
        return value

    aliyun: AliyunLoginSettings | None = None  # an ACR host: log in with a RAM identity, no stored password

    @model_validator(mode="after")
    def _one_password(self) -> Self:
        _one_source("password", password=self.password, file=self.password_file, env=self.password_env)
        if self.aliyun is not None and (self.username or self.password or self.password_file or self.password_env):
            raise ValueError("aliyun: logs in with a RAM identity; give no username or password with it")
        return self

    def password_value(self) -> str | None:
        if self.password is not None:
            return self.password.get_secret_value()
        if self.password_env is not None:
            return os.environ.get(self.password_env)
        if self.password_file is not None:
            return self.password_file.read_text(encoding="utf-8").rstrip("\r\n")
        return None


class SourceSettings(_Model):
    registry: Host = "docker.io"


class TargetSettings(_Model):
    name: PlainName
    registry: Host
    namespace: str
    vpc_registry: Host | None = None
    # attestation and other non-image entries of an index: copy them (keep), leave them out (drop), or
    # copy them and leave out only those the target refuses for their manifest class (auto)
    attestations: Literal["keep", "drop", "auto"] = "auto"
    platforms: list[Platform] | None = None  # e.g. [linux/amd64]: write a filtered index
    referrers: bool = True  # carry signatures, attestations and SBOMs that refer to each copied image
    pull_secret: KubeObjectName | None = None  # always put this global.imagePullSecrets entry in the values
    pull_secret_name: KubeObjectName = "acr-pull"  # noqa: S105 - a Secret object name, used when anonymous pulls fail

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if len(value) > 255 or not all(_PATH_COMPONENT.match(part) for part in value.split("/")):
            raise ValueError(
                f"{_shown(value)}: expected lower-case path components of letters and digits, with '.', '_' or '-' "
                "only between them"
            )
        return value

    @model_validator(mode="after")
    def _edition_rules(self) -> Self:
        personal = acr.is_personal(self.registry)
        if "/" in self.namespace and personal:
            raise ValueError(
                f"namespace {_shown(self.namespace)}: ACR personal edition ({self.registry}) takes exactly "
                "<namespace>/<repository>, no deeper paths"
            )
        first = self.namespace.split("/")[0]  # Enterprise: the namespace; the rest is the repository's path
        if personal and not _ACR_PERSONAL_NAMESPACE.match(first):
            raise ValueError(
                f"namespace {_shown(first)}: an ACR personal edition namespace is 2-30 lower-case letters, digits, '_' "
                "or '-', starting and ending with a letter or digit"
            )
        if acr.edition_of(self.registry) == acr.ENTERPRISE and not _ACR_ENTERPRISE_NAMESPACE.match(first):
            raise ValueError(
                f"namespace {_shown(first)}: an ACR Enterprise namespace is 2-120 lower-case letters, digits, '.', '_' "
                "or '-', starting and ending with a letter or digit"
            )
        return self


class ImageSettings(_Model):
    name: RepositoryComponent  # the repository under each target's namespace
    source: str
    registry: Host | None = None  # where `source` lives; default: source.registry
    tag: str = VERSION_PLACEHOLDER
    # the Helm values keys that point at this image; default: the chart's blocks for the same repository,
    # or HAMi's own keys for its images
    values_keys: list[str] = []
    platforms: list[Platform] | None = None  # overrides the target's platform filter for this image

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        return reference.validate_repository(value)

    @field_validator("tag")
    @classmethod
    def _tag(cls, value: str) -> str:
        if not reference.is_valid_tag(value.replace(VERSION_PLACEHOLDER, "v0.0.0")):
            raise ValueError(f"{_shown(value)} is not a valid tag (the only placeholder is {VERSION_PLACEHOLDER})")
        return value

    @field_validator("values_keys")
    @classmethod
    def _keys(cls, value: list[str]) -> list[str]:
        for key in value:
            if not all(_VALUES_KEY_PART.match(part) for part in key.split(".")):
                raise ValueError(f"{_shown(key)} is not a dotted Helm values key")
        return value

    @property
    def follows_release(self) -> bool:
        return VERSION_PLACEHOLDER in self.tag

    def tag_for(self, version: str) -> str:
        return self.tag.replace(VERSION_PLACEHOLDER, normalise_version(version))


class ValuesSettings(_Model):
    """The Helm values file written for each verified target."""

    file_name: FileName = "hami-ack-values.yaml"
    extra: PlainData = Field(default_factory=lambda: {"devicePlugin": {"nvidiaDriverRoot": "/"}})
    release: HelmRelease = "hami"
    chart: str = "hami-charts/hami"  # the chart in the printed `helm install` line when no `chart:` is set
    kube_namespace: KubeNamespace = "kube-system"
    # an image of the release that the values would leave on the source registry: refuse to write the
    # file (error), or write it with a warning naming each key (warn)
    unmirrored: Literal["error", "warn"] = "error"


class TransferSettings(_Model):
    # blob transfers at once to each target registry (each region has a link of its own), and across the whole
    # run (each transfer holds a few MB of buffers)
    blob_concurrency: int = Field(default=6, ge=1, le=64)
    run_blob_concurrency: int = Field(default=8, ge=1, le=256)
    manifest_concurrency: int = Field(default=8, ge=1, le=64)
    chunk_size: int = Field(default=1024 * 1024, ge=64 * 1024, le=64 * 1024 * 1024)  # read buffer
    chunked_upload_threshold: int = Field(default=64 * 1024 * 1024, ge=64 * 1024)  # larger blobs go in PATCHes
    upload_chunk_size: int = Field(default=16 * 1024 * 1024, ge=64 * 1024, le=1024 * 1024 * 1024)
    connect_timeout: float = Field(default=10.0, gt=0, le=600)
    read_timeout: float = Field(default=120.0, gt=0, le=3600)  # the longest wait for the next bytes
    # the whole of one request, its retries and its body included (a manifest, a token, a chart index): a peer
    # that trickles a byte per read timeout cannot hold a run longer; a blob gets this plus its size at min_rate
    deadline: float = Field(default=300.0, gt=0, le=86400)
    min_rate: int = Field(default=64 * 1024, ge=1024)  # bytes per second a blob read may average, at the least
    max_blob_size: int = Field(default=50 * 1024**3, ge=1024)  # a descriptor claiming more is refused unread

    @model_validator(mode="after")
    def _run_takes_a_registry(self) -> Self:
        if self.run_blob_concurrency < self.blob_concurrency:
            raise ValueError(
                f"run_blob_concurrency ({self.run_blob_concurrency}) must be at least blob_concurrency "
                f"({self.blob_concurrency}): the run's bound takes in every target's"
            )
        return self


class ChartSettings(_Model):
    """The release's Helm chart: where it is published, and how it decides what to mirror."""

    repository: ChartRepository = "https://project-hami.github.io/HAMi"  # a classic Helm repository, or oci://host/path
    name: ChartName = "hami"
    release_repository: str = "projecthami/hami"  # the image whose tags are release versions (webhooks)
    kube_version: str = "1.32.0"  # the cluster's Kubernetes version: rendering, and kube-scheduler's tag
    mirror_acr_images: bool = False  # also mirror images the chart already takes from ACR (kube-scheduler)
    allowed_registries: list[str] = Field(default_factory=lambda: list(ACR_REGISTRIES))  # nodes pull as they are
    publish: bool = True  # push the chart to each target as an OCI chart (else, or where refused: the .tgz)
    renderer: Literal["auto", "sdk", "binary", "values"] = "auto"
    max_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, le=512 * 1024 * 1024)
    # images of subcharts switched off by default: mirror them too (all), so turning one on later needs no
    # second trip, or only those of subcharts that are on (enabled)
    subcharts: Literal["all", "enabled"] = "all"
    max_images: int = Field(default=200, ge=1, le=5000)  # image blocks one chart (with its subcharts) may bring

    @field_validator("kube_version")
    @classmethod
    def _kube_version(cls, value: str) -> str:
        if not re.match(r"^v?\d{1,9}\.\d{1,9}\.\d{1,9}$", value):
            raise ValueError(f"{_shown(value)}: expected a Kubernetes version like 1.32.0")
        return value.removeprefix("v")


NEWEST = "newest"


class InstallChartSettings(_Model):
    """Another chart installed with the release (HAMi-WebUI): relocated with it, with its own values file,
    render proof, published chart and `helm install` line. Rendering and publishing follow `chart:`."""

    repository: ChartRepository  # a classic Helm repository, or oci://host/path
    name: PlainName
    version: str = NEWEST  # a version (pinned), or newest: the repository's newest release, looked up each run
    release: HelmRelease | None = None  # the Helm release name; default: the chart's name
    namespace: KubeNamespace | None = None  # the Kubernetes namespace; default: values.kube_namespace
    file_name: FileName | None = None  # default: <name>-values.yaml
    values: PlainData = {}  # merged into the values written
    subcharts: Literal["all", "enabled"] = "all"

    @model_validator(mode="after")
    def _release_from_name(self) -> Self:
        if self.release is None and not _is_label(self.name, HELM_RELEASE_MAX):
            raise ValueError(
                f"release: defaults to the chart's name {_shown(self.name)}, which is not a Helm release name; "
                "set release:"
            )
        return self

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if value != NEWEST and not _CHART_VERSION.match(value):
            raise ValueError(f"{_shown(value)}: expected a chart version like 1.3.0, or {NEWEST}")
        return value

    @property
    def values_file(self) -> str:
        return self.file_name or f"{self.name}-values.yaml"


class DiscoverySettings(_Model):
    """Which source releases `mirror sync --discover` and `mirror serve` mirror."""

    versions: str = ">=2.7.0"  # comma-separated clauses: >=, <=, >, <, ==, !=
    newest: int = Field(default=3, ge=0)  # keep the newest N of those (0: all)
    prereleases: bool = False
    # where releases are found: the chart repository's published versions (a release exists when its chart
    # does), the tags of the version-bearing images, or auto (the chart when one is configured)
    source: Literal["auto", "chart", "tags"] = "auto"

    @field_validator("versions")
    @classmethod
    def _filter(cls, value: str) -> str:
        try:
            parse_filter(value)
        except VersionError as exc:
            raise ValueError(str(exc)) from None
        return value


class SignatureRule(_Model):
    """Images that must be signed, and by whom: checked at the source, before anything is copied."""

    repositories: list[str] = Field(min_length=1)  # source repositories, globs allowed: projecthami/*
    identity: str | None = None  # the certificate's identity, exactly (cosign --certificate-identity)
    identity_regexp: str | None = None  # or a pattern searched in it (--certificate-identity-regexp)
    issuer: str | None = None  # the OIDC issuer, exactly (--certificate-oidc-issuer)
    issuer_regexp: str | None = None

    @field_validator("identity_regexp", "issuer_regexp")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"{_shown(value)} is not a regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_of_each(self) -> Self:
        for name in ("identity", "issuer"):
            exact, pattern = getattr(self, name), getattr(self, f"{name}_regexp")
            if (exact is None) == (pattern is None):
                raise ValueError(f"give exactly one of {name} and {name}_regexp")
        return self

    def applies_to(self, registry: str, repository: str) -> bool:
        names = (repository, f"{registry}/{repository}")
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.repositories for name in names)


class SignatureSettings(_Model):
    # Sigstore's trusted root (a trusted_root.json); default: the public-good instance, refreshed over TUF
    trusted_root: Path | None = None
    require: list[SignatureRule] = []
    max_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024)  # per bundle, payload, Rekor answer

    @field_validator("trusted_root")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"{value}: no such file")
        return value

    @model_validator(mode="after")
    def _verifier_installed(self) -> Self:
        if self.require and importlib.util.find_spec("sigstore") is None:
            raise ValueError("require: needs sigstore-python: pip install 'mirror[signatures]'")
        return self

    def rule_for(self, registry: str, repository: str) -> SignatureRule | None:
        return next((r for r in self.require if r.applies_to(registry, repository)), None)


def _long_enough(value: SecretStr | None) -> SecretStr | None:
    if value is not None and len(value.get_secret_value().encode()) < MIN_SECRET_BYTES:
        raise ValueError(f"must be at least {MIN_SECRET_BYTES} bytes (an empty or short key lets others sign)")
    return value


def _strong_secrets(*fields: str) -> Any:
    """A validator refusing an empty or short inline secret in any of `fields`."""

    def strong(cls: type[BaseModel], value: SecretStr | None) -> SecretStr | None:
        return _long_enough(value)

    return field_validator(*fields)(classmethod(strong))


def _inline_or_file(label: str, inline: str) -> Any:
    """A validator refusing a secret given both inline (`inline`) and in a file (`<inline>_file`)."""

    def one(model: BaseModel) -> BaseModel:
        _one_source(label, **{inline: getattr(model, inline), f"{inline}_file": getattr(model, f"{inline}_file")})
        return model

    return model_validator(mode="after")(one)


def read_secret_file(path: Path) -> bytes:
    with path.open("rb") as stream:
        return stream.read(MAX_SECRET_FILE_BYTES + 1).strip()


def secret_bytes(value: SecretStr | None, path: Path | None) -> bytes | None:
    """A secret given inline or in a file (the one the config names), or None when neither is given."""
    if value is not None:
        return value.get_secret_value().encode()
    return read_secret_file(path) if path is not None else None


NotifyEvent = Literal["mirrored", "failed", "drift"]
NOTIFY_EVENTS: tuple[NotifyEvent, ...] = ("mirrored", "failed", "drift")


def _secret_from(what: str, env: str | None, file: Path | None) -> str:
    """A secret named by an environment variable or a file, read (and checked) at load; never kept in the model."""
    _one_source(what, env=env, file=file)
    if env is not None:
        value = os.environ.get(env, "").strip()
        if not value:
            raise ValueError(f"{what}: the environment variable {env} is not set")
        return value
    if file is not None:
        try:
            value = read_secret_file(file).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{what}: cannot read {file}: {getattr(exc, 'strerror', None) or exc}") from None
        if not value:
            raise ValueError(f"{what}: {file} is empty")
        return value
    raise ValueError(f"{what}: give {what}_env or {what}_file (a secret is never written in the config)")


class NotifyChannelSettings(_Model):
    """One place the people on call hear from. The webhook URL holds the robot's token, so it is a secret too:
    it comes from an environment variable or a file, as does the signing secret (DingTalk, Feishu/Lark, and the
    generic webhook's HMAC-SHA256 key)."""

    name: PlainName
    kind: Literal["dingtalk", "feishu", "wecom", "slack", "webhook"]
    url_env: EnvName | None = None
    url_file: Path | None = None
    secret_env: EnvName | None = None
    secret_file: Path | None = None
    events: tuple[NotifyEvent, ...] = NOTIFY_EVENTS

    @model_validator(mode="after")
    def _readable(self) -> Self:
        url = self.url()
        if not re.match(r"^https?://[^\s/]+", url):
            raise ValueError("url: expected an http(s) URL")
        signed = self.kind in ("dingtalk", "feishu", "webhook")
        if signed:
            secret = self.secret()
            if self.kind == "webhook" and len(secret.encode()) < MIN_SECRET_BYTES:
                raise ValueError(f"secret: must be at least {MIN_SECRET_BYTES} bytes")
        elif self.secret_env or self.secret_file:
            raise ValueError(f"secret: {self.kind} robots are not signed; give none")
        return self

    def url(self) -> str:
        return _secret_from("url", self.url_env, self.url_file)

    def secret(self) -> str:
        return _secret_from("secret", self.secret_env, self.secret_file)


class NotifySettings(_Model):
    """Messages to the on-call channel: a release newly mirrored to a target, a failure, drift. Never for a run
    that changed nothing; never failing or holding up the run they report."""

    channels: list[NotifyChannelSettings] = []
    timeout: float = Field(default=10.0, gt=0, le=120)  # one post
    attempts: int = Field(default=3, ge=1, le=10)  # a post that fails to connect or gets a 5xx/429 is sent again
    deadline: float = Field(default=30.0, gt=0, le=600)  # every post of a run together
    public_url: str | None = None  # where people reach `mirror serve`: messages link to the job's values

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+", value):
            raise ValueError("expected an http(s) URL")
        return value.rstrip("/") if value else value

    @field_validator("channels")
    @classmethod
    def _unique(cls, value: list[NotifyChannelSettings]) -> list[NotifyChannelSettings]:
        names = [c.name for c in value]
        if len(set(names)) != len(names):
            raise ValueError("two channels with one name")
        return value


class WebhookSettings(_Model):
    secret: SecretStr | None = None  # HMAC-SHA256 key for X-Hub-Signature-256
    secret_file: Path | None = None
    dockerhub_token: SecretStr | None = None  # the <token> in POST /hooks/dockerhub/<token>
    max_body: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)

    _strong = _strong_secrets("secret", "dockerhub_token")
    _one_secret = _inline_or_file("webhook secret", "secret")

    def secret_value(self) -> bytes | None:
        return secret_bytes(self.secret, self.secret_file)


class ServiceSettings(_Model):
    """`mirror serve`: who may read the job API, and how jobs are leased among replicas."""

    api_token: SecretStr | None = None  # bearer token for /jobs; without one the job API answers 401
    api_token_file: Path | None = None
    lease_seconds: float = Field(default=60.0, ge=1.0, le=3600.0)  # a running job's lease, renewed at 1/3
    poll_seconds: float = Field(default=1.0, gt=0, le=60.0)  # how often an idle replica looks for work
    # a job whose lease ran out this many times (its replica died running it: out of memory on a huge layer,
    # say) is not run again: it ends failed, naming the replica that last held it and when
    max_attempts: int = Field(default=3, ge=1, le=100)
    # the HTTP server's doors: a request's headers and its body must arrive within these, an idle keep-alive
    # connection is closed after keepalive_seconds, and connections past max_connections are answered 503
    header_seconds: float = Field(default=10.0, gt=0, le=300.0)
    body_seconds: float = Field(default=30.0, gt=0, le=600.0)
    keepalive_seconds: float = Field(default=5.0, gt=0, le=300.0)
    max_connections: int = Field(default=100, ge=1, le=10000)

    _strong = _strong_secrets("api_token")
    _one_token = _inline_or_file("service api token", "api_token")

    def api_token_value(self) -> bytes | None:
        return secret_bytes(self.api_token, self.api_token_file)


class SpoolSettings(_Model):
    """Where blobs going to several targets are spooled, so the source is read once."""

    dir: Path | None = None  # default: the system temp directory
    max_bytes: int = Field(default=4 * 1024**3, ge=0)  # blobs that do not fit are streamed per target


class RetrySettings(_Model):
    """Retries of transient failures: exponential backoff with jitter, capped in count and total time."""

    attempts: int = Field(default=5, ge=1, le=100)
    base_delay: float = Field(default=0.5, ge=0, le=3600)
    max_delay: float = Field(default=30.0, ge=0, le=3600)
    max_elapsed: float = Field(default=300.0, gt=0, le=86400)


class BudgetSettings(_Model):
    """Docker Hub's pull budget: manifest GETs pause when `ratelimit-remaining` reaches `floor`."""

    floor: int = Field(default=2, ge=0)
    max_wait: float = Field(default=900.0, ge=0, le=86400)
    poll_interval: float = Field(default=60.0, gt=0, le=3600)


class MirrorSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", frozen=True, allow_inf_nan=False
    )

    source: SourceSettings = SourceSettings()
    targets: list[TargetSettings] = Field(min_length=1)
    images: list[ImageSettings] = []  # optional when a chart is configured
    chart: ChartSettings | None = None
    charts: list[InstallChartSettings] = []  # installed after the release's chart
    output_dir: Path = Path("out")
    registries: dict[str, RegistrySettings] = {}
    docker_config: Path | None = None  # a docker config.json or a mounted dockerconfigjson secret
    transfer: TransferSettings = TransferSettings()
    retry: RetrySettings = RetrySettings()
    spool: SpoolSettings = SpoolSettings()
    pull_budget: BudgetSettings = BudgetSettings()
    discovery: DiscoverySettings = DiscoverySettings()
    schedule: str | None = None  # cron for `mirror serve`: 5 fields, or 6 with seconds first
    state_dir: Path = Path("state")
    database_url: str | None = None  # default: sqlite:///<state_dir>/mirror.db
    webhook: WebhookSettings = WebhookSettings()
    service: ServiceSettings = ServiceSettings()
    shutdown_grace: float = Field(default=20.0, ge=0, le=3600)  # seconds in-flight uploads get after SIGTERM
    lock_timeout: float = Field(default=600.0, ge=0, le=86400)  # how long to wait for another sync of a target
    # the target lock files; default: <state_dir>/locks. With a PostgreSQL database_url the locks are there instead
    lock_dir: Path | None = None
    values: ValuesSettings = ValuesSettings()
    signatures: SignatureSettings = SignatureSettings()
    notify: NotifySettings = NotifySettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The YAML file arrives as init kwargs; the environment overrides it.
        return env_settings, init_settings

    @field_validator("*", mode="before")
    @classmethod
    def _strict_scalars(cls, value: object, info: ValidationInfo) -> object:
        return _strict_scalar(value, cls.model_fields[info.field_name].annotation) if info.field_name else value

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str | None) -> str | None:
        if value is not None and len(value) > MAX_SCHEDULE_LENGTH:
            raise ValueError(f"longer than {MAX_SCHEDULE_LENGTH} characters")
        if value is not None:
            check_cron(value)
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(sqlite|postgresql)(\+\w+)?://", value):
            raise ValueError("expected sqlite:///path or postgresql+psycopg://user@host/db")
        return value

    @field_validator("registries")
    @classmethod
    def _hosts(cls, value: dict[str, RegistrySettings]) -> dict[str, RegistrySettings]:
        for host in value:
            reference.validate_host(host)
        return value

    @model_validator(mode="after")
    def _something_to_mirror(self) -> Self:
        if not self.images and self.chart is None:
            raise ValueError("images: name at least one image, or configure a chart: to take them from")
        if self.discovery.source == "chart" and self.chart is None:
            raise ValueError("discovery.source: chart needs a chart: section")
        if self.charts and self.chart is None:
            raise ValueError("charts: install with the release's chart: configure chart: too")
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> Self:
        for kind, names in (
            ("targets", [t.name for t in self.targets]),
            ("images", [i.name for i in self.images]),
            ("charts", [c.name for c in self.charts] + ([self.chart.name] if self.chart else [])),
            ("charts (values file names)", [c.values_file for c in self.charts] + [self.values.file_name]),
        ):
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise ValueError(f"{kind}: duplicate name(s) {', '.join(duplicates)}")
        return self

    def registry(self, host: str) -> RegistrySettings:
        """Per-host settings, matched on the host as configured or as its API host (docker.io aliases)."""
        api = reference.api_host(host)
        for key, value in self.registries.items():
            if key == host or reference.api_host(key) == api:
                return value
        return RegistrySettings()

    def target(self, name: str) -> TargetSettings:
        for target in self.targets:
            if target.name == name:
                return target
        known = ", ".join(t.name for t in self.targets)
        raise ConfigError(f"--target {_shown(name)}: no such target (configured: {known})")


def check_cron(expression: str) -> None:
    """Parse a cron expression the way APScheduler will (5 fields, or 6 with seconds first), naming the
    field that is wrong."""
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise ValueError(f"{_shown(expression)}: a cron expression has 5 fields (or 6, with seconds first)")
    from apscheduler.triggers.cron import CronTrigger  # only configs with a schedule pay for the import

    names = ("second", *CRON_FIELDS) if len(fields) == 6 else CRON_FIELDS
    for name, value in zip(names, fields, strict=True):
        try:
            CronTrigger(**{name: value}, timezone="UTC")
        except ValueError as exc:
            raise ValueError(f"{_shown(expression)}: {name} field {_shown(value)}: {exc}") from None


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader with two bounds: nesting (the composer recurses once per level, so a file nested
    thousands deep would exhaust the stack) and the values the document stands for with every alias expanded
    (an alias bomb is a few lines that pydantic and the values writer would walk billions of times)."""

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


def _undecodable(raw: bytes, exc: UnicodeDecodeError) -> str:
    return f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"


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
        raise ConfigError(f"{where} {_undecodable(raw, exc)}") from None
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
    variables = variable_problems(environ, _named_variables(data, environ))
    if variables:
        raise ConfigError(f"{where}:\n" + _lines(variables))
    try:
        settings = MirrorSettings(**data)
    except ValidationError as exc:
        raise ConfigError(f"{where}:\n" + format_validation_error(exc, environ)) from None
    except ValueError as exc:  # raised by a settings source: a MIRROR_* variable that is not valid JSON
        raise ConfigError(_blame_variable(str(exc), environ) or clip(f"{where}: {exc}", MAX_LINE)) from None
    except RecursionError:  # the bounds on the file and the variables should make this unreachable
        raise ConfigError(f"{where}: nested too deeply to check") from None
    problems = missing_inputs(settings, environ)
    if problems:
        raise ConfigError(f"{where}:\n" + _lines(problems))
    return settings


def _lines(problems: Iterable[str]) -> str:
    return "\n".join(f"  {clip(problem, MAX_LINE)}" for problem in problems)


def read_named_file(path: Path, limit: int) -> str:
    """A file the config names, as text: a regular file, readable, at most `limit` bytes, UTF-8. The
    ValueError says which of these it is not."""
    try:
        regular = path.is_file()
    except OSError as exc:
        raise ValueError(f"cannot be read: {exc.strerror or exc}") from None
    if not regular:
        raise ValueError("is not a readable file")
    try:
        with path.open("rb") as stream:
            raw = stream.read(limit + 1)
    except OSError as exc:
        raise ValueError(f"cannot be read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise ValueError(f"is larger than {limit // 1024} KiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(_undecodable(raw, exc)) from None


def _json_object_problem(text: str) -> str | None:
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return f"is not JSON ({type(exc).__name__})"
    return None if isinstance(document, dict) else "is not a JSON object"


def missing_inputs(settings: MirrorSettings, environ: Mapping[str, str]) -> list[str]:
    """The files and environment variables the config names that are not there, not usable as they are
    (unreadable, not UTF-8, empty, not JSON where JSON is due), or too weak to use."""
    problems = []

    def need_file(key: str, path: Path | None, limit: int) -> str | None:
        if path is None:
            return None
        try:
            return read_named_file(path, limit)
        except ValueError as exc:
            problems.append(f"{key}: {path} {exc}")
            return None

    def need_json_file(key: str, path: Path | None) -> None:
        text = need_file(key, path, MAX_DOCUMENT_FILE_BYTES)
        problem = None if text is None else _json_object_problem(text)
        if problem:
            problems.append(f"{key}: {path} {problem}")

    def need_secret_file(key: str, path: Path | None, min_bytes: int = 1) -> None:
        text = need_file(key, path, MAX_SECRET_FILE_BYTES)
        if text is not None and not text.strip():
            problems.append(f"{key}: {path} is empty")
        elif text is not None and len(text.strip().encode()) < min_bytes:
            problems.append(f"{key}: {path} holds fewer than {min_bytes} bytes (an empty key lets anyone sign)")

    need_json_file("docker_config", settings.docker_config)
    for host, registry in settings.registries.items():
        need_secret_file(f"registries.{host}.password_file", registry.password_file)
        if registry.password_env is not None:
            value = environ.get(registry.password_env)
            if value is None:
                problems.append(f"registries.{host}.password_env: the variable {registry.password_env} is not set")
            elif not value.strip():
                problems.append(f"registries.{host}.password_env: the variable {registry.password_env} is empty")
        if registry.aliyun is not None:
            problems += [f"registries.{host}.aliyun: {p}" for p in _aliyun_problems(host, registry.aliyun, environ)]
    need_secret_file("webhook.secret_file", settings.webhook.secret_file, MIN_SECRET_BYTES)
    need_secret_file("service.api_token_file", settings.service.api_token_file, MIN_SECRET_BYTES)
    need_json_file("signatures.trusted_root", settings.signatures.trusted_root)
    return problems


def _named_variables(data: Mapping[str, Any], environ: Mapping[str, str]) -> set[str]:
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
        if not name.upper().startswith(ENV_PREFIX) or name in allowed or _SERVICE_LINK.match(name):
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
        if node is Any:
            break  # a key inside free-form values (values.extra)
        model, mapping = _model_of(node), _mapping_value(node)
        if model is not None:
            field = model.model_fields.get(part.lower())
            if field is None:
                return "not a setting" + _nearest(name, parts[:index], model)
            node = field.annotation
        elif mapping is not None:
            node = mapping  # `part` is a key of the mapping: a registry host
        else:
            whole = ENV_PREFIX + "__".join(parts[:index])
            return f"not a setting: {whole} is set whole (JSON for a list or a mapping), not part by part"
    if _structured(node) and _json_depth(value) > MAX_CONFIG_DEPTH:
        return f"its JSON value is nested deeper than {MAX_CONFIG_DEPTH} levels"
    return None


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for member in _union_members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def _mapping_value(annotation: Any) -> Any:
    """X for a dict[str, X] field, else None."""
    for member in _union_members(annotation):
        if typing.get_origin(member) is dict:
            return typing.get_args(member)[1]
    return None


def _structured(annotation: Any) -> bool:
    """Whether pydantic-settings reads the variable's value as JSON: a model, a list, a mapping, free-form."""
    return annotation is Any or any(
        typing.get_origin(m) in (list, dict) or _model_of(m) is not None for m in _union_members(annotation)
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
    """`; did you mean MIRROR_...?` with the closest setting below the part of `name` that was found, or ""."""
    lead = ENV_PREFIX + "".join(f"{part}__" for part in prefix)
    tails = {"__".join(path).upper() for path in _setting_paths(model)}
    found = difflib.get_close_matches(name[len(lead) :].upper(), tails, n=1)  # the shared lead would match anything
    if found:
        return f"; did you mean {lead}{found[0]}?"
    return " (a setting's variable is MIRROR_ and its key path joined with __, e.g. MIRROR_TRANSFER__READ_TIMEOUT)"


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


def _aliyun_problems(host: str, login: AliyunLoginSettings, environ: Mapping[str, str]) -> list[str]:
    from mirror.aliyun.login import credential_problem

    if acr.is_personal(host):
        return [
            f"{host} is a Personal Edition instance: its temporary login is not available through ACR's "
            "OpenAPI with a RAM identity; use a registry password (password_env) there, or an Enterprise instance"
        ]
    if acr.edition_of(host) is None and (login.region is None or login.instance_id is None):
        return [f"{host} is not an ACR endpoint name: give region and instance_id"]
    problem = credential_problem(login.credentials, dict(environ))
    return [problem] if problem else []


def _variable_for(loc: tuple[int | str, ...], environ: Mapping[str, str]) -> str | None:
    """The MIRROR_* variable that set the value at `loc`, if one did (the longest matching prefix)."""
    names = {name.upper(): name for name in environ if name.upper().startswith(ENV_PREFIX)}
    for length in range(len(loc), 0, -1):
        wanted = ENV_PREFIX + "__".join(str(part) for part in loc[:length]).upper()
        if wanted in names:
            return names[wanted]
    return None


def _blame_variable(message: str, environ: Mapping[str, str]) -> str | None:
    match = re.search(r'error parsing value for field "(\w+)" from source "EnvSettingsSource"', message)
    variable = _variable_for((match[1],), environ) if match else None
    return f"{variable}: not valid JSON for {match[1]}" if match and variable else None


def format_validation_error(exc: ValidationError, environ: Mapping[str, str] | None = None) -> str:
    lines = []
    for error in exc.errors(include_url=False, include_input=False):
        key = ".".join(str(part) for part in error["loc"]) or "(top level)"
        variable = _variable_for(tuple(error["loc"]), environ) if environ is not None else None
        where = f"{key} (set by the environment variable {variable})" if variable else key
        lines.append("  " + clip(f"{where}: {error['msg']}", MAX_LINE))
    return "\n".join(lines)
