"""mirror vs skopeo on the same local registries, side by side.

Starts throwaway `docker-registry` instances on loopback, builds a realistic image set (multi-arch OCI
indexes with BuildKit-style attestations, 4-30 MiB random layers, layers shared across platforms and
images), then measures, alternating the tools each round. The parts (`--only a,b`; all but scaling by
default, about 13 minutes on 2 idle cores):

- startup: `mirror --help`, loading the config, and the imports of `mirror sync` (`python -c "import
  mirror.commands.sync"` minus a bare `python -c pass`, best of several);
- loopback: cold copy of the set into an empty target, `mirror sync` (one run) vs `skopeo copy --all` (one
  run per image, as people do today) vs the parallel-upload floor (4 concurrent curl uploads of the blobs);
  the no-op re-sync with its source requests by kind; peak RSS (VmHWM);
- noop: the loopback no-op at a larger set (`--noop-images`, 20; small images, same structure);
- scale: the scale curve, 1, 10 and 50 small images x 1 and 3 targets: cold copy and no-op wall time,
  requests by kind at the source and the targets, peak RSS; whether time and requests grow linearly and RSS
  stays flat;
- rss: peak RSS of a cold copy of an image with 32 MiB layers vs one with a 512 MiB layer;
- fanout: fan-out to 3 targets on loopback: source bytes read and wall time;
- scaling (not run by default: the scale curve replaces it): the cold copy at 1x and 5x the realistic set
  (`--scales`), and the no-op re-sync of the largest;
- cross-border: a simulated link (a TCP proxy of ours in front of each registry: source 10 ms round trip;
  target 80 ms and 200 Mbit/s per connection): cold copy, no-op and fan-out to three regions, every request
  counted by kind from the registries' access logs;
- tls: the cross-border cold copy and no-op (fan-out with `--tls-fanout`) over registries serving HTTPS,
  mirror with `http2: true` vs `http2: false` vs skopeo; says which wins (`--tls` runs this part alone).

Every goal is printed at the end with mirror and skopeo side by side.

    python bench/run.py [--rounds 3] [--only scale,tls] [--out bench/results]
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import concurrent.futures
import contextlib
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import benchkit
from benchkit import (
    LEGEND,
    MIRROR_PYTHON,
    Bench,
    Counts,
    Goal,
    Host,
    ImageSet,
    Series,
    ToolFailed,
    alternating,
    build_set,
    describe_kinds,
    make_certificates,
    mirror_config,
    run_tool,
    source_requests,
)
from crossborder import cross_border, tls_cross_border
from scalecurve import REPLAY_CONCURRENCY, NoopAt, noop_at, rss_by_blob_size, scale_curve, small_set

import mirror
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.procstat import run_measured

PARTS = ("startup", "loopback", "noop", "scale", "rss", "fanout", "scaling", "cross-border", "tls")
# "scaling" (the realistic set at 1x and 5x) is left out by default: the scale curve measures growth now, and the
# full run stays within about 15 minutes on 2 cores
DEFAULT_PARTS = tuple(part for part in PARTS if part != "scaling")


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


@dataclass
class Startup:
    help_seconds: float
    load_seconds: float
    import_seconds: float  # `import mirror.commands.sync` minus a bare interpreter, best of several
    bare_seconds: float
    floor_seconds: float  # the libraries the sync command cannot start without, minus a bare interpreter
    packages: list[tuple[str, float]]  # third-party packages the sync imports, by cumulative seconds
    modules: list[tuple[str, float]]  # single modules, by their own seconds


def best_wall(command: list[str], tries: int) -> float:
    best = float("inf")
    for _ in range(tries):
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - started)
    return best


def heaviest_imports(module: str, count: int = 5) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """Where importing `module` spends its time (`-X importtime`, one run): the third-party packages by their
    cumulative time, and the single modules by their own."""
    stderr = subprocess.run(
        [MIRROR_PYTHON, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, check=True
    ).stderr
    packages: dict[str, float] = {}
    modules: list[tuple[str, float]] = []
    for line in stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) != 3 or not parts[0].strip().isdigit():
            continue
        name, own, cumulative = parts[2].strip(), int(parts[0]) / 1e6, int(parts[1]) / 1e6
        modules.append((name, own))
        if "." not in name and name != "mirror" and not name.startswith("_") and name not in sys.stdlib_module_names:
            packages[name] = max(packages.get(name, 0.0), cumulative)
    by_time = sorted(packages.items(), key=lambda item: -item[1])[:count]
    return by_time, sorted(modules, key=lambda item: -item[1])[:count]


def startup(rounds: int, config: Path) -> Startup:
    """Median wall seconds of `mirror --help` and of loading the config in a fresh interpreter; the sync
    command's imports as the best of several, less a bare interpreter's best."""
    load = f"from mirror.settings import load_settings; load_settings(__import__('pathlib').Path({str(config)!r}))"
    helps, loads = Series(), Series()
    for _ in range(max(rounds, 5)):
        helps.add(run_measured([MIRROR_PYTHON, "-m", "mirror", "--help"]).seconds)
        loads.add(run_measured([MIRROR_PYTHON, "-c", load]).seconds)
    tries = max(rounds, 7)
    bare = best_wall([MIRROR_PYTHON, "-c", "pass"], tries)
    sync = best_wall([MIRROR_PYTHON, "-c", AS_THE_COMMAND + "import mirror.commands.sync"], tries)
    floor = best_wall([MIRROR_PYTHON, "-c", AS_THE_COMMAND + LIBRARY_FLOOR], tries)
    return Startup(
        helps.median, loads.median, sync - bare, bare, floor - bare, *heaviest_imports("mirror.commands.sync")
    )


RUNS_AS = (
    "mirror runs as the container image runs it: from a venv holding what the image installs (no test tools) "
    "with MALLOC_ARENA_MAX=2."
    if sys.executable != MIRROR_PYTHON
    else "mirror runs from the development venv (test tools installed) with MALLOC_ARENA_MAX=2."
)


AS_THE_COMMAND = "import gc; gc.disable(); "  # `mirror` (cli.entry) loads its modules with the collector paused

# What `mirror sync` cannot start without: the config's models (pydantic-settings, PyYAML), the HTTP client and
# the protocol its connections speak (httpx, h11) and asyncio, with httpx's command-line client kept out as mirror
# does. httpcore is imported only for a host with HTTP/2 on.
LIBRARY_FLOOR = "import sys; sys.modules['httpx._main'] = None; import asyncio, yaml, pydantic_settings, httpx, h11"


def byte_compile() -> None:
    """Compile mirror's modules, as `pip install` does for an installed package: a checkout run with
    PYTHONDONTWRITEBYTECODE set (as the container image sets it) would compile every module at every start."""
    compileall.compile_dir(str(Path(mirror.__file__).parent), quiet=1)


@dataclass
class Loopback:
    cold: dict[str, Series] = field(default_factory=lambda: {"mirror": Series(), "skopeo": Series(), "floor": Series()})
    noop: dict[str, Series] = field(default_factory=lambda: {"mirror": Series(), "skopeo": Series()})
    noop_counts: dict[str, Counts] = field(default_factory=dict)


def loopback(
    bench: Bench, work: Path, source: LocalRegistry, image_set: ImageSet, rounds: int, rss: dict[str, Series]
) -> Loopback:
    result = Loopback()
    for round_number in range(rounds):
        for tool in alternating(round_number):
            target = bench.registry(f"{tool}-target")
            config = mirror_config(work / f"{tool}-{round_number}.yaml", source, [target], image_set)
            first = run_tool(tool, config, source, [target], image_set)
            result.cold[tool].add(first.seconds)
            rss[tool].add(first.peak_rss_mb)
            mark = len(source.access_log())
            again = run_tool(tool, config, source, [target], image_set)
            result.noop[tool].add(again.seconds)
            rss[tool].add(again.peak_rss_mb)
            result.noop_counts[tool] = source_requests(source, mark)
            bench.drop(target)
        floor_target = bench.registry("floor-target")
        result.cold["floor"].add(upload_floor(source, floor_target, image_set))
        bench.drop(floor_target)
        print(
            f"round {round_number + 1}: cold mirror {result.cold['mirror'].values[-1]:.2f} s, "
            f"skopeo {result.cold['skopeo'].values[-1]:.2f} s, floor {result.cold['floor'].values[-1]:.2f} s",
            flush=True,
        )
    return result


def fanout(
    bench: Bench, work: Path, source: LocalRegistry, image_set: ImageSet, rounds: int, rss: dict[str, Series]
) -> tuple[dict[str, Series], dict[str, int]]:
    fan = {"mirror": Series(), "skopeo": Series()}
    fan_bytes: dict[str, int] = {}
    for round_number in range(rounds):
        for tool in alternating(round_number):
            targets = [bench.registry(f"{tool}-fan") for _ in range(3)]
            mark = len(source.access_log())
            config = mirror_config(work / f"fan-{round_number}.yaml", source, targets, image_set)
            result = run_tool(tool, config, source, targets, image_set)
            fan[tool].add(result.seconds)
            rss[tool].add(result.peak_rss_mb)
            fan_bytes[tool] = source_requests(source, mark).blob_bytes
            bench.drop(*targets)
    print("fan-out done", flush=True)
    return fan, fan_bytes


@dataclass
class Scaled:
    scale: int
    images: int
    megabytes: float
    cold: dict[str, float]
    noop: dict[str, float]


def scaling(bench: Bench, work: Path, images: int, scales: list[int], rss: dict[str, Series]) -> list[Scaled]:
    rows = []
    for scale in scales:
        scaled_source = bench.registry(f"source-x{scale}")
        scaled = asyncio.run(build_set(scaled_source, images * scale, seed=10 + scale))
        times, noops = {}, {}
        for tool in ("mirror", "skopeo"):
            target = bench.registry(f"{tool}-x{scale}")
            config = mirror_config(work / f"x{scale}.yaml", scaled_source, [target], scaled)
            result = run_tool(tool, config, scaled_source, [target], scaled)
            times[tool] = result.seconds
            rss[tool].add(result.peak_rss_mb)
            noops[tool] = run_tool(tool, config, scaled_source, [target], scaled).seconds
            bench.drop(target)
        rows.append(Scaled(scale, len(scaled.names), scaled.total_bytes / 1e6, times, noops))
        bench.drop(scaled_source)
        print(f"scale {scale}x: mirror {times['mirror']:.2f} s, skopeo {times['skopeo']:.2f} s", flush=True)
    return rows


def noop_section(noop_set: NoopAt, images: int) -> list[str]:
    """The larger no-op's table, with each tool's CPU and its registries', and the least time mirror's run could
    take on this machine: its imports, then the registries' CPU for its requests spread over every core."""
    times, kinds, cpu, servers = noop_set.times, noop_set.kinds, noop_set.cpu, noop_set.registry_cpu
    cores = os.cpu_count() or 1
    imports = best_wall([MIRROR_PYTHON, "-c", "import mirror.commands.sync"], 5)
    least = imports + servers["mirror"].median / cores
    skopeo = times["skopeo"].median
    return [
        f"## No-op re-sync, {images} images (small images, same structure as the set above)",
        "",
        "| | seconds | vs skopeo | CPU s: the tool | CPU s: the registries | source requests |",
        "|---|---|---|---|---|---|",
        *(
            f"| {tool} | {times[tool]} | {times[tool].median / skopeo:.2f}x | {cpu[tool]} | {servers[tool]} "
            f"| {describe_kinds(kinds[tool], short=True)} |"
            for tool in ("mirror", "skopeo")
        ),
        f"| floor: mirror's {noop_set.replayed} requests (source and target) replayed by httpx alone "
        f"| {times['httpx']} | {times['httpx'].median / skopeo:.2f}x | | | |",
        f"| least possible here: mirror's imports ({imports:.2f} s) + its registries' CPU / {cores} cores "
        f"| {least:.2f} | {least / skopeo:.2f}x | | | |",
        "",
        LEGEND + ". CPU: user and system seconds, the tool's from its rusage, the registries' (the source and the "
        "tool's target, both on this machine) from /proc over the tool's run. The floor is a process of its own that "
        "imports httpx and sends the requests mirror's last round sent, at most "
        f"{REPLAY_CONCURRENCY} at a time per host, with httpx's own connection pool and network backend: no "
        "config, no auth, no order between them. The least possible time counts nothing of mirror's own work "
        "after its imports: the registries answering its requests need that much of the machine whatever the client.",
        "",
    ]


