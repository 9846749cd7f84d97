"""`mirror serve` as a real process on a loopback port, driven by a real HTTP client."""

from __future__ import annotations

import asyncio
import datetime
import fcntl
import hashlib
import hmac
import json
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from mirror import database
from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from mirror.demo.sample import push_multiarch
from mirror.engine.discover import select_versions
from mirror.engine.lock import lock_name
from mirror.oci import Manifest
from mirror.service.store import JobStore
from mirror.settings import DiscoverySettings
from tests.faultproxy import Fault, fault_proxy
from tests.support import (
    beyond_heads,
    held_source,
    manifest_bytes,
    manifest_digest,
    with_client,
    write_config,
)
from tests.test_crash import wait_for
from tests.test_sync import VERSION, seed_release

OLDER = "v2.9.0"  # a release before VERSION: discovery's newest two are both

SECRET = "webhook-shared-secret-0123"
DOCKERHUB_TOKEN = "dh-token-4567-89ab-cdef"
API_TOKEN = "job-api-token-0123456789"
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


class Service:
    def __init__(self, config: Path, port: int) -> None:
        self.config, self.port = config, port
        self.process: subprocess.Popen[str] | None = None
        self.log = config.parent / "serve.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def readiness_url(self) -> str:
        """Where /readyz answers: the public port, unless `service.internal_port` moves it."""
        return self.url

    def start(self) -> None:
        """Start and wait until ready; on a port another process took between our pick and the bind, again on
        a fresh one (tests reach the service through `url`)."""
        for _ in range(3):
            written = self.log.stat().st_size if self.log.exists() else 0
            if self._started():
                return
            if "address already in use" not in self.log.read_text()[written:].lower():
                raise AssertionError(f"service exited:\n{self.log.read_text()}")
            self.port = free_port()
        raise AssertionError(f"no free port held long enough:\n{self.log.read_text()}")

    def command(self) -> list[str]:
        """`mirror serve` on this service's config and port."""
        serve = [sys.executable, "-m", "mirror", "serve", "--config", str(self.config)]
        return [*serve, "--host", "127.0.0.1", "--port", str(self.port)]

    def _started(self) -> bool:
        """True once ready; False if the process exited first."""
        with self.log.open("a") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                if httpx.get(f"{self.readiness_url}/readyz", timeout=1).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"service did not become ready:\n{self.log.read_text()}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=30)

    def stopped_cleanly(self) -> bool:
        """SIGTERM: uvicorn shuts down gracefully, then re-raises the signal (exit status -15)."""
        code = self.stop()
        return code in (0, -signal.SIGTERM) and "service stopped cleanly" in self.log.read_text()

    def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", content=body, headers=headers or {}, timeout=10)

    def signed(self, payload: Any, delivery: str | None = None, event: str | None = None) -> httpx.Response:
        body = json.dumps(payload).encode()
        signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        headers = {"X-Hub-Signature-256": signature, "Content-Type": "application/json"}
        if delivery:
            headers["X-GitHub-Delivery"] = delivery
        if event:
            headers["X-GitHub-Event"] = event
        return self.post("/hooks/ci", body, headers)

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/jobs/{job_id}", headers=AUTH, timeout=5).json())

    def wait_done(self, job_id: str, seconds: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["state"] in ("succeeded", "failed"):
                return job
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} did not finish: {self.job(job_id)}")

    def jobs(self) -> list[dict[str, Any]]:
        return list(httpx.get(f"{self.url}/jobs", headers=AUTH, timeout=5).json()["jobs"])


def service_config(
    tmp_path: Path, source: Any, target: Any, service: dict[str, Any] | None = None, **extra: Any
) -> Path:
    """The tests' service config; `service` adds to (or overrides) its `service:` block."""
    path = write_config(
        tmp_path / "mirror.yaml",
        source,
        [target],
        state_dir=str(tmp_path / "state"),
        lock_dir=str(tmp_path / "locks"),
        webhook={"secret": SECRET, "dockerhub_token": DOCKERHUB_TOKEN},
        service={"api_token": API_TOKEN, "lease_seconds": 3, "poll_seconds": 0.2, **(service or {})},
        discovery={"versions": ">=2.7.0", "newest": 2},
        **extra,
    )
    return path


