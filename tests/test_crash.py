"""Crash safety and process-level behaviour: SIGKILL at random points, SIGTERM with a grace period, the
target registry dying mid-copy, two syncs of one target, and memory that stays flat in blob size."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.procstat import run_measured
from mirror.demo.sample import MiB, push_multiarch
from mirror.engine.shutdown import Shutdown
from mirror.engine.sync import SyncOptions, sync
from mirror.engine.verify import verify_copy
from mirror.oci import DOCKER_CONFIG, OCI_MANIFEST, Manifest
from mirror.progress import Progress
from mirror.registry import RegistryClient
from mirror.registry.options import ClientOptions
from mirror.settings import load_settings
from tests.faultproxy import Fault, fault_proxy
from tests.support import CdnServer, HeldCdn, cdn_server, held_source, manifest_digest, with_client, write_config
from tests.test_sync import VERSION, seed_release

IMAGES = (("mirrored/hami", VERSION), ("mirrored/kube-webhook-certgen", "v1.1.1"))


@contextmanager
def slow_source(tmp_path: Path, delay: float) -> Iterator[tuple[LocalRegistry, CdnServer]]:
    """A source whose blob bytes come from a CDN that takes `delay` seconds for each blob."""
    with cdn_server(tmp_path / "source" / "data", delay=delay) as cdn:
        source = start_registry(tmp_path / "source", redirect_to=cdn.url)
        try:
            yield source, cdn
        finally:
            source.stop()


def mirror_command(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config), *args]


def spawn(config: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(mirror_command(config, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition: Any, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def first_upload_started(target: LocalRegistry) -> bool:
    return any(e.method == "POST" and "/blobs/uploads/" in e.path for e in target.access_log())


def incomplete_tags(target: LocalRegistry) -> list[str]:
    """Tags at the target that do not verify: each must be absent or complete."""

    async def check(client: RegistryClient) -> list[str]:
        problems = []
        for repository, tag in IMAGES:
            digest = manifest_digest(target, repository, tag)
            if digest is not None:
                verification = await verify_copy(client, repository, tag, digest)
                problems += list(verification.problems)
        return problems

    return with_client(target, check)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_sigkill_at_a_random_point_never_leaves_an_incomplete_tag(tmp_path: Path, seed: int) -> None:
    with slow_source(tmp_path, delay=0.3) as (source, _):
        target = start_registry(tmp_path / "target")
        try:
            seed_release(source)
            config = write_config(tmp_path / "mirror.yaml", source, [target])
            delays = random.Random(seed)
            for _ in range(3):  # kill it three times over, each at another moment
                process = spawn(config)
                time.sleep(delays.uniform(0.05, 2.0))
                process.send_signal(signal.SIGKILL)
                process.communicate()
                assert incomplete_tags(target) == []
            final = subprocess.run(mirror_command(config), capture_output=True, text=True)
            assert final.returncode == 0, final.stderr
            for repository, tag in IMAGES:
                assert manifest_digest(target, repository, tag) is not None
            assert incomplete_tags(target) == []
        finally:
            target.stop()


@contextmanager
def slow_copy(tmp_path: Path, delay: float) -> Iterator[tuple[LocalRegistry, LocalRegistry]]:
    """A seeded slow source and an empty target."""
    with slow_source(tmp_path, delay) as (source, _):
        target = start_registry(tmp_path / "target")
        try:
            seed_release(source)
            yield source, target
        finally:
            target.stop()


def sigterm_mid_copy(config: Path, target: LocalRegistry) -> tuple[int, float, str]:
    """Start a sync, SIGTERM it once its first upload started; its exit code, seconds to exit, stderr."""
    code, seconds, _, err = signalled_mid_copy(config, target, signal.SIGTERM)
    return code, seconds, err


def test_sigterm_lets_in_flight_uploads_finish_then_exits_143(tmp_path: Path) -> None:
    with slow_copy(tmp_path, delay=2.0) as (source, target):  # a blob takes 2 s: the copy is under way at SIGTERM
        config = write_config(tmp_path / "mirror.yaml", source, [target], shutdown_grace=30)
        code, seconds, err = sigterm_mid_copy(config, target)
        assert code == 143 and seconds < 30
        assert "stopped by SIGTERM" in err and "Traceback" not in err
        assert "upload abandoned" not in err  # the grace period was enough for what was in flight
        finished = [e for e in target.access_log() if e.method == "PUT" and "/blobs/uploads/" in e.path]
        assert finished and all(e.status == 201 for e in finished)
        assert incomplete_tags(target) == []


def test_sigterm_abandons_uploads_after_the_grace_period(tmp_path: Path) -> None:
    with slow_copy(tmp_path, delay=20.0) as (source, target):
        config = write_config(tmp_path / "mirror.yaml", source, [target], shutdown_grace=0.3)
        code, seconds, err = sigterm_mid_copy(config, target)
        assert code == 143 and seconds < 10  # far less than the 20 s a blob takes
        assert "upload abandoned at shutdown" in err and "Traceback" not in err
        for repository, tag in IMAGES:
            assert manifest_digest(target, repository, tag) is None
        assert live_upload_sessions(target) == []


def signalled_mid_copy(
    config: Path, target: LocalRegistry, sig: signal.Signals, presses: int = 1
) -> tuple[int, float, str, str]:
    """Start a sync, send it `sig` once its first upload started (Ctrl-C again, `presses` in all, each once the
    run said it heard the one before); its exit code, seconds to exit after the first, stdout and stderr."""
    process = spawn(config)
    wait_for(lambda: first_upload_started(target))
    process.send_signal(sig)
    started = time.monotonic()
    assert process.stderr is not None
    heard: list[str] = []
    for _ in range(presses - 1):  # signals do not queue: the next press only once the first was taken
        while "Ctrl-C again" not in (line := process.stderr.readline()):
            assert line, "the run ended before it heard Ctrl-C"
            heard.append(line)
        heard.append(line)
        process.send_signal(sig)
    out, err = process.communicate(timeout=30)
    return process.returncode, time.monotonic() - started, out, "".join(heard) + err


def test_ctrl_c_lets_in_flight_uploads_finish_then_reports_and_exits_130(tmp_path: Path) -> None:
    with slow_copy(tmp_path, delay=2.0) as (source, target):
        config = write_config(tmp_path / "mirror.yaml", source, [target], shutdown_grace=30)
        code, seconds, out, err = signalled_mid_copy(config, target, signal.SIGINT)
        assert code == 130 and seconds < 30
        assert "stopped by Ctrl-C (SIGINT)" in err and "Ctrl-C again abandons them now" in err
        assert "Traceback" not in err and "upload abandoned" not in err
        assert f"release {VERSION}" in out  # the report of what was done and what was left
        finished = [e for e in target.access_log() if e.method == "PUT" and "/blobs/uploads/" in e.path]
        assert finished and all(e.status == 201 for e in finished)
        assert incomplete_tags(target) == []


def test_a_second_ctrl_c_abandons_uploads_at_once_and_cancels_their_sessions(tmp_path: Path) -> None:
    with slow_copy(tmp_path, delay=20.0) as (source, target):
        config = write_config(tmp_path / "mirror.yaml", source, [target], shutdown_grace=60)
        code, seconds, out, err = signalled_mid_copy(config, target, signal.SIGINT, presses=2)
        assert code == 130 and seconds < 15  # far less than the grace period or the 20 s a blob takes
        assert "upload abandoned at shutdown" in err and "stopped by Ctrl-C (SIGINT)" in err
        assert "Traceback" not in err and "CancelledError" not in err
        assert f"release {VERSION}" in out
        for repository, tag in IMAGES:
            assert manifest_digest(target, repository, tag) is None
        opened = [e for e in target.access_log() if e.method == "POST" and e.status == 202]
        assert opened and live_upload_sessions(target) == []  # none left for the registry's purge a week on


def live_upload_sessions(registry: LocalRegistry) -> list[Path]:
    """Upload sessions the registry still keeps: its start time and its bytes (distribution's own PUT handler,
    cut off, may write an empty hash state after the session's DELETE, which its next purge removes)."""
    uploads = registry.storage.glob("docker/registry/v2/repositories/**/_uploads/*")
    return [session for session in uploads if (session / "startedat").exists() or (session / "data").exists()]


def test_a_run_started_with_ctrl_c_ignored_keeps_ignoring_it(tmp_path: Path) -> None:
    """`mirror sync ... &` from a script starts it with SIGINT ignored, as a background job should be: the
    terminal's Ctrl-C is not for it, and the copy goes on to its end."""
    with slow_copy(tmp_path, delay=1.0) as (source, target):
        config = write_config(tmp_path / "mirror.yaml", source, [target])
        ignoring = functools.partial(signal.signal, signal.SIGINT, signal.SIG_IGN)
        command = mirror_command(config)
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ignoring
        )
        wait_for(lambda: first_upload_started(target))
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0 and "Ctrl-C" not in err, err
        for repository, tag in IMAGES:
            assert manifest_digest(target, repository, tag) is not None
        assert incomplete_tags(target) == []


