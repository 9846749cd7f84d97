"""Helm's render of an untrusted chart, bounded: a template that loops (a huge `range`, nested ranges, an
`include` that calls itself twice) runs in a child process under an address-space limit, a CPU limit and a
wall clock, and ends as one line. End to end, `mirror sync` under `prlimit` (2 GiB of address space, which the
render's child inherits, and 20 s of CPU, which it inherits too, lower than its own bound) must end within
SYNC_SECONDS with exit 1, one short stderr line, no traceback and no Go runtime dump, before anything is copied
or written. (Until the bounds are settings, the run's own CPU limit is how a test lowers the child's: the wall
clock of 120 s would end these too, slowly.) The wall clock (RenderBounds.seconds), the output limit and the
binary renderer are checked on the renderer itself, with real Helm (or a stand-in helm executable) in a real
child."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mirror.chart.archive import ChartArchive, ChartError, open_chart
from mirror.chart.render import (
    RENDER_MEMORY,
    RENDER_OUTPUT,
    RenderBoundExceeded,
    RenderBounds,
    RenderRequest,
    render_images,
)
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.samplechart import chart_server, hami_chart, package
from tests.support import MEMORY_LIMIT, BoundedRun, requests_since, write_config, writes
from tests.test_hostile_chart import Setup, assert_refused_in_one_line, release_chart, serving
from tests.test_sync import VERSION

# one `mirror sync` whose render loops: about 20 s of CPU (the bound below) when the bound holds, which a loaded
# machine stretches to twice that on the wall clock or more; unbounded, the render runs for minutes or forever
SYNC_SECONDS = 180.0
CPU_SECONDS = 20  # prlimit's soft CPU limit for the run (its hard one 10 s later): the render's child inherits it
WALL_SECONDS = 5.0  # RenderBounds.seconds in the renderer's own tests
RENDERER_SECONDS = 60.0  # one bounded render (a few seconds when the bound holds; unbounded, minutes or forever)
SYNC_MEMORY_MB = min(MEMORY_LIMIT, RENDER_MEMORY) // 2**20  # the child's: its own bound, or the run's when lower
REQUEST = RenderRequest("hami", "kube-system", "1.32.0")

BIG_LOOP = "{{ range until 100000000 }}x{{ end }}"  # in-process: 14 s and 3.2 GB resident, 100 MB of output
NESTED_LOOPS = "{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}"  # 10**10 steps, no output
# each call calls itself twice until its list is 40 long: 2**40 calls, within Helm's include depth of 1000
BRANCHING_INCLUDE = (
    '{{- define "r" }}{{ if lt (len .) 40 }}{{ include "r" (append . 1) }}{{ include "r" (append . 1) }}'
    '{{ end }}{{ end }}{{ include "r" list }}'
)
SELF_INCLUDE = '{{- define "r" }}{{ include "r" . }}{{ end }}{{ include "r" . }}'  # Helm stops it at depth 1000


def with_template(template: str) -> Setup:
    """The sample HAMi chart (its empty tags make the run render it before copying) with one more template."""
    return serving(lambda host: release_chart(host, **{"templates/hostile.yaml": template}))


def bounded_sync(tmp_path: Path, source: LocalRegistry, target: LocalRegistry, setup: Setup) -> tuple[BoundedRun, int]:
    """`mirror sync` (as test_hostile_chart's `hostile_sync` runs it) under `prlimit`: run_bounded's address
    space, and CPU_SECONDS of CPU. The run, and how many writes the target saw."""
    with chart_server() as server:
        setup(server, source.host)
        chart = {"repository": f"{server.origin}/charts"}
        path = write_config(tmp_path / "mirror.yaml", source, [target], chart=chart)
        data = yaml.safe_load(path.read_text())
        del data["images"]  # the chart names the images
        path.write_text(yaml.safe_dump(data))
        mark = len(target.access_log())
        limits = [f"--as={MEMORY_LIMIT}", f"--cpu={CPU_SECONDS}:{CPU_SECONDS + 10}"]
        command = ["prlimit", *limits, "--", sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(path)]
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=SYNC_SECONDS)
    return BoundedRun(done.returncode, done.stdout, done.stderr), len(writes(requests_since(target, mark)))


SYNC_CASES = [
    ("a range of 10**8", BIG_LOOP, f"Helm's render needed more than {SYNC_MEMORY_MB} MB of address space"),
    ("nested ranges", NESTED_LOOPS, f"Helm's render took more than {CPU_SECONDS} s of CPU"),
    ("an include calling itself twice", BRANCHING_INCLUDE, f"Helm's render took more than {CPU_SECONDS} s of CPU"),
]


@pytest.mark.parametrize(("case", "template", "message"), SYNC_CASES, ids=[case[0] for case in SYNC_CASES])
def test_a_template_that_loops_stops_the_sync_in_one_line_before_anything_is_copied(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, case: str, template: str, message: str
) -> None:
    started = time.monotonic()
    run, target_writes = bounded_sync(tmp_path, source, target, with_template(template))
    assert time.monotonic() - started < SYNC_SECONDS
    assert_refused_in_one_line(run, target_writes, tmp_path, message)
    assert "a template loops?" in run.stderr
    assert "goroutine" not in run.stderr and "runtime" not in run.stderr, run.stderr[:2000]


# The renderer itself: a real child, real Helm.


def chart_with(template: str, name: str = "h") -> ChartArchive:
    files = {"Chart.yaml": f"apiVersion: v2\nname: {name}\nversion: 1.0.0\n", "templates/a.yaml": template}
    return open_chart(package(files, name), f"chart {name}")


def test_the_wall_clock_bound_ends_a_render_that_loops() -> None:
    started = time.monotonic()
    with pytest.raises(RenderBoundExceeded) as refused:
        render_images(chart_with(NESTED_LOOPS), {}, REQUEST, "sdk", RenderBounds(seconds=WALL_SECONDS))
    assert time.monotonic() - started < RENDERER_SECONDS
    assert str(refused.value) == f"chart h 1.0.0: Helm's render took longer than {WALL_SECONDS:g} s; a template loops?"


def test_a_render_over_the_address_space_bound_is_one_line_without_the_go_dump() -> None:
    with pytest.raises(RenderBoundExceeded) as refused:
        render_images(chart_with(BIG_LOOP), {}, REQUEST, "sdk")
    limit = RENDER_MEMORY // 2**20
    assert str(refused.value) == (
        f"chart h 1.0.0: Helm's render needed more than {limit} MB of address space; a template loops?"
    )


def test_manifests_over_the_output_bound_are_refused_after_the_render() -> None:
    """40 MB of manifests render within the memory bound (its headroom), and are refused for their size."""
    chart = chart_with("{{ range until 40960 }}" + "x" * 1023 + "\n{{ end }}")
    with pytest.raises(RenderBoundExceeded, match=f"made more than {RENDER_OUTPUT // 2**20} MB of manifests"):
        render_images(chart, {}, REQUEST, "sdk")


def test_an_include_of_itself_is_helms_own_error_in_one_line() -> None:
    """Helm stops a template including itself at depth 1000: not a bound, Helm's refusal, cut short."""
    with pytest.raises(ChartError) as refused:
        render_images(chart_with(SELF_INCLUDE), {}, REQUEST, "sdk")
    assert not isinstance(refused.value, RenderBoundExceeded)
    assert str(refused.value).startswith("chart h 1.0.0: Helm could not render it: template:")
    assert len(str(refused.value)) < 400 and "\n" not in str(refused.value)


def test_a_real_chart_renders_within_the_bounds() -> None:
    """The bounds leave room: the sample HAMi chart renders in the child as in-process Helm did."""
    rendering = render_images(open_chart(hami_chart("docker.io"), "chart hami"), {}, REQUEST, "sdk")
    assert rendering.renderer.startswith("Helm v4")
    assert "docker.io/projecthami/hami:v2.10.0" in {image.reference for image in rendering.images}


def stand_in_helm(directory: Path, script: str) -> Path:
    """A `helm` executable in `directory` that runs `script` (sh) whatever it is asked."""
    helm = directory / "helm"
    helm.write_text(f"#!/bin/sh\n{script}\n")
    helm.chmod(helm.stat().st_mode | stat.S_IXUSR)
    return helm


def test_the_binary_renderer_is_bounded_and_its_process_group_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `helm template` that never ends, having started a process of its own: both are gone at the bound."""
    stand_in_helm(tmp_path, f"sleep 600 &\necho $! > {tmp_path / 'pid'}\nwhile :; do :; done")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    started = time.monotonic()
    with pytest.raises(RenderBoundExceeded, match=r"^chart h 1\.0\.0: Helm's render took longer than 3 s"):
        render_images(chart_with("x: 1\n"), {}, REQUEST, "binary", RenderBounds(seconds=3.0))
    assert time.monotonic() - started < RENDERER_SECONDS
    sleeper = Path(f"/proc/{int((tmp_path / 'pid').read_text())}/status")
    assert gone_within(sleeper, 30)  # killed with its group


def gone_within(status: Path, seconds: float) -> bool:
    """The process of that /proc status file has ended (gone, or a zombie: pid 1 may not reap it) within
    `seconds`: a SIGKILL sent to a group is delivered to each process when the kernel next schedules it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if "zombie" in status.read_text():
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_the_binary_renderers_output_is_read_up_to_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in_helm(tmp_path, "yes 'x: 1'")  # writes forever
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(RenderBoundExceeded, match=f"made more than {RENDER_OUTPUT // 2**20} MB of manifests"):
        render_images(chart_with("x: 1\n"), {}, REQUEST, "binary", RenderBounds(seconds=RENDERER_SECONDS))


def test_an_sdk_whose_library_does_not_load_is_said_or_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """helm-python-sdk installed, its native library unusable (HELM_C_LIB naming a file that is not one): the
    child says so; `sdk` is refused in one line, `auto` falls back as before (here: values.yaml, no helm on PATH)."""
    monkeypatch.setenv("HELM_C_LIB", __file__)
    monkeypatch.setenv("PATH", "/nonexistent")
    chart = open_chart(hami_chart("docker.io"), "chart hami")
    with pytest.raises(ChartError, match="renderer 'sdk' asked for, but helm-python-sdk does not load: "):
        render_images(chart, {}, REQUEST, "sdk")
    assert render_images(chart, {}, REQUEST, "auto").renderer.startswith("values.yaml only")
