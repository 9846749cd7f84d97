"""What every part of the benchmark shares: the image sets, the registries, running each tool, counting the
requests a registry logged, and the goals."""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml
from linkproxy import LinkProxy, LinkShape

from mirror.demo import certs, procstat
from mirror.demo.localregistry import AccessEntry, LocalRegistry, client_settings, start_registry
from mirror.demo.procstat import Measured
from mirror.demo.sample import MiB, SampleBuilder
from mirror.engine.clients import open_client

# The interpreter that runs mirror: scripts/bench.sh points it at a venv holding what the container image
# installs, so the test tools' packages (selenium brings trio, which httpcore imports when it finds it) do not
# count against mirror.
MIRROR_PYTHON = os.environ.get("BENCH_MIRROR_PYTHON") or sys.executable
VERSION = "v2.10.0"  # a HAMi release version: values are written for charts 2.7.0 and later
PLATFORMS = ("linux/amd64", "linux/arm64")
KiB = 1024


@dataclass
class ImageSet:
    names: list[str]
    blobs: dict[str, int]  # distinct blob digest -> size
    per_image: dict[str, dict[str, int]] = field(default_factory=dict)  # name -> its blobs

    @property
    def total_bytes(self) -> int:
        return sum(self.blobs.values())

    def first(self, count: int) -> ImageSet:
        """The first `count` images, with only their blobs."""
        names = self.names[:count]
        per_image = {name: self.per_image[name] for name in names}
        blobs = {digest: size for image in per_image.values() for digest, size in image.items()}
        return ImageSet(names, blobs, per_image)


@dataclass(frozen=True)
class Shape:
    """Layer sizes of a set: one base layer shared by every image; per image one layer shared by its platforms;
    per platform `own` layers of their own. Sizes are drawn as randint(low, high) * unit."""

    base: int
    low: int
    high: int
    unit: int
    own: int = 2


REALISTIC = Shape(base=24 * MiB, low=4, high=30, unit=MiB)  # 4-30 MiB layers
SMALL = Shape(base=1 * MiB, low=1, high=4, unit=256 * KiB)  # 256 KiB - 1 MiB layers


async def build_set(registry: LocalRegistry, images: int, seed: int, shape: Shape = REALISTIC) -> ImageSet:
    """`images` multi-arch OCI indexes (2 platforms + 2 attestations each) in `bench/app<N>:VERSION`."""
    settings = client_settings(registry.host)
    client = open_client(settings, registry.host)
    rng = random.Random(seed)
    base = rng.randbytes(shape.base)
    names: list[str] = []
    blobs: dict[str, int] = {}
    per_image: dict[str, dict[str, int]] = {}
    try:
        for index in range(images):
            name = f"bench/app{index}"
            builder = SampleBuilder(client, name, seed=seed * 1000 + index)
            common = builder.random_layer(rng.randint(shape.low, shape.high) * shape.unit)  # both platforms'
            entries = []
            for platform_name in PLATFORMS:
                own = (builder.random_layer(rng.randint(shape.low, shape.high) * shape.unit) for _ in range(shape.own))
                entries.append(await builder.image_manifest(platform_name, [base, common, *own]))
            entries += [await builder.attestation(e["digest"]) for e in list(entries)]
            index_doc = {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": entries,
            }
            image = await builder.finish(VERSION, await builder.manifest(index_doc, VERSION))
            names.append(name)
            blobs.update(image.blobs)
            per_image[name] = dict(image.blobs)
    finally:
        await client.aclose()
    return ImageSet(names, blobs, per_image)


async def build_layered(registry: LocalRegistry, name: str, shared: int, own: int, seed: int) -> ImageSet:
    """One 2-platform index in `name:VERSION`: a `shared` layer both platforms use and an `own` one each."""
    settings = client_settings(registry.host)
    client = open_client(settings, registry.host)
    try:
        builder = SampleBuilder(client, name, seed=seed)
        rng = random.Random(f"shared-{seed}")  # not the builder's sequence: its layers differ
        chunk = 64 * MiB  # randbytes takes at most 2**31 bits at once
        common = b"".join(rng.randbytes(min(chunk, shared - at)) for at in range(0, shared, chunk))
        entries = [
            await builder.image_manifest(platform_name, [common, builder.random_layer(own)])
            for platform_name in PLATFORMS
        ]
        del common
        entries += [await builder.attestation(e["digest"]) for e in list(entries)]
        index_doc = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": entries}
        image = await builder.finish(VERSION, await builder.manifest(index_doc, VERSION))
    finally:
        await client.aclose()
    return ImageSet([name], dict(image.blobs), {name: dict(image.blobs)})


