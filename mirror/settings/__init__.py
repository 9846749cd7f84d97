"""Configuration: one YAML file (default config/mirror.yaml), overridden by MIRROR_* environment variables.

`load_settings` reads, validates and checks it (`loading.py`); `MirrorSettings` is the whole of it (`root.py`),
put together from sections: `registries.py` (where from and where to), `images.py` (what, and the values file),
`charts.py`, `signatures.py`, `service.py` (the service, webhooks, notifications), `transfer.py` (how bytes
move). `fields.py` holds the checks they share, `inputs.py` the secrets and files they name, `environment.py`
the MIRROR_* variables.
"""

from mirror.settings.charts import ACR_REGISTRIES, NEWEST, ChartSettings, DiscoverySettings, InstallChartSettings
from mirror.settings.fields import ConfigError
from mirror.settings.images import VERSION_PLACEHOLDER, ImageSettings, ValuesSettings
from mirror.settings.loading import load_settings
from mirror.settings.registries import AliyunLoginSettings, RegistrySettings, SourceSettings, TargetSettings
from mirror.settings.root import MirrorSettings
from mirror.settings.service import NotifyChannelSettings, NotifySettings, ServiceSettings, WebhookSettings
from mirror.settings.signatures import SignatureRule, SignatureSettings
from mirror.settings.transfer import BudgetSettings, RetrySettings, SpoolSettings, TransferSettings

__all__ = [
    "ACR_REGISTRIES",
    "NEWEST",
    "VERSION_PLACEHOLDER",
    "AliyunLoginSettings",
    "BudgetSettings",
    "ChartSettings",
    "ConfigError",
    "DiscoverySettings",
    "ImageSettings",
    "InstallChartSettings",
    "MirrorSettings",
    "NotifyChannelSettings",
    "NotifySettings",
    "RegistrySettings",
    "RetrySettings",
    "ServiceSettings",
    "SignatureRule",
    "SignatureSettings",
    "SourceSettings",
    "SpoolSettings",
    "TargetSettings",
    "TransferSettings",
    "ValuesSettings",
    "WebhookSettings",
    "load_settings",
]
