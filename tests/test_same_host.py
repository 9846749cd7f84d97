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


def test_fan_out_with_the_source_among_the_targets_completes(
    tmp_path: Path, source: LocalRegistry, other: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two targets, one of them the source's host, one connection per host: blobs go through the spool, and with
    the spool smaller than the run's blobs, the rest stream per target beside the spooled ones."""
    images = _seed(source)
    spool = {"dir": str(tmp_path / "spool"), "max_bytes": 3 * LAYER}
    report = _synced(_config(tmp_path / "mirror.yaml", source, [source, other], 1, spool=spool), capsys)
    _copied(report, 2)
    for target in (source, other):
        for name, image in images.items():
            assert_byte_exact(source, target, image, f"mirrored/{name}")


def test_fan_out_between_other_hosts_completes_with_one_connection_each(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    other: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No host shared, the spool partly full: an upload of a spooled blob holding a target's one connection
    while the spool's download waited for the source's, held by a streamed blob's GET waiting for that target."""
    images = _seed(source)
    spool = {"dir": str(tmp_path / "spool"), "max_bytes": 3 * LAYER}
    report = _synced(_config(tmp_path / "mirror.yaml", source, [target, other], 1, spool=spool), capsys)
    _copied(report, 2)
    for copy in (target, other):
        for name, image in images.items():
            assert_byte_exact(source, copy, image, f"mirrored/{name}")
