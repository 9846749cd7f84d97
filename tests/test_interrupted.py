"""A copy killed half-way (SIGKILL, no chance to clean up) leaves no tag at the target, and the next run
finishes the job reusing the blobs that already arrived."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mirror.demo.localregistry import start_registry
from tests.support import blob_exists, cdn_server, manifest_digest, requests_since, write_config
from tests.test_sync import VERSION, seed_release


def test_sigkill_mid_copy_leaves_no_tag_and_the_rerun_completes(tmp_path: Path) -> None:
    with cdn_server(tmp_path / "source" / "data", delay=0.5) as cdn:  # each blob takes half a second
        source = start_registry(tmp_path / "source", redirect_to=cdn.url)
        target = start_registry(tmp_path / "target")
        try:
            hami, certgen = seed_release(source)
            distinct = set(hami.blobs) | set(certgen.blobs)
            config = write_config(tmp_path / "mirror.yaml", source, [target])
            command = [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config)]
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ)
            deadline = time.monotonic() + 30
            while not _completed_uploads(target) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert process.poll() is None, "the copy finished before it could be interrupted"
            process.send_signal(signal.SIGKILL)
            process.wait()

            time.sleep(0.3)  # let the registry finish what it had already received
            repositories = ("mirrored/hami", "mirrored/kube-webhook-certgen")
            arrived = [d for d in distinct if any(blob_exists(target, r, d) for r in repositories)]
            assert 0 < len(arrived) < len(distinct)
            assert manifest_digest(target, "mirrored/hami", VERSION) is None
            assert manifest_digest(target, "mirrored/kube-webhook-certgen", "v1.1.1") is None
            assert manifest_digest(target, "mirrored/hami", hami.digest) is None  # the index is pushed last too
            mark = len(target.access_log())

            assert subprocess.call(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0

            assert manifest_digest(target, "mirrored/hami", VERSION) == hami.digest
            assert manifest_digest(target, "mirrored/kube-webhook-certgen", "v1.1.1") == certgen.digest
            rerun_uploads = [e for e in requests_since(target, mark) if e.method == "PUT" and "/blobs/" in e.path]
            assert len(rerun_uploads) == len(distinct) - len(arrived)
        finally:
            source.stop()
            target.stop()


def _completed_uploads(target: object) -> list[str]:
    from mirror.demo.localregistry import LocalRegistry

    assert isinstance(target, LocalRegistry)
    return [
        e.path for e in target.access_log() if e.method == "PUT" and "/blobs/uploads/" in e.path and e.status == 201
    ]
