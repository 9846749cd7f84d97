"""How mirror's cost grows: the scale curve (images x targets, small images), the loopback no-op at a larger set,
and peak RSS as the largest blob grows."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

from benchkit import (
    LEGEND,
    MIRROR_PYTHON,
    SMALL,
    Bench,
    Goal,
    ImageSet,
    Marks,
    Series,
    ToolFailed,
    alternating,
    build_layered,
    build_set,
    describe_kinds,
    mirror_config,
    run_measured,
    run_tool,
)

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import MiB

TIME_GROWTH = 1.5  # per-image time at the largest set at most this times that at the middle one: linear
REPLAY = Path(__file__).with_name("replay.py")
REQUEST_GROWTH = 1.1  # the same for requests, which are not noisy
RSS_GROWTH = 1.25  # peak RSS at most this times that of the smallest: flat


def small_set(bench: Bench, images: int) -> tuple[LocalRegistry, ImageSet]:
    """A source holding `images` small multi-arch images (2 platforms, 256 KiB-1 MiB layers: a base shared by
    every image, one shared by an image's platforms, two of each platform's own; 2 attestations each)."""
    source = bench.registry("small-source")
    image_set = asyncio.run(build_set(source, images, seed=50, shape=SMALL))
    print(
        f"small set: {len(image_set.names)} images, {len(image_set.blobs)} distinct blobs, "
        f"{image_set.total_bytes / 1e6:.0f} MB",
        flush=True,
    )
    return source, image_set


@dataclass
class Cell:
    images: int
    targets: int
    tool: str
    cold: float = 0.0
    noop: float = 0.0
    cold_rss: float = 0.0
    noop_rss: float = 0.0
    cold_source: dict[str, int] = field(default_factory=dict)
    cold_targets: dict[str, int] = field(default_factory=dict)
    noop_source: dict[str, int] = field(default_factory=dict)
    noop_targets: dict[str, int] = field(default_factory=dict)

    @property
    def peak_rss(self) -> float:
        return max(self.cold_rss, self.noop_rss)

    def requests(self, which: str) -> int:
        if which == "cold":
            return sum(self.cold_source.values()) + sum(self.cold_targets.values())
        return sum(self.noop_source.values()) + sum(self.noop_targets.values())

    def seconds(self, which: str) -> float:
        return self.cold if which == "cold" else self.noop


@dataclass
class Curve:
    cells: list[Cell]
    lines: list[str]
    goals: list[Goal]


def scale_curve(
    bench: Bench, work: Path, source: LocalRegistry, full: ImageSet, sizes: list[int], target_counts: list[int]
) -> Curve:
    """Per cell (images x targets), each tool: a cold copy into fresh targets, then the no-op re-sync."""
    cells: list[Cell] = []
    number = 0
    for images in sizes:
        image_set = full.first(images)
        for targets_count in target_counts:
            for tool in alternating(number):
                cell = Cell(images, targets_count, tool)
                targets = [bench.registry(f"scale-{tool}") for _ in range(targets_count)]
                config = mirror_config(work / f"scale-{images}x{targets_count}.yaml", source, targets, image_set)
                marks = Marks(source), Marks(*targets)
                run = run_tool(tool, config, source, targets, image_set)
                cell.cold, cell.cold_rss = run.seconds, run.peak_rss_mb
                cell.cold_source, cell.cold_targets = marks[0].kinds(), marks[1].kinds()
                marks = Marks(source), Marks(*targets)
                run = run_tool(tool, config, source, targets, image_set)
                cell.noop, cell.noop_rss = run.seconds, run.peak_rss_mb
                cell.noop_source, cell.noop_targets = marks[0].kinds(), marks[1].kinds()
                bench.drop(*targets)
                cells.append(cell)
            number += 1
            done = [c for c in cells if c.images == images and c.targets == targets_count]
            print(
                f"scale {images} images x {targets_count} targets: "
                + "; ".join(f"{c.tool} cold {c.cold:.2f} s, no-op {c.noop:.2f} s" for c in done),
                flush=True,
            )
    return summarise(cells, sizes, target_counts, full)


def summarise(cells: list[Cell], sizes: list[int], target_counts: list[int], full: ImageSet) -> Curve:
    lines = [
        "## Scale curve: images x targets (small images, one run each)",
        "",
        f"Small images: 2 platforms + 2 attestations each, layers of 256 KiB-1 MiB (a base shared by every image, "
        f"one shared by an image's platforms, two of each platform's own); {len(full.first(max(sizes)).blobs)} "
        f"distinct blobs, {full.first(max(sizes)).total_bytes / 1e6:.0f} MB at {max(sizes)} images. mirror: one "
        "run; skopeo: one `skopeo copy --all` per image per target. Requests from the access logs of the source "
        "and of every target (summed).",
        "",
        "| images | targets | tool | cold s | no-op s | peak RSS MB | cold: source | cold: targets "
        "| no-op: source | no-op: targets |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        lines.append(
            f"| {cell.images} | {cell.targets} | {cell.tool} | {cell.cold:.2f} | {cell.noop:.2f} "
            f"| {cell.peak_rss:.0f} | {describe_kinds(cell.cold_source, True)} "
            f"| {describe_kinds(cell.cold_targets, True)} | {describe_kinds(cell.noop_source, True)} "
            f"| {describe_kinds(cell.noop_targets, True)} |"
        )
    lines += ["", LEGEND + ".", ""]
    goals: list[Goal] = []
    if len(sizes) < 2:
        return Curve(cells, lines, goals)
    big, mid, small = max(sizes), sorted(sizes)[-2], min(sizes)

    def find(tool: str, images: int, targets: int) -> Cell:
        return next(c for c in cells if (c.tool, c.images, c.targets) == (tool, images, targets))

    growth: dict[str, dict[str, float]] = {}
    for tool in ("mirror", "skopeo"):
        time_ratios, request_ratios, rss_ratios = [], [], []
        parts = []
        for targets in target_counts:
            at_big, at_mid = find(tool, big, targets), find(tool, mid, targets)
            for which in ("cold", "no-op"):
                per_big = at_big.seconds(which) / big
                per_mid = at_mid.seconds(which) / mid
                time_ratios.append(per_big / per_mid)
                request_ratios.append((at_big.requests(which) / big) / max(at_mid.requests(which) / mid, 1e-9))
                parts.append(
                    f"{which} x{targets}: {per_mid * 1000:.0f} -> {per_big * 1000:.0f} ms/image "
                    f"({per_big / per_mid:.2f}x), {at_mid.requests(which) / mid:.1f} -> "
                    f"{at_big.requests(which) / big:.1f} requests/image"
                )
            rss_ratios.append(find(tool, big, targets).peak_rss / find(tool, small, targets).peak_rss)
        growth[tool] = {"time": max(time_ratios), "requests": max(request_ratios), "rss": max(rss_ratios)}
        linear = max(time_ratios) <= TIME_GROWTH and max(request_ratios) <= REQUEST_GROWTH
        rss_text = ", ".join(
            f"x{t}: {find(tool, small, t).peak_rss:.0f} -> {find(tool, big, t).peak_rss:.0f} MB" for t in target_counts
        )
        flat = max(rss_ratios) <= RSS_GROWTH
        lines.append(
            f"- {tool}, {mid} -> {big} images: {'; '.join(parts)}. Growth {'LINEAR' if linear else 'NOT linear'} "
            f"(worst per-image time {max(time_ratios):.2f}x <= {TIME_GROWTH}x, requests "
            f"{max(request_ratios):.2f}x <= {REQUEST_GROWTH}x). Peak RSS {small} -> {big} images ({rss_text}): "
            f"{'FLAT' if flat else 'NOT flat'} (worst {max(rss_ratios):.2f}x <= {RSS_GROWTH}x)."
        )
    lines.append("")
    goals = [
        Goal.own(
            f"scale curve linear: time per image at {big} / at {mid} images (worst case)",
            growth["mirror"]["time"],
            growth["skopeo"]["time"],
            TIME_GROWTH,
        ),
        Goal.own(
            f"scale curve linear: requests per image at {big} / at {mid} images (worst case)",
            growth["mirror"]["requests"],
            growth["skopeo"]["requests"],
            REQUEST_GROWTH,
        ),
        Goal.own(
            f"RSS flat over the curve: peak at {big} / at {small} images",
            growth["mirror"]["rss"],
            growth["skopeo"]["rss"],
            RSS_GROWTH,
        ),
    ]
    return Curve(cells, lines, goals)


@dataclass
class NoopAt:
    times: dict[str, Series]  # mirror, skopeo and "httpx" (mirror's requests replayed by httpx alone)
    kinds: dict[str, dict[str, int]]  # each tool's requests at the source (last round)
    replayed: int  # how many requests the floor sent
    cpu: dict[str, Series]  # each tool's own CPU seconds per run
    registry_cpu: dict[str, Series]  # the CPU seconds the source and the tool's target took during its run


REPLAY_CONCURRENCY = 8  # per host: mirror's default manifest_concurrency


def noop_at(bench: Bench, work: Path, source: LocalRegistry, image_set: ImageSet, rounds: int) -> NoopAt:
    """The loopback no-op at a larger set: each tool copies into its own target once, then re-syncs it `rounds`
    times, the tools alternating. Then the floor: the requests of mirror's last round, at the source and at its
    target, replayed by httpx alone (`replay.py`) `rounds` times."""
    targets = {tool: bench.registry(f"noop-{tool}") for tool in ("mirror", "skopeo")}
    configs = {tool: mirror_config(work / f"noop-{tool}.yaml", source, [targets[tool]], image_set) for tool in targets}
    for tool in ("mirror", "skopeo"):
        run_tool(tool, configs[tool], source, [targets[tool]], image_set)
    times = {"mirror": Series(), "skopeo": Series(), "httpx": Series()}
    cpu = {"mirror": Series(), "skopeo": Series()}
    registry_cpu = {"mirror": Series(), "skopeo": Series()}
    kinds: dict[str, dict[str, int]] = {}
    sent: list[tuple[str, str, int]] = []
    for round_number in range(rounds):
        for tool in alternating(round_number):
            marks = [Marks(source), Marks(targets[tool])]
            servers_before = source.cpu_seconds() + targets[tool].cpu_seconds()
            run = run_tool(tool, configs[tool], source, [targets[tool]], image_set)
            registry_cpu[tool].add(source.cpu_seconds() + targets[tool].cpu_seconds() - servers_before)
            times[tool].add(run.seconds)
            cpu[tool].add(run.cpu_seconds)
            kinds[tool] = marks[0].kinds()
            if tool == "mirror":
                sent = [(e.method, f"{m.registries[0].url}{e.path}", e.status) for m in marks for e in m.entries()]
    requests = work / "noop-requests.json"
    requests.write_text(json.dumps(sent))
    for _ in range(rounds):
        replay = run_measured([MIRROR_PYTHON, str(REPLAY), str(requests), str(REPLAY_CONCURRENCY)])
        if replay.returncode != 0:
            raise ToolFailed(f"the replay failed:\n{replay.stderr[-2000:]}")
        times["httpx"].add(replay.seconds)
    bench.drop(*targets.values())
    print(
        f"no-op at {len(image_set.names)} images: mirror {times['mirror']} s, skopeo {times['skopeo']} s, "
        f"its {len(sent)} requests replayed by httpx alone {times['httpx']} s; CPU s (tool / registries): "
        f"mirror {cpu['mirror']} / {registry_cpu['mirror']}, skopeo {cpu['skopeo']} / {registry_cpu['skopeo']}",
        flush=True,
    )
    return NoopAt(times, kinds, len(sent), cpu, registry_cpu)


def rss_by_blob_size(bench: Bench, work: Path, small_mib: int, big_mib: int) -> tuple[list[str], Goal]:
    """Peak RSS of a cold copy of one image whose layers are `small_mib` MiB, and of one whose largest layer (shared
    by its two platforms) is `big_mib` MiB, each tool into a fresh target."""
    rows: dict[str, dict[str, float]] = {}
    sizes: dict[str, float] = {}
    for label, shared in (("small", small_mib), ("big", big_mib)):
        source = bench.registry(f"rss-{label}")
        image = asyncio.run(build_layered(source, f"bench/rss{label}", shared * MiB, small_mib * MiB, seed=70))
        sizes[label] = image.total_bytes / 1e6
        for tool in ("mirror", "skopeo"):
            target = bench.registry(f"rss-{label}-{tool}")
            config = mirror_config(work / f"rss-{label}.yaml", source, [target], image)
            run = run_tool(tool, config, source, [target], image)
            rows.setdefault(tool, {})[label] = run.peak_rss_mb
            rows[tool][f"{label}-seconds"] = run.seconds
            bench.drop(target)
        bench.drop(source)
        print(
            f"RSS, largest layer {shared} MiB: mirror {rows['mirror'][label]:.0f} MB, "
            f"skopeo {rows['skopeo'][label]:.0f} MB",
            flush=True,
        )
    lines = [
        "## Peak RSS as the largest blob grows (loopback, cold copy, one target)",
        "",
        f"One 2-platform image (+2 attestations): layers of {small_mib} MiB ({sizes['small']:.0f} MB in all) vs a "
        f"{big_mib} MiB layer shared by both platforms plus a {small_mib} MiB one each ({sizes['big']:.0f} MB).",
        "",
        f"| | peak RSS, {small_mib} MiB layers | peak RSS, {big_mib} MiB layer | ratio | seconds ({small_mib} / {big_mib}) |",
        "|---|---|---|---|---|",
    ]
    for tool in ("mirror", "skopeo"):
        row = rows[tool]
        lines.append(
            f"| {tool} | {row['small']:.0f} MB | {row['big']:.0f} MB | {row['big'] / row['small']:.2f}x "
            f"| {row['small-seconds']:.2f} / {row['big-seconds']:.2f} |"
        )
    lines.append("")
    goal = Goal.own(
        f"RSS flat in blob size: peak with a {big_mib} MiB layer / with {small_mib} MiB layers",
        rows["mirror"]["big"] / rows["mirror"]["small"],
        rows["skopeo"]["big"] / rows["skopeo"]["small"],
        RSS_GROWTH,
    )
    return lines, goal
