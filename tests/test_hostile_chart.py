"""A hostile chart repository, end to end: every door it has (index.yaml, the `.tgz` and its tar headers, Chart.yaml,
values.yaml, a subchart's values, the number of images a chart brings) is bounded. Each case runs `mirror sync`
as a subprocess under `run_bounded` (1.5 GiB of address space, BOUND_SECONDS of wall clock) against a real chart
server on loopback, and must end with exit 1, one short line on stderr and no traceback, before anything is
copied (the target registry receives no write) or written (no output directory)."""

from __future__ import annotations

import asyncio
import gzip
import http.server
import io
import struct
import tarfile
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from mirror.chart import source
from mirror.chart.archive import MAX_HEADER_BYTES, ChartError, open_chart
from mirror.chart.source import ChartLocation, FetchLimits, http_client, read_index
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.samplechart import ChartRepository, ChartServer, chart_files, chart_server, package
from mirror.registry.retry import RetryPolicy
from mirror.untrusted import load_yaml
from tests.support import BoundedRun, http_server, requests_since, run_bounded, write_config, writes
from tests.test_sync import VERSION

BOUND_SECONDS = 60.0  # one bounded `mirror sync`: about 2 s when the door holds; a bomb would take minutes
MiB = 1024 * 1024
GiB = 1024 * MiB
CHART_VERSION = "2.10.0"
CHART_YAML = f"apiVersion: v2\nname: hami\nversion: {CHART_VERSION}\n"