class HasHost(Protocol):
    @property
    def host(self) -> str: ...


@dataclass(frozen=True)
class Host:
    """A registry host no process serves (for configs that are only loaded)."""

    host: str


PLAIN: dict[str, Any] = {"plain_http": True}


def mirror_config(
    path: Path,
    source: HasHost,
    targets: list[Any],
    images: ImageSet,
    transport: dict[str, Any] | None = None,
) -> Path:
    """A config copying `images` to every target. `transport` is each registry's entry (default: plain HTTP).
    Each config keeps its own state_dir beside it, so a re-run with it sees what its cold run kept, and no
    other run's."""
    config = {
        "source": {"registry": source.host},
        "targets": [{"name": f"t{i}", "registry": t.host, "namespace": "mirrored"} for i, t in enumerate(targets)],
        "images": [{"name": n.split("/")[1], "source": n, "tag": "{version}"} for n in images.names],
        "values": {"unmirrored": "warn"},  # the bench images are not HAMi's
        "output_dir": str(path.parent / "out"),
        "registries": {r.host: dict(transport or PLAIN) for r in [source, *targets]},
        "lock_dir": str(path.parent / "locks"),
        "state_dir": str(path.parent / f"state-{path.stem}"),
        "spool": {"dir": str(path.parent / "spool")},
    }
    path.write_text(yaml.safe_dump(config))
    return path


TIMEOUT = 300.0  # seconds one tool run may take before it counts as hung (`--timeout`)


class ToolFailed(RuntimeError):
    """A tool exited non-zero or hung: the part it ran in is reported as failed, the other parts go on."""


def run_measured(command: list[str], timeout: float | None = None, poll: float = 0.01) -> Measured:
    """`mirror.demo.procstat.run_measured` (wall time, peak VmHWM read from /proc while it runs, stderr to a
    file); a child still running after `timeout` (default TIMEOUT) is killed with its process group: ToolFailed."""
    timeout = TIMEOUT if timeout is None else timeout
    try:
        return procstat.run_measured(command, poll, timeout)
    except subprocess.TimeoutExpired as expired:
        tail = (expired.stderr or b"").decode("utf-8", errors="replace")[-1500:]
        raise ToolFailed(f"{' '.join(command[:4])} ... still running after {timeout:g} s, killed:\n{tail}") from None


def run_mirror(config: Path) -> Measured:
    result = run_measured([MIRROR_PYTHON, "-m", "mirror", "sync", VERSION, "--config", str(config)])
    if result.returncode != 0:
        raise ToolFailed(f"mirror failed ({config.name}):\n{result.stderr[-2000:]}")
    return result


SKOPEO_PLAIN = ("--src-tls-verify=false", "--dest-tls-verify=false")


def run_skopeo(source: HasHost, targets: list[Any], images: ImageSet, tls: tuple[str, ...] = SKOPEO_PLAIN) -> Measured:
    """One `skopeo copy --all` per image per target, one after the other: today's procedure."""
    seconds, peak, cpu = 0.0, 0.0, 0.0
    for target in targets:
        for name in images.names:
            result = run_measured(
                [
                    "skopeo",
                    "copy",
                    "--all",
                    "--quiet",
                    "--preserve-digests",
                    *tls,
                    f"docker://{source.host}/{name}:{VERSION}",
                    f"docker://{target.host}/mirrored/{name.split('/')[1]}:{VERSION}",
                ]
            )
            if result.returncode != 0:
                raise ToolFailed(f"skopeo failed:\n{result.stderr[-2000:]}")
            seconds += result.seconds
            cpu += result.cpu_seconds
            peak = max(peak, result.peak_rss_mb)
    return Measured(0, seconds, peak, "", cpu)


def run_tool(tool: str, config: Path, source: HasHost, targets: list[Any], images: ImageSet) -> Measured:
    return run_mirror(config) if tool == "mirror" else run_skopeo(source, targets, images)


def alternating(round_number: int) -> list[str]:
    return ["mirror", "skopeo"] if round_number % 2 == 0 else ["skopeo", "mirror"]


# Requests, from a registry's access log


@dataclass
class Counts:
    manifest_gets: int = 0
    blob_gets: int = 0
    heads: int = 0
    blob_bytes: int = 0


