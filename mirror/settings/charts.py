"""The release's Helm chart, the charts installed with it, and which releases are mirrored."""

# No `from __future__ import annotations` in a module of models: pydantic would compile each field's annotation
# from its string at import, a tenth of the config's import time.
import re
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from mirror import reference
from mirror.release import VersionError, parse_filter
from mirror.settings.fields import (
    HELM_RELEASE_MAX,
    ChartName,
    ChartRepository,
    FileName,
    HelmRelease,
    KubeNamespace,
    PlainData,
    PlainName,
    Section,
    is_label,
    shown,
)

# used whole (fullmatch): `$` would also match before a final newline
_CHART_VERSION = re.compile(r"[0-9]{1,9}\.[0-9]{1,9}\.[0-9]{1,9}([-+][0-9A-Za-z.+-]{1,64})?")  # as an index lists it
_KUBE_VERSION = re.compile(r"v?[0-9]{1,9}\.[0-9]{1,9}\.[0-9]{1,9}")
ACR_REGISTRIES = ("*.aliyuncs.com",)  # registries nodes in mainland China pull from as they are


class ChartSettings(Section):
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

    @field_validator("release_repository")
    @classmethod
    def _release_repository(cls, value: str) -> str:
        return reference.validate_repository(value)

    @field_validator("kube_version")
    @classmethod
    def _kube_version(cls, value: str) -> str:
        if not _KUBE_VERSION.fullmatch(value):
            raise ValueError(f"{shown(value)}: expected a Kubernetes version like 1.32.0")
        return value.removeprefix("v")


NEWEST = "newest"


class InstallChartSettings(Section):
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
        if self.release is None and not is_label(self.name, HELM_RELEASE_MAX):
            raise ValueError(
                f"release: defaults to the chart's name {shown(self.name)}, which is not a Helm release name; "
                "set release:"
            )
        return self

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if value != NEWEST and not _CHART_VERSION.fullmatch(value):
            raise ValueError(f"{shown(value)}: expected a chart version like 1.3.0, or {NEWEST}")
        return value

    @property
    def values_file(self) -> str:
        return self.file_name or f"{self.name}-values.yaml"


class DiscoverySettings(Section):
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
