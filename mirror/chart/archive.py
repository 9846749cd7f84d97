"""A chart archive (`.tgz`) opened as untrusted input, in memory: regular files and directories under one
top directory, no absolute paths, no `..`, no links or devices, bounded in member count, per-file size and
total unpacked size (so a decompression bomb stops at the bound, not at the disk)."""

from __future__ import annotations

import io
import posixpath
import tarfile
from dataclasses import dataclass, field
from typing import Any

import yaml

MAX_MEMBERS = 5000
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_UNPACKED_BYTES = 64 * 1024 * 1024


class ChartError(Exception):
    """A chart that cannot be fetched or is not safe to open; the message says which and why."""


@dataclass(frozen=True)
class ChartArchive:
    """The exact `.tgz` bytes (what is pushed and rendered) and the files they hold, by path under the top
    directory (`Chart.yaml`, `values.yaml`, `templates/...`)."""

    raw: bytes = field(repr=False)
    files: dict[str, bytes] = field(repr=False)
    metadata: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.metadata["name"])

    @property
    def version(self) -> str:
        return str(self.metadata["version"])

    def values(self) -> dict[str, Any]:
        text = self.files.get("values.yaml", b"")
        try:
            values = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ChartError(f"chart {self.name} {self.version}: values.yaml is not YAML: {exc}") from None
        if not isinstance(values, dict):
            raise ChartError(f"chart {self.name} {self.version}: values.yaml is not a mapping")
        return values


def open_chart(
    raw: bytes,
    where: str,
    max_members: int = MAX_MEMBERS,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_unpacked_bytes: int = MAX_UNPACKED_BYTES,
) -> ChartArchive:
    """Check and unpack a chart archive into memory; raises ChartError naming `where` and the problem."""
    files: dict[str, bytes] = {}
    top: str | None = None
    unpacked = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r|gz") as archive:
            for count, member in enumerate(archive, start=1):
                if count > max_members:
                    raise ChartError(f"{where}: more than {max_members} entries")
                path = _safe_path(member.name, where)
                if not (member.isfile() or member.isdir()):
                    raise ChartError(f"{where}: {member.name!r} is a link or a special file; charts hold plain files")
                first, _, rest = path.partition("/")
                top = top or first
                if first != top:
                    raise ChartError(f"{where}: entries under more than one top directory ({top!r}, {first!r})")
                if member.isdir():
                    continue
                if member.size > max_file_bytes:
                    limit = f"limit {max_file_bytes}"
                    raise ChartError(f"{where}: {member.name!r} unpacks to {member.size} bytes ({limit})")
                unpacked += member.size
                if unpacked > max_unpacked_bytes:
                    raise ChartError(f"{where}: unpacks to more than {max_unpacked_bytes} bytes")
                handle = archive.extractfile(member)
                data = handle.read(member.size + 1) if handle else b""
                if len(data) != member.size:
                    raise ChartError(f"{where}: {member.name!r} is not the size its header says")
                if not rest:
                    raise ChartError(f"{where}: a file at the top level ({member.name!r}); charts sit in one directory")
                files[rest] = data
    except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError) as exc:  # OSError: not gzip, truncated
        raise ChartError(f"{where}: not a readable chart archive: {exc}") from None
    return ChartArchive(raw, files, _metadata(files, where))


def _safe_path(name: str, where: str) -> str:
    if name.startswith("/") or "\\" in name or "\x00" in name:
        raise ChartError(f"{where}: unsafe path {name!r} in the archive")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ChartError(f"{where}: unsafe path {name!r} in the archive")
    return posixpath.join(*parts)


def _metadata(files: dict[str, bytes], where: str) -> dict[str, Any]:
    if "Chart.yaml" not in files:
        raise ChartError(f"{where}: no Chart.yaml at the top of the chart")
    try:
        metadata = yaml.safe_load(files["Chart.yaml"])
    except yaml.YAMLError as exc:
        raise ChartError(f"{where}: Chart.yaml is not YAML: {exc}") from None
    if not isinstance(metadata, dict) or not metadata.get("name") or not metadata.get("version"):
        raise ChartError(f"{where}: Chart.yaml has no name or version")
    return metadata
