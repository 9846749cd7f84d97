"""A registry that is both the source and a target: its blob reads and its uploads must not wait on each other.

Each transfer holds its source GET open (a body over 4 MiB is not read ahead) while its PUT waits for a
connection; when reads and writes shared one host's pool, the GETs could take every place and no PUT ever got one
(the run stalled until its deadline). So could a fan-out's uploads, each holding a target's connection while the
spool's download waited for one at the source. The deadline here is far beyond what a loopback copy needs: a
failure is a hang turned into an error, never a lost race."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.sample import MiB, SampleImage, push_multiarch, push_single
from tests.support import with_client, write_config
from tests.test_sync import VERSION, assert_byte_exact

LAYER = 5 * MiB  # over the 4 MiB a retried GET reads ahead: the GET keeps its connection while the PUT goes
SHARED = random.Random(5).randbytes(LAYER)  # in both images: one repository uploads it, the other mounts it
DEADLINE = 60.0  # each request's, its wait for a connection included: a hang fails, a loopback copy never does
NAMES = ("wide", "tall")


@pytest.fixture
def other(tmp_path: Path) -> Iterator[LocalRegistry]:
    registry = start_registry(tmp_path / "other")
    yield registry
    registry.stop()


def _seed(registry: LocalRegistry) -> dict[str, SampleImage]:
    """Eleven distinct layers of 5 MiB: more transfers at once than the host has connections."""
    wide = with_client(
        registry,
        lambda c: push_multiarch(
            c, "team/wide", "v1", layer_sizes=(LAYER,) * 3, shared_layers=(SHARED,), attestations=False, seed=11
        ),
    )
    tall = with_client(
        registry, lambda c: push_single(c, "team/tall", "v1", layer_sizes=(LAYER,) * 4, shared_layers=(SHARED,))
    )
    return {"wide": wide, "tall": tall}


def _config(path: Path, source: LocalRegistry, targets: list[LocalRegistry], connections: int, **extra: Any) -> Path:
    """Each host limited to `connections`, eight transfers at once: settings that stalled the run."""
    return write_config(
        path,
        source,
        targets,
        images=[{"name": name, "source": f"team/{name}", "tag": "v1"} for name in NAMES],
        registries={r.host: {"plain_http": True, "max_connections": connections} for r in [source, *targets]},
        transfer={"blob_concurrency": 8, "run_blob_concurrency": 8, "deadline": DEADLINE},
        retry={"attempts": 2, "base_delay": 0.05, "max_delay": 0.5, "max_elapsed": DEADLINE},
        **extra,
    )


def _synced(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = main(["sync", VERSION, "--config", str(config), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report: dict[str, Any] = json.loads(captured.out)
    assert report["ok"] is True, captured.err
    return report


def _copied(report: dict[str, Any], targets: int) -> None:
    for image in report["images"]:
        assert len(image["targets"]) == targets
        assert all(t["action"] == "copied" and t["verified"] for t in image["targets"]), image


@pytest.mark.parametrize("connections", [4, 1])
def test_a_copy_within_one_registry_completes_byte_exact(
    tmp_path: Path,
    source: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    connections: int,
) -> None:
    """Source and target one host, another namespace. A streamed copy there needs a read and a write open at
    once: even one connection for the host does."""
    caplog.set_level(logging.INFO, logger="mirror")
    images = _seed(source)
    report = _synced(_config(tmp_path / "mirror.yaml", source, [source], connections), capsys)
    _copied(report, 1)
    for name, image in images.items():
        assert_byte_exact(source, source, image, f"mirrored/{name}")
    said = [r.getMessage() for r in caplog.records if "is a source and a target" in r.getMessage()]
    assert said == [
        f"{source.host} is a source and a target: blobs read from it get a connection pool of their own "
        f"(max_connections {connections} for reads, {connections} for everything else)"
    ]


@pytest.mark.parametrize("with_the_source", [True, False], ids=["source-among-targets", "other-hosts"])
def test_a_fan_out_with_one_connection_per_host_completes(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    other: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
    with_the_source: bool,
) -> None:
    """Two targets, one connection per host, the spool smaller than the run's blobs (the rest stream per target
    beside the spooled ones): with the source's host among the targets, blobs read from it go through the spool;
    with no host shared, an upload of a spooled blob held a target's one connection while the spool's download
    waited for the source's, held by a streamed blob's GET waiting for that target."""
    images = _seed(source)
    targets = [source if with_the_source else target, other]
    spool = {"dir": str(tmp_path / "spool"), "max_bytes": 3 * LAYER}
    report = _synced(_config(tmp_path / "mirror.yaml", source, targets, 1, spool=spool), capsys)
    _copied(report, 2)
    for copy in targets:
        for name, image in images.items():
            assert_byte_exact(source, copy, image, f"mirrored/{name}")
