"""`MirrorSettings`: the whole config, its sections put together, overridden by MIRROR_* environment
variables."""

# No `from __future__ import annotations` in a module of models: pydantic would compile each field's annotation
# from its string at import, a tenth of the config's import time.
import fnmatch
import re
from pathlib import Path
from typing import Self

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from mirror import reference
from mirror.settings.charts import ACR_REGISTRIES, ChartSettings, DiscoverySettings, InstallChartSettings
from mirror.settings.fields import ConfigError, shown, strict_scalar
from mirror.settings.images import ImageSettings, ValuesSettings
from mirror.settings.registries import RegistrySettings, SourceSettings, TargetSettings
from mirror.settings.service import NotifySettings, ServiceSettings, WebhookSettings
from mirror.settings.signatures import SignatureSettings
from mirror.settings.transfer import BudgetSettings, RetrySettings, SpoolSettings, TransferSettings

ENV_PREFIX = "MIRROR_"
MAX_SCHEDULE_LENGTH = 256


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
        return strict_scalar(value, cls.model_fields[info.field_name].annotation) if info.field_name else value

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

    @model_validator(mode="after")
    def _one_copy_per_place(self) -> Self:
        """Two targets at one registry and namespace push to the same tags: with a different copy (platforms,
        attestations, referrers) each run moved the tags to its own and reported both verified."""
        seen: dict[tuple[str, str], TargetSettings] = {}
        for target in self.targets:
            place = (reference.api_host(target.registry), target.namespace)
            other = seen.setdefault(place, target)
            if _copy_of(other) != _copy_of(target):
                raise ValueError(
                    f"targets: {other.name} and {target.name} push to {target.registry}/{target.namespace} with a "
                    "different copy (platforms, attestations, referrers): each run would move the other's tags; "
                    "give them one copy, or a namespace each"
                )
        return self

    @model_validator(mode="after")
    def _global_registry_not_at_home(self) -> Self:
        """`global.imageRegistry` moves every image to one registry: on a registry nodes pull from as it is
        (old ACK guides set an ACR host), every image would read as already there, none copied, and pods would
        pull paths never pushed. Elsewhere it names where the images come from, and the values clear it."""
        for where, values in [("values.extra", self.values.extra)] + [
            (f"charts.{i}.values", chart.values) for i, chart in enumerate(self.charts)
        ]:
            found = values.get("global")
            registry = found.get("imageRegistry") if isinstance(found, dict) else None
            if isinstance(registry, str) and registry and self.pulled_as_is(registry.split("/", 1)[0]):
                raise ValueError(
                    f"{where}: global.imageRegistry {shown(registry)} is a registry nodes pull from as it is "
                    "(chart.allowed_registries): every image would read as already there and none be copied; "
                    "leave it out: mirror points each image at its target in the values it writes"
                )
        return self

    def pulled_as_is(self, registry: str) -> bool:
        """Whether nodes pull from `registry` as it is (`chart.allowed_registries`, else ACR's hosts)."""
        patterns = self.chart.allowed_registries if self.chart else ACR_REGISTRIES
        return any(fnmatch.fnmatch(reference.api_host(registry), pattern) for pattern in patterns)

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
        raise ConfigError(f"--target {shown(name)}: no such target (configured: {known})")


def _copy_of(target: TargetSettings) -> tuple[object, ...]:
    """What a target's copy is made of: its platforms (in any order), attestations and referrers."""
    platforms = sorted(target.platforms) if target.platforms is not None else None
    return platforms, target.attestations, target.referrers


def check_cron(expression: str) -> None:
    """Parse a cron expression as the service's scheduler will (cron's meaning: 5 fields, or 6 with seconds
    first), naming the field that is wrong."""
    from mirror.cron import CronError, cron_trigger  # APScheduler: only configs with a schedule pay for it

    try:
        cron_trigger(expression)
    except CronError as exc:
        raise ValueError(f"{shown(expression)}: {exc}") from None