def source_requests(source: LocalRegistry, mark: int) -> Counts:
    counts = Counts()
    for entry in source.access_log()[mark:]:
        if entry.method == "HEAD":
            counts.heads += 1
        elif entry.method == "GET" and "/manifests/" in entry.path:
            counts.manifest_gets += 1
        elif entry.method == "GET" and "/blobs/" in entry.path:
            counts.blob_gets += 1
            counts.blob_bytes += entry.size
    return counts


KINDS = ("manifest GET", "manifest HEAD", "manifest PUT", "blob GET", "blob HEAD", "upload", "other")
SHORT = {
    "manifest GET": "mGET",
    "manifest HEAD": "mHEAD",
    "manifest PUT": "mPUT",
    "blob GET": "bGET",
    "blob HEAD": "bHEAD",
    "upload": "up",
    "other": "other",
}
LEGEND = (
    "mGET/mHEAD/mPUT: manifest GET/HEAD/PUT; bGET/bHEAD: blob GET/HEAD; up: upload POST/PATCH/PUT (mount "
    "attempts included); other: the rest (`GET /v2/`, tag lists, referrers listings)"
)


def kind_of(entry: AccessEntry) -> str:
    path = entry.path.split("?", 1)[0]
    if "/blobs/uploads" in path:
        return "upload" if entry.method in ("POST", "PATCH", "PUT") else "other"
    if "/manifests/" in path and entry.method in ("GET", "HEAD", "PUT"):
        return f"manifest {entry.method}"
    if "/blobs/" in path and entry.method in ("GET", "HEAD"):
        return f"blob {entry.method}"
    return "other"


