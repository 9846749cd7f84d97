"""Several `mirror serve` processes on one real PostgreSQL database: every accepted job runs exactly once,
a job whose replica is killed is finished by another after its lease expires (not before), and a hand-run
`mirror sync` of the same target waits for the replica's lock in the database.

Nothing here races a lease or a sleep: leases are long next to a loaded machine's hiccups, the moments that
matter are made (a source that holds its blobs until the test lets them go), and the order of events is
read from the store (a takeover's start against the dead replica's last lease, one clock)."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from mirror.oci import Manifest
from mirror.registry import RegistryClient
from mirror.service.store import JobStore
from tests.support import held_source, manifest_bytes, manifest_digest, with_client, write_config
from tests.test_crash import wait_for
from tests.test_service import Service, service_config
from tests.test_sync import VERSION, seed_release

LEASE = 10.0  # renewed every third: a live replica keeps it through seconds of a loaded machine's stalls
VERSIONS = [f"v2.{minor}.0" for minor in range(10, 30)]


def replicas(config: Path, count: int) -> list[Service]:
    started = [Service(config, free_port()) for _ in range(count)]
    for replica in started:
        replica.start()
    return started


def tag_pushes(target: LocalRegistry, repository: str) -> Counter[str]:
    """Tag PUTs at the target, per tag: one per sync that copied it (digest PUTs are not counted)."""
    prefix = f"/v2/{repository}/manifests/"
    return Counter(
        e.path.removeprefix(prefix)
        for e in target.access_log()
        if e.method == "PUT" and e.path.startswith(prefix) and not e.path.removeprefix(prefix).startswith("sha256:")
    )


async def _tag_all(client: RegistryClient, index: Manifest) -> None:
    for version in VERSIONS[1:]:
        await client.put_manifest("projecthami/hami", version, index)


def test_three_replicas_run_each_of_twenty_deliveries_exactly_once(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, database_url: str
) -> None:
    hami, _ = seed_release(source)
    index = Manifest.parse(manifest_bytes(source, "projecthami/hami", VERSION))
    with_client(source, lambda c: _tag_all(c, index))
    config = service_config(tmp_path, source, target, service={"lease_seconds": LEASE}, database_url=database_url)
    services = replicas(config, 3)
    try:
        rng = random.Random(11)
        accepted = {}
        for number, version in enumerate(VERSIONS):
            delivery = f"delivery-{number}"
            first, again = rng.sample(services, 2)  # the same delivery reaches two replicas
            answer = first.signed({"version": version}, delivery=delivery)
            assert answer.status_code == 202, answer.text
            duplicate = again.signed({"version": version}, delivery=delivery)
            assert duplicate.json()["id"] == answer.json()["id"] and duplicate.json()["duplicate"] is True
            accepted[version] = answer.json()["id"]
        jobs = {version: services[0].wait_done(job_id, seconds=240) for version, job_id in accepted.items()}
        owners = Counter(job["owner"] for job in jobs.values())
    finally:
        for service in services:
            service.stop()
    assert all(job["state"] == "succeeded" for job in jobs.values()), [j["error"] for j in jobs.values()]
    assert all(job["attempts"] == 1 for job in jobs.values())
    records = asyncio.run(JobStore(database_url).recent(100))
    assert sorted(r["id"] for r in records) == sorted(accepted.values())  # 20 deliveries (each sent twice): 20 jobs
    pushed = tag_pushes(target, "mirrored/hami")
    assert pushed == Counter(dict.fromkeys(VERSIONS, 1)), pushed
    assert all(manifest_digest(target, "mirrored/hami", v) == hami.digest for v in VERSIONS)
    assert len(owners) >= 2, owners  # the work was shared, not run by one replica alone


def test_the_replicas_schedules_make_one_discovery_per_tick(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, database_url: str
) -> None:
    """Every replica runs the schedule: each tick is one job, however the replicas' ticks and claims interleave
    (a tick queued after another replica claimed that tick's job used to queue a second discovery behind it)."""
    seed_release(source)
    config = service_config(tmp_path, source, target, schedule="*/3 * * * * *", database_url=database_url)
    services = replicas(config, 2)
    store = JobStore(database_url)
    try:
        deadline = time.monotonic() + 90
        while len([j for j in asyncio.run(store.recent(100)) if j["state"] == "succeeded"]) < 3:
            assert time.monotonic() < deadline, asyncio.run(store.recent(100))
            time.sleep(0.5)
    finally:
        for service in services:
            service.stop()
    records = asyncio.run(store.recent(100))
    ticks = Counter(r["delivery"] for r in records)
    assert all(r["kind"] == "schedule" for r in records)
    assert all(str(tick).startswith("schedule:") for tick in ticks) and set(ticks.values()) == {1}, ticks


def test_a_killed_replicas_job_is_finished_by_another_after_its_lease_expires(
    tmp_path: Path, target: LocalRegistry, database_url: str
) -> None:
    with held_source(tmp_path / "source", serve_first=1) as (source, cdn):
        hami, _ = seed_release(source)
        config = service_config(tmp_path, source, target, service={"lease_seconds": LEASE}, database_url=database_url)
        services = replicas(config, 2)
        try:
            job_id = services[0].signed({"version": VERSION}).json()["id"]
            wait_for(lambda: cdn.held > 0, seconds=60)  # mid-copy, and it stays there
            running = services[0].job(job_id)
            assert running["state"] == "running" and running["attempts"] == 1
            victim = next(s for s in services if _pid_tag(s) in running["owner"])
            survivor = next(s for s in services if s is not victim)
            victim.stop(signal.SIGKILL)
            killed_at = time.time()
            # the dead replica's lease holds for seconds yet (renewed at most a third of it ago): its job is
            # still its own
            still = survivor.job(job_id)
            assert still["state"] == "running" and still["owner"] == running["owner"] and still["attempts"] == 1
            cdn.let_go()
            job = survivor.wait_done(job_id, seconds=180)
        finally:
            for service in services:
                service.stop()
    assert job["state"] == "succeeded", job["error"]
    assert job["attempts"] == 2 and job["owner"] != running["owner"] and _pid_tag(survivor) in job["owner"]
    # taken over only once the last lease the dead replica renewed had run out: a claim reads the clock once,
    # so its start is past the lease it found expired
    assert job["started_at"] > still["lease_expires_at"]
    assert job["started_at"] >= killed_at
    assert manifest_digest(target, "mirrored/hami", VERSION) == hami.digest
    assert "taking it over" in survivor.log.read_text()


def lines_of(process: subprocess.Popen[str]) -> list[str]:
    """The process's stderr lines as they come (read on a thread, so the test never blocks on a pipe)."""
    lines: list[str] = []

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _pid_tag(service: Service) -> str:
    assert service.process is not None
    return f":{service.process.pid}:"


def test_a_hand_run_sync_waits_for_the_replicas_lock(tmp_path: Path, target: LocalRegistry, database_url: str) -> None:
    with held_source(tmp_path / "source", serve_first=0) as (source, cdn):
        hami, _ = seed_release(source)
        config = service_config(tmp_path, source, target, database_url=database_url)
        (service,) = replicas(config, 1)
        try:
            job_id = service.signed({"version": VERSION}).json()["id"]
            wait_for(lambda: cdn.held > 0, seconds=60)  # the replica holds the target's lock, mid-copy
            command = [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config)]
            with (tmp_path / "by-hand.out").open("w") as out:
                by_hand = subprocess.Popen(command, stdout=out, stderr=subprocess.PIPE, text=True)
            err = lines_of(by_hand)
            wait_for(lambda: any("waiting for another" in line for line in err) or by_hand.poll() is not None, 60)
            cdn.let_go()  # the replica finishes, and lets go of the lock
            by_hand.wait(timeout=180)
            job = service.wait_done(job_id, seconds=120)
        finally:
            service.stop()
    assert by_hand.returncode == 0, err
    waited = [line for line in err if "waiting for another mirror sync" in line]
    assert waited and "PostgreSQL advisory lock" in waited[0], err
    assert job["state"] == "succeeded", job["error"]
    assert "up-to-date" in (tmp_path / "by-hand.out").read_text()  # it ran after the replica's copy: found it done
    assert tag_pushes(target, "mirrored/hami") == Counter({VERSION: 1})
    assert manifest_digest(target, "mirrored/hami", VERSION) == hami.digest


def test_a_database_that_cannot_be_reached_is_one_line_without_the_password(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    url = f"postgresql+psycopg://mirror:db-s3cret-pw@127.0.0.1:{free_port()}/mirror"  # nothing listens
    config = write_config(tmp_path / "mirror.yaml", source, [target], database_url=url)
    assert main(["sync", VERSION, "--config", str(config)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mirror: cannot take the target lock in the database: "), err
    assert "db-s3cret-pw" not in err[0]
    assert manifest_digest(target, "mirrored/hami", VERSION) is None  # nothing written without the lock
