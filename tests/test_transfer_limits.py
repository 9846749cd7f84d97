"""Blob transfers at once: at most `transfer.blob_concurrency` to each target registry and
`transfer.run_blob_concurrency` across the run, counted where they wait. The source's blob bytes come from a CDN
that holds every answer until the test lets go, so the transfers a run has started stay in flight, and a third
one, were it allowed, would show up within seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.sample import SampleImage
from tests.support import HeldCdn, held_source, manifest_digest, write_config
from tests.test_crash import wait_for
from tests.test_sync import VERSION, seed_release

Served = Callable[[tuple[SampleImage, ...]], set[str]]
WATCH_SECONDS = 3.0  # how long the held count must stay within its bound


def most_held_while_watching(cdn: HeldCdn) -> int:
    most, until = cdn.held, time.monotonic() + WATCH_SECONDS
    while time.monotonic() < until:
        most = max(most, cdn.held)
        time.sleep(0.02)
    return most


@contextmanager
def held_sync(
    tmp_path: Path, transfer: dict[str, int], platforms: list[list[str] | None], served: Served = lambda _: set()
) -> Iterator[HeldCdn]:
    """A `mirror sync` of the two-image release to a registry per entry of `platforms` (each target's platform
    filter), the source's blobs held but those `served` picks; on leaving, the blobs are let go and the sync
    must finish with every tag in place."""
    with held_source(tmp_path / "source", serve_first=0) as (source, cdn):
        registries = [start_registry(tmp_path / f"target{i}") for i in range(len(platforms))]
        try:
            cdn.served.update(served(seed_release(source)))
            config = write_config(tmp_path / "mirror.yaml", source, registries, transfer=transfer)
            data = yaml.safe_load(config.read_text(encoding="utf-8"))
            for target, only in zip(data["targets"], platforms, strict=True):
                target["platforms"] = only
            config.write_text(yaml.safe_dump(data), encoding="utf-8")
            command = [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config)]
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ)
            try:
                yield cdn
                assert process.poll() is None, "the sync ended while its blobs were held"
                cdn.let_go()
                assert process.wait(timeout=120) == 0
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait(timeout=30)
            assert all(_tagged(r) for r in registries)
        finally:
            for registry in registries:
                registry.stop()


def platform_blobs(image: SampleImage, platform: str) -> set[str]:
    """The config and layer digests of the image's manifests for `platform` (`os/architecture`)."""
    documents = {digest: json.loads(raw) for digest, raw in image.manifests.items()}
    children = [
        entry["digest"]
        for document in documents.values()
        for entry in document.get("manifests", [])
        if "{os}/{architecture}".format(**entry.get("platform", {"os": "", "architecture": ""})) == platform
    ]
    return {d["digest"] for child in children for d in [documents[child]["config"], *documents[child]["layers"]]}


def shared_by_platforms(images: tuple[SampleImage, ...]) -> set[str]:
    return {d for image in images for d in platform_blobs(image, "linux/amd64") & platform_blobs(image, "linux/arm64")}


def _tagged(target: LocalRegistry) -> bool:
    return manifest_digest(target, "mirrored/hami", VERSION) is not None


def test_one_target_gets_at_most_blob_concurrency_transfers_at_once(tmp_path: Path) -> None:
    with held_sync(tmp_path, {"blob_concurrency": 2}, platforms=[None]) as cdn:
        wait_for(lambda: cdn.held == 2, seconds=60)
        assert most_held_while_watching(cdn) == 2


def test_the_run_moves_at_most_run_blob_concurrency_across_its_targets(tmp_path: Path) -> None:
    # each target takes the other platform, and the blobs the platforms share are served at once: the two
    # targets read blobs of their own, so without the run's bound their two transfers each would make four
    transfer = {"blob_concurrency": 2, "run_blob_concurrency": 3}
    platforms: list[list[str] | None] = [["linux/amd64"], ["linux/arm64"]]
    with held_sync(tmp_path, transfer, platforms, served=shared_by_platforms) as cdn:
        wait_for(lambda: cdn.held == 3, seconds=60)
        assert most_held_while_watching(cdn) == 3