@pytest.mark.parametrize(
    ("stalled", "synced_before"),
    [(r"/manifests/sha256:", False), (r"/manifests/sha256-", True)],
    ids=["a cold copy's trees", "a re-run's referrers"],
)
def test_sigterm_while_a_shared_look_up_is_under_way_exits_143_without_a_traceback(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, stalled: str, synced_before: bool
) -> None:
    """Abandoning a run cancels the look-ups its images share (a manifest tree, what refers to an image): each
    image waiting on one stops as interrupted, as one waiting on an upload does, not with a CancelledError. On
    a re-run of what is already there, what refers to each image is all that is left to wait for."""
    seed_release(source)
    with fault_proxy(source.port) as proxy:
        config = write_config(tmp_path / "mirror.yaml", proxy, [target], shutdown_grace=0.3)
        if synced_before:
            assert subprocess.run(mirror_command(config), capture_output=True).returncode == 0
        stall = Fault("stall", path=stalled, seconds=60, count=1000)
        proxy.add(stall)
        process = spawn(config)
        wait_for(lambda: stall.applied > 0)
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        _, err = process.communicate(timeout=50)
    assert process.returncode == 143 and time.monotonic() - started < 40, err
    assert "stopped by SIGTERM" in err and "Traceback" not in err and "CancelledError" not in err
    assert "abandoned at shutdown" in err
    for repository, tag in IMAGES:
        assert (manifest_digest(target, repository, tag) is not None) == synced_before


