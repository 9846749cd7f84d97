"""A chart published to a target registry as Helm stores it in OCI (`helm push`): a config blob holding
Chart.yaml as JSON (in the types Helm reads it into), one layer holding the `.tgz` bytes unchanged, an image
manifest tagged with the chart version. Pushed with the same client, credentials and retries as the images."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from mirror.acr import refuses_manifest_class
from mirror.chart.archive import ChartArchive
from mirror.chart.source import HELM_CHART_CONTENT, HELM_CONFIG, oci_tag
from mirror.errors import Kind, MirrorError
from mirror.oci import OCI_MANIFEST, Manifest, sha256_digest
from mirror.registry import RegistryClient, RegistryError


@dataclass(frozen=True, slots=True)
class Published:
    reference: str | None  # host/repository:tag, when the registry took it
    refusal: str | None = None  # why not, when it refused the artifact


# Chart.yaml's fields that Helm's chart.Metadata holds as strings. Helm's loader reads `appVersion: 1.16` into
# one, but its pull refuses a config holding a number there ("cannot unmarshal number into ... appVersion").
HELM_STRING_FIELDS = frozenset(
    {"apiVersion", "name", "version", "appVersion", "kubeVersion", "description", "type", "home", "icon", "tags"}
    | {"condition"}
)
HELM_STRING_COLLECTIONS = ("keywords", "sources", "annotations")  # each item, or each value, a string
MAINTAINER_STRING_FIELDS = frozenset(("name", "email", "url"))
_TEXT_LOADER = getattr(yaml, "CBaseLoader", yaml.BaseLoader)  # every scalar as its text


def helm_config(archive: ChartArchive) -> bytes:
    """Chart.yaml as JSON, each field Helm holds as a string given as one: a number or a boolean there is its
    text as Chart.yaml writes it (`appVersion: 1.10` is "1.10", which the parsed 1.1 could not tell)."""
    written = _scalars_as_written(archive.files.get("Chart.yaml", b""))
    config = {
        key: _as_text(value, written.get(key)) if key in HELM_STRING_FIELDS else value
        for key, value in archive.metadata.items()
    }
    for key in HELM_STRING_COLLECTIONS:
        if key in config:
            config[key] = _items_as_text(config[key], written.get(key))
    maintainers = config.get("maintainers")
    if isinstance(maintainers, list):
        shadows = _aligned(written.get("maintainers"), len(maintainers))
        config["maintainers"] = [
            _items_as_text(entry, shadow, MAINTAINER_STRING_FIELDS)
            for entry, shadow in zip(maintainers, shadows, strict=True)
        ]
    return json.dumps(config, separators=(",", ":"), sort_keys=True, default=str).encode()


def _scalars_as_written(chart_yaml: bytes) -> dict[str, Any]:
    """Chart.yaml with every scalar as its text. The text was read within `load_yaml`'s limits (aliases expanded)
    when the archive was opened, so reading it again costs no more than that did."""
    loader = _TEXT_LOADER(chart_yaml)
    try:
        document = loader.get_single_data()
    except yaml.YAMLError:
        return {}
    finally:
        loader.dispose()
    return document if isinstance(document, dict) else {}


def _as_text(parsed: Any, written: Any) -> Any:
    """A scalar Helm reads as a string: a number or a boolean as its written text (else rendered as YAML writes
    it); anything else as parsed."""
    if parsed is None or isinstance(parsed, (str, list, dict)):
        return parsed
    if isinstance(written, str):
        return written
    if isinstance(parsed, bool):
        return "true" if parsed else "false"
    return str(parsed)


def _items_as_text(parsed: Any, written: Any, keys: frozenset[str] | None = None) -> Any:
    """Each item of a list, or each value of a mapping (only those under `keys`, when given), as `_as_text`."""
    if isinstance(parsed, list):
        return [_as_text(item, shadow) for item, shadow in zip(parsed, _aligned(written, len(parsed)), strict=True)]
    if isinstance(parsed, dict):
        shadows = written if isinstance(written, dict) else {}
        return {k: _as_text(v, shadows.get(k)) if keys is None or k in keys else v for k, v in parsed.items()}
    return parsed


def _aligned(written: Any, length: int) -> list[Any]:
    """The written list beside a parsed one of `length` items, or nothing to go by where they differ."""
    return written if isinstance(written, list) and len(written) == length else [None] * length


def chart_manifest(archive: ChartArchive) -> tuple[bytes, Manifest]:
    config = helm_config(archive)
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": HELM_CONFIG, "digest": sha256_digest(config), "size": len(config)},
        "layers": [{"mediaType": HELM_CHART_CONTENT, "digest": sha256_digest(archive.raw), "size": len(archive.raw)}],
        "annotations": {
            "org.opencontainers.image.title": archive.name,
            "org.opencontainers.image.version": archive.version,
        },
    }
    return config, Manifest.parse(json.dumps(doc, separators=(",", ":")).encode())


async def publish_chart(client: RegistryClient, repository: str, archive: ChartArchive) -> Published:
    """Push the chart unless the same manifest is already at the tag; verify the tag resolves to it."""
    config, manifest = chart_manifest(archive)
    tag = oci_tag(archive.version)
    where = f"{client.host}/{repository}:{tag}"
    current = await client.head_manifest(repository, tag)
    if current is not None and current.digest != manifest.digest:
        await _check_holds_a_chart(client, repository, current.digest, where)
    if current is None or current.digest != manifest.digest:
        for data in (config, archive.raw):
            digest = sha256_digest(data)
            if await client.head_blob(repository, digest) is None:
                await client.push_blob(repository, digest, data)
        try:
            await client.put_manifest(repository, tag, manifest)
        except RegistryError as exc:
            if refuses_manifest_class(exc):  # ACR's Personal Edition takes no chart artifact
                return Published(None, f"{client.host} refused the chart artifact: {exc.message or exc.code}")
            raise
    check = await client.head_manifest(repository, tag)
    if check is None or check.digest != manifest.digest:
        raise MirrorError(f"verify chart {where}: the tag does not resolve to the pushed chart")
    return Published(where)


class ChartTagTaken(MirrorError):
    """The chart's tag at the target holds something else (an image): the registry's answers, not its error."""

    kind = Kind.REFUSED


async def _check_holds_a_chart(client: RegistryClient, repository: str, digest: str, where: str) -> None:
    """Another chart at the tag is replaced (an older packaging of this version); anything else is left alone:
    an image there would be moved off its tag, and nodes pulling it would get a chart."""
    held = await client.get_manifest(repository, digest)
    config = held.config.media_type if held.config is not None else held.media_type
    if config != HELM_CONFIG:
        raise ChartTagTaken(f"publish chart {where}: the tag holds {digest} ({config}), not a Helm chart: left alone")
