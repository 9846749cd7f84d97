"""mirror vs skopeo on the same local registries, side by side.

Starts throwaway `docker-registry` instances on loopback, builds a realistic image set (multi-arch OCI
indexes with BuildKit-style attestations, 4-30 MiB random layers, layers shared across platforms and
images), then measures, alternating the tools each round:

1. cold copy of the set into an empty target: `mirror sync` (one run) vs `skopeo copy --all` (one run per
   image, as people do today) vs the parallel-upload floor (4 concurrent curl uploads of the blobs);
2. no-op re-sync: wall time and source requests by kind, from the source registry's access log;
3. fan-out to 3 targets: source bytes read and wall time, mirror (one run) vs skopeo (three runs);
4. peak RSS of each (VmHWM);
5. scaling: the cold copy at 1x and 5x the set, and the no-op re-sync of the largest;
6. start-up: `mirror --help` and loading the config;
7. a simulated cross-border link (`--link cross-border`): a TCP proxy of ours in front of each registry
   (source 10 ms round trip; target 80 ms and 200 Mbit/s per connection); cold copy, no-op and fan-out to
   three regions, with every request counted by kind from the registries' access logs.

Every goal is printed at the end with mirror and skopeo side by side.

    python bench/run.py [--rounds 3] [--images 2] [--scales 1,5] [--link both] [--out bench/results]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import datetime
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml
from linkproxy import LinkProxy, LinkShape

from mirror.demo.localregistry import AccessEntry, LocalRegistry, client_settings, start_registry
from mirror.demo.procstat import Measured, run_measured
from mirror.demo.sample import MiB, SampleBuilder
from mirror.engine.clients import open_client

VERSION = "v2.10.0"  # a HAMi release version: values are written for charts 2.7.0 and later
PLATFORMS = ("linux/amd64", "linux/arm64")


@dataclass
class ImageSet:
    names: list[str]
    blobs: dict[str, int]  # distinct blob digest -> size

    @property
    def total_bytes(self) -> int:
        return sum(self.blobs.values())


async def build_set(registry: LocalRegistry, images: int, seed: int) -> ImageSet:
    """`images` images; every image shares a base layer, and each pair of platforms shares one more."""
    settings = client_settings(registry.host)
    client = open_client(settings, registry.host)
    rng = random.Random(seed)
    base = rng.randbytes(24 * MiB)
    names, blobs = [], {}
    try:
        for index in range(images):
            name = f"bench/app{index}"
            builder = SampleBuilder(client, name, seed=seed * 1000 + index)
            common = builder.random_layer(rng.randint(4, 30) * MiB)  # shared by both platforms of this image
            entries = []
            for platform_name in PLATFORMS:
                layers = [base, common, *(builder.random_layer(rng.randint(4, 30) * MiB) for _ in range(2))]
                entries.append(await builder.image_manifest(platform_name, layers))
            entries += [await builder.attestation(e["digest"]) for e in list(entries)]
            index_doc = {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": entries,
            }
            image = await builder.finish(VERSION, await builder.manifest(index_doc, VERSION))
            names.append(name)
            blobs.update(image.blobs)
    finally:
        await client.aclose()
    return ImageSet(names, blobs)


class HasHost(Protocol):
    @property
    def host(self) -> str: ...


def mirror_config(path: Path, source: HasHost, targets: list[Any], images: ImageSet) -> Path:
    config = {
        "source": {"registry": source.host},
        "targets": [{"name": f"t{i}", "registry": t.host, "namespace": "mirrored"} for i, t in enumerate(targets)],
        "images": [{"name": n.split("/")[1], "source": n, "tag": "{version}"} for n in images.names],
        "values": {"unmirrored": "warn"},  # the bench images are not HAMi's
        "output_dir": str(path.parent / "out"),
        "registries": {r.host: {"plain_http": True} for r in [source, *targets]},
        "lock_dir": str(path.parent / "locks"),
        "spool": {"dir": str(path.parent / "spool")},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def run_mirror(config: Path) -> Measured:
    result = run_measured([sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config)])
    if result.returncode != 0:
        raise SystemExit(f"mirror failed:\n{result.stderr[-2000:]}")
    return result


def run_skopeo(source: Any, targets: list[Any], images: ImageSet) -> Measured:
    """One `skopeo copy --all` per image per target, one after the other: today's procedure."""
    seconds, peak = 0.0, 0.0
    for target in targets:
        for name in images.names:
            result = run_measured(
                [
                    "skopeo",
                    "copy",
                    "--all",
                    "--quiet",
                    "--preserve-digests",
                    "--src-tls-verify=false",
                    "--dest-tls-verify=false",
                    f"docker://{source.host}/{name}:{VERSION}",
                    f"docker://{target.host}/mirrored/{name.split('/')[1]}:{VERSION}",
                ]
            )
            if result.returncode != 0:
                raise SystemExit(f"skopeo failed:\n{result.stderr[-2000:]}")
            seconds += result.seconds
            peak = max(peak, result.peak_rss_mb)
    return Measured(0, seconds, peak, "")


