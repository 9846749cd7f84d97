"""The cross-border cases (cold copy, no-op, fan-out to three regions) over simulated links, over plain HTTP or
over HTTPS with mirror's HTTP/2 on and off, every request counted by kind from the registries' access logs."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchkit import (
    LEGEND,
    PLAIN,
    SKOPEO_PLAIN,
    SOURCE_LINK,
    TARGET_LINK,
    Bench,
    Certificates,
    Goal,
    ImageSet,
    Linked,
    Marks,
    Series,
    describe_kinds,
    mirror_config,
    run_mirror,
    run_skopeo,
    source_requests,
    trusting,
)

from mirror.demo.localregistry import LocalRegistry


@dataclass(frozen=True)
class Variant:
    label: str
    tool: str  # "mirror" or "skopeo"
    transport: dict[str, Any] = field(default_factory=lambda: dict(PLAIN))  # mirror: each registry's entry


@dataclass
class Case:
    """One case (cold, no-op, fan-out) of one variant: its times and what the registries saw (last round)."""

    seconds: Series = field(default_factory=Series)
    source: dict[str, int] = field(default_factory=dict)
    targets: dict[str, int] = field(default_factory=dict)
    protocols: dict[str, int] = field(default_factory=dict)  # at the source
    source_blob_bytes: int = 0
    peak_rss_mb: float = 0.0


@dataclass
class Results:
    variants: list[Variant]
    cases: dict[tuple[str, str], Case] = field(default_factory=dict)  # (case, variant label) -> figures

    def case(self, name: str, label: str) -> Case:
        return self.cases.setdefault((name, label), Case())

    def has(self, name: str) -> bool:
        return any(case == name for case, _ in self.cases)


def run_variants(
    bench: Bench,
    work: Path,
    image_set: ImageSet,
    source: LocalRegistry,
    variants: list[Variant],
    rounds: int,
    fanout: bool,
    tag: str,
    tls: Certificates | None = None,
) -> Results:
    """Each round runs every variant (the order rotating), each into fresh targets behind the target link."""
    linked_source = bench.link(source, SOURCE_LINK)
    results = Results(variants)
    skopeo_flags = tls.skopeo_flags if tls else SKOPEO_PLAIN

    def linked_target(label: str) -> Linked:
        return bench.link(bench.registry(label, tls=tls.pair if tls else None), TARGET_LINK)

    def run(variant: Variant, config_name: str, targets: list[Linked]) -> float:
        if variant.tool == "mirror":
            config = mirror_config(work / config_name, linked_source, targets, image_set, variant.transport)
            return run_mirror(config).seconds
        return run_skopeo(linked_source, targets, image_set, skopeo_flags).seconds

    def measure(case: Case, variant: Variant, config_name: str, targets: list[Linked]) -> None:
        marks = Marks(source), Marks(*(t.registry for t in targets))
        case.seconds.add(run(variant, config_name, targets))
        case.source, case.targets = marks[0].kinds(), marks[1].kinds()
        case.protocols = marks[0].protocols()
        case.source_blob_bytes = source_requests(source, marks[0].marks[0]).blob_bytes

    def rotated(round_number: int) -> list[Variant]:
        shift = round_number % len(variants)
        return variants[shift:] + variants[:shift]

    with trusting(tls.ca) if tls else contextlib.nullcontext():
        try:
            for round_number in range(rounds):
                for variant in rotated(round_number):
                    target = linked_target(f"{tag}-{variant.tool}-far")
                    name = f"{tag}-{variant.label.replace(' ', '-')}-{round_number}.yaml"
                    for case in ("cold", "no-op"):
                        measure(results.case(case, variant.label), variant, name, [target])
                    target.stop()
                    bench.drop(target.registry)
                print(
                    f"{tag} round {round_number + 1}: "
                    + "; ".join(
                        f"{v.label} cold {results.case('cold', v.label).seconds.values[-1]:.2f} s, "
                        f"no-op {results.case('no-op', v.label).seconds.values[-1]:.2f} s"
                        for v in variants
                    ),
                    flush=True,
                )
            for round_number in range(rounds if fanout else 0):
                for variant in rotated(round_number):
                    targets = [linked_target(f"{tag}-{variant.tool}-far-fan") for _ in range(3)]
                    name = f"{tag}-fan-{variant.label.replace(' ', '-')}-{round_number}.yaml"
                    measure(results.case("fan-out to 3", variant.label), variant, name, targets)
                    for target in targets:
                        target.stop()
                        bench.drop(target.registry)
                print(f"{tag} fan-out round {round_number + 1} done", flush=True)
        finally:
            linked_source.stop()
    return results


def table(results: Results, skopeo_label: str = "skopeo") -> list[str]:
    lines = [
        "| | seconds | vs skopeo | source requests | target requests (all targets) |",
        "|---|---|---|---|---|",
    ]
    for name in ("cold", "no-op", "fan-out to 3"):
        if not results.has(name):
            continue
        skopeo = results.case(name, skopeo_label).seconds.median
        for variant in results.variants:
            case = results.case(name, variant.label)
            source = describe_kinds(case.source, short=True)
            if name == "fan-out to 3":
                source += f" ({case.source_blob_bytes / 1e6:.0f} MB of blobs read)"
            lines.append(
                f"| {name}: {variant.label} | {case.seconds} | {case.seconds.median / skopeo:.2f}x | {source} "
                f"| {describe_kinds(case.targets, short=True)} |"
            )
    return [*lines, "", LEGEND + ". Requests are the last round's.", ""]


CROSS_BORDER = [Variant("mirror", "mirror"), Variant("skopeo", "skopeo")]


def cross_border(
    bench: Bench, work: Path, image_set: ImageSet, source: LocalRegistry, rounds: int
) -> tuple[list[str], list[Goal]]:
    """Cold copy, no-op and fan-out over simulated links, plain HTTP."""
    results = run_variants(bench, work, image_set, source, CROSS_BORDER, rounds, fanout=True, tag="far")
    lines = [
        "## Cross-border simulation",
        "",
        f"Source link: {SOURCE_LINK.describe()}; target link: {TARGET_LINK.describe()} (a TCP proxy of ours in "
        "front of each registry, delaying each direction, pipelined). Requests counted from the registries' "
        "access logs.",
        "",
        *table(results),
    ]

    def goal(name: str, case: str, limit: float) -> Goal:
        return Goal.versus(
            name, results.case(case, "mirror").seconds.median, results.case(case, "skopeo").seconds.median, limit
        )

    goals = [
        goal("cross-border cold copy", "cold", 0.4),
        goal("cross-border no-op", "no-op", 0.15),
        goal("cross-border fan-out to 3 regions (source read once)", "fan-out to 3", 0.3),
    ]
    return lines, goals


TLS_VARIANTS = [
    Variant("mirror http2", "mirror", {"http2": True}),
    Variant("mirror http1.1", "mirror", {"http2": False}),
    Variant("skopeo", "skopeo"),
]
MARGIN = 0.05  # a difference under 5% is a tie


def tls_cross_border(
    bench: Bench,
    work: Path,
    image_set: ImageSet,
    plain_source: LocalRegistry,
    certs: Certificates,
    rounds: int,
    fanout: bool,
) -> tuple[list[str], str]:
    """The cross-border cases over HTTPS: mirror with `http2: true` and `false` for every registry, and skopeo.
    Returns the section and the verdict line."""
    source = bench.twin("tls-source", plain_source, certs.pair)
    try:
        results = run_variants(
            bench, work, image_set, source, TLS_VARIANTS, rounds, fanout=fanout, tag="tls", tls=certs
        )
    finally:
        bench.drop(source)
    lines = [
        "## TLS: mirror's HTTP/2 vs HTTP/1.1, and skopeo",
        "",
        f"The cross-border links ({SOURCE_LINK.describe()} to the source, {TARGET_LINK.describe()} to each "
        "target) in front of registries serving HTTPS (a throwaway CA: SSL_CERT_FILE for mirror, "
        "--src-cert-dir/--dest-cert-dir for skopeo). mirror with `registries: {<host>: {http2: true}}` for every "
        "registry vs `http2: false`. The link caps bandwidth per TCP connection, as a long fat link does: HTTP/2 "
        "puts every transfer to a host on one connection.",
        "",
        *table(results),
    ]
    protocol_lines = []
    for variant in TLS_VARIANTS:
        seen = results.case("cold", variant.label).protocols
        protocol_lines.append(f"{variant.label}: " + (", ".join(f"{p} {n}" for p, n in sorted(seen.items())) or "-"))
    lines += ["Protocols the source logged (cold copy): " + "; ".join(protocol_lines) + ".", ""]
    verdicts: list[str] = []
    winners: list[str] = []
    for name in ("cold", "no-op", "fan-out to 3"):
        if not results.has(name):
            continue
        h2 = results.case(name, "mirror http2").seconds.median
        h1 = results.case(name, "mirror http1.1").seconds.median
        skopeo = results.case(name, "skopeo").seconds.median
        winner = "http2" if h2 < h1 * (1 - MARGIN) else "http1.1" if h1 < h2 * (1 - MARGIN) else "tie"
        winners.append(winner)
        verdicts.append(
            f"{name}: http2 {h2:.2f} s, http1.1 {h1:.2f} s, skopeo {skopeo:.2f} s: {winner} "
            f"(http2 / http1.1 {h2 / h1:.2f}x)"
        )
    if winners and all(w == "http2" for w in winners):
        decision = "HTTP/2 wins every case: make `http2: true` the default."
    elif "http1.1" not in winners and "http2" in winners:
        decision = "HTTP/2 wins some cases and loses none (5% margin): a candidate for the default."
    elif "http1.1" not in winners:
        decision = "HTTP/2 makes no difference beyond 5%: keep `http2: false` the default."
    else:
        decision = "HTTP/2 loses at least one case: keep `http2: false` the default."
    lines += ["Which wins:", "", *(f"- {v}" for v in verdicts), "", f"**{decision}**", ""]
    return lines, decision
