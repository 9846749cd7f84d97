"""A rolling upgrade (or a rollback): replicas of the version before (905f389, one queued-or-running job per
release, a single partial index) share the job store with this version. A follow-up job of a running release
waits in a state the old code never reads, so an old replica's claim takes other releases' jobs instead of
failing on the follow-up, and an old replica starting again makes its index without conflict. A waiting job whose
running job an old replica ended is queued by this version's next claim. On SQLite and on a real PostgreSQL."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from mirror.service.store import QUEUED, RUNNING, SUCCEEDED, WAITING, JobStore
from tests.test_store import FakeClock

OLD_VERSION = "905f389"
OLD_STORE = Path(__file__).resolve().parent / "golden" / f"store-{OLD_VERSION}.py.txt"


@pytest.fixture(scope="module")
def old_store(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """mirror/service/store.py as the version before wrote it, loaded as a module of its own."""
    source = OLD_STORE.read_text()  # kept as it was: a checkout without history runs this too
    path = tmp_path_factory.mktemp("old") / "old_store.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_store", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_store"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def stores(store_url: str, clock: FakeClock, old_store: ModuleType) -> Iterator[tuple[JobStore, JobStore]]:
    """An old replica, running before the rollout; then a new one starting on the same database."""
    old = old_store.JobStore(store_url, clock=clock)
    new = JobStore(store_url, clock=clock)
    yield old, new
    new.close()
    old.close()


async def test_an_old_replica_claims_other_releases_while_a_follow_up_waits(
    stores: tuple[JobStore, JobStore], store_url: str, clock: FakeClock, old_store: ModuleType
) -> None:
    old, new = stores
    running, _ = await new.enqueue("ci", ["v2.10.0"], "d1")
    claimed = await new.claim_next("new", 60)
    assert claimed is not None and claimed["id"] == running["id"]
    follow_up, created = await new.enqueue("dockerhub", ["v2.10.0"], "d2")
    assert created and follow_up["state"] == WAITING
    other, _ = await new.enqueue("ci", ["v2.11.0"], "d3")
    taken = await old.claim_next("old", 60)  # the follow-up is not the oldest queued job: it is not queued at all
    assert taken is not None and taken["id"] == other["id"]
    assert await old.claim_next("old", 60) is None
    old_store.JobStore(store_url, clock=clock).close()  # an old replica restarting (a rollback) makes its index again
    assert (await new.get(follow_up["id"]) or {})["state"] == WAITING
    assert await new.finish(running["id"], "new", SUCCEEDED, [], None)
    assert (await new.get(follow_up["id"]) or {})["state"] == QUEUED
    taken = await old.claim_next("old", 60)  # and old replicas run it once it is queued
    assert taken is not None and taken["id"] == follow_up["id"] and taken["state"] == RUNNING


async def test_a_follow_up_whose_job_an_old_replica_ended_is_queued_by_the_next_claim(
    stores: tuple[JobStore, JobStore],
) -> None:
    old, new = stores
    running, _ = await new.enqueue("ci", ["v2.10.0"], None)
    claimed = await old.claim_next("old", 60)
    assert claimed is not None and claimed["id"] == running["id"]
    follow_up, created = await new.enqueue("dockerhub", ["v2.10.0"], None)
    assert created and follow_up["state"] == WAITING
    assert await old.finish(running["id"], "old", SUCCEEDED, [], None)  # it knows nothing of follow-ups
    assert (await new.get(follow_up["id"]) or {})["state"] == WAITING
    taken = await new.claim_next("new", 60)
    assert taken is not None and taken["id"] == follow_up["id"]
