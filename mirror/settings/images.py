"""What is mirrored: the images the config names, and the Helm values file written for each verified
target."""

# No `from __future__ import annotations` in a module of models: pydantic would compile each field's annotation
# from its string at import, a tenth of the config's import time.
import copy
import re
from typing import Any, Literal

from pydantic import Field, field_validator

from mirror import reference
from mirror.chart.merge import deep_merge
from mirror.release import normalise_version
from mirror.settings.fields import (
    FileName,
    HelmRelease,
    Host,
    KubeNamespace,
    PlainData,
    Platform,
    RepositoryComponent,
    Section,
    shown,
)

VERSION_PLACEHOLDER = "{version}"
_VALUES_KEY_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")  # subcharts' keys have dashes: dcgm-exporter.image


class ImageSettings(Section):
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
            raise ValueError(f"{shown(value)} is not a valid tag (the only placeholder is {VERSION_PLACEHOLDER})")
        return value

    @field_validator("values_keys")
    @classmethod
    def _keys(cls, value: list[str]) -> list[str]:
        for key in value:
            if not all(_VALUES_KEY_PART.fullmatch(part) for part in key.split(".")):
                raise ValueError(f"{shown(key)} is not a dotted Helm values key")
        return value

    @property
    def follows_release(self) -> bool:
        return VERSION_PLACEHOLDER in self.tag

    def tag_for(self, version: str) -> str:
        return self.tag.replace(VERSION_PLACEHOLDER, normalise_version(version))


# What HAMi needs on ACK whatever else is set: ACK installs the NVIDIA driver at the node's root, not where the
# chart looks by default (/usr/local/nvidia). A user's `values.extra` may override it (null: the chart's own, the
# key left out of the values written: Helm given a null would delete the default too).
ACK_VALUES: dict[str, Any] = {"devicePlugin": {"nvidiaDriverRoot": "/"}}


class ValuesSettings(Section):
    """The Helm values file written for each verified target."""

    file_name: FileName = "hami-ack-values.yaml"
    extra: PlainData = Field(default_factory=lambda: copy.deepcopy(ACK_VALUES))
    release: HelmRelease = "hami"
    chart: str = "hami-charts/hami"  # the chart in the printed `helm install` line when no `chart:` is set
    kube_namespace: KubeNamespace = "kube-system"
    # an image of the release that the values would leave on the source registry: refuse to write the
    # file (error), or write it with a warning naming each key (warn)
    unmirrored: Literal["error", "warn"] = "error"

    @field_validator("extra")
    @classmethod
    def _over_ack_values(cls, value: dict[str, Any]) -> dict[str, Any]:
        """The user's values over ACK's own: setting `extra` for anything else keeps the driver root."""
        return deep_merge(copy.deepcopy(ACK_VALUES), value)