class StopAtFirstVerified(Progress):
    """SIGTERM's effect (`Shutdown.request`) the moment the run says an image verified."""

    def __init__(self, shutdown: Shutdown) -> None:
        super().__init__()
        self.shutdown = shutdown

    def event(self, message: str) -> None:
        super().event(message)
        if "verified" in message:
            self.shutdown.request(30)


def test_what_asks_to_be_told_of_the_grace_periods_end_after_it_ended_is_told_at_once() -> None:
    async def run() -> list[str]:
        told: list[str] = []
        shutdown = Shutdown()
        shutdown.request(0)
        await asyncio.sleep(0.01)  # the grace period of 0 s ends at the loop's next turn
        assert shutdown.abandoned
        shutdown.on_abandon(lambda: told.append("cancel"))  # a run's cache made after the end: cancelled at once
        return told

    assert asyncio.run(run()) == ["cancel"]


def test_after_sigterm_no_values_are_written_and_no_chart_rendered(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """Writing a chart's values (its render, a chart push) is new work: after SIGTERM it is not started, and the
    report says why; the next run writes them."""
    seed_release(source)
    settings = load_settings(write_config(tmp_path / "mirror.yaml", source, [target]))
    first = asyncio.run(sync(settings, [VERSION], SyncOptions(), Progress()))
    written = [v.path for r in first for v in r.values]
    assert written and all(Path(p).exists() for p in written)
    for path in written:
        Path(path).unlink()
    shutdown = Shutdown()
    (result,) = asyncio.run(sync(settings, [VERSION], SyncOptions(), StopAtFirstVerified(shutdown), shutdown))
    assert shutdown.stopping and all(t.verified for image in result.images for t in image.targets)
    assert result.values == [] and not any(Path(p).exists() for p in written)
    assert result.errors == ["hami values for t0 not written: not started: the run is shutting down"]


def test_after_sigterm_a_release_not_begun_is_not_started(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """Two releases in one run, SIGTERM during the first: the second is reported not started, nothing of it asked."""
    seed_release(source)
    with_client(source, lambda c: push_multiarch(c, "projecthami/hami", "v2.9.0", seed=5))
    settings = load_settings(write_config(tmp_path / "mirror.yaml", source, [target]))
    shutdown = Shutdown()
    mark = len(source.access_log())
    first, second = asyncio.run(
        sync(settings, ["v2.9.0", VERSION], SyncOptions(), StopAtFirstVerified(shutdown), shutdown)
    )
    assert shutdown.stopping and first.images
    assert (second.images, second.errors) == ([], ["not started: the run is shutting down"])
    assert not [e for e in source.access_log()[mark:] if f"/manifests/{second.version}" in e.path]


def test_target_registry_killed_mid_copy_then_a_rerun_completes(tmp_path: Path) -> None:
    with slow_source(tmp_path, delay=0.4) as (source, _):
        target = start_registry(tmp_path / "target")
        try:
            seed_release(source)
            config = write_config(tmp_path / "mirror.yaml", source, [target], retry={"attempts": 2, "base_delay": 0.05})
            process = spawn(config)
            wait_for(lambda: first_upload_started(target))
            target.process.send_signal(signal.SIGKILL)
            target.process.wait()
            _, err = process.communicate(timeout=60)
            assert process.returncode == 1
            assert "registry unreachable" in err and "Traceback" not in err
            target = start_registry(tmp_path / "target", port=target.port)  # same storage, same port
            assert incomplete_tags(target) == []
            rerun = subprocess.run(mirror_command(config), capture_output=True, text=True)
            assert rerun.returncode == 0, rerun.stderr
            for repository, tag in IMAGES:
                assert manifest_digest(target, repository, tag) is not None
        finally:
            target.stop()


@contextmanager
def held_copy(tmp_path: Path, serve_first: int = 1) -> Iterator[tuple[LocalRegistry, LocalRegistry, HeldCdn]]:
    """A seeded source whose blob bytes are held after the first `serve_first` until `let_go()`, and an empty
    target: a copy that stays under way for as long as a test needs, however loaded the machine."""
    with held_source(tmp_path / "source", serve_first=serve_first) as (source, cdn):
        target = start_registry(tmp_path / "target")
        try:
            seed_release(source)
            yield source, target, cdn
        finally:
            target.stop()


def test_sigterm_lets_an_upload_finish_whose_image_already_failed(tmp_path: Path) -> None:
    """After SIGTERM a blob waiting for a transfer slot is refused, which fails its image while another of the
    image's uploads is still under way. That upload gets the grace period too: the run waits for it (the next
    run then skips it) instead of cutting it off as the run closes."""
    with held_copy(tmp_path, serve_first=0) as (source, target, cdn):
        transfer = {"blob_concurrency": 2, "run_blob_concurrency": 2}
        config = write_config(tmp_path / "mirror.yaml", source, [target], shutdown_grace=120, transfer=transfer)
        err_path = tmp_path / "sync.err"
        with err_path.open("w") as err_file:
            process = subprocess.Popen(mirror_command(config), stdout=subprocess.DEVNULL, stderr=err_file, text=True)
            wait_for(lambda: cdn.held == 2, seconds=60)  # both slots taken, every other blob waits for one
            process.send_signal(signal.SIGTERM)
            wait_for(lambda: "finishing in-flight uploads" in err_path.read_text(), seconds=60)
            cdn.let_one_go()  # a slot frees: the blobs that wait are refused, one by one, failing both images
            wait_for(lambda: process.poll() is not None or "still under way" in err_path.read_text(), seconds=60)
            cdn.let_go()
            process.wait(timeout=60)
        err = err_path.read_text()
        assert process.returncode == 143, err
        assert "upload abandoned" not in err and "Traceback" not in err
        uploads = [e for e in target.access_log() if "/blobs/uploads/" in e.path and e.method in ("PUT", "DELETE")]
        assert [(e.method, e.status) for e in uploads] == [("PUT", 201), ("PUT", 201)], uploads
        assert incomplete_tags(target) == []


@contextmanager
def waiting_behind_the_lock(
    tmp_path: Path, *args: str, stdout: int
) -> Iterator[tuple[subprocess.Popen[str], subprocess.Popen[str], Path, HeldCdn]]:
    """A first sync holding the target's lock mid-copy (its blobs held until `let_go()`), and a second one
    started after it, waiting for the lock: both processes, the second's stderr file, and the CDN."""
    with held_copy(tmp_path) as (source, target, cdn):
        config = write_config(tmp_path / "mirror.yaml", source, [target], lock_dir=str(tmp_path / "locks"))
        first = spawn(config)
        wait_for(lambda: cdn.held > 0, seconds=60)  # the first holds the target's lock, mid-copy
        err_path = tmp_path / "second.err"
        with err_path.open("w") as err_file:
            second = subprocess.Popen(mirror_command(config, *args), stdout=stdout, stderr=err_file, text=True)
            wait_for(lambda: "waiting for another mirror sync of the same target" in err_path.read_text(), 60)
            yield first, second, err_path, cdn


def test_two_syncs_of_one_target_take_turns(tmp_path: Path) -> None:
    with waiting_behind_the_lock(tmp_path, "--json", stdout=subprocess.PIPE) as (first, second, err_path, cdn):
        cdn.let_go()
        _, first_err = first.communicate(timeout=60)
        second_out, _ = second.communicate(timeout=60)
        assert first.returncode == 0, first_err
        assert second.returncode == 0, err_path.read_text()
        # the second run went on once the first had finished: everything was already there
        actions = [t["action"] for i in yaml.safe_load(second_out)["images"] for t in i["targets"]]
        assert actions == ["up-to-date", "up-to-date"]


def test_sigterm_while_waiting_for_the_target_lock_exits_143_at_once(tmp_path: Path) -> None:
    """A run stopped before it holds its lock has nothing in flight: it leaves at once, copying and writing
    nothing, where it went on waiting (up to lock_timeout) and then ran the whole sync."""
    with waiting_behind_the_lock(tmp_path, stdout=subprocess.DEVNULL) as (first, second, err_path, cdn):
        second.send_signal(signal.SIGTERM)
        code = second.wait(timeout=60)  # before the first run lets go of the lock
        cdn.let_go()
        _, first_err = first.communicate(timeout=60)
        err = err_path.read_text()
        assert code == 143, err
        assert "stopped while waiting for the lock" in err and "stopped by SIGTERM" in err and "Traceback" not in err
        assert "verified" not in err and "wrote" not in err
        assert first.returncode == 0, first_err


def test_a_sync_waiting_too_long_for_the_lock_gives_up(tmp_path: Path) -> None:
    with held_copy(tmp_path) as (source, target, cdn):
        locks = str(tmp_path / "locks")
        slow = write_config(tmp_path / "slow.yaml", source, [target], lock_dir=locks)
        impatient = write_config(tmp_path / "impatient.yaml", source, [target], lock_dir=locks, lock_timeout=0.5)
        first = spawn(slow)
        wait_for(lambda: cdn.held > 0, seconds=60)  # held mid-copy until the impatient run has given up
        second = subprocess.run(mirror_command(impatient), capture_output=True, text=True, timeout=60)
        cdn.let_go()
        assert second.returncode == 1
        assert "another mirror sync holds" in second.stderr
        assert first.wait(timeout=60) == 0


def test_a_read_only_state_dir_is_one_line_naming_lock_dir(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """The default lock_dir is `<state_dir>/locks`; a state_dir on a read-only file system (a tmpfs mounted
    read-only in a mount namespace of the run's own) cannot hold it."""
    seed_release(source)
    state = tmp_path / "state"
    state.mkdir()
    config = write_config(tmp_path / "mirror.yaml", source, [target], state_dir=str(state))
    mount_then_run = 'mount -t tmpfs -o size=1m,ro tmpfs "$0" && exec "$@"'
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", mount_then_run, str(state), *mirror_command(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "lock file" in line]
    assert str(state / "locks") in line and "Read-only file system" in line and "lock_dir" in line
    assert not any(e.method in ("POST", "PUT") for e in target.access_log())  # nothing written to the target


def test_a_kept_manifest_a_crash_left_empty_is_written_again(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """A crash can leave a kept manifest's name on no bytes (or cut short): ignored when read, as it must be,
    and written again by the run that reads the manifest instead, so only that run pays the GET."""
    hami, _ = seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    assert subprocess.run(mirror_command(config), capture_output=True, timeout=120).returncode == 0
    child = next(digest for digest in hami.manifests if digest != hami.digest)
    kept = tmp_path / "state" / "manifests" / "sha256" / child.removeprefix("sha256:")
    kept.write_bytes(b"")

    def gets_of_child() -> int:
        return sum(1 for r in (source, target) for e in r.access_log() if e.method == "GET" and child in e.path)

    for run, gets in (("repairs it", 1), ("reads it from the file", 0)):
        before = gets_of_child()
        done = subprocess.run(mirror_command(config), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert gets_of_child() - before == gets, run
    assert hashlib.sha256(kept.read_bytes().partition(b"\n")[2]).hexdigest() == child.removeprefix("sha256:")


# -- memory ---------------------------------------------------------------------------------------------


def pattern(seed: int, size: int, block: int = 8 * MiB) -> Iterator[bytes]:
    """`size` bytes of repeatable noise, generated a block at a time."""
    rng = random.Random(seed)
    base = rng.randbytes(block)
    sent = 0
    index = 0
    while sent < size:
        piece = hashlib.sha256(index.to_bytes(8, "big")).digest() + base[32:]
        piece = piece[: size - sent]
        sent += len(piece)
        index += 1
        yield piece


def push_large_image(source: LocalRegistry, repository: str, size: int) -> str:
    hasher = hashlib.sha256()
    for piece in pattern(3, size):
        hasher.update(piece)
    layer_digest = "sha256:" + hasher.hexdigest()

    async def push(client: RegistryClient) -> str:
        async def body() -> AsyncIterator[bytes]:
            for piece in pattern(3, size):
                yield piece

        session = await client.start_upload(repository)
        assert session is not None
        await client.finish_upload(repository, session, layer_digest, size, body())
        config = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'
        config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        await client.push_blob(repository, config_digest, config)
        layer_type = "application/vnd.oci.image.layer.v1.tar+gzip"
        raw = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"mediaType": DOCKER_CONFIG, "digest": config_digest, "size": len(config)},
                "layers": [{"mediaType": layer_type, "digest": layer_digest, "size": size}],
            }
        ).encode()
        await client.put_manifest(repository, "v1", Manifest.parse(raw))
        return layer_digest

    return with_client(source, push)


@pytest.mark.parametrize("size_mb", [1024])
def test_memory_stays_flat_in_blob_size(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, size_mb: int
) -> None:
    small_digest = push_large_image(source, "small/layer", 16 * MiB)
    large_digest = push_large_image(source, "large/layer", size_mb * MiB)
    runs = {}
    for name, digest in (("small", small_digest), ("large", large_digest)):
        images = [{"name": name, "source": f"{name}/layer", "tag": "v1"}]
        config = write_config(tmp_path / f"{name}.yaml", source, [target], images=images)
        measured = run_measured(mirror_command(config))
        assert measured.returncode == 0, measured.stderr
        runs[name] = measured.peak_rss_mb
        assert asyncio.run(_exists(target, f"mirrored/{name}", digest))
    print(f"peak RSS: {runs}")
    assert runs["large"] < 150, runs
    assert runs["large"] - runs["small"] < 30, runs  # flat: the blob's size does not show in memory


async def _exists(target: LocalRegistry, repository: str, digest: str) -> bool:
    client = RegistryClient.open(target.host, ClientOptions(plain_http=True))
    try:
        return await client.head_blob(repository, digest) is not None
    finally:
        await client.aclose()


@contextmanager
def silent_server() -> Iterator[tuple[str, list[object]]]:
    """A listener that takes connections and never answers: a chart repository gone quiet."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    held: list[object] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/charts", held
    finally:
        listener.close()


def test_sigterm_while_the_charts_are_fetched_ends_the_run_when_the_grace_does(tmp_path: Path) -> None:
    """Before any upload (the chart's fetch, discovery, a namespace's look-up) the run went on retrying to its
    deadline after the grace was over (117 s of a 120 s deadline here), to be killed by Kubernetes instead."""
    source = start_registry(tmp_path / "source")
    try:
        with silent_server() as (url, held):
            chart = {"repository": url, "renderer": "values"}
            transfer = {"deadline": 120, "read_timeout": 60}
            config = write_config(
                tmp_path / "mirror.yaml", source, [source], chart=chart, transfer=transfer, shutdown_grace=1
            )
            process = spawn(config)
            wait_for(lambda: len(held) > 0)  # the run is waiting on the chart repository
            process.send_signal(signal.SIGTERM)
            started = time.monotonic()
            _, err = process.communicate(timeout=60)
            seconds = time.monotonic() - started
    finally:
        source.stop()
    assert process.returncode == 143, err
    assert seconds < 30, seconds  # the grace (the config's, 1 s) and the report, not the deadline
    assert "fetching the charts: abandoned at shutdown" in err and "Traceback" not in err