def billion_laughs(levels: int = 9) -> str:
    """Top-level keys `l0`..`l8`, each a list of ten aliases of the one before: 10**9 strings by reference."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * 10)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def release_chart(host: str, **files: str | bytes) -> bytes:
    """The sample HAMi chart with some files replaced or added."""
    return package({**chart_files(host, CHART_VERSION), **files})


def with_subchart(host: str, values: str) -> bytes:
    sub = package({"Chart.yaml": "apiVersion: v2\nname: sub\nversion: 1.0.0\n", "values.yaml": values}, "sub")
    return release_chart(host, **{"charts/sub-1.0.0.tgz": sub})


def many_images(name: str, count: int, version: str = "1.0.0") -> bytes:
    values = {
        f"part{i}": {"image": {"registry": "quay.io", "repository": f"x/part{i}", "tag": "1"}} for i in range(count)
    }
    files = {"Chart.yaml": f"apiVersion: v2\nname: {name}\nversion: {version}\n", "values.yaml": yaml.safe_dump(values)}
    return package(files, name)


def gzip_with_zeros(head: bytes, zeros: int, tail: bytes) -> bytes:
    """`head`, `zeros` zero bytes and `tail`, gzipped in a few milliseconds: the zeros are one deflate block of a
    MiB, flushed so that it stands alone, repeated. A GiB of zeros is a MiB on the wire."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    start = deflate.compress(head) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(bytes(MiB)) + deflate.flush(zlib.Z_FULL_FLUSH)
    end = deflate.compress(tail) + deflate.flush()
    crc = zlib.crc32(head)
    for _ in range(zeros // MiB):
        crc = zlib.crc32(bytes(MiB), crc)
    crc = zlib.crc32(tail, crc)
    trailer = struct.pack("<II", crc, (len(head) + zeros + len(tail)) & 0xFFFFFFFF)
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + start + block * (zeros // MiB) + end + trailer


def tar_header(name: str, kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(tarfile.USTAR_FORMAT)


def header_bomb(kind: bytes, size: int = GiB) -> bytes:
    """A chart whose first header is an extension header (GNU long name `L`, pax `x`) of `size` bytes of zeros,
    then a Chart.yaml: without a bound on headers, tarfile reads the whole body into memory."""
    chart = CHART_YAML.encode()
    tail = tar_header("hami/Chart.yaml", tarfile.REGTYPE, len(chart)) + chart.ljust(512, b"\0") + bytes(1024)
    return gzip_with_zeros(tar_header("././@LongLink", kind, size), size, tail)


@dataclass
class RawIndex(ChartRepository):
    """A repository whose index.yaml is exactly `raw_index` (the archives are still served by file name)."""

    raw_index: bytes = b""

    def index(self) -> bytes:
        return self.raw_index


def index_yaml(extra: str = "", **entry: Any) -> bytes:
    """An index with one entry for hami (changed by `entry`), and `extra` YAML text after it."""
    fields = {"name": "hami", "version": CHART_VERSION, "urls": [f"hami-{CHART_VERSION}.tgz"], "digest": "0" * 64}
    return (yaml.safe_dump({"apiVersion": "v1", "entries": {"hami": [{**fields, **entry}]}}) + extra).encode()


Setup = Callable[[ChartServer, str], None]  # (server, the source registry's host): publish at /charts


def serving(make: Callable[[str], bytes]) -> Setup:
    def setup(server: ChartServer, host: str) -> None:
        server.repository("/charts").add("hami", CHART_VERSION, make(host))

    return setup


def raw_index(raw: bytes) -> Setup:
    def setup(server: ChartServer, host: str) -> None:
        server.repositories["/charts"] = RawIndex(url=f"{server.origin}/charts", raw_index=raw)

    return setup


def hostile_sync(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    setup: Setup,
    chart: dict[str, Any] | None = None,
    charts: Sequence[tuple[str, str, str]] = (),
) -> tuple[BoundedRun, int]:
    """`mirror sync` against the repository `setup` publishes at /charts (and `charts:` entries, each a base
    path, name and version on the same server): the run, and how many writes the target saw."""
    with chart_server() as server:
        setup(server, source.host)
        others = [{"repository": f"{server.origin}{path}", "name": name, "version": v} for path, name, v in charts]
        settings = {"repository": f"{server.origin}/charts", **(chart or {})}
        path = write_config(tmp_path / "mirror.yaml", source, [target], chart=settings, charts=others)
        data = yaml.safe_load(path.read_text())
        del data["images"]  # the chart names the images
        path.write_text(yaml.safe_dump(data))
        mark = len(target.access_log())
        run = run_bounded("sync", VERSION, "--config", str(path), cwd=tmp_path, seconds=BOUND_SECONDS)
    return run, len(writes(requests_since(target, mark)))


def assert_refused_in_one_line(run: BoundedRun, target_writes: int, tmp_path: Path, message: str) -> None:
    assert run.returncode == 1, run.stderr[-2000:]
    assert "Traceback" not in run.stderr, run.stderr[-2000:]
    lines = run.error_lines()
    assert 1 <= len(lines) <= 3 and all(len(line) < 1000 for line in lines), [line[:300] for line in lines]
    assert any(line.startswith("mirror: chart") and message in line for line in lines), lines
    assert target_writes == 0  # charts are read before anything is copied
    assert not (tmp_path / "out").exists()


def chart_yaml(text: str) -> Setup:
    return serving(lambda host: release_chart(host, **{"Chart.yaml": text}))


def values_yaml(text: str) -> Setup:
    return serving(lambda host: release_chart(host, **{"values.yaml": text}))


BLOCK_NESTED = "".join(f"{' ' * i}k{i}:\n" for i in range(150)) + " " * 150 + "x\n"
CASES: list[tuple[str, Setup, str]] = [
    ("index.yaml alias bomb", raw_index(index_yaml(billion_laughs())), "index.yaml: more than 5000000 YAML nodes"),
    ("index.yaml entries a list", raw_index(b"apiVersion: v1\nentries: [1, 2]\n"), "entries is not a mapping"),
    ("index.yaml chart a mapping", raw_index(b"entries: {hami: {version: 1}}\n"), "entries.hami is a dict"),
    ("index.yaml urls an int", raw_index(index_yaml(urls=5)), "urls is not a list of URLs"),
    ("index.yaml urls a mapping", raw_index(index_yaml(urls={"a": 1})), "urls is not a list of URLs"),
    ("index.yaml URL of 100k characters", raw_index(index_yaml(urls=["x" * 100_000])), "(limit 2048)"),
    ("index.yaml version a list", raw_index(index_yaml(version=[2, 10, 0])), "not published"),
    ("index.yaml digest a mapping", raw_index(index_yaml(digest={"sha256": 1})), "no sha256 digest"),
    ("index.yaml nested 500 deep", raw_index(index_yaml(f"deep: {'[' * 500}{']' * 500}\n")), "nested more than 64"),
    ("Chart.yaml alias bomb", chart_yaml(CHART_YAML + billion_laughs()), "Chart.yaml: more than 50000 YAML nodes"),
    ("Chart.yaml dependencies an int", chart_yaml(CHART_YAML + "dependencies: 5\n"), "dependencies is a int"),
    (
        "Chart.yaml dependency alias a list",
        chart_yaml(CHART_YAML + "dependencies: [{name: a, alias: [1]}]\n"),
        "dependencies[0]: alias is a list",
    ),
    (
        "Chart.yaml name of 100k characters",
        chart_yaml(f"name: {'n' * 100_000}\nversion: {CHART_VERSION}\n"),
        "name is 100000 characters long",
    ),
    ("Chart.yaml version a list", chart_yaml("name: hami\nversion: [1]\n"), "version is a list, not a string"),
    ("values.yaml alias bomb", values_yaml(billion_laughs()), "values.yaml: more than 500000 YAML nodes"),
    (
        "subchart values.yaml alias bomb",
        serving(lambda host: with_subchart(host, billion_laughs())),
        "chart sub 1.0.0: values.yaml: more than 500000 YAML nodes",
    ),
    ("values.yaml global a list", values_yaml("global: [1]\n"), "global is a list, not a mapping"),
    ("values.yaml global.imageRegistry a list", values_yaml("global: {imageRegistry: [a]}\n"), "imageRegistry is a"),
    ("values.yaml nested 5000 deep", values_yaml(f"a: {'[' * 5000}{']' * 5000}\n"), "values.yaml: not usable YAML"),
    ("values.yaml nested 150 deep (block style)", values_yaml(BLOCK_NESTED), "values.yaml: YAML nested more than 100"),
    (
        "GNU long-name header of 1 GiB",
        serving(lambda host: header_bomb(tarfile.GNUTYPE_LONGNAME)),
        f"a GNU long-name header of {GiB} bytes (limit {MAX_HEADER_BYTES})",
    ),
    (
        "pax header of 1 GiB",
        serving(lambda host: header_bomb(tarfile.XHDTYPE)),
        f"a pax header of {GiB} bytes (limit {MAX_HEADER_BYTES})",
    ),
]


@pytest.mark.parametrize(("case", "setup", "message"), CASES, ids=[case[0] for case in CASES])
def test_a_hostile_chart_repository_is_refused_in_one_line_before_anything_is_copied(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, case: str, setup: Setup, message: str
) -> None:
    run, target_writes = hostile_sync(tmp_path, source, target, setup)
    assert_refused_in_one_line(run, target_writes, tmp_path, message)


def test_a_chart_bringing_more_images_than_chart_max_images_is_refused(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    setup = serving(lambda host: many_images("hami", 30, CHART_VERSION))
    run, target_writes = hostile_sync(tmp_path, source, target, setup, chart={"max_images": 5})
    assert_refused_in_one_line(run, target_writes, tmp_path, "hami 2.10.0: 6 image blocks found so far")
    assert "chart.max_images (5)" in run.stderr


def test_chart_max_images_holds_for_the_charts_of_the_install(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """A `charts:` entry is bounded by the same setting; the release chart (seven blocks) is within it (read
    with values.yaml alone: this case is about the count, not the render)."""

    def setup(server: ChartServer, host: str) -> None:
        server.repository("/charts").add("hami", CHART_VERSION, release_chart(host))
        server.repository("/others").add("many", "1.0.0", many_images("many", 30))

    run, target_writes = hostile_sync(
        tmp_path,
        source,
        target,
        setup,
        chart={"max_images": 10, "renderer": "values"},
        charts=[("/others", "many", "1.0.0")],
    )
    assert_refused_in_one_line(run, target_writes, tmp_path, "chart many 1.0.0: 11 image blocks found so far")
    assert "chart.max_images (10)" in run.stderr


# The tar headers' other doors, on the archive alone (no subprocess): each refused before its body is read.


def _archive(*headers: bytes) -> bytes:
    """A chart archive of one Chart.yaml with `headers` (raw tar blocks) in front of it."""
    chart = CHART_YAML.encode()
    member = tar_header("hami/Chart.yaml", tarfile.REGTYPE, len(chart)) + chart.ljust(512, b"\0")
    return gzip.compress(b"".join(headers) + member + bytes(1024))


def _blocks(data: bytes) -> bytes:
    return data.ljust(-(-len(data) // 512) * 512, b"\0")


def _pax(records: dict[str, str]) -> bytes:
    """A pax extended header: records `<length> <key>=<value>\n`, the length counting its own digits."""
    text = ""
    for key, value in records.items():
        line = f" {key}={value}\n"
        length = len(line) + 1
        while length != len(line) + len(str(length)):
            length = len(line) + len(str(length))
        text += f"{length}{line}"
    return tar_header("././@PaxHeader", tarfile.XHDTYPE, len(text)) + _blocks(text.encode())


HEADER_CASES: list[tuple[str, Callable[[], bytes], str]] = [
    ("nine pax headers in a row", lambda: _archive(*[_pax({"comment": "x"})] * 9), "more than 8 extension headers"),
    ("a GNU sparse member", lambda: _archive(tar_header("hami/sparse", tarfile.GNUTYPE_SPARSE, 0)), "a sparse file"),
    (
        "a pax GNU sparse 1.0 member",
        lambda: _archive(_pax({"GNU.sparse.major": "1", "GNU.sparse.minor": "0"})),
        "pax GNU.sparse",
    ),
    (
        "a long name one byte over the limit",
        lambda: _archive(tar_header("././@LongLink", tarfile.GNUTYPE_LONGNAME, MAX_HEADER_BYTES + 1)),
        f"a GNU long-name header of {MAX_HEADER_BYTES + 1} bytes",
    ),
]


@pytest.mark.parametrize(("case", "raw", "message"), HEADER_CASES, ids=[case[0] for case in HEADER_CASES])
def test_tar_extension_headers_are_bounded(case: str, raw: Callable[[], bytes], message: str) -> None:
    with pytest.raises(ChartError, match=message):
        open_chart(raw(), "chart hami 2.10.0")


def test_a_long_name_within_the_limit_is_shown_cut_short() -> None:
    """A 60 KiB path (under the header limit) of a symlink: refused, and the message carries a few hundred
    characters of it."""
    long_name = ("hami/" + "a" * 60_000).encode() + b"\0"
    link = tar_header("././@LongLink", tarfile.GNUTYPE_LONGNAME, len(long_name)) + _blocks(long_name)
    with pytest.raises(ChartError, match="link or a special file") as refused:
        open_chart(_archive(link + tar_header("hami/x", tarfile.SYMTYPE, 0)), "chart hami 2.10.0")
    assert len(str(refused.value)) < 400


def test_a_real_pax_archive_still_opens() -> None:
    """Python's own pax writer (long names, a pax header per member) within the bounds."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT) as archive:
        for path, text in {"Chart.yaml": CHART_YAML, f"templates/{'long-' * 60}name.yaml": "kind: x\n"}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"hami/{path}")
            info.size, info.pax_headers = len(data), {"comment": "é" * 100}
            archive.addfile(info, io.BytesIO(data))
    chart = open_chart(out.getvalue(), "chart hami 2.10.0")
    assert chart.name == "hami" and len(chart.files) == 2


def big_index(entries: int) -> bytes:
    """A repository index of `entries` versions of one chart: about 300 bytes of YAML each."""
    versions = [
        {
            "apiVersion": "v2",
            "name": "big",
            "version": f"1.{n}.0",
            "appVersion": f"1.{n}.0",
            "digest": "a" * 64,
            "urls": [f"https://charts.invalid/big-1.{n}.0.tgz"],
            "created": "2026-01-01T00:00:00Z",
            "description": "x" * 40,
        }
        for n in range(entries)
    ]
    return yaml.safe_dump({"apiVersion": "v1", "entries": {"big": versions}}).encode()


def test_a_large_index_is_read_while_the_loop_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index.yaml of 6 MB takes seconds to read with the untrusted loader's bounds; `mirror serve` answers
    webhooks, health checks and its lease heartbeat on the same loop meanwhile, so it is read in a thread. A
    ticker on the loop goes on ticking while the index is parsed (on the loop it could not tick at all)."""
    raw = big_index(20_000)
    parses: list[tuple[float, float]] = []

    def timed_load_yaml(*args: Any) -> Any:
        started = time.monotonic()
        try:
            return load_yaml(*args)
        finally:
            parses.append((started, time.monotonic()))

    monkeypatch.setattr(source, "load_yaml", timed_load_yaml)

    class Index(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    async def read_with_a_ticker(url: str) -> tuple[int, list[float]]:
        ticks: list[float] = []
        done = asyncio.Event()

        async def tick() -> None:
            while not done.is_set():
                await asyncio.sleep(0.01)
                ticks.append(time.monotonic())

        ticker = asyncio.ensure_future(tick())
        limits = FetchLimits(32 * 1024 * 1024, 30, RetryPolicy(attempts=1))
        async with http_client(limits) as client:
            entries = await read_index(client, ChartLocation(url, "big"))
        done.set()
        await ticker
        return len(entries), ticks

    with http_server(Index) as server:
        read, ticks = asyncio.run(read_with_a_ticker(f"http://127.0.0.1:{server.server_address[1]}"))
    assert read == 20_000 and len(parses) == 1
    began, ended = parses[0]
    during = [t for t in ticks if began < t < ended]
    assert len(during) >= 3, f"{len(during)} ticks in a parse of {ended - began:.2f} s"