def upload_floor(source: LocalRegistry, target: LocalRegistry, images: ImageSet) -> float:
    """Four concurrent curl uploads of every distinct blob, read from the source's own storage."""

    def upload(digest: str) -> None:
        head = subprocess.run(
            ["curl", "-sS", "-X", "POST", "-D", "-", "-o", "/dev/null", f"{target.url}/v2/floor/blobs/uploads/"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        location = next(
            line.split(" ", 1)[1].strip() for line in head.splitlines() if line.lower().startswith("location:")
        )
        sep = "&" if "?" in location else "?"
        subprocess.run(
            [
                "curl",
                "-sS",
                "-f",
                "-o",
                "/dev/null",
                "-X",
                "PUT",
                "-H",
                "Content-Type: application/octet-stream",
                "--data-binary",
                f"@{source.blob_path(digest)}",
                f"{location}{sep}digest={digest}",
            ],
            check=True,
        )

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(upload, images.blobs))
    return time.monotonic() - started


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


@dataclass
class Series:
    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(value)

    def __str__(self) -> str:
        if not self.values:
            return "-"
        med = statistics.median(self.values)
        return f"{med:.2f} ({min(self.values):.2f}-{max(self.values):.2f})"

    @property
    def median(self) -> float:
        return statistics.median(self.values)


class Bench:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.registries: list[LocalRegistry] = []
        self.counter = 0

    def registry(self, label: str) -> LocalRegistry:
        self.counter += 1
        registry = start_registry(self.work / f"{label}-{self.counter}")
        self.registries.append(registry)
        return registry

    def drop(self, *registries: LocalRegistry) -> None:
        for registry in registries:
            registry.stop()
            shutil.rmtree(registry.workdir, ignore_errors=True)
            self.registries.remove(registry)

    def close(self) -> None:
        for registry in list(self.registries):
            registry.stop()


def machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError, StopIteration):
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    skopeo = subprocess.run(["skopeo", "--version"], capture_output=True, text=True).stdout.strip()
    return (
        f"{os.cpu_count()} cores ({cpu}), {memory:.0f} GiB, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, {skopeo}, docker-registry (distribution) from Debian"
    )


def requests_by_kind(entries: list[AccessEntry]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for entry in entries:
        if entry.method == "GET" and "/manifests/" in entry.path:
            kind = "GET manifest"
        elif entry.method == "GET" and "/blobs/uploads/" not in entry.path and "/blobs/" in entry.path:
            kind = "GET blob"
        elif entry.method == "HEAD":
            kind = "HEAD"
        else:
            kind = entry.method
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def describe_kinds(kinds: dict[str, int]) -> str:
    return ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())) or "none"


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


@dataclass
class Goal:
    name: str
    mirror: float
    skopeo: float | None
    limit: float  # the most mirror may take: a ratio to skopeo, or seconds when skopeo is None
    unit: str = "x"

    @property
    def value(self) -> float:
        return self.mirror / self.skopeo if self.skopeo else self.mirror

    @property
    def met(self) -> bool:
        return self.value <= self.limit

    def row(self) -> str:
        measured = f"{self.value:.2f}{self.unit}"
        skopeo = f"{self.skopeo:.2f} s" if self.skopeo is not None else "-"
        verdict = "met" if self.met else f"MISSED by {self.value - self.limit:.2f}{self.unit}"
        return f"| {self.name} | {self.mirror:.2f} s | {skopeo} | {measured} | <= {self.limit}{self.unit} | {verdict} |"


def startup(rounds: int, config: Path) -> tuple[float, float]:
    """Median wall seconds of `mirror --help` and of loading the config in a fresh interpreter."""
    load = f"from mirror.settings import load_settings; load_settings(__import__('pathlib').Path({str(config)!r}))"
    helps, loads = Series(), Series()
    for _ in range(max(rounds, 5)):
        helps.add(run_measured([sys.executable, "-m", "mirror", "--help"]).seconds)
        loads.add(run_measured([sys.executable, "-c", load]).seconds)
    return helps.median, loads.median


