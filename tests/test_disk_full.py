"""The spool's disk fills up under a run (another writer takes the space after mirror checked it), on a real
tmpfs mounted in a private mount namespace, with Debian's docker-registry as source and targets: the blob the
disk refused is read from the source per target instead, and where no retry is left only the images that
needed it fail, each with one line; the run is never lost."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.sample import MiB, SampleImage, push_single
from tests.faultproxy import Fault, fault_proxy
from tests.support import manifest_digest, with_client, write_config
from tests.test_sync import VERSION, seed_release

# The run, with one change: right after the spool's first free-space check passes, another writer fills
# the disk. The margin is set to nothing so that a tmpfs of a few MB is a disk the spool would use.
RUN_AS_THE_DISK_FILLS = """
import os, sys
from pathlib import Path
import mirror.engine.fanout as fanout
from mirror.cli import main

disk = Path(sys.argv[1])
fanout.FREE_SPACE_MARGIN = 0
checked = fanout.Spool._room_for

def room_then_another_writer_fills_the_disk(spool, size):
    room = checked(spool, size)
    if room and not (disk / "other-writer").exists():
        other = os.open(disk / "other-writer", os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            while os.write(other, bytes(65536)):
                pass
        except OSError:  # full
            pass
        os.close(other)
    return room

fanout.Spool._room_for = room_then_another_writer_fills_the_disk
sys.exit(main(sys.argv[2:]))
"""
DISK_OPTIONS = "size=8m"


@pytest.fixture
def two_targets(tmp_path: Path) -> Iterator[list[LocalRegistry]]:
    targets = [start_registry(tmp_path / f"target{i}") for i in range(2)]
    yield targets
    for target in targets:
        target.stop()


def _on_a_small_disk(tmp_path: Path, script: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    """`python -c script <disk> <arguments>`, a fresh tmpfs at <disk> seen by this process alone."""
    disk = tmp_path / "spooldisk"
    disk.mkdir()
    mount_then_run = 'mount -t tmpfs -o "$0" tmpfs "$1" && shift && exec "$@"'
    command = [DISK_OPTIONS, str(disk), sys.executable, "-c", script, str(disk), *arguments]
    return subprocess.run(
        ["unshare", "--mount", "sh", "-c", mount_then_run, *command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _sync_as_the_disk_fills(tmp_path: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return _on_a_small_disk(tmp_path, RUN_AS_THE_DISK_FILLS, "sync", VERSION, "--config", str(config), "--json")


def _refused_blob(stderr: str) -> str:
    """The digest of the blob the disk refused, from the run's one warning about it."""
    (warning,) = [line for line in stderr.splitlines() if "WARNING" in line and "failed to write it" in line]
    assert "No space left on device" in warning and "spool.dir" in warning
    found = re.search(r"blob (sha256:[0-9a-f]{64})", warning)
    assert found is not None
    return found.group(1)


def test_a_blob_the_full_disk_refused_is_read_from_the_source_per_target(
    tmp_path: Path, source: LocalRegistry, two_targets: list[LocalRegistry]
) -> None:
    hami, certgen = seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, two_targets, spool={"dir": str(tmp_path / "spooldisk")})
    done = _sync_as_the_disk_fills(tmp_path, config)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    refused = _refused_blob(done.stderr)
    assert refused in set(hami.blobs) | set(certgen.blobs)
    for target in two_targets:
        assert manifest_digest(target, "mirrored/hami", VERSION) == hami.digest
        assert manifest_digest(target, "mirrored/kube-webhook-certgen", "v1.1.1") == certgen.digest
    assert list((tmp_path / "out").rglob("*values.yaml"))  # the run's values, written


def _pushed(source: LocalRegistry, name: str, seed: int) -> SampleImage:
    """A single-platform image of its own layers (no two images here share a blob)."""
    return with_client(source, lambda client: push_single(client, f"team/{name}", "v1", seed=seed))


def test_without_a_retry_left_only_the_images_needing_the_refused_blob_fail(
    tmp_path: Path, source: LocalRegistry, two_targets: list[LocalRegistry]
) -> None:
    images = {name: _pushed(source, name, seed) for seed, name in enumerate(("one", "two", "three"), start=1)}
    config = write_config(
        tmp_path / "mirror.yaml",
        source,
        two_targets,
        images=[{"name": name, "source": f"team/{name}", "tag": "v1"} for name in images],
        spool={"dir": str(tmp_path / "spooldisk")},
        retry={"attempts": 1},
    )
    done = _sync_as_the_disk_fills(tmp_path, config)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    refused = _refused_blob(done.stderr)
    report = json.loads(done.stdout)
    failed = set()
    for image in report["images"]:
        needed = refused in images[image["name"]].blobs
        for target in image["targets"]:
            if target["action"] == "failed":
                assert needed and refused in target["error"] and "No space left on device" in target["error"]
                failed.add(image["name"])
            else:  # a target that asked for the blob only once the disk had failed read it from the source
                assert target["action"] == "copied" and target["verified"], target
    needing = {name for name, image in images.items() if refused in image.blobs}
    assert failed and failed <= needing  # where a target was reading the spool when the write failed
    for target in two_targets:
        for name in images.keys() - needing:
            assert manifest_digest(target, f"mirrored/{name}", "v1") == images[name].digest


# One spool, its blob's first download corrupted by the proxy; then the disk fills, and the blob is asked for
# again. Prints what the second read got.
DOWNLOAD_AGAIN_ON_A_FULL_DISK = """
import asyncio, os, sys
from pathlib import Path
import mirror.engine.fanout as fanout
from mirror.engine.upload import RegistryOrigin
from mirror.oci import Descriptor
from mirror.registry import RegistryClient
from mirror.registry.options import ClientOptions
from mirror.registry.retry import RetryPolicy

disk, host, digest, size = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
fanout.FREE_SPACE_MARGIN = 0
blob = Descriptor("application/octet-stream", digest, size)

async def read(spool, origin):
    async with spool.open(origin, blob) as body:
        return sum([len(chunk) async for chunk in body.chunks])

async def main():
    client = RegistryClient.open(host, ClientOptions(plain_http=True, anonymous=True, retry=RetryPolicy(attempts=1)))
    spool, origin = fanout.Spool(64 << 20, 65536, disk), RegistryOrigin(client, "team/spooled")
    try:
        try:
            await read(spool, origin)
        except Exception as exc:
            print("first:", type(exc).__name__, flush=True)
        other = os.open(disk / "other-writer", os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            while os.write(other, bytes(65536)):
                pass
        except OSError:
            pass
        print("again:", await read(spool, origin), flush=True)
    finally:
        await spool.aclose()
        await client.aclose()

asyncio.run(main())
"""


def test_a_blob_downloaded_again_is_not_spooled_on_a_disk_that_filled_since(
    tmp_path: Path, source: LocalRegistry
) -> None:
    image = with_client(source, lambda c: push_single(c, "team/spooled", "v1", layer_sizes=(2 * MiB,)))
    layer = max(image.blobs, key=lambda digest: image.blobs[digest])
    with fault_proxy(source.port) as proxy:
        proxy.add(Fault("corrupt", method="GET", path=layer, after_bytes=MiB, count=1))
        size = str(image.blobs[layer])
        done = _on_a_small_disk(tmp_path, DOWNLOAD_AGAIN_ON_A_FULL_DISK, proxy.host, layer, size)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["first: IntegrityError", f"again: {image.blobs[layer]}"]  # from the source
