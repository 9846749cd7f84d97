"""A chart archive (`.tgz`) opened as untrusted input, in memory: regular files and directories under one
top directory, no absolute paths, no `..`, no links or devices, bounded in member count, per-file size and
total unpacked size (so a decompression bomb stops at the bound, not at the disk), and in the size of the headers
tar reads before a member (GNU long names, pax records), which `tarfile` would otherwise read whole into memory.
Chart.yaml and values.yaml are read with `untrusted.load_yaml`'s limits, and Chart.yaml's fields are checked for
the shapes Helm gives them.

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

from mirror.chart.merge import deep_merge
from mirror.errors import Kind, MirrorError
from mirror.untrusted import UntrustedInput, YamlLimits, clip, load_yaml

MAX_MEMBERS = 5000
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_UNPACKED_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 5  # a chart, its subcharts, theirs...: Helm charts in the wild nest two or three deep
# tar's extension headers: a GNU long name or link, or a pax record set, is a few hundred bytes in a real chart
MAX_HEADER_BYTES = 64 * 1024  # one extension header
MAX_HEADER_CHAIN = 8  # extension headers in front of one member (pax, long name, long link: three in practice)
MAX_HEADERS_BYTES = 4 * 1024 * 1024  # every extension header of one archive together
# Chart.yaml: a few KB in real charts (bitnami's, with twenty dependencies, about 500 nodes)
CHART_YAML_LIMITS = YamlLimits(max_bytes=1024 * 1024, max_depth=32, max_nodes=50_000)
# values.yaml: kube-prometheus-stack's, among the largest, is 180 KB, about 5000 lines and 10,000 nodes, 12 deep
VALUES_YAML_LIMITS = YamlLimits(max_bytes=MAX_FILE_BYTES, max_depth=100, max_nodes=500_000)
MAX_FIELD_CHARS = 256  # a chart's name, version, appVersion; a dependency's name, alias, version
MAX_CONDITION_CHARS = 1024  # a dependency's condition (comma-separated values paths) or repository


class ChartError(MirrorError):
    """A chart that cannot be fetched or is not safe to open; the message says which and why."""

    kind = Kind.SOURCE


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
            values = load_yaml(text, f"chart {self.name} {self.version}: values.yaml", VALUES_YAML_LIMITS) or {}
        except UntrustedInput as exc:
            raise ChartError(str(exc)) from None
        if not isinstance(values, dict):
            raise ChartError(f"chart {self.name} {self.version}: values.yaml is not a mapping")
        return values

    def values(self) -> dict[str, Any]:
        """values.yaml, parsed once per archive; callers layer onto it (`deep_merge`) and never change it."""
        return self._values

    def values_declared(self) -> dict[str, Any]:
        """What the chart's values may hold: its values.yaml over each subchart instance's own (under its alias
        or name, at any depth), and every chart's `global` together."""
        declared: dict[str, Any] = {}
        shared: dict[str, Any] = {}
        by_name: dict[str, list[dict[str, Any]]] = {}
        for entry in self.dependencies():
            by_name.setdefault(entry["name"], []).append(entry)
        for subchart in self.subcharts:
            own = subchart.values_declared()
            shared = deep_merge(shared, _mapping(own.get("global")))
            for entry in by_name.get(subchart.name) or [{}]:
                declared[str(entry.get("alias") or subchart.name)] = own
        merged = deep_merge(declared, self.values())
        merged["global"] = deep_merge(shared, _mapping(merged.get("global")))
        return merged


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
            raise ChartError(f"{where}: {_shown(name)} unpacks to {size} bytes (limit {self.file_bytes})")
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
        found.append(_open(files[path], f"{where} {clip(path, 100)}", budget, depth))
    for directory in directories:
        prefix = f"charts/{directory}/"
        inner = {p.removeprefix(prefix): data for p, data in files.items() if p.startswith(prefix)}
        if "Chart.yaml" in inner:
            found.append(_chart(b"", inner, f"{where} {clip(prefix, 100)}", budget, depth))
    return tuple(found)


def _unpack(raw: bytes, where: str, budget: _Budget) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    top: str | None = None
    try:
        with _BoundedTarFile.open(fileobj=io.BytesIO(raw), mode="r|gz", tarinfo=_BoundedTarInfo) as archive:
            for member in archive:
                path = _safe_path(member.name, where)
                if not (member.isfile() or member.isdir()):
                    raise ChartError(
                        f"{where}: {_shown(member.name)} is a link or a special file; charts hold plain files"
                    )
                first, _, rest = path.partition("/")
                top = top or first
                if first != top:
                    raise ChartError(
                        f"{where}: entries under more than one top directory ({_shown(top)}, {_shown(first)})"
                    )
                budget.take(where, member.name, 0 if member.isdir() else member.size)
                if member.isdir():
                    continue
                handle = archive.extractfile(member)
                data = handle.read(member.size + 1) if handle else b""
                if len(data) != member.size:
                    raise ChartError(f"{where}: {_shown(member.name)} is not the size its header says")
                if not rest:
                    raise ChartError(
                        f"{where}: a file at the top level ({_shown(member.name)}); charts sit in one directory"
                    )
                files[rest] = data
    except _HeaderRefused as exc:
        raise ChartError(f"{where}: {exc}") from None
    except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError) as exc:  # OSError: not gzip, truncated
        raise ChartError(f"{where}: not a readable chart archive: {clip(str(exc))}") from None
    return files


def _shown(name: str) -> str:
    """A path from the archive as a message shows it: quoted, one line, cut short."""
    return repr(clip(name, 200))