def cross_border(
    bench: Bench, work: Path, image_set: ImageSet, source: LocalRegistry, rounds: int
) -> tuple[list[str], list[Goal]]:
    """Cold copy, no-op and fan-out over simulated links, with every request counted by kind."""
    linked_source = Linked(source, LinkProxy(source.port, SOURCE_LINK).start())
    cold = {"mirror": Series(), "skopeo": Series()}
    noop = {"mirror": Series(), "skopeo": Series()}
    fan = {"mirror": Series(), "skopeo": Series()}
    cold_kinds: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    noop_kinds: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    fan_bytes: dict[str, int] = {}

    def linked_target(label: str) -> Linked:
        registry = bench.registry(label)
        return Linked(registry, LinkProxy(registry.port, TARGET_LINK).start())

    try:
        for round_number in range(rounds):
            order = ["mirror", "skopeo"] if round_number % 2 == 0 else ["skopeo", "mirror"]
            for tool in order:
                target = linked_target(f"{tool}-far")
                config = mirror_config(work / f"far-{tool}-{round_number}.yaml", linked_source, [target], image_set)
                for series, kinds in ((cold, cold_kinds), (noop, noop_kinds)):
                    marks = len(source.access_log()), len(target.registry.access_log())
                    run = run_mirror(config) if tool == "mirror" else run_skopeo(linked_source, [target], image_set)
                    series[tool].add(run.seconds)
                    kinds[tool] = (
                        requests_by_kind(source.access_log()[marks[0] :]),
                        requests_by_kind(target.registry.access_log()[marks[1] :]),
                    )
                target.stop()
                bench.drop(target.registry)
            print(
                f"cross-border round {round_number + 1}: cold mirror {cold['mirror'].values[-1]:.2f} s, "
                f"skopeo {cold['skopeo'].values[-1]:.2f} s; no-op {noop['mirror'].values[-1]:.2f} / "
                f"{noop['skopeo'].values[-1]:.2f} s",
                flush=True,
            )
        for round_number in range(rounds):
            order = ["mirror", "skopeo"] if round_number % 2 == 0 else ["skopeo", "mirror"]
            for tool in order:
                targets = [linked_target(f"{tool}-far-fan") for _ in range(3)]
                mark = len(source.access_log())
                if tool == "mirror":
                    config = mirror_config(work / f"far-fan-{round_number}.yaml", linked_source, targets, image_set)
                    result = run_mirror(config)
                else:
                    result = run_skopeo(linked_source, targets, image_set)
                fan[tool].add(result.seconds)
                fan_bytes[tool] = source_requests(source, mark).blob_bytes
                for target in targets:
                    target.stop()
                    bench.drop(target.registry)
    finally:
        linked_source.stop()
    lines = [
        "## Cross-border simulation",
        "",
        f"Source link: {SOURCE_LINK.describe()}; target link: {TARGET_LINK.describe()} (a TCP proxy of ours in "
        "front of each registry, delaying each direction, pipelined). Requests counted from the registries' "
        "access logs (last round).",
        "",
        "| | seconds | vs skopeo | source requests | target requests |",
        "|---|---|---|---|---|",
    ]
    for label, series, kinds in (("cold", cold, cold_kinds), ("no-op", noop, noop_kinds)):
        for tool in ("mirror", "skopeo"):
            ratio = series[tool].median / series["skopeo"].median
            source_kinds, target_kinds = kinds[tool]
            lines.append(
                f"| {label}: {tool} | {series[tool]} | {ratio:.2f}x | {describe_kinds(source_kinds)} "
                f"| {describe_kinds(target_kinds)} |"
            )
    lines += [
        f"| fan-out to 3: mirror | {fan['mirror']} | {fan['mirror'].median / fan['skopeo'].median:.2f}x "
        f"| {fan_bytes['mirror'] / 1e6:.0f} MB of blobs read | |",
        f"| fan-out to 3: skopeo | {fan['skopeo']} | 1.00x | {fan_bytes['skopeo'] / 1e6:.0f} MB of blobs read | |",
        "",
    ]
    goals = [
        Goal("cross-border cold copy", cold["mirror"].median, cold["skopeo"].median, 0.4),
        Goal("cross-border no-op", noop["mirror"].median, noop["skopeo"].median, 0.15),
        Goal("cross-border fan-out to 3 (source read once)", fan["mirror"].median, fan["skopeo"].median, 0.3),
    ]
    return lines, goals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--images", type=int, default=2, help="images in the 1x set")
    parser.add_argument("--scales", default="1,5")
    parser.add_argument("--link", choices=["loopback", "cross-border", "both"], default="both")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    if not shutil.which("skopeo") or not shutil.which("curl"):
        raise SystemExit("skopeo and curl are needed: apt-get install -y skopeo curl")
    work = Path(tempfile.mkdtemp(prefix="mirror-bench-"))
    bench = Bench(work)
    lines: list[str] = []
    try:
        source = bench.registry("source")
        image_set = asyncio.run(build_set(source, args.images, seed=1))
        print(
            f"image set: {len(image_set.names)} images, {len(image_set.blobs)} distinct blobs, "
            f"{image_set.total_bytes / 1e6:.0f} MB",
            flush=True,
        )

        cold = {"mirror": Series(), "skopeo": Series(), "floor": Series()}
        noop = {"mirror": Series(), "skopeo": Series()}
        rss = {"mirror": Series(), "skopeo": Series()}
        noop_counts: dict[str, Counts] = {}
        for round_number in range(args.rounds):
            order = ["mirror", "skopeo"] if round_number % 2 == 0 else ["skopeo", "mirror"]
            for tool in order:
                target = bench.registry(f"{tool}-target")
                config = mirror_config(work / f"{tool}-{round_number}.yaml", source, [target], image_set)
                first = run_mirror(config) if tool == "mirror" else run_skopeo(source, [target], image_set)
                cold[tool].add(first.seconds)
                rss[tool].add(first.peak_rss_mb)
                mark = len(source.access_log())
                again = run_mirror(config) if tool == "mirror" else run_skopeo(source, [target], image_set)
                noop[tool].add(again.seconds)
                rss[tool].add(again.peak_rss_mb)
                noop_counts[tool] = source_requests(source, mark)
                bench.drop(target)
            floor_target = bench.registry("floor-target")
            cold["floor"].add(upload_floor(source, floor_target, image_set))
            bench.drop(floor_target)
            print(
                f"round {round_number + 1}: cold mirror {cold['mirror'].values[-1]:.2f} s, "
                f"skopeo {cold['skopeo'].values[-1]:.2f} s, floor {cold['floor'].values[-1]:.2f} s",
                flush=True,
            )

        fan = {"mirror": Series(), "skopeo": Series()}
        fan_bytes: dict[str, int] = {}
        for round_number in range(args.rounds):
            order = ["mirror", "skopeo"] if round_number % 2 == 0 else ["skopeo", "mirror"]
            for tool in order:
                targets = [bench.registry(f"{tool}-fan") for _ in range(3)]
                mark = len(source.access_log())
                if tool == "mirror":
                    result = run_mirror(mirror_config(work / f"fan-{round_number}.yaml", source, targets, image_set))
                else:
                    result = run_skopeo(source, targets, image_set)
                fan[tool].add(result.seconds)
                rss[tool].add(result.peak_rss_mb)
                fan_bytes[tool] = source_requests(source, mark).blob_bytes
                bench.drop(*targets)
        print("fan-out done", flush=True)

        scaling: list[tuple[int, float, float, float]] = []
        largest_noop: dict[str, float] = {}
        largest_images = 0
        for scale in [int(s) for s in args.scales.split(",")]:
            scaled_source = bench.registry(f"source-x{scale}")
            scaled = asyncio.run(build_set(scaled_source, args.images * scale, seed=10 + scale))
            times, noops = {}, {}
            for tool in ("mirror", "skopeo"):
                target = bench.registry(f"{tool}-x{scale}")
                config = mirror_config(work / f"x{scale}.yaml", scaled_source, [target], scaled)
                result = run_mirror(config) if tool == "mirror" else run_skopeo(scaled_source, [target], scaled)
                times[tool] = result.seconds
                rss[tool].add(result.peak_rss_mb)
                again = run_mirror(config) if tool == "mirror" else run_skopeo(scaled_source, [target], scaled)
                noops[tool] = again.seconds
                bench.drop(target)
            scaling.append((scale, scaled.total_bytes / 1e6, times["mirror"], times["skopeo"]))
            largest_noop, largest_images = noops, len(scaled.names)
            bench.drop(scaled_source)
            print(f"scale {scale}x: mirror {times['mirror']:.2f} s, skopeo {times['skopeo']:.2f} s", flush=True)

        help_seconds, load_seconds = startup(
            args.rounds, mirror_config(work / "startup.yaml", source, [source], image_set)
        )
        far_lines: list[str] = []
        far_goals: list[Goal] = []
        if args.link in ("cross-border", "both"):
            far_lines, far_goals = cross_border(bench, work, image_set, source, args.rounds)

        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        lines += [
            f"# mirror vs skopeo ({stamp})",
            "",
            f"Machine: {machine()}.",
            f"Image set (1x): {len(image_set.names)} multi-arch OCI indexes (2 platforms + 2 attestation manifests "
            f"each), {len(image_set.blobs)} distinct blobs, {image_set.total_bytes / 1e6:.0f} MB; a base layer shared "
            f"by every image and a layer shared by the two platforms of each. {args.rounds} rounds, tools "
            "alternating; median (min-max).",
            "",
            "## Cold copy into an empty target",
            "",
            "| | seconds | vs skopeo | vs floor |",
            "|---|---|---|---|",
            f"| mirror sync (one run) | {cold['mirror']} | {cold['mirror'].median / cold['skopeo'].median:.2f}x "
            f"| {cold['mirror'].median / cold['floor'].median:.2f}x |",
            f"| skopeo copy --all (one run per image) | {cold['skopeo']} | 1.00x "
            f"| {cold['skopeo'].median / cold['floor'].median:.2f}x |",
            f"| floor: 4 parallel curl uploads of the blobs | {cold['floor']} | | 1.00x |",
            "",
            "## No-op re-sync (everything already there)",
            "",
            "| | seconds | source manifest GETs | source blob GETs | source HEADs |",
            "|---|---|---|---|---|",
        ]
        for tool in ("mirror", "skopeo"):
            counts = noop_counts[tool]
            lines.append(f"| {tool} | {noop[tool]} | {counts.manifest_gets} | {counts.blob_gets} | {counts.heads} |")
        lines += [
            "",
            "## Fan-out to 3 targets",
            "",
            "| | seconds | source blob bytes read |",
            "|---|---|---|",
            f"| mirror (one run, three targets) | {fan['mirror']} | {fan_bytes['mirror'] / 1e6:.0f} MB |",
            f"| skopeo (three runs per image) | {fan['skopeo']} | {fan_bytes['skopeo'] / 1e6:.0f} MB |",
            "",
            f"mirror / skopeo wall time: {fan['mirror'].median / fan['skopeo'].median:.2f}x.",
            "",
            "## Peak RSS (MB, over every run above)",
            "",
            "| | median | max |",
            "|---|---|---|",
            f"| mirror | {rss['mirror'].median:.0f} | {max(rss['mirror'].values):.0f} |",
            f"| skopeo | {rss['skopeo'].median:.0f} | {max(rss['skopeo'].values):.0f} |",
            "",
            "## Scaling: cold copy as the set grows (one round)",
            "",
            "| scale | MB | mirror s | skopeo s | mirror / skopeo |",
            "|---|---|---|---|---|",
        ]
        for scale, megabytes, mirror_s, skopeo_s in scaling:
            lines.append(
                f"| {scale}x | {megabytes:.0f} | {mirror_s:.2f} | {skopeo_s:.2f} | {mirror_s / skopeo_s:.2f}x |"
            )
        lines += ["", *far_lines]
        goals = [
            Goal("start-up: mirror --help", help_seconds, None, 0.15, " s"),
            Goal("start-up: loading the config", load_seconds, None, 0.15, " s"),
            Goal("loopback cold copy", cold["mirror"].median, cold["skopeo"].median, 0.8),
            Goal(f"loopback no-op, {len(image_set.names)} images", noop["mirror"].median, noop["skopeo"].median, 1.0),
            Goal(f"loopback no-op, {largest_images} images", largest_noop["mirror"], largest_noop["skopeo"], 0.3),
            *far_goals,
        ]
        lines += [
            "## Goals",
            "",
            "| goal | mirror | skopeo | measured | limit | |",
            "|---|---|---|---|---|---|",
            *(goal.row() for goal in goals),
            f"| peak RSS (1 GiB layer: tests/test_crash.py) | {max(rss['mirror'].values):.0f} MB | "
            f"{max(rss['skopeo'].values):.0f} MB | | < 100 MB | {'met' if max(rss['mirror'].values) < 100 else 'MISSED'} |",
        ]
    finally:
        bench.close()
        shutil.rmtree(work, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    report = "\n".join(lines) + "\n"
    (args.out / "latest.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
