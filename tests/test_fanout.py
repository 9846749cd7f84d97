"""Several targets in one run: each source blob is read once, whatever the number of targets."""

from __future__ import annotations

import asyncio
import fcntl
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.sample import MiB, push_single
from mirror.engine import fanout
from mirror.engine.fanout import Spool
from mirror.engine.upload import RegistryOrigin
from mirror.oci import Descriptor
from mirror.registry import RegistryClient
from mirror.registry.options import ClientOptions
from mirror.registry.retry import RetryPolicy
from tests.faultproxy import Fault, fault_proxy
from tests.support import manifest_bytes, manifest_digest, with_client, write_config
from tests.test_sync import VERSION, seed_release

NO_RETRY = RetryPolicy(attempts=1)  # a failed read fails the download at once


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


def test_a_spool_being_made_is_not_swept_by_another_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another run's sweep at the worst moment, as this run's spool locks its owner file: the spool stays."""
    spool = Spool(max_bytes=MiB, chunk_size=MiB, directory=tmp_path)
    real_flock = fcntl.flock
    swept: list[Path] = []

    def flock_after_a_sweep(fd: int, operation: int) -> None:
        if not swept and operation == fcntl.LOCK_EX:
            swept.append(tmp_path)
            fanout.sweep_stale_spools(tmp_path)
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock_after_a_sweep)
    made = spool._directory()
    assert swept and made.is_dir() and (made / fanout.OWNER_FILE).is_file()
    monkeypatch.setattr(fcntl, "flock", real_flock)
    assert fanout.sweep_stale_spools(tmp_path) == []  # locked: its run is alive
    asyncio.run(spool.aclose())
    assert not made.exists()


def test_a_reader_behind_a_failed_spool_download_reads_its_own_bytes_while_the_next_one_runs(
    tmp_path: Path, source: LocalRegistry
) -> None:
    """A blob's download into the spool fails its digest check at the end while one target's upload has read
    only its first chunk; another target's retry starts the next download. The first reader still reads the
    bytes that arrived, then hears of the failure: the retry opened the same file, truncated it, and the reader
    spun on empty reads until the new download came past it; here the new download fails at once, and it spun
    for ever."""
    image = with_client(source, lambda client: push_single(client, "team/spooled", "v1", layer_sizes=(8 * MiB,)))
    layer = max(image.blobs, key=lambda digest: image.blobs[digest])
    blob = Descriptor("application/octet-stream", layer, image.blobs[layer])

    async def race(origin: RegistryOrigin, spool: Spool) -> tuple[int, BaseException | None]:
        read, error = 0, None
        async with spool.open(origin, blob) as first:
            chunks = aiter(first.chunks)
            read += len(await anext(chunks))
            download = spool._entries[blob.digest]  # the spool's own record of the download
            async with download.changed:
                await download.changed.wait_for(lambda: download.failed)
            async with spool.open(origin, blob):  # the retry: its download fails as its answer begins
                try:
                    async for chunk in chunks:
                        read += len(chunk)
                except Exception as exc:  # the first download's failure
                    error = exc
        return read, error

    with fault_proxy(source.port) as proxy:
        proxy.add(
            Fault("corrupt", method="GET", path=layer, after_bytes=8 * MiB - 100, count=1),
            Fault("reset_response", method="GET", path=layer, after_bytes=0, count=1),
        )

        async def run() -> tuple[int, BaseException | None]:
            client = RegistryClient.open(proxy.host, ClientOptions(plain_http=True, anonymous=True, retry=NO_RETRY))
            spool = Spool(64 * MiB, 64 * 1024, tmp_path / "spool")
            try:
                return await asyncio.wait_for(race(RegistryOrigin(client, "team/spooled"), spool), 40)
            finally:
                await spool.aclose()
                await client.aclose()

        read, error = asyncio.run(run())
    assert error is not None and 0 < read < blob.size


def test_a_reader_that_opens_the_spool_after_its_write_failed_gets_that_failure(tmp_path: Path) -> None:
    """A reader given the entry before the disk filled opens its file only as it starts reading; by then the
    failed write may have removed the file. It is told of the full disk (and its target reads the source
    instead), not of a file that is gone."""
    entry = fanout._Entry(tmp_path / "sha256-gone.1", "sha256:" + "0" * 64, 10)
    full = fanout.SpoolError("blob sha256:00: the spool's disk failed to write it: No space left on device")
    asyncio.run(entry._fail(full))

    async def read() -> None:
        async for _ in entry.read(0, 4):
            pass

    with pytest.raises(fanout.SpoolError) as told:
        asyncio.run(read())
    assert told.value is full