class _HeaderRefused(tarfile.TarError):
    """An extension header over a bound, refused before its body is read."""


_EXTENSION_TYPES = (
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
)


_HEADER_KINDS = {tarfile.GNUTYPE_LONGNAME: "GNU long-name", tarfile.GNUTYPE_LONGLINK: "GNU long-link"}


class _BoundedTarFile(tarfile.TarFile):
    """A TarFile whose headers are read by `_BoundedTarInfo`, with what its extension headers have cost so far."""

    header_chain = 0  # extension headers read since the last member
    header_bytes = 0  # extension header bytes read in the whole archive


class _BoundedTarInfo(tarfile.TarInfo):
    """`tarfile` reads an extension header's body whole, and the member after it recursively: each is checked
    here against the bounds before that (CPython 3.11's `TarInfo._proc_member` is the one entry point for every
    header type). Sparse files, which no chart holds, are refused, so their maps are never read."""

    def _proc_member(self, archive: tarfile.TarFile) -> tarfile.TarInfo:
        assert isinstance(archive, _BoundedTarFile)
        if self.type in _EXTENSION_TYPES:
            kind = _HEADER_KINDS.get(self.type, "pax")
            if self.size > MAX_HEADER_BYTES:
                raise _HeaderRefused(f"a {kind} header of {self.size} bytes (limit {MAX_HEADER_BYTES})")
            archive.header_chain += 1
            archive.header_bytes += self.size
            if archive.header_chain > MAX_HEADER_CHAIN:
                raise _HeaderRefused(f"more than {MAX_HEADER_CHAIN} extension headers in front of one member")
            if archive.header_bytes > MAX_HEADERS_BYTES:
                raise _HeaderRefused(f"extension headers of more than {MAX_HEADERS_BYTES} bytes in all")
        elif self.type == tarfile.GNUTYPE_SPARSE:
            raise _HeaderRefused("a sparse file; charts hold plain files")
        else:
            archive.header_chain = 0
        member: tarfile.TarInfo = super()._proc_member(archive)  # type: ignore[misc]
        return member

    def _proc_gnusparse_00(self, *args: Any) -> None:
        raise _HeaderRefused("a sparse file (pax GNU.sparse); charts hold plain files")

    _proc_gnusparse_01 = _proc_gnusparse_10 = _proc_gnusparse_00


def _safe_path(name: str, where: str) -> str:
    if name.startswith("/") or "\\" in name or "\x00" in name:
        raise ChartError(f"{where}: unsafe path {_shown(name)} in the archive")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ChartError(f"{where}: unsafe path {_shown(name)} in the archive")
    return posixpath.join(*parts)


def _metadata(files: dict[str, bytes], where: str) -> dict[str, Any]:
    if "Chart.yaml" not in files:
        raise ChartError(f"{where}: no Chart.yaml at the top of the chart")
    try:
        metadata = load_yaml(files["Chart.yaml"], f"{where}: Chart.yaml", CHART_YAML_LIMITS)
    except UntrustedInput as exc:
        raise ChartError(str(exc)) from None
    if not isinstance(metadata, dict) or not metadata.get("name") or not metadata.get("version"):
        raise ChartError(f"{where}: Chart.yaml has no name or version")
    if not _string_keys(metadata):
        raise ChartError(f"{where}: Chart.yaml has a key that is not a string")  # it is published as JSON
    for key in ("name", "version"):
        _field(metadata, key, where, "Chart.yaml", (str,))
    _field(metadata, "appVersion", where, "Chart.yaml", (str, int, float))  # `appVersion: 1.16` is a float
    dependencies = metadata.get("dependencies")
    if dependencies is not None and not isinstance(dependencies, list):
        raise ChartError(f"{where}: Chart.yaml: dependencies is a {type(dependencies).__name__}, not a list")
    for index, entry in enumerate(dependencies or []):
        _dependency(entry, where, f"Chart.yaml: dependencies[{index}]")
    return metadata


def _dependency(entry: Any, where: str, what: str) -> None:
    """A `dependencies` entry in the shape Helm reads it: a mapping with a name; alias, condition, version and
    repository strings; tags a list of strings."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
        raise ChartError(f"{where}: {what} is not a mapping with a name")
    for key in ("name", "alias", "version"):
        _field(entry, key, where, what, (str,))
    for key in ("condition", "repository"):
        _field(entry, key, where, what, (str,), MAX_CONDITION_CHARS)
    tags = entry.get("tags")
    if tags is not None and (
        not isinstance(tags, list) or not all(isinstance(tag, str) and len(tag) <= MAX_FIELD_CHARS for tag in tags)
    ):
        raise ChartError(f"{where}: {what}.tags is not a list of short strings")


def _field(
    mapping: dict[str, Any], key: str, where: str, what: str, kinds: tuple[type, ...], limit: int = MAX_FIELD_CHARS
) -> None:
    value = mapping.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ChartError(f"{where}: {what}: {key} is a {type(value).__name__}, not a string")
    if len(str(value)) > limit:
        raise ChartError(f"{where}: {what}: {key} is {len(str(value))} characters long (limit {limit})")


def _string_keys(node: Any) -> bool:
    """Every mapping key a string, at every depth (the loader bounds how many nodes there are)."""
    if isinstance(node, dict):
        return all(isinstance(key, str) and _string_keys(value) for key, value in node.items())
    if isinstance(node, list):
        return all(_string_keys(item) for item in node)
    return True


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
