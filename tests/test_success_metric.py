"""`MirrorServiceNoRecentSuccess` reads the deployment's last success from the job store every replica shares
(`mirror_store_last_successful_job_timestamp_seconds`, read at scrape), not from the process that ran the job:
with two replicas, the one that ran it restarting no longer pulls the newest success back to 0 while the other's
uptime satisfies the alert's guard. The store's answer on SQLite and a real PostgreSQL, the rule through
promtool, and the metric through a real `mirror serve` restarted over the same store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from mirror.service import metrics as service_metrics
from mirror.service.store import FAILED, SUCCEEDED, JobStore
from tests.test_monitoring import RULES, load_yaml, promtool
from tests.test_service import Service, service_config
from tests.test_store import FakeClock
from tests.test_sync import VERSION, seed_release

STORE_METRIC = "mirror_store_last_successful_job_timestamp_seconds"
PROCESS_METRIC = "mirror_last_successful_job_timestamp_seconds"


async def finish_one(store: JobStore, version: str, state: str) -> float:
    job, _ = await store.enqueue("ci", [version], None)
    claimed = await store.claim_next("runner", 60)
    assert claimed is not None and claimed["id"] == job["id"]
    assert isinstance(store.clock, FakeClock)
    store.clock.advance(10)
    assert await store.finish(job["id"], "runner", state, [], None if state == SUCCEEDED else "failed")
    return float((await store.get(job["id"]) or {})["finished_at"])


async def test_the_store_tells_when_its_newest_succeeded_job_finished(job_store: JobStore) -> None:
    assert await job_store.last_success() is None
    await finish_one(job_store, "v2.9.0", SUCCEEDED)
    newest = await finish_one(job_store, "v2.10.0", SUCCEEDED)
    await finish_one(job_store, "v2.11.0", FAILED)  # later, but failed
    await job_store.enqueue("ci", ["v2.12.0"], None)
    assert await job_store.claim_next("runner", 60) is not None  # running: not finished
    await job_store.enqueue("ci", ["v2.13.0"], None)  # queued
    assert await job_store.last_success() == newest


async def test_a_store_that_cannot_be_read_leaves_the_last_reading() -> None:
    answers: list[float | Exception | None] = [1234.0, RuntimeError("the database is away")]

    async def newest() -> float | None:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    metrics = service_metrics.Metrics(now=1000.0)
    reader = service_metrics.StoreSuccess(metrics, newest)
    await reader.refresh()
    await reader.refresh()  # within STORE_READ_SECONDS: not read again
    assert answers and metrics.registry.get_sample_value(STORE_METRIC) == 1234.0
    reader.read_at = None  # as if the interval had passed
    await reader.refresh()
    assert not answers and metrics.registry.get_sample_value(STORE_METRIC) == 1234.0


def test_a_replica_that_restarts_after_another_ran_the_job_does_not_fire(tmp_path: Path) -> None:
    """Replica A ran the job that succeeded at 20 h and restarted at 21 h; B, up since 0, never ran one. Both
    export what they would: A's own gauge forgotten by the restart, the store's newest success on both. The
    rule (its annotations left out, so that only its expression is compared) must not fire at 21 h 30; it does
    two periods after that success."""
    rules = load_yaml(RULES)
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))

    def series(name: str, instance: str, values: str) -> dict[str, str]:
        return {"series": f'{name}{{namespace="mirror", job="mirror", instance="{instance}"}}', "values": values}

    inputs = [
        series("mirror_started_timestamp_seconds", "A", "0x1259 75600x700"),
        series(PROCESS_METRIC, "A", "0x1199 72000x60 0x700"),
        series(STORE_METRIC, "A", "0x1199 72000x760"),
        series("mirror_started_timestamp_seconds", "B", "0x1960"),
        series(PROCESS_METRIC, "B", "0x1960"),
        series(STORE_METRIC, "B", "0x1199 72000x760"),
    ]
    fired = [{"exp_labels": {"severity": "critical", "namespace": "mirror", "job": "mirror"}}]
    checks = [("21h30m", []), ("31h30m", []), ("32h30m", fired)]
    expected = [
        {"alertname": "MirrorServiceNoRecentSuccess", "eval_time": at, "exp_alerts": alerts} for at, alerts in checks
    ]
    test = {"interval": "1m", "input_series": inputs, "alert_rule_test": expected}
    document = {"rule_files": ["rules.yaml"], "evaluation_interval": "5m", "tests": [test]}
    (tmp_path / "restart_test.yaml").write_text(yaml.safe_dump(document))
    tested = promtool("test", "rules", "restart_test.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def scraped(service: Service) -> dict[str, float]:
    text = httpx.get(f"{service.url}/metrics", timeout=10).text
    return {sample.name: sample.value for family in text_string_to_metric_families(text) for sample in family.samples}


def test_a_restarted_service_exports_the_stores_last_success(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    seed_release(source)
    config = service_config(tmp_path, source, target)
    first = Service(config, free_port())
    first.start()
    try:
        job = first.wait_done(first.signed({"version": VERSION}).json()["id"])
        assert job["state"] == "succeeded", job["error"]
        before: dict[str, Any] = scraped(first)
    finally:
        assert first.stopped_cleanly()
    assert before[STORE_METRIC] == job["finished_at"] and before[PROCESS_METRIC] > 0
    again = Service(config, free_port())
    again.start()
    try:
        after = scraped(again)
    finally:
        assert again.stopped_cleanly()
    assert after[PROCESS_METRIC] == 0  # this process ran nothing
    assert after[STORE_METRIC] == job["finished_at"]  # the store remembers


def test_the_store_reading_is_cheap_on_a_long_history(tmp_path: Path) -> None:
    """The newest success is one index look-up: SQLite's plan for it names the index, not a scan of the table."""
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        asyncio.run(store.last_success())
        with store.engine.connect() as db:
            plan = db.exec_driver_sql(
                "EXPLAIN QUERY PLAN SELECT finished_at FROM jobs WHERE state = 'succeeded' AND finished_at IS NOT NULL"
                " ORDER BY finished_at DESC LIMIT 1"
            ).all()
    finally:
        store.close()
    details = " ".join(str(row[-1]) for row in plan)
    assert "jobs_finished_by_state" in details and "TEMP B-TREE" not in details, details
