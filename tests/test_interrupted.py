"""A copy killed half-way (SIGKILL, no chance to clean up) leaves no tag at the target, and the next run
finishes the job reusing the blobs that already arrived.

The half-way point is made, not timed: the source's blobs come from a CDN that serves the first few blobs
asked for and holds every other answer until the test lets it go, so at the kill exactly those blobs are at
the target and no other upload can complete."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from mirror.demo.localregistry import LocalRegistry, start_registry
from tests.support import blob_exists, held_source, manifest_digest, requests_since, write_config
from tests.test_crash import wait_for
from tests.test_sync import VERSION, seed_release


def test_sigkill_mid_copy_leaves_no_tag_and_the_rerun_completes(tmp_path: Path) -> None:
    with held_source(tmp_path / "source", serve_first=2) as (source, cdn):
        target = start_registry(tmp_path / "target")
        try:
            hami, certgen = seed_release(source)
            distinct = set(hami.blobs) | set(certgen.blobs)
            assert len(distinct) > 3
            config = write_config(tmp_path / "mirror.yaml", source, [target])
            command = [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config)]
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ)
            # two blobs copied, the others waiting at the source: the copy is half-way, and stays there
            wait_for(lambda: len(_completed_uploads(target)) == 2 and cdn.held > 0, seconds=60)
            assert process.poll() is None, "the copy finished before it could be interrupted"
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)

            repositories = ("mirrored/hami", "mirrored/kube-webhook-certgen")
            arrived = {d for d in distinct if any(blob_exists(target, r, d) for r in repositories)}
            assert arrived == cdn.served and len(arrived) == 2  # exactly the blobs served, no held one
            assert manifest_digest(target, "mirrored/hami", VERSION) is None
            assert manifest_digest(target, "mirrored/kube-webhook-certgen", "v1.1.1") is None
            assert manifest_digest(target, "mirrored/hami", hami.digest) is None  # the index is pushed last too
            mark = len(target.access_log())

            cdn.let_go()
            assert subprocess.call(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120) == 0

            assert manifest_digest(target, "mirrored/hami", VERSION) == hami.digest
            assert manifest_digest(target, "mirrored/kube-webhook-certgen", "v1.1.1") == certgen.digest
            rerun_uploads = [e for e in requests_since(target, mark) if e.method == "PUT" and "/blobs/" in e.path]
            assert len(rerun_uploads) == len(distinct) - len(arrived)
        finally:
            target.stop()


def _completed_uploads(target: LocalRegistry) -> list[str]:
    return [
        e.path for e in target.access_log() if e.method == "PUT" and "/blobs/uploads/" in e.path and e.status == 201
    ]