def requests_by_kind(entries: list[AccessEntry]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for entry in entries:
        kind = kind_of(entry)
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def add_kinds(*counts: dict[str, int]) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in counts:
        for kind, count in one.items():
            total[kind] = total.get(kind, 0) + count
    return total


def describe_kinds(kinds: dict[str, int], short: bool = False) -> str:
    shown = [(SHORT[k] if short else k, kinds[k]) for k in KINDS if kinds.get(k)]
    return ", ".join(f"{kind} {count}" for kind, count in shown) or "none"


class Marks:
    """Where each registry's access log stood, to count what came after."""

    def __init__(self, *registries: LocalRegistry) -> None:
        self.registries = registries
        self.marks = [len(r.access_log()) for r in registries]

    def entries(self) -> list[AccessEntry]:
        return [e for r, mark in zip(self.registries, self.marks, strict=True) for e in r.access_log()[mark:]]

    def kinds(self) -> dict[str, int]:
        return requests_by_kind(self.entries())

    def protocols(self) -> dict[str, int]:
        seen: dict[str, int] = {}
        for registry, mark in zip(self.registries, self.marks, strict=True):
            for protocol in protocols_logged(registry)[mark:]:
                seen[protocol] = seen.get(protocol, 0) + 1
        return seen


_ACCESS = re.compile(r'"[A-Z]+ \S+ (?P<protocol>HTTP/[\d.]+)" \d{3} (\d+)?')


def protocols_logged(registry: LocalRegistry) -> list[str]:
    """The protocol of each request in the access log, in the order (and by the rule) of `access_log()`."""
    text = registry.log_path.read_text(encoding="utf-8", errors="replace")
    return [m["protocol"] for line in text.splitlines() if " - - [" in line and (m := _ACCESS.search(line))]


# Figures


@dataclass
class Series:
    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(value)

    def __str__(self) -> str:
        if not self.values:
            return "-"
        med = statistics.median(self.values)
        if len(self.values) == 1:
            return f"{med:.2f}"
        return f"{med:.2f} ({min(self.values):.2f}-{max(self.values):.2f})"

    @property
    def median(self) -> float:
        return statistics.median(self.values)


@dataclass
class Goal:
    """One line of the goals table: `measured` must be at most `limit`."""

    name: str
    measured: float
    limit: float
    unit: str
    mirror: str
    skopeo: str
    digits: int = 2

    @classmethod
    def versus(cls, name: str, mirror_seconds: float, skopeo_seconds: float, limit: float) -> Goal:
        """mirror's time as a ratio of skopeo's."""
        return cls(
            name, mirror_seconds / skopeo_seconds, limit, "x", f"{mirror_seconds:.2f} s", f"{skopeo_seconds:.2f} s"
        )

    @classmethod
    def seconds(cls, name: str, seconds: float, limit: float) -> Goal:
        return cls(name, seconds, limit, " s", f"{seconds:.2f} s", "-")

    @classmethod
    def own(
        cls, name: str, mirror: float, skopeo: float | None, limit: float, unit: str = "x", digits: int = 2
    ) -> Goal:
        """A figure each tool has of its own (a growth ratio, a peak); the limit applies to mirror's."""
        shown = "-" if skopeo is None else f"{skopeo:.{digits}f}{unit}"
        return cls(name, mirror, limit, unit, f"{mirror:.{digits}f}{unit}", shown, digits)

    @property
    def met(self) -> bool:
        return self.measured <= self.limit

    def row(self) -> str:
        verdict = "met" if self.met else f"MISSED by {self.measured - self.limit:.{self.digits}f}{self.unit}"
        return (
            f"| {self.name} | {self.mirror} | {self.skopeo} | {self.measured:.{self.digits}f}{self.unit} "
            f"| <= {self.limit:g}{self.unit} | {verdict} |"
        )


# Registries


class Bench:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.registries: list[LocalRegistry] = []
        self.proxies: list[LinkProxy] = []
        self.counter = 0

    def registry(self, label: str, tls: tuple[Path, Path] | None = None) -> LocalRegistry:
        self.counter += 1
        registry = start_registry(self.work / f"{label}-{self.counter}", tls=tls)
        self.registries.append(registry)
        return registry

    def twin(self, label: str, of: LocalRegistry, tls: tuple[Path, Path]) -> LocalRegistry:
        """A registry serving `of`'s storage over HTTPS (read only: nothing is pushed to a twin), with an access
        log of its own: the set is built once, over plain HTTP."""
        self.counter += 1
        workdir = self.work / f"{label}-{self.counter}"
        workdir.mkdir(parents=True)
        (workdir / "data").symlink_to(of.storage.resolve(), target_is_directory=True)
        registry = start_registry(workdir, tls=tls)
        self.registries.append(registry)
        return registry

    def drop(self, *registries: LocalRegistry) -> None:
        for registry in registries:
            registry.stop()
            shutil.rmtree(registry.workdir, ignore_errors=True)
            self.registries.remove(registry)

    def link(self, registry: LocalRegistry, shape: LinkShape) -> Linked:
        """`registry` behind a link proxy, stopped by `close` if nobody stopped it before."""
        proxy = LinkProxy(registry.port, shape).start()
        self.proxies.append(proxy)
        return Linked(registry, proxy)

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.stop()
        for registry in list(self.registries):
            registry.stop()


@dataclass
class Linked:
    """A registry behind a simulated link: the tools talk to `host`, the access log is the registry's."""

    registry: LocalRegistry
    proxy: LinkProxy

    @property
    def host(self) -> str:
        return self.proxy.host

    def stop(self) -> None:
        self.proxy.stop()


SOURCE_LINK = LinkShape(round_trip=0.010)
TARGET_LINK = LinkShape(round_trip=0.080, bytes_per_second=200e6 / 8)


# TLS


@dataclass(frozen=True)
class Certificates:
    ca: Path  # PEM, the CA to trust
    cert: Path  # the registries' server certificate (127.0.0.1 and localhost)
    key: Path
    cert_dir: Path  # a directory holding ca.crt, for skopeo's --src-cert-dir / --dest-cert-dir

    @property
    def pair(self) -> tuple[Path, Path]:
        return self.cert, self.key

    @property
    def skopeo_flags(self) -> tuple[str, ...]:
        return (
            "--src-tls-verify=true",
            "--dest-tls-verify=true",
            f"--src-cert-dir={self.cert_dir}",
            f"--dest-cert-dir={self.cert_dir}",
        )


def make_certificates(directory: Path) -> Certificates:
    """A throwaway CA and a server certificate for 127.0.0.1 and localhost, valid for a day."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, cert, key = certs.make_certificates(directory, {"localhost": "127.0.0.1"})
    made = Certificates(ca, cert, key, directory / "certs")
    made.cert_dir.mkdir(exist_ok=True)
    (made.cert_dir / "ca.crt").write_bytes(ca.read_bytes())
    return made


@contextlib.contextmanager
def trusting(ca: Path) -> Iterator[None]:
    """SSL_CERT_FILE set for the children started meanwhile (mirror's httpx reads it)."""
    before = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = str(ca)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SSL_CERT_FILE", None)
        else:
            os.environ["SSL_CERT_FILE"] = before