def int_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", help=f"comma-separated parts: {', '.join(PARTS)} (default: all but scaling)")
    parser.add_argument("--skip", default="", help="comma-separated parts not to run")
    parser.add_argument("--images", type=int, default=2, help="images in the realistic 1x set")
    parser.add_argument("--scales", default="1,5", help="the scaling part: multiples of the 1x set")
    parser.add_argument(
        "--link",
        choices=["loopback", "cross-border", "both"],
        default="both",
        help="loopback: leave out the cross-border and tls parts",
    )
    parser.add_argument("--noop-images", type=int, default=20, help="the noop part: images re-synced")
    parser.add_argument("--scale-images", default="1,10,50", help="the scale curve: image counts")
    parser.add_argument("--scale-targets", default="1,3", help="the scale curve: target counts")
    parser.add_argument("--rss-mib", default="32,512", help="the rss part: small layers, then the large layer (MiB)")
    parser.add_argument("--tls", action="store_true", help="the tls part alone (with --only: added to it)")
    parser.add_argument("--tls-fanout", action="store_true", help="the tls part measures fan-out to 3 too")
    parser.add_argument(
        "--timeout", type=float, default=benchkit.TIMEOUT, help="seconds one tool run may take (then: hung, killed)"
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    benchkit.TIMEOUT = args.timeout

    def named(text: str) -> set[str]:
        names = {name.strip() for name in text.split(",") if name.strip()}
        if unknown := names - set(PARTS):
            parser.error(f"unknown parts: {', '.join(sorted(unknown))} (known: {', '.join(PARTS)})")
        return names

    parts = named(args.only) if args.only is not None else set() if args.tls else set(DEFAULT_PARTS)
    if args.tls:
        parts.add("tls")
    parts -= named(args.skip)
    if args.link == "loopback":
        parts -= {"cross-border", "tls"}
    args.parts = [p for p in PARTS if p in parts]
    return args


def main() -> int:
    args = parse_args()
    if not shutil.which("skopeo") or not shutil.which("curl"):
        raise SystemExit("skopeo and curl are needed: apt-get install -y skopeo curl")
    parts: list[str] = args.parts
    byte_compile()
    os.environ["MALLOC_ARENA_MAX"] = "2"  # as the container image runs mirror
    work = Path(tempfile.mkdtemp(prefix="mirror-bench-"))
    bench = Bench(work)
    began = time.monotonic()
    took: dict[str, float] = {}
    sections: list[str] = []
    goals: list[Goal] = []
    notes: list[str] = []
    rss = {"mirror": Series(), "skopeo": Series()}

    @contextlib.contextmanager
    def part(name: str) -> Iterator[None]:
        """A part's measurements and its report; a tool failing or hanging in it is noted, the next part runs."""
        print(f"== {name}", flush=True)
        started = time.monotonic()
        try:
            yield
        except ToolFailed as failure:
            print(f"part {name} FAILED: {failure}", flush=True)
            notes.append(f"**Part {name} FAILED** (its figures left out): {str(failure).splitlines()[0]}")
        finally:
            took[name] = time.monotonic() - started

    try:
        source: LocalRegistry | None = None
        image_set = ImageSet([], {})
        if set(parts) & {"loopback", "fanout", "cross-border", "tls"}:
            source = bench.registry("source")
            image_set = asyncio.run(build_set(source, args.images, seed=1))
            print(
                f"image set: {len(image_set.names)} images, {len(image_set.blobs)} distinct blobs, "
                f"{image_set.total_bytes / 1e6:.0f} MB",
                flush=True,
            )
        small_source: LocalRegistry | None = None
        small = ImageSet([], {})
        scale_sizes, scale_targets = int_list(args.scale_images), int_list(args.scale_targets)
        if set(parts) & {"noop", "scale"}:
            wanted = max([*(scale_sizes if "scale" in parts else []), args.noop_images if "noop" in parts else 0])
            small_source, small = small_set(bench, wanted)

        if "startup" in parts:
            with part("startup"):
                names = ImageSet([f"bench/app{i}" for i in range(args.images)], {})
                config = mirror_config(work / "startup.yaml", Host("127.0.0.1:5000"), [Host("127.0.0.1:5001")], names)
                figures = startup(args.rounds, config)
                packages = ", ".join(f"{name} {seconds:.3f} s" for name, seconds in figures.packages)
                modules = ", ".join(f"{name} {seconds:.3f} s" for name, seconds in figures.modules)
                sections += [
                    "## Start-up",
                    "",
                    "| | seconds |",
                    "|---|---|",
                    f"| `mirror --help` (median) | {figures.help_seconds:.2f} |",
                    f"| loading the config (median) | {figures.load_seconds:.2f} |",
                    f"| `import mirror.commands.sync` less a bare `python -c pass` ({figures.bare_seconds:.3f} s), "
                    f"best of {max(args.rounds, 7)} | {figures.import_seconds:.3f} |",
                    "| of which the libraries it cannot start without (asyncio, PyYAML, pydantic-settings, httpx, "
                    f"h11), alone, less a bare interpreter | {figures.floor_seconds:.3f} |",
                    "",
                    f"mirror's modules are byte-compiled first, as an installed package's are. {RUNS_AS}",
                    "",
                    "Where the sync command's imports go (`-X importtime`, one run): third-party packages "
                    f"(cumulative) {packages}; single modules (own time) {modules}.",
                    "",
                ]
                goals += [
                    Goal.seconds("start-up: mirror --help", figures.help_seconds, 0.15),
                    Goal.seconds("start-up: loading the config", figures.load_seconds, 0.15),
                    Goal.seconds("start-up: sync command imports", figures.import_seconds, 0.2),
                ]

        if "loopback" in parts:
            assert source is not None
            with part("loopback"):
                loop = loopback(bench, work, source, image_set, args.rounds, rss)
                cold, noop = loop.cold, loop.noop
                sections += [
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
                    f"## No-op re-sync, {len(image_set.names)} images (everything already there)",
                    "",
                    "| | seconds | source manifest GETs | source blob GETs | source HEADs |",
                    "|---|---|---|---|---|",
                ]
                for tool in ("mirror", "skopeo"):
                    counts = loop.noop_counts[tool]
                    sections.append(
                        f"| {tool} | {noop[tool]} | {counts.manifest_gets} | {counts.blob_gets} | {counts.heads} |"
                    )
                sections.append("")
                goals += [
                    Goal.versus("loopback cold copy", cold["mirror"].median, cold["skopeo"].median, 0.8),
                    Goal.versus(
                        f"loopback no-op, {len(image_set.names)} images",
                        noop["mirror"].median,
                        noop["skopeo"].median,
                        1.0,
                    ),
                ]

        if "noop" in parts:
            assert small_source is not None
            with part("noop"):
                noop_set = noop_at(bench, work, small_source, small.first(args.noop_images), args.rounds)
                sections += noop_section(noop_set, args.noop_images)
                times = noop_set.times
                goals.append(
                    Goal.versus(
                        f"loopback no-op, {args.noop_images} images",
                        times["mirror"].median,
                        times["skopeo"].median,
                        0.3,
                    )
                )

        if "scale" in parts:
            assert small_source is not None
            with part("scale"):
                curve = scale_curve(bench, work, small_source, small, scale_sizes, scale_targets)
                sections += curve.lines
                goals += curve.goals

        if "rss" in parts:
            small_mib, big_mib = int_list(args.rss_mib)[:2]
            with part("rss"):
                rss_lines, rss_goal = rss_by_blob_size(bench, work, small_mib, big_mib)
                sections += rss_lines
                goals.append(rss_goal)

        if small_source is not None:
            bench.drop(small_source)

        if "fanout" in parts:
            assert source is not None
            with part("fanout"):
                fan, fan_bytes = fanout(bench, work, source, image_set, args.rounds, rss)
                sections += [
                    "## Fan-out to 3 targets",
                    "",
                    "| | seconds | source blob bytes read |",
                    "|---|---|---|",
                    f"| mirror (one run, three targets) | {fan['mirror']} | {fan_bytes['mirror'] / 1e6:.0f} MB |",
                    f"| skopeo (three runs per image) | {fan['skopeo']} | {fan_bytes['skopeo'] / 1e6:.0f} MB |",
                    "",
                    f"mirror / skopeo wall time: {fan['mirror'].median / fan['skopeo'].median:.2f}x.",
                    "",
                ]

        if "scaling" in parts:
            with part("scaling"):
                rows = scaling(bench, work, args.images, int_list(args.scales), rss)
                sections += [
                    "## Scaling: the realistic set's cold copy as it grows (one round)",
                    "",
                    "| scale | images | MB | mirror s | skopeo s | mirror / skopeo | no-op: mirror s | no-op: skopeo s |",
                    "|---|---|---|---|---|---|---|---|",
                    *(
                        f"| {r.scale}x | {r.images} | {r.megabytes:.0f} | {r.cold['mirror']:.2f} | {r.cold['skopeo']:.2f} "
                        f"| {r.cold['mirror'] / r.cold['skopeo']:.2f}x | {r.noop['mirror']:.2f} | {r.noop['skopeo']:.2f} |"
                        for r in rows
                    ),
                    "",
                ]

        if rss["mirror"].values:
            sections += [
                "## Peak RSS (MB, over the loopback, fan-out and scaling runs)",
                "",
                "| | median | max |",
                "|---|---|---|",
                f"| mirror | {rss['mirror'].median:.0f} | {max(rss['mirror'].values):.0f} |",
                f"| skopeo | {rss['skopeo'].median:.0f} | {max(rss['skopeo'].values):.0f} |",
                "",
            ]
            goals.append(
                Goal.own(
                    "peak RSS over the loopback runs",
                    max(rss["mirror"].values),
                    max(rss["skopeo"].values),
                    100,
                    " MB",
                    digits=0,
                )
            )

        if "cross-border" in parts:
            assert source is not None
            with part("cross-border"):
                far_lines, far_goals = cross_border(bench, work, image_set, source, args.rounds)
                sections += far_lines
                goals += far_goals

        if "tls" in parts:
            assert source is not None
            with part("tls"):
                certs = make_certificates(work / "tls")
                tls_lines, decision = tls_cross_border(
                    bench, work, image_set, source, certs, args.rounds, args.tls_fanout
                )
                sections += tls_lines
                notes.append(f"HTTP/2 over TLS: {decision}")
    finally:
        bench.close()
        shutil.rmtree(work, ignore_errors=True)

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    total = time.monotonic() - began
    lines = [
        f"# mirror vs skopeo ({stamp})",
        "",
        f"Machine: {machine()}.",
        f"Parts: {', '.join(parts)}; {args.rounds} rounds where a part repeats, tools alternating; median (min-max).",
        RUNS_AS,
    ]
    if image_set.names:
        lines.append(
            f"Image set (1x): {len(image_set.names)} multi-arch OCI indexes (2 platforms + 2 attestation manifests "
            f"each), {len(image_set.blobs)} distinct blobs, {image_set.total_bytes / 1e6:.0f} MB; a base layer "
            "shared by every image and a layer shared by the two platforms of each."
        )
    lines += ["", *sections]
    if goals:
        lines += [
            "## Goals",
            "",
            "| goal | mirror | skopeo | measured | limit | |",
            "|---|---|---|---|---|---|",
            *(goal.row() for goal in goals),
            "",
        ]
    if notes:
        lines += [*notes, ""]
    lines.append(
        f"Run time: {total / 60:.1f} min ("
        + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in took.items())
        + ", the rest building the sets)."
    )
    args.out.mkdir(parents=True, exist_ok=True)
    report = "\n".join(lines) + "\n"
    (args.out / "latest.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