def test_signed_webhook_runs_a_verified_copy_and_serves_the_values(
    service: Service, source: LocalRegistry, target: LocalRegistry
) -> None:
    hami, _ = seed_release(source)
    answer = service.signed({"version": "2.10.0"}, delivery="delivery-1")
    assert answer.status_code == 202
    accepted = answer.json()
    assert accepted["state"] == "queued" and accepted["versions"] == [VERSION] and accepted["duplicate"] is False
    job = service.wait_done(accepted["id"])
    assert job["state"] == "succeeded", job["error"]
    assert job["started_at"] <= job["finished_at"]
    (release,) = job["releases"]
    assert release["version"] == VERSION and release["images"][0]["source_digest"] == hami.digest
    assert manifest_digest(target, "mirrored/hami", VERSION) == hami.digest
    values = httpx.get(f"{service.url}{job['values'][0]['url']}", headers=AUTH, timeout=5)
    assert values.status_code == 200 and values.headers["content-type"].startswith("application/yaml")
    assert yaml.safe_load(values.text)["devicePlugin"]["image"]["repository"] == "mirrored/hami"
    assert [j["id"] for j in service.jobs()] == [accepted["id"]]
    # the JSON logs carry the job id
    lines = [json.loads(line) for line in service.log.read_text().splitlines() if line.startswith("{")]
    assert any(line.get("job") == accepted["id"] and "job started" in line["msg"] for line in lines)


def test_github_release_events_are_understood(service: Service, source: LocalRegistry) -> None:
    """GitHub announces a release twice, `published` then `released`, each its own delivery: one job, however
    far the first has got when the second arrives (a second run would announce a failure twice)."""
    seed_release(source)
    release = {"tag_name": "v2.10.0", "id": 215380421, "prerelease": False}
    answer = service.signed({"action": "published", "release": release}, event="release", delivery="d-published")
    assert answer.status_code == 202 and answer.json()["versions"] == [VERSION]
    assert service.wait_done(answer.json()["id"])["state"] == "succeeded"
    again = service.signed({"action": "released", "release": release}, event="release", delivery="d-released")
    assert again.json()["id"] == answer.json()["id"] and again.json()["duplicate"] is True, again.text
    assert [job["id"] for job in service.jobs()] == [answer.json()["id"]]


def test_bad_requests_are_refused_and_queue_nothing(service: Service) -> None:
    body = json.dumps({"version": "v2.10.0"}).encode()
    good_sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    cases = [
        (body, {}, 401),  # unsigned
        (body, {"X-Hub-Signature-256": "sha256=" + "0" * 64}, 401),  # badly signed
        (body, {"X-Hub-Signature-256": good_sig.replace("sha256=", "sha1=")}, 401),
        (b"x" * (64 * 1024 + 1), {"X-Hub-Signature-256": good_sig}, 413),  # oversized
    ]
    for raw, headers, status in cases:
        answer = service.post("/hooks/ci", raw, headers)
        assert answer.status_code == status and "error" in answer.json()
    for payload in ({"version": "latest"}, {"version": "v2.6.0"}, {"nothing": 1}, ["v2.10.0"]):
        assert service.signed(payload).status_code == 422
    malformed = b"{not json"
    signature = "sha256=" + hmac.new(SECRET.encode(), malformed, hashlib.sha256).hexdigest()
    assert service.post("/hooks/ci", malformed, {"X-Hub-Signature-256": signature}).status_code == 422
    assert service.post(f"/hooks/dockerhub/wrong-{DOCKERHUB_TOKEN}", b"{}").status_code == 401
    wrong_repo = {"push_data": {"tag": "v2.10.0"}, "repository": {"repo_name": "someone/else"}}
    assert service.post(f"/hooks/dockerhub/{DOCKERHUB_TOKEN}", json.dumps(wrong_repo).encode()).status_code == 422
    assert service.jobs() == []


def test_duplicate_deliveries_queue_once(service: Service, source: LocalRegistry) -> None:
    seed_release(source)
    first = service.signed({"version": "v2.10.0"}, delivery="same-delivery").json()
    again = service.signed({"version": "v2.10.0"}, delivery="same-delivery").json()
    assert again["id"] == first["id"] and again["duplicate"] is True
    service.wait_done(first["id"])
    later = service.signed({"version": "v2.10.0"}, delivery="same-delivery").json()
    assert later["id"] == first["id"]
    assert len(service.jobs()) == 1


def test_dockerhub_push_webhook(service: Service, source: LocalRegistry) -> None:
    seed_release(source)
    push = {"push_data": {"tag": "v2.10.0"}, "repository": {"repo_name": "projecthami/hami"}}
    answer = service.post(f"/hooks/dockerhub/{DOCKERHUB_TOKEN}", json.dumps(push).encode())
    assert answer.status_code == 202
    assert service.wait_done(answer.json()["id"])["state"] == "succeeded"


