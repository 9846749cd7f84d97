"""A chart archive (`.tgz`) opened as untrusted input, in memory: regular files and directories under one
top directory, no absolute paths, no `..`, no links or devices, bounded in member count, per-file size and
total unpacked size (so a decompression bomb stops at the bound, not at the disk).

Its subcharts are opened with it, as Helm loads them: each `charts/*.tgz` (an archive inside the archive,
opened with the same checks) and each `charts/<dir>/` holding a Chart.yaml, to a bounded depth. The bounds on
members and unpacked bytes are shared by the whole nest, so archives inside archives cannot multiply them."""

from __future__ import annotations

import io
import posixpath
import tarfile
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import yaml

MAX_MEMBERS = 5000
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_UNPACKED_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 5  # a chart, its subcharts, theirs...: Helm charts in the wild nest two or three deep


class ChartError(Exception):
    """A chart that cannot be fetched or is not safe to open; the message says which and why."""


@dataclass(frozen=True)
class ChartArchive:
    """The exact `.tgz` bytes (what is pushed and rendered) and the files they hold, by path under the top
    directory (`Chart.yaml`, `values.yaml`, `templates/...`)."""

    raw: bytes = field(repr=False)  # empty for a subchart that came as a directory
    files: dict[str, bytes] = field(repr=False)
    metadata: dict[str, Any]
    subcharts: tuple[ChartArchive, ...] = ()

    @property
    def name(self) -> str:
        return str(self.metadata["name"])

    @property
    def version(self) -> str:
        return str(self.metadata["version"])

    @property
    def app_version(self) -> str:
        return str(self.metadata.get("appVersion") or "")

    def dependencies(self) -> list[dict[str, Any]]:
        """Chart.yaml's `dependencies` entries that are mappings with a name."""
        entries = self.metadata.get("dependencies")
        if not isinstance(entries, list):
            return []
        return [e for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str)]

    @cached_property
    def _values(self) -> dict[str, Any]:
        text = self.files.get("values.yaml", b"")
        try:
            values = yaml.safe_load(text) or {}
        except (yaml.YAMLError, RecursionError) as exc:
            raise ChartError(f"chart {self.name} {self.version}: values.yaml is not usable YAML: {exc}") from None
        if not isinstance(values, dict):
            raise ChartError(f"chart {self.name} {self.version}: values.yaml is not a mapping")
        return values

    def values(self) -> dict[str, Any]:
        """values.yaml, parsed once per archive; callers layer onto it (`deep_merge`) and never change it."""
        return self._values


@dataclass
class _Budget:
    """What the whole nest may still unpack: members and bytes, shared by a chart and its subcharts."""

    members: int
    file_bytes: int
    unpacked_bytes: int

    def take(self, where: str, name: str, size: int) -> None:
        self.members -= 1
        if self.members < 0:
            raise ChartError(f"{where}: more than the limit of entries (with its subcharts)")
        if size > self.file_bytes:
            raise ChartError(f"{where}: {name[:200]!r} unpacks to {size} bytes (limit {self.file_bytes})")
        self.unpacked_bytes -= size
        if self.unpacked_bytes < 0:
            raise ChartError(f"{where}: unpacks to more than the limit of bytes (with its subcharts)")


def open_chart(
    raw: bytes,
    where: str,
    max_members: int = MAX_MEMBERS,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_unpacked_bytes: int = MAX_UNPACKED_BYTES,
) -> ChartArchive:
    """Check and unpack a chart archive, and its subcharts, into memory; raises ChartError naming `where` and
    the problem."""
    return _open(raw, where, _Budget(max_members, max_file_bytes, max_unpacked_bytes), depth=0)


def _open(raw: bytes, where: str, budget: _Budget, depth: int) -> ChartArchive:
    files = _unpack(raw, where, budget)
    return _chart(raw, files, where, budget, depth)


def _chart(raw: bytes, files: dict[str, bytes], where: str, budget: _Budget, depth: int) -> ChartArchive:
    metadata = _metadata(files, where)
    subcharts = _subcharts(files, where, budget, depth + 1)
    return ChartArchive(raw, files, metadata, subcharts)


def _subcharts(files: dict[str, bytes], where: str, budget: _Budget, depth: int) -> tuple[ChartArchive, ...]:
    """`charts/*.tgz` and `charts/<dir>/` (with a Chart.yaml), in name order."""
    found = []
    directories = sorted({p.split("/")[1] for p in files if p.startswith("charts/") and p.count("/") >= 2})
    archives = sorted(p for p in files if p.startswith("charts/") and p.count("/") == 1 and p.endswith(".tgz"))
    if (directories or archives) and depth > MAX_DEPTH:
        raise ChartError(f"{where}: subcharts nested more than {MAX_DEPTH} deep")
    for path in archives:
        found.append(_open(files[path], f"{where} {path}", budget, depth))
    for directory in directories:
        prefix = f"charts/{directory}/"
        inner = {p.removeprefix(prefix): data for p, data in files.items() if p.startswith(prefix)}
        if "Chart.yaml" in inner:
            found.append(_chart(b"", inner, f"{where} {prefix}", budget, depth))
    return tuple(found)


def _unpack(raw: bytes, where: str, budget: _Budget) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    top: str | None = None
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r|gz") as archive:
            for member in archive:
                path = _safe_path(member.name, where)
                if not (member.isfile() or member.isdir()):
                    raise ChartError(f"{where}: {member.name!r} is a link or a special file; charts hold plain files")
                first, _, rest = path.partition("/")
                top = top or first
                if first != top:
                    raise ChartError(f"{where}: entries under more than one top directory ({top!r}, {first!r})")
                budget.take(where, member.name, 0 if member.isdir() else member.size)
                if member.isdir():
                    continue
                handle = archive.extractfile(member)
                data = handle.read(member.size + 1) if handle else b""
                if len(data) != member.size:
                    raise ChartError(f"{where}: {member.name!r} is not the size its header says")
                if not rest:
                    raise ChartError(f"{where}: a file at the top level ({member.name!r}); charts sit in one directory")
                files[rest] = data
    except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError) as exc:  # OSError: not gzip, truncated
        raise ChartError(f"{where}: not a readable chart archive: {exc}") from None
    return files


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
    except (yaml.YAMLError, RecursionError) as exc:
        raise ChartError(f"{where}: Chart.yaml is not YAML: {exc}") from None
    if not isinstance(metadata, dict) or not metadata.get("name") or not metadata.get("version"):
        raise ChartError(f"{where}: Chart.yaml has no name or version")
    return metadata
