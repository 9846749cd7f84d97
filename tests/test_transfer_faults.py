"""Faults met while mirror reads what it copied back from a target (`--deep`): a read that fails in passing is
read again, one that keeps failing is a MirrorError that stops the other reads, and bytes that are wrong are
the target's, not the source's."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path

import pytest

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import MiB, SampleImage, push_single
from mirror.engine.verify import verify_copy
from mirror.registry import RegistryClient, RegistryUnreachable
from mirror.registry.options import ClientOptions
from mirror.registry.retry import RetryPolicy
from tests.faultproxy import Fault, FaultProxy
from tests.support import with_client, write_config

IMAGES = [{"name": "big", "source": "ns/big", "tag": "v1", "values_keys": []}]
# over the 4 MiB the transport reads ahead of a GET (and so retries itself): a reset past them reaches the engine
LAYERS = (8 * MiB, 6 * MiB, 5 * MiB)
RETRY = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.05)


def big_image(registry: LocalRegistry) -> tuple[SampleImage, str]:
    image = with_client(registry, lambda c: push_single(c, "ns/big", "v1", layer_sizes=LAYERS))
    return image, max(image.blobs, key=lambda d: image.blobs[d])


def test_a_deep_check_of_an_up_to_date_copy_reads_a_blob_again_after_a_reset_mid_body(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    target_proxy: FaultProxy,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One reset in the middle of the target's answer failed the image, up to date as it was: the check's
    read was tried once, where a transfer's is tried again."""
    _, largest = big_image(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target_proxy], images=IMAGES)
    assert main(["sync", "--config", str(config), "v2.10.0"]) == 0
    reset = Fault("reset_response", method="GET", path=re.escape(largest), after_bytes=7 * MiB, count=1)
    target_proxy.add(reset)
    assert main(["sync", "--config", str(config), "v2.10.0", "--deep"]) == 0, capsys.readouterr().err
    assert reset.applied == 1
    assert len([e for e in target_proxy.log if e.method == "GET" and largest in e.path]) == 2  # read again


def test_a_deep_check_that_cannot_read_a_blob_is_a_mirror_error_and_stops_the_other_reads(
    source: LocalRegistry, source_proxy: FaultProxy
) -> None:
    """A blob whose every read is reset: RegistryUnreachable, which the check did not catch, left the other
    blobs' reads running after verify_copy had given up (here, held by the proxy until the test ends)."""
    image, largest = big_image(source)
    released = threading.Event()
    others = "|".join(re.escape(d) for d in image.blobs if d != largest)
    source_proxy.add(
        Fault("reset_response", method="GET", path=re.escape(largest), after_bytes=5 * MiB, count=1000),
        Fault("stall", method="GET", path=others, seconds=120, until=released.is_set, count=1000),
    )

    def checks_reading() -> list[asyncio.Task[object]]:
        return [
            task
            for task in asyncio.all_tasks()
            if "_BlobChecks" in getattr(task.get_coro(), "__qualname__", "")
            and not task.done()
            and not task.cancelling()
        ]

    async def check() -> list[asyncio.Task[object]]:
        options = ClientOptions(plain_http=True, retry=RETRY)
        client = RegistryClient.open(source_proxy.host, options)
        try:
            with pytest.raises(RegistryUnreachable, match=f"fetch blob {source_proxy.host}/ns/big@{largest}"):
                await verify_copy(client, "ns/big", "v1", image.digest, deep=True)
            return checks_reading()
        finally:
            released.set()
            await client.aclose()

    assert asyncio.run(check()) == []


def test_a_deep_check_names_the_target_whose_bytes_are_wrong(source: LocalRegistry) -> None:
    """The check's message said `source sent`, though the bytes it read were the target's."""
    image, largest = big_image(source)
    stored = source.blob_path(largest)
    data = stored.read_bytes()
    stored.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))

    found = with_client(source, lambda c: verify_copy(c, "ns/big", "v1", image.digest, deep=True))
    assert [problem.split(" hashing to ")[0] for problem in found.problems] == [
        f"blob {largest}: {source.host}/ns/big sent {len(data)} bytes"
    ]