def test_the_dockerhub_token_may_come_from_a_file(tmp_path: Path, source: LocalRegistry, target: LocalRegistry) -> None:
    """`webhook.dockerhub_token_file`: the token in a mounted Secret rather than in the ConfigMap, its newline
    (a Secret made from a file) not part of it."""
    seed_release(source)
    config = service_config(tmp_path, source, target)
    data = yaml.safe_load(config.read_text())
    token_file = tmp_path / "dockerhub-token"
    token_file.write_text(DOCKERHUB_TOKEN + "\n")
    data["webhook"] = {"secret": SECRET, "dockerhub_token_file": str(token_file)}
    config.write_text(yaml.safe_dump(data))
    running = Service(config, free_port())
    running.start()
    try:
        push = json.dumps({"push_data": {"tag": VERSION}, "repository": {"repo_name": "projecthami/hami"}}).encode()
        assert running.post(f"/hooks/dockerhub/{DOCKERHUB_TOKEN}x", push).status_code == 401
        answer = running.post(f"/hooks/dockerhub/{DOCKERHUB_TOKEN}", push)
        assert answer.status_code == 202, answer.text
        assert running.wait_done(answer.json()["id"])["state"] == "succeeded"
    finally:
        assert running.stopped_cleanly()


def test_tokens_in_files_are_read_again_so_a_rotation_takes_effect_at_once(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """A mounted Secret changes in place: after both files are rewritten the old API token (and a session the
    status page signed with it) and the old Docker Hub token are refused, the new ones taken, with no restart."""
    api_file, hub_file = tmp_path / "api-token", tmp_path / "dockerhub-token"
    api_file.write_text(API_TOKEN + "\n")
    hub_file.write_text(DOCKERHUB_TOKEN + "\n")
    config = service_config(tmp_path, source, target, service={"api_token": None, "api_token_file": str(api_file)})
    data = yaml.safe_load(config.read_text())
    data["webhook"] = {"secret": SECRET, "dockerhub_token_file": str(hub_file)}
    config.write_text(yaml.safe_dump(data))
    latest = json.dumps({"push_data": {"tag": "latest"}, "repository": {"repo_name": "projecthami/hami"}}).encode()
    running = Service(config, free_port())
    running.start()
    try:

        def answers(api: str, hub: str, cookies: httpx.Cookies | None = None) -> tuple[int, int, int]:
            jobs = httpx.get(f"{running.url}/jobs", headers={"Authorization": f"Bearer {api}"}, timeout=10)
            by_session = httpx.get(f"{running.url}/jobs", cookies=cookies, timeout=10) if cookies else jobs
            return jobs.status_code, by_session.status_code, running.post(f"/hooks/dockerhub/{hub}", latest).status_code

        login = httpx.post(f"{running.url}/login", data={"token": API_TOKEN}, timeout=10)
        assert answers(API_TOKEN, DOCKERHUB_TOKEN, login.cookies) == (200, 200, 200)  # 200: 'latest' is ignored
        new_api, new_hub = API_TOKEN[::-1] + "-rotated", DOCKERHUB_TOKEN[::-1] + "-rotated"
        api_file.write_text(new_api + "\n")
        hub_file.write_text(new_hub + "\n")
        assert answers(API_TOKEN, DOCKERHUB_TOKEN, login.cookies) == (401, 401, 401)
        assert answers(new_api, new_hub) == (200, 200, 200)
    finally:
        assert running.stopped_cleanly()


def test_pre_releases_published_or_pushed_are_answered_and_not_queued(service: Service) -> None:
    """discovery.prereleases is off (the default): a GitHub release marked pre-release, one named `-rc.1`, and a
    Docker Hub push of an `-rc.1` tag are answered and queue nothing, as discovery would leave them out; a tag
    that is not a release of the image's template at all (`latest`) neither."""
    for release in ({"tag_name": "v2.11.0", "prerelease": True}, {"tag_name": "v2.11.0-rc.1"}):
        answer = service.signed({"action": "published", "release": release}, event="release")
        assert answer.status_code == 200 and "pre-release" in answer.json()["ignored"], answer.text
    for tag, said in (("v2.11.0-rc.1", "pre-release"), ("latest", "not a release")):
        push = {"push_data": {"tag": tag}, "repository": {"repo_name": "projecthami/hami"}}
        answer = service.post(f"/hooks/dockerhub/{DOCKERHUB_TOKEN}", json.dumps(push).encode())
        assert answer.status_code == 200 and said in answer.json()["ignored"], answer.text
    assert service.jobs() == []


def test_a_pre_release_promoted_to_a_release_is_mirrored(service: Service, source: LocalRegistry) -> None:
    """GitHub announces a pre-release made a release with `released` alone (no second `published`)."""
    seed_release(source)
    release = {"tag_name": VERSION, "prerelease": True}
    answer = service.signed({"action": "published", "release": release}, event="release")
    assert answer.status_code == 200 and "pre-release" in answer.json()["ignored"], answer.text
    promoted = service.signed({"action": "released", "release": {**release, "prerelease": False}}, event="release")
    assert promoted.status_code == 202 and promoted.json()["versions"] == [VERSION], promoted.text
    assert service.wait_done(promoted.json()["id"])["state"] == "succeeded"


@contextmanager
def target_lock_held(tmp_path: Path, target: LocalRegistry, database_url: str | None) -> Iterator[None]:
    """The target's lock, held as another mirror sync would hold it: its lock file, or with PostgreSQL the
    advisory lock every replica and the CronJob take."""
    name = lock_name(target.host, "mirrored")
    if database_url is None:
        lock = tmp_path / "locks" / f"{name}.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        with lock.open("a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            yield
        return
    key = database.advisory_key(database.target_lock(name))
    with database.open_engine(database_url, pooled=False).connect() as connection:
        connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
        yield


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_job_cut_at_shutdown_is_given_back_without_using_an_attempt(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, backend: str, request: pytest.FixtureRequest
) -> None:
    """A job waiting on its target's lock (another sync holds it) when its replica stops: it stops waiting, and
    the replica gives it back to the queue, its attempt too, and the next replica runs it as its first. It
    stayed `running` until its lease ran out, an attempt spent on every such shutdown."""
    seed_release(source)
    database_url = request.getfixturevalue("database_url") if backend == "postgresql" else None
    extra = {"database_url": database_url} if database_url else {}
    config = service_config(tmp_path, source, target, shutdown_grace=1, **extra)
    with target_lock_held(tmp_path, target, database_url):
        first = Service(config, free_port())
        first.start()
        try:
            job_id = first.signed({"version": VERSION}).json()["id"]
            wait_for(lambda: "waiting for another mirror sync" in first.log.read_text(), 30)
        finally:
            assert first.stopped_cleanly(), first.log.read_text()[-3000:]
    assert "given back to the queue unfinished" in first.log.read_text()
    second = Service(config, free_port())
    second.start()
    try:
        job = second.wait_done(job_id, 60)
    finally:
        second.stop()
    assert (job["state"], job["attempts"]) == ("succeeded", 1)


def test_metrics_parse_and_move(service: Service, source: LocalRegistry) -> None:
    def samples() -> dict[str, float]:
        text = httpx.get(f"{service.url}/metrics", timeout=5).text
        found = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                found[f"{sample.name}{{{labels}}}"] = sample.value
        return found

    before = samples()
    seed_release(source)
    service.wait_done(service.signed({"version": "v2.10.0"}).json()["id"])
    after = samples()
    assert after["mirror_syncs_total{result=succeeded}"] == before.get("mirror_syncs_total{result=succeeded}", 0) + 1
    assert after["mirror_bytes_copied_total{}"] > 0
    assert after["mirror_blobs_total{outcome=uploaded}"] > 0
    assert after["mirror_sync_duration_seconds_count{}"] == 1
    assert after["mirror_last_success_timestamp_seconds{image=hami,tag=v2.10.0,target=t0}"] > time.time() - 120
    assert "mirror_rate_limited_responses_total{}" in after


def metric_samples(service: Service) -> dict[str, float]:
    found = {}
    for family in text_string_to_metric_families(httpx.get(f"{service.url}/metrics", timeout=5).text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}"] = sample.value
    return found


def test_the_runs_count_the_429s_they_are_answered(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """The job's registry clients tell the service's metrics each retryable answer (no global counter)."""
    seed_release(source)
    with fault_proxy(source.port) as proxy:
        running = Service(service_config(tmp_path, proxy, target), free_port())
        running.start()
        try:
            assert metric_samples(running)["mirror_rate_limited_responses_total{}"] == 0
            limited = Fault("status", method="HEAD", path="/manifests/", status=429, retry_after="0", count=3)
            proxy.add(limited)
            job = running.wait_done(running.signed({"version": VERSION}).json()["id"])
            after = metric_samples(running)
        finally:
            assert running.stopped_cleanly()
    assert job["state"] == "succeeded", job["error"]
    assert limited.applied == 3 and after["mirror_rate_limited_responses_total{}"] == 3


@contextmanager
def store_out_of_reach(database_url: str) -> Iterator[None]:
    """The job store's database refusing every connection (its sessions ended), as while PostgreSQL restarts."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    admin = f"postgresql://{url.username}@{url.host}:{url.port}/postgres"
    with psycopg.connect(admin, autocommit=True) as db:
        db.execute(f"ALTER DATABASE {url.database} WITH ALLOW_CONNECTIONS false")
        db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (url.database,))
    try:
        yield
    finally:
        with psycopg.connect(admin, autocommit=True) as db:
            db.execute(f"ALTER DATABASE {url.database} WITH ALLOW_CONNECTIONS true")


def test_a_job_store_out_of_reach_is_a_503_and_a_scheduled_tick_waits_for_it(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, database_url: str
) -> None:
    """A webhook while the database is away is told to come back (503, Retry-After), not "internal error"; the
    schedule's tick is queued once the database is back, not lost until the next one."""
    seed_release(source)
    config = service_config(tmp_path, source, target, database_url=database_url, schedule="*/2 * * * * *")
    running = Service(config, free_port())
    running.start()
    try:
        with store_out_of_reach(database_url):
            answer = running.signed({"version": VERSION})
            assert answer.status_code == 503 and answer.headers["retry-after"] == "30", answer.text
            assert "job store cannot take the request now (out of reach, or its disk full)" in answer.json()["error"]
            assert httpx.get(f"{running.url}/jobs", headers=AUTH, timeout=10).status_code == 503
            wait_for(lambda: "scheduled discovery not queued yet" in running.log.read_text())
            back = datetime.datetime.now(datetime.UTC).strftime("schedule:%Y-%m-%dT%H:%M:%SZ")
        wait_for(lambda: any(job["kind"] == "schedule" for job in running.jobs()), seconds=60)
        ticks = [str(r["delivery"]) for r in asyncio.run(JobStore(database_url).recent(100))]
        assert min(ticks) <= back, (ticks, back)  # the tick that fired while the database was away
        assert running.signed({"version": VERSION}).status_code == 202
    finally:
        assert running.stopped_cleanly()
    assert "Traceback" not in running.log.read_text()


def test_a_tick_waiting_for_the_job_store_when_the_service_stops_is_one_line(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, database_url: str
) -> None:
    """The service stopped while a scheduled tick waits for the job store: one line saying the tick was not
    queued, where APScheduler logged the cancelled wait as a traceback."""
    config = service_config(tmp_path, source, target, database_url=database_url, schedule="*/2 * * * * *")
    running = Service(config, free_port())
    running.start()
    try:
        with store_out_of_reach(database_url):
            wait_for(lambda: "scheduled discovery not queued yet" in running.log.read_text())
            assert running.stopped_cleanly()  # while the tick waits
    finally:
        running.stop()
    log = running.log.read_text()
    assert "not queued: the service stopped first" in log and "Traceback" not in log, log


def test_an_outcome_the_database_refuses_is_recorded_as_an_internal_error(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, database_url: str
) -> None:
    """Not "the database is away": the same row would be refused at every run, so the job is not run again
    at each lease expiry. The refusal here is real: a constraint on the table that the report breaks."""
    seed_release(source)
    running = Service(service_config(tmp_path, source, target, database_url=database_url), free_port())
    running.start()
    engine = database.open_engine(database_url)
    try:
        with engine.begin() as db:  # a DBA's rule the full report breaks, and the bare failure does not
            db.execute(text("ALTER TABLE jobs ADD CONSTRAINT short_results CHECK (length(result) < 10)"))
        job = running.wait_done(running.signed({"version": VERSION}).json()["id"])
        assert manifest_digest(target, "mirrored/hami", VERSION) is not None  # the copy itself was done
    finally:
        engine.dispose()
        assert running.stopped_cleanly()
    assert job["state"] == "failed" and job["attempts"] == 1 and job["releases"] == []
    assert job["error"].startswith('internal error: IntegrityError: new row for relation "jobs" violates check'), job
    assert "\n" not in job["error"] and "SQL" not in job["error"]
    lines = [json.loads(line) for line in running.log.read_text().splitlines() if line.startswith("{")]
    refused = [line for line in lines if line["msg"].startswith("could not record the job's outcome")]
    assert len(refused) == 1 and "Traceback" in refused[0]["error"] and refused[0]["job"] == job["id"]
    assert sum("Traceback" in line.get("error", "") for line in lines) == 1  # logged once


def test_health_endpoints(service: Service) -> None:
    assert httpx.get(f"{service.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{service.url}/readyz").json()
    assert ready == {
        "config": True,
        "store": True,
        "runner": True,
        "scheduler": True,
        "detail": {"webhooks": "enabled: ci, dockerhub", "schedule": "off"},
    }


def test_the_job_api_needs_the_bearer_token_and_health_stays_open(service: Service, source: LocalRegistry) -> None:
    seed_release(source)
    job = service.wait_done(service.signed({"version": "v2.10.0"}).json()["id"])
    paths = ["/jobs", f"/jobs/{job['id']}", f"/jobs/{job['id']}/values/t0"]
    for path in paths:
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": API_TOKEN}):
            answer = httpx.get(f"{service.url}{path}", headers=headers, timeout=5)
            assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer", (path, headers)
            assert API_TOKEN not in answer.text
        answer = httpx.get(f"{service.url}{path}", headers=AUTH, timeout=5)
        assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store", path  # kept nowhere
    for path in ("/healthz", "/readyz", "/metrics"):
        assert httpx.get(f"{service.url}{path}", timeout=5).status_code == 200


def test_release_events_other_than_a_publication_are_answered_and_ignored(service: Service) -> None:
    for action in ("created", "edited", "deleted", "prereleased", "unpublished"):
        answer = service.signed({"action": action, "release": {"tag_name": "v2.10.0"}}, event="release")
        assert answer.status_code == 200 and action in answer.json()["ignored"]
    ping = service.signed({"zen": "Keep it logically awesome.", "hook_id": 1}, event="ping")
    assert ping.status_code == 200 and "ping" in ping.json()["ignored"]
    assert service.jobs() == []


def test_a_failed_job_is_logged_at_error_level(service: Service) -> None:
    job = service.wait_done(service.signed({"version": "v2.10.0"}).json()["id"])  # nothing seeded: fails
    assert job["state"] == "failed"
    lines = [json.loads(line) for line in service.log.read_text().splitlines() if line.startswith("{")]
    failed = [line for line in lines if line.get("job") == job["id"] and line["msg"].startswith("job failed")]
    assert failed and failed[0]["level"] == "error" and "not found at the source" in failed[0]["msg"]


def test_webhooks_disabled_are_said_so(tmp_path: Path, source: LocalRegistry, target: LocalRegistry) -> None:
    config = write_config(
        tmp_path / "mirror.yaml",
        source,
        [target],
        state_dir=str(tmp_path / "state"),
        service={"api_token": API_TOKEN},
    )
    running = Service(config, free_port())
    running.start()
    try:
        detail = httpx.get(f"{running.url}/readyz", timeout=5).json()["detail"]
        assert detail["webhooks"].startswith("disabled")
        assert running.signed({"version": "v2.10.0"}).status_code == 401
    finally:
        running.stop()
    assert "webhooks disabled" in running.log.read_text()
    assert "SQLite, for one replica only" in running.log.read_text()


def test_a_job_accepted_before_a_crash_completes_after_restart(tmp_path: Path, target: LocalRegistry) -> None:
    with held_source(tmp_path / "slow", serve_first=0) as (source, cdn):  # no blob arrives until let go
        hami, _ = seed_release(source)
        running = Service(service_config(tmp_path, source, target), free_port())
        running.start()
        job_id = running.signed({"version": "v2.10.0"}).json()["id"]
        running.stop(signal.SIGKILL)  # accepted, persisted, not finished
        assert manifest_digest(target, "mirrored/hami", VERSION) is None
        cdn.let_go()
        running.start()
        job = running.wait_done(job_id, seconds=90)
        assert job["state"] == "succeeded", job["error"]
        assert manifest_digest(target, "mirrored/hami", VERSION) == hami.digest
        assert running.stopped_cleanly()
        running.start()  # a finished job's record survives restarts
        assert running.job(job_id)["state"] == "succeeded"
        running.stop()


def test_the_schedule_runs_discovery(tmp_path: Path, source: LocalRegistry, target: LocalRegistry) -> None:
    """A scheduled discovery mirrors the newest releases, each one's values file served under its own version."""
    seed_release(source)
    with_client(source, lambda c: push_multiarch(c, "projecthami/hami", OLDER, seed=9))
    running = Service(service_config(tmp_path, source, target, schedule="*/2 * * * * *"), free_port())
    running.start()
    try:
        deadline = time.monotonic() + 30
        while not [j for j in running.jobs() if j["kind"] == "schedule" and j["state"] == "succeeded"]:
            assert time.monotonic() < deadline, running.jobs()
            time.sleep(0.3)
        job = next(j for j in running.jobs() if j["kind"] == "schedule" and j["state"] == "succeeded")
        assert [r["version"] for r in job["releases"]] == [OLDER, VERSION]
        assert manifest_digest(target, "mirrored/hami", VERSION) is not None
        for listed in job["values"]:
            served = httpx.get(f"{running.url}{listed['url']}", headers=AUTH, timeout=5)
            assert served.text.startswith(f"# HAMi {listed['version']} images mirrored"), listed
        unnamed = httpx.get(f"{running.url}/jobs/{job['id']}/values/t0/hami", headers=AUTH, timeout=5)
        assert unnamed.status_code == 400 and OLDER in unnamed.json()["error"]
    finally:
        assert running.stopped_cleanly()


# -- discovery -----------------------------------------------------------------------------------------


def test_select_versions_filters_and_keeps_the_newest() -> None:
    tags = ["v2.4.0", "v2.6.1", "v2.7.0", "v2.8.0", "v2.8.1", "v2.9.0", "v2.10.0", "v2.11.0-rc.1", "latest", "2.9.0"]
    assert select_versions(tags, DiscoverySettings(versions=">=2.7.0", newest=0)) == [
        "v2.7.0",
        "v2.8.0",
        "v2.8.1",
        "v2.9.0",
        "v2.10.0",
    ]
    assert select_versions(tags, DiscoverySettings(versions=">=2.7.0,<2.10.0", newest=2)) == ["v2.8.1", "v2.9.0"]
    assert select_versions(tags, DiscoverySettings(versions=">=2.10.0", newest=0, prereleases=True)) == [
        "v2.10.0",
        "v2.11.0-rc.1",
    ]


def test_a_release_candidate_whose_release_is_out_takes_no_place_among_the_newest() -> None:
    """With pre-releases on and `newest: 3`, v2.10.0's candidates took two of the three places, v2.9.0 and v2.8.0
    dropped, and the finished candidates were verified and given values on every run."""
    tags = ["v2.8.0", "v2.9.0", "v2.10.0-rc.1", "v2.10.0-rc.2", "v2.10.0", "v2.11.0-rc.1"]
    selected = select_versions(tags, DiscoverySettings(versions=">=2.7.0", newest=3, prereleases=True))
    assert selected == ["v2.9.0", "v2.10.0", "v2.11.0-rc.1"]


def test_releases_older_than_the_values_schema_are_left_out_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """A filter that lets v2.6.1 in made every discovery run exit 2 (the version refused as bad input), nothing
    mirrored and nothing posted: it is left out, said once, and the rest go on."""
    tags = ["v2.5.0", "v2.6.1", "v2.10.0"]
    with caplog.at_level(logging.WARNING, logger="mirror"):
        assert select_versions(tags, DiscoverySettings(versions=">=2.6.0", newest=0)) == ["v2.10.0"]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("discovery: v2.6.1 left out: HAMi charts before 2.7.0") and "v2.5.0" not in warning


def test_sync_discover_mirrors_exactly_the_selected_releases(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    from mirror.cli import main
    from mirror.demo.sample import push_multiarch
    from tests.support import with_client

    for index, version in enumerate(["v2.6.0", "v2.8.0", "v2.9.0", "v2.10.0"]):

        async def push(client: Any, version: str = version, index: int = index) -> Any:
            return await push_multiarch(client, "projecthami/hami", version, seed=10 + index)

        with_client(source, push)
    seed_release(source)  # certgen v1.1.1 (and hami v2.10.0 again)
    config = service_config(tmp_path, source, target)
    assert main(["sync", "--discover", "--config", str(config), "--json"]) == 0
    mirrored = [r["version"] for r in json.loads(capsys.readouterr().out)]
    assert mirrored == ["v2.9.0", "v2.10.0"]  # >=2.7.0, newest 2
    for version in ("v2.9.0", "v2.10.0"):
        assert manifest_digest(target, "mirrored/hami", version) is not None
    for version in ("v2.6.0", "v2.8.0"):
        assert manifest_digest(target, "mirrored/hami", version) is None
    # again: already mirrored releases cost one HEAD per image at the source (and HEADs of what may refer
    # to it, with the one referrers listing), no GET
    mark = len(source.access_log())
    assert main(["sync", "--discover", "--config", str(config)]) == 0
    after = source.access_log()[mark:]
    tags = [e.path.split("/manifests/")[-1] for e in after if "/manifests/" in e.path]
    # certgen's tag, which both releases use, asked once in the run
    assert sorted(t for t in tags if not t.startswith("sha256-")) == ["v1.1.1", "v2.10.0", "v2.9.0"]
    assert [e.path for e in beyond_heads(after)] == ["/v2/projecthami/hami/tags/list"]  # discovery's own listing
    # a layer the target lost since (a retention rule, GC, a delete): the scheduled run verifies and finds it,
    # as a run by hand would, and copies again (it trusted a matching tag before and wrote the values again)
    layer = next(p for p in target.storage.rglob("blobs/sha256/*/*/data") if p.stat().st_size > 1024 * 1024 // 2)
    layer.unlink()
    capsys.readouterr()
    assert main(["sync", "--discover", "--config", str(config), "--json"]) == 0
    actions = {
        (r["version"], i["name"]): i["targets"][0]["action"]
        for r in json.loads(capsys.readouterr().out)
        for i in r["images"]
    }
    assert "copied" in actions.values(), actions  # (distribution's own blob cache may still say it holds it)


def test_each_job_serves_the_values_of_its_own_release(service: Service, source: LocalRegistry) -> None:
    seed_release(source)
    index = Manifest.parse(manifest_bytes(source, "projecthami/hami", VERSION))
    with_client(source, lambda c: c.put_manifest("projecthami/hami", "v2.11.0", index))
    older = service.wait_done(service.signed({"version": VERSION}).json()["id"])
    newer = service.wait_done(service.signed({"version": "v2.11.0"}).json()["id"])
    assert older["state"] == newer["state"] == "succeeded"
    for job, version in ((older, VERSION), (newer, "v2.11.0")):
        (entry,) = job["values"]
        assert entry["version"] == version and "content" not in job["releases"][0]["values"][0]
        text = httpx.get(f"{service.url}{entry['url']}", headers=AUTH, timeout=5).text
        assert text.startswith(f"# HAMi {version} images"), text[:80]


def test_discovery_that_cannot_reach_the_source_is_one_line(
    tmp_path: Path, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    class Gone:
        host = f"127.0.0.1:{free_port()}"  # nothing listens here

    config = write_config(tmp_path / "mirror.yaml", Gone(), [target], retry={"attempts": 1})
    assert main(["sync", "--discover", "--config", str(config)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mirror: discovery failed: list tags "), err
    assert "registry unreachable" in err[0]


def cookie_attributes(answer: httpx.Response) -> set[str]:
    """The attribute names of the response's one Set-Cookie, lower-cased (`secure`, `httponly`, ...)."""
    (header,) = answer.headers.get_list("set-cookie")
    return {part.strip().partition("=")[0].lower() for part in header.split(";")[1:]}


@pytest.mark.parametrize(
    ("setting", "headers", "secure"),
    [
        ("always", {}, True),  # behind an ingress that terminates TLS: plain http as the service sees it
        ("never", {"X-Forwarded-Proto": "https"}, False),
        ("auto", {"X-Forwarded-Proto": "https"}, True),  # a proxy on loopback, which uvicorn believes
        ("auto", {}, False),
    ],
)
def test_service_secure_cookie_decides_the_session_cookies_secure_flag(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, setting: str, headers: dict[str, str], secure: bool
) -> None:
    config = service_config(tmp_path, source, target, service={"secure_cookie": setting})
    running = Service(config, free_port())
    running.start()
    try:
        login = httpx.post(f"{running.url}/login", data={"token": API_TOKEN}, headers=headers, timeout=10)
        logout = httpx.post(f"{running.url}/logout", headers=headers, timeout=10)
    finally:
        assert running.stopped_cleanly()
    assert login.status_code == 303 and {"httponly", "samesite"} <= cookie_attributes(login)
    assert ("secure" in cookie_attributes(login)) is secure
    assert logout.status_code == 303 and ("secure" in cookie_attributes(logout)) is secure
