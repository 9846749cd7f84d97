"""Several `mirror serve` processes on one real PostgreSQL database: every accepted job runs exactly once,
a job whose replica is killed is finished by another after its lease expires (not before), and a hand-run
`mirror sync` of the same target waits for the replica's lock in the database."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry, free_port
from mirror.oci import Manifest
from mirror.registry import RegistryClient
from mirror.service.store import JobStore
from tests.support import manifest_bytes, manifest_digest, with_client, write_config
from tests.test_crash import first_upload_started, slow_source, wait_for
from tests.test_service import Service, service_config
from tests.test_sync import VERSION, seed_release

LEASE = 3.0
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
    config = service_config(tmp_path, source, target, database_url=database_url)
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


def test_a_killed_replicas_job_is_finished_by_another_after_its_lease_expires(
    tmp_path: Path, target: LocalRegistry, database_url: str
) -> None:
    with slow_source(tmp_path, delay=1.5) as (source, _):
        hami, _ = seed_release(source)
        config = service_config(tmp_path, source, target, database_url=database_url)
        services = replicas(config, 2)
        try:
            job_id = services[0].signed({"version": VERSION}).json()["id"]
            wait_for(lambda: first_upload_started(target))
            running = services[0].job(job_id)
            assert running["state"] == "running" and running["attempts"] == 1
            victim = next(s for s in services if _pid_tag(s) in running["owner"])
            survivor = next(s for s in services if s is not victim)
            victim.stop(signal.SIGKILL)
            killed_at = time.time()
            # the dead replica's lease still holds for a while: nobody takes the job before it expires
            time.sleep(LEASE / 3)
            still = survivor.job(job_id)
            assert still["owner"] == running["owner"] and still["attempts"] == 1
            job = survivor.wait_done(job_id, seconds=120)
        finally:
            for service in services:
                service.stop()
    assert job["state"] == "succeeded", job["error"]
    assert job["attempts"] == 2 and job["owner"] != running["owner"] and _pid_tag(survivor) in job["owner"]
    # taken over only once the last lease the dead replica renewed had run out
    assert job["started_at"] >= still["lease_expires_at"] - 0.05
    assert job["started_at"] >= killed_at
    assert manifest_digest(target, "mirrored/hami", VERSION) == hami.digest
    assert "taking it over" in survivor.log.read_text()


def _pid_tag(service: Service) -> str:
    assert service.process is not None
    return f":{service.process.pid}:"


def test_a_hand_run_sync_waits_for_the_replicas_lock(tmp_path: Path, target: LocalRegistry, database_url: str) -> None:
    with slow_source(tmp_path, delay=1.0) as (source, _):
        hami, _ = seed_release(source)
        config = service_config(tmp_path, source, target, database_url=database_url)
        (service,) = replicas(config, 1)
        try:
            job_id = service.signed({"version": VERSION}).json()["id"]
            wait_for(lambda: first_upload_started(target))
            command = [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config)]
            by_hand = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
            ended_at = time.time()
            job = service.wait_done(job_id)
        finally:
            service.stop()
    assert by_hand.returncode == 0, by_hand.stderr
    assert "waiting for another mirror sync" in by_hand.stderr and "PostgreSQL advisory lock" in by_hand.stderr
    assert job["state"] == "succeeded" and job["finished_at"] <= ended_at
    assert "up-to-date" in by_hand.stdout  # it ran after the replica's copy, and found it done
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
