"""Several targets in one run: each source blob is read once, whatever the number of targets."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry, start_registry
from tests.support import manifest_bytes, manifest_digest, write_config
from tests.test_sync import VERSION, seed_release


@pytest.fixture
def three_targets(tmp_path: Path) -> Iterator[list[LocalRegistry]]:
    targets = [start_registry(tmp_path / f"target{i}") for i in range(3)]
    yield targets
    for target in targets:
        target.stop()


def test_each_source_blob_is_read_once_for_three_targets(
    tmp_path: Path, source: LocalRegistry, three_targets: list[LocalRegistry]
) -> None:
    hami, certgen = seed_release(source)
    spool_dir = tmp_path / "spool"
    config = write_config(tmp_path / "mirror.yaml", source, three_targets, spool={"dir": str(spool_dir)})
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    blob_gets = [e.path for e in source.access_log() if e.method == "GET" and "/blobs/" in e.path]
    distinct = set(hami.blobs) | set(certgen.blobs)
    # one read per blob; a blob shared by both images is read for the first, mounted for the second
    assert len(blob_gets) == len(set(blob_gets)) <= len(set(hami.blobs)) + len(set(certgen.blobs))
    assert {p.rsplit("/", 1)[1] for p in blob_gets} == distinct
    for target in three_targets:
        assert manifest_digest(target, "mirrored/hami", VERSION) == hami.digest
        assert manifest_bytes(target, "mirrored/hami", hami.digest) == hami.manifests[hami.digest]
        assert manifest_digest(target, "mirrored/kube-webhook-certgen", "v1.1.1") == certgen.digest
    assert list(spool_dir.iterdir()) == []  # the spool is gone with the run


def test_a_spool_too_small_falls_back_to_reading_per_target(
    tmp_path: Path, source: LocalRegistry, three_targets: list[LocalRegistry]
) -> None:
    hami, _ = seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, three_targets, spool={"max_bytes": 0})
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    blob_gets = [e.path for e in source.access_log() if e.method == "GET" and "/blobs/" in e.path]
    assert len(blob_gets) >= 3 * len(set(hami.blobs))  # no spool: every target read for itself
    for target in three_targets:
        assert manifest_digest(target, "mirrored/hami", VERSION) == hami.digest


SPOOL_THEN = """
import os, signal, sys, time
from pathlib import Path
from mirror.engine.fanout import Spool
spool = Spool(1 << 20, 65536, Path(sys.argv[1]))
(spool._directory() / "sha256-partial").write_bytes(b"half a blob")
print(spool._directory(), flush=True)
if sys.argv[2] == "die":
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(300)
"""


def _spool_of_a_process(spool_dir: Path, then: str) -> tuple[subprocess.Popen[str], Path]:
    process = subprocess.Popen(
        [sys.executable, "-c", SPOOL_THEN, str(spool_dir), then], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    return process, Path(process.stdout.readline().strip())


def test_a_spool_left_by_a_killed_run_is_swept_by_the_next_and_a_live_one_kept(
    tmp_path: Path, source: LocalRegistry, three_targets: list[LocalRegistry]
) -> None:
    seed_release(source)
    spool_dir = tmp_path / "spool"
    killed, stale = _spool_of_a_process(spool_dir, "die")
    assert killed.wait(timeout=60) == -signal.SIGKILL and (stale / "sha256-partial").is_file()
    running, live = _spool_of_a_process(spool_dir, "live")
    try:
        config = write_config(tmp_path / "mirror.yaml", source, three_targets, spool={"dir": str(spool_dir)})
        assert main(["sync", VERSION, "--config", str(config)]) == 0
        assert not stale.exists()  # its run is gone: nobody holds its lock
        assert (live / "sha256-partial").is_file()  # another run, alive, is using it
    finally:
        running.kill()
        running.wait(timeout=60)
