"""Every door of `mirror serve`, tried with what an adversary sends: signed junk, slow and silent peers, more
connections than allowed, the job list's query, a replayed delivery, and a state directory or database that
cannot be used. Each is answered with a 4xx and a short reason (or the connection closed), never a 500 for
input, and the log holds no traceback. The service runs as a real process under uvicorn on a loopback port,
on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import select
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import update

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from mirror.service.store import MAX_ERROR_CHARS, SUCCEEDED, JobStore, UnknownJob, jobs
from tests.support import run_bounded, write_config
from tests.test_crash import wait_for
from tests.test_service import API_TOKEN, AUTH, DOCKERHUB_TOKEN, SECRET, Service, service_config
from tests.test_sync import VERSION, seed_release

BOUND = 30.0  # seconds: a door set to 2 s must have shut well within this
SHORT = 1000  # bytes: the most a refusal's body may take
FAST_DOORS = {"header_seconds": 2, "body_seconds": 2, "keepalive_seconds": 2}


class Nowhere:
    """A registry address where nothing listens: for tests in which no job may run."""

    def __init__(self) -> None:
        self.host = f"127.0.0.1:{free_port()}"


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The config's database: SQLite under state_dir (nothing to set), or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return {}
    return {"database_url": request.getfixturevalue("postgres").new_database()}


@contextmanager
def running(config: Path) -> Iterator[Service]:
    service = Service(config, free_port())
    service.start()
    try:
        yield service
    finally:
        service.stop()


def nowhere_config(tmp_path: Path, service: dict[str, Any] | None = None, **extra: Any) -> Path:
    return service_config(tmp_path, Nowhere(), Nowhere(), service=service, **extra)


def assert_no_traceback(service: Service) -> None:
    text = service.log.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert max(len(line) for line in text.splitlines()) < 2500


def signature(body: bytes) -> str:
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


def signed_post(service: Service, body: bytes, **headers: str) -> httpx.Response:
    return service.post("/hooks/ci", body, {"X-Hub-Signature-256": signature(body), **headers})


def store_url(config: Path, database: dict[str, Any]) -> str:
    return str(database.get("database_url") or f"sqlite:///{config.parent / 'state' / 'mirror.db'}")


# -- signed junk ---------------------------------------------------------------------------------------

DEEP = b"[" * 30000 + b"]" * 30000
HUGE_VERSION = "v" + "1" * 5000 + ".0.0"


def junk_cases() -> list[tuple[str, bytes, dict[str, str], int]]:
    """(what, signed body, extra headers, status): each a signed /hooks/ci delivery."""

    def body(doc: Any) -> bytes:
        return json.dumps(doc).encode()

    release = {"action": "published", "release": {"tag_name": HUGE_VERSION}}
    return [
        ("a version of 5000 digits", body({"version": HUGE_VERSION}), {}, 422),
        ("a release tag of 5000 digits", body(release), {"X-GitHub-Event": "release"}, 422),
        ("a long pre-release", body({"version": "v2.10.0-" + "a" * 300}), {}, 422),
        ("30000 nested brackets", DEEP, {}, 422),
        ("30000 nested brackets as the version", b'{"version": ' + DEEP + b"}", {}, 422),
        ("an integer of 5000 digits", b'{"version": ' + b"1" * 5000 + b"}", {}, 422),
        ("a body that is not UTF-8", b'{"version": "\xff\xfe"}', {}, 422),
        ("a delivery id of 300 characters", body({"version": VERSION}), {"X-GitHub-Delivery": "d" * 300}, 400),
        ("a delivery id with spaces", body({"version": VERSION}), {"X-GitHub-Delivery": "a b; drop"}, 400),
        ("an empty delivery id", body({"version": VERSION}), {"X-GitHub-Delivery": ""}, 400),
        # ids mirror gives itself: a replayed body under a tick's id would answer that tick with its job
        (
            "a scheduled tick's id",
            body({"version": VERSION}),
            {"X-GitHub-Delivery": "schedule:2030-01-01T00:00:00Z"},
            400,
        ),
        ("an event name of 8000 characters", body({"zen": 1}), {"X-GitHub-Event": "e" * 8000}, 200),
        ("a release action of 50000 characters", body({"action": "a" * 50000, "release": {}}), {}, 200),
        ("a release action that is a list", body({"action": [[["x"]]], "release": {}}), {}, 200),
    ]


def dockerhub_junk() -> list[tuple[str, bytes]]:
    def push(tag: Any, name: Any = "projecthami/hami") -> bytes:
        return json.dumps({"push_data": {"tag": tag}, "repository": {"repo_name": name}}).encode()

    return [
        ("a tag of 5000 digits", push(HUGE_VERSION)),
        ("a repository name of 20000 characters", push(VERSION, "a/" + "b" * 20000)),
        ("a repository name that is a list", push(VERSION, [["projecthami/hami"]])),
        ("a tag that is an object", push({"tag": VERSION})),
        ("30000 nested brackets", DEEP),
        ("nested brackets as the repository", b'{"push_data": {}, "repository": ' + DEEP + b"}"),
    ]


def test_signed_junk_is_a_4xx_with_a_short_reason(tmp_path: Path, database: dict[str, Any]) -> None:
    with running(nowhere_config(tmp_path, **database)) as service:
        for what, body, headers, status in junk_cases():
            answer = signed_post(service, body, **headers)
            assert answer.status_code == status, (what, answer.status_code, answer.text[:300])
            assert len(answer.content) < SHORT, (what, len(answer.content))
            assert set(answer.json()) == ({"error"} if status >= 400 else {"ignored"}), what
        for what, body in dockerhub_junk():
            answer = service.post(f"/hooks/dockerhub/{DOCKERHUB_TOKEN}", body)
            assert answer.status_code == 422, (what, answer.status_code, answer.text[:300])
            assert len(answer.content) < SHORT and "error" in answer.json(), what
        # the token in the path is compared, never echoed, whatever its length
        answer = service.post("/hooks/dockerhub/" + "t" * 5000, b"{}")
        assert answer.status_code == 401 and len(answer.content) < SHORT
        assert service.jobs() == []
    assert_no_traceback(service)


def test_the_job_api_refuses_junk_ids_and_queries(tmp_path: Path) -> None:
    with running(nowhere_config(tmp_path)) as service:
        for path in ("/jobs/" + "x" * 5000, "/jobs/a%20b", "/jobs/" + "x" * 300 + "/values/t0"):
            answer = httpx.get(f"{service.url}{path}", headers=AUTH, timeout=10)
            assert answer.status_code == 404 and len(answer.content) < SHORT, path
        for query in ("limit=0", "limit=201", "limit=abc", "limit=" + "9" * 5000, "limit=1.5", "limit=%C2%B2"):
            answer = httpx.get(f"{service.url}/jobs?{query}", headers=AUTH, timeout=10)
            assert answer.status_code == 400 and "limit" in answer.json()["error"], query
            assert len(answer.content) < SHORT
        for query, word in (
            ("state=" + "s" * 5000, "state"),
            ("state=done", "state"),
            ("kind=cron", "kind"),
            ("before=" + "b" * 5000, "before"),
            ("before=0123456789abcdef0123456789abcdef", "before"),  # well formed, names no job
            ("status=failed", "status"),  # a typo is said, not ignored
            ("state=failed&state=queued", "state"),
        ):
            answer = httpx.get(f"{service.url}/jobs?{query}", headers=AUTH, timeout=10)
            assert answer.status_code == 400 and word in answer.json()["error"], (query, answer.text[:200])
            assert len(answer.content) < SHORT
    assert_no_traceback(service)


def test_a_failing_store_is_a_500_with_one_log_line(tmp_path: Path, database: dict[str, Any]) -> None:
    """Not input: the jobs table is dropped under the running service. Each request is answered 500, and
    each failure is one log line naming the error, not a traceback."""
    config = nowhere_config(tmp_path, **database)
    with running(config) as service:
        url = store_url(config, database)
        if url.startswith("sqlite"):
            with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
                db.execute("DROP TABLE jobs")
        else:
            with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as db:
                db.execute("DROP TABLE jobs")
        listed = httpx.get(f"{service.url}/jobs", headers=AUTH, timeout=10)
        assert listed.status_code == 500 and listed.json() == {"error": "internal error"}
        hooked = signed_post(service, json.dumps({"version": VERSION}).encode())
        assert hooked.status_code == 500 and hooked.json() == {"error": "internal error"}
    lines = [json.loads(line) for line in service.log.read_text().splitlines() if line.startswith("{")]
    failures = [line["msg"] for line in lines if "internal error" in line["msg"]]
    assert any(m.startswith("GET /jobs: internal error: ") for m in failures), failures
    assert any(m.startswith("POST /hooks/ci: internal error: ") for m in failures), failures
    assert all(line["level"] == "error" and "error" not in line for line in lines if "internal error" in line["msg"])
    assert_no_traceback(service)


# -- slow, silent and too many peers ----------------------------------------------------------------------


def closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> float:
    """Seconds until the server closes `sock` without answering, sending one byte of `trickle` a second
    meanwhile; fails when it is still open after `seconds`, or when anything is answered."""
    started = time.monotonic()
    for index in range(int(seconds)):
        if trickle:
            try:
                sock.sendall(trickle[index % len(trickle) : index % len(trickle) + 1])
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - started
        readable, _, _ = select.select([sock], [], [], 1.0)
        if readable:
            try:
                data = sock.recv(4096)
            except ConnectionResetError:
                return time.monotonic() - started
            assert data == b"", data[:200]
            return time.monotonic() - started
    raise AssertionError(f"the connection was still open after {seconds:.0f} s")


def response_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> bytes:
    """What the server answers on `sock` until it closes it, sending one byte of `trickle` a second all the
    while (after the answer too); fails when it has not closed the connection after `seconds`."""
    received = b""
    deadline = time.monotonic() + seconds
    index = 0
    while time.monotonic() < deadline:
        if trickle:
            try:
                sock.sendall(trickle[index % len(trickle) : index % len(trickle) + 1])
            except (BrokenPipeError, ConnectionResetError):
                return received
            index += 1
        readable, _, _ = select.select([sock], [], [], 1.0)
        if readable:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:  # closed while our bytes were unread: a reset, after what it sent
                return received
            if not data:
                return received
            received += data
    raise AssertionError(f"no answer and no close after {seconds:.0f} s: {received[:200]!r}")


def connect(service: Service) -> socket.socket:
    return socket.create_connection(("127.0.0.1", service.port), timeout=BOUND)


def keep_alive_get(sock: socket.socket, path: str = "/healthz") -> bytes:
    """One GET on a kept-alive connection, read to the end of its (small) body."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: mirror\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < content_length(answer):
        chunk = sock.recv(4096)
        assert chunk, answer
        answer += chunk
    return answer


def content_length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


@pytest.fixture
def fast_doors(tmp_path: Path) -> Iterator[Service]:
    """The service with its header, body and keep-alive deadlines at 2 s."""
    with running(nowhere_config(tmp_path, service=FAST_DOORS)) as service:
        yield service


def test_a_slow_body_to_the_docker_hub_hook_is_logged_without_its_token(fast_doors: Service) -> None:
    """The Docker Hub hook takes its token in the path; a line the doors log about such a request names the
    route, never the token."""
    with connect(fast_doors) as slow:
        slow.sendall(
            f"POST /hooks/dockerhub/{DOCKERHUB_TOKEN} HTTP/1.1\r\nHost: mirror\r\n".encode()
            + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        answer = response_within(slow, BOUND, trickle=b' "push_data": {}, ')
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
    log = fast_doors.log.read_text()
    assert "POST /hooks/dockerhub/<token>: the request body did not arrive within 2 s" in log
    assert DOCKERHUB_TOKEN not in log and DOCKERHUB_TOKEN[:8] not in log


def test_slow_headers_are_cut_off_while_others_are_served(fast_doors: Service) -> None:
    with connect(fast_doors) as slow, connect(fast_doors) as silent:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: mirror\r\n")
        slow.sendall(b"X")  # a header begun, then one byte a second
        served = httpx.get(f"{fast_doors.url}/healthz", timeout=10)  # meanwhile, another connection is served
        assert served.status_code == 200 and served.json() == {"status": "ok"}
        closed_within(slow, BOUND, trickle=b"-slow-header-value")
        closed_within(silent, BOUND)  # connected, then nothing sent at all
    assert httpx.get(f"{fast_doors.url}/healthz", timeout=10).status_code == 200
    assert "request headers did not arrive within 2 s" in fast_doors.log.read_text()
    assert_no_traceback(fast_doors)


def test_a_slow_body_is_answered_408_and_the_connection_closed(fast_doors: Service) -> None:
    with connect(fast_doors) as slow:
        slow.sendall(
            b"POST /hooks/ci HTTP/1.1\r\nHost: mirror\r\nContent-Type: application/json\r\n"
            b"X-Hub-Signature-256: sha256=00\r\nContent-Length: 1000\r\n\r\n{"
        )
        answer = response_within(slow, BOUND, trickle=b' "version": "v2.10.0", ')
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer[:300]
    assert b"connection: close" in head.lower()
    assert json.loads(body) == {"error": "the request body did not arrive within 2 s"}
    # a body trickled to a route that answered without reading it is cut off too
    with connect(fast_doors) as leftover:
        leftover.sendall(b"POST /healthz HTTP/1.1\r\nHost: mirror\r\nContent-Length: 100000\r\n\r\nxx")
        refused = response_within(leftover, BOUND, trickle=b"x")
    assert refused.startswith(b"HTTP/1.1 405 "), refused[:300]
    assert fast_doors.jobs() == []
    assert_no_traceback(fast_doors)


def test_an_idle_keep_alive_connection_is_closed(tmp_path: Path) -> None:
    # 10 s: long enough that the second request surely goes out before the first answer's connection idles
    # out, well within BOUND for the close
    keepalive = {"keepalive_seconds": 10, "header_seconds": 60}
    with running(nowhere_config(tmp_path, service=keepalive)) as service, connect(service) as idle:
        first = keep_alive_get(idle)
        assert first.startswith(b"HTTP/1.1 200 ") and b'"status":"ok"' in first
        second = keep_alive_get(idle)  # the connection is kept for a next request ...
        assert second.startswith(b"HTTP/1.1 200 ")
        closed_within(idle, BOUND)  # ... and closed once it idles past keepalive_seconds


def test_headers_over_the_limit_are_refused(fast_doors: Service) -> None:
    with connect(fast_doors) as big:
        big.sendall(b"GET /healthz HTTP/1.1\r\nHost: mirror\r\nX-Big: " + b"a" * 20000)  # unfinished, over 16 KiB
        answer = response_within(big, BOUND)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:300]
    assert httpx.get(f"{fast_doors.url}/healthz", timeout=10).status_code == 200


def test_connections_past_max_connections_are_answered_503(tmp_path: Path) -> None:
    alive = tmp_path / "alive"
    patient = {"max_connections": 2, "header_seconds": 60, "keepalive_seconds": 60, "heartbeat_file": str(alive)}
    with running(nowhere_config(tmp_path, service=patient)) as service:
        with connect(service) as first, connect(service) as second:
            assert keep_alive_get(first).startswith(b"HTTP/1.1 200 ")
            assert keep_alive_get(second).startswith(b"HTTP/1.1 200 ")
            crowded = httpx.get(f"{service.url}/healthz", timeout=10)
            assert crowded.status_code == 503, crowded.text
            # so the Deployment's liveness probe reads the heartbeat file instead, which a crowd does not stop
            # (kubelet would otherwise restart the pod, and its running job with it, for anyone holding them)
            touched = alive.stat().st_mtime
            wait_for(lambda: alive.stat().st_mtime > touched, seconds=BOUND)
            time.sleep(8)  # past uvicorn's own keep-alive default (5 s), well within keepalive_seconds (60 s)
            assert keep_alive_get(first).startswith(b"HTTP/1.1 200 ")
        deadline = time.monotonic() + BOUND  # the two closed: served again
        while httpx.get(f"{service.url}/healthz", timeout=10).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.5)
    assert_no_traceback(service)


# -- the job list -----------------------------------------------------------------------------------------


async def finished_jobs(url: str) -> list[dict[str, Any]]:
    """Eight finished jobs, oldest first: ci and dockerhub ones succeeded and failed, and a discovery."""
    store = JobStore(url)
    made = []
    try:
        for number in range(8):
            kind = ("ci", "dockerhub")[number % 2] if number < 7 else "schedule"
            job, _ = await store.enqueue(kind, [f"v2.{10 + number}.0"] if number < 7 else None, f"delivery-{number}")
            assert await store.claim_next("seeder", 30) is not None
            state = "failed" if number % 3 == 0 else "succeeded"
            assert await store.finish(job["id"], "seeder", state, [], "boom" if state == "failed" else None)
            made.append({**job, "state": state})
            await asyncio.sleep(0.01)  # distinct creation times, oldest first
    finally:
        store.close()
    return made


def test_the_job_list_pages_and_filters(tmp_path: Path, database: dict[str, Any]) -> None:
    config = nowhere_config(tmp_path, **database)
    (tmp_path / "state").mkdir()
    made = asyncio.run(finished_jobs(store_url(config, database)))
    newest_first = [job["id"] for job in reversed(made)]

    with running(config) as service:

        def listing(query: str) -> dict[str, Any]:
            answer = httpx.get(f"{service.url}/jobs?{query}", headers=AUTH, timeout=10)
            assert answer.status_code == 200, answer.text
            return dict(answer.json())

        everything = listing("")
        assert [j["id"] for j in everything["jobs"]] == newest_first and everything["next"] is None
        pages, cursor = [], ""
        while True:
            page = listing(f"limit=3{cursor}")
            pages.append([j["id"] for j in page["jobs"]])
            if page["next"] is None:
                break
            cursor = f"&before={page['next']}"
        assert [len(p) for p in pages] == [3, 3, 2] and [i for p in pages for i in p] == newest_first
        failed = listing("state=failed")
        assert [j["id"] for j in failed["jobs"]] == [j["id"] for j in reversed(made) if j["state"] == "failed"]
        hub = listing("kind=dockerhub&limit=2")
        wanted = [j["id"] for j in reversed(made) if j["kind"] == "dockerhub"]
        assert [j["id"] for j in hub["jobs"]] == wanted[:2] and hub["next"] == wanted[1]
        rest = listing(f"kind=dockerhub&before={hub['next']}")
        assert [j["id"] for j in rest["jobs"]] == wanted[2:] and rest["next"] is None
        both = listing("kind=ci&state=succeeded")
        assert [j["id"] for j in both["jobs"]] == [
            j["id"] for j in reversed(made) if j["kind"] == "ci" and j["state"] == "succeeded"
        ]
        assert [j["kind"] for j in listing("kind=schedule")["jobs"]] == ["schedule"]
        assert listing("state=queued") == {"jobs": [], "next": None}
    assert_no_traceback(service)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobStore]:
    url = (
        f"sqlite:///{tmp_path / 'jobs.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres").new_database()
    )
    opened = JobStore(url)
    yield opened
    opened.close()


async def test_pages_break_ties_by_id_and_skip_nothing(store: JobStore) -> None:
    made = [(await store.enqueue("ci", [f"v2.{minor}.0"], None))[0]["id"] for minor in range(10, 15)]
    with store.engine.begin() as db:  # five jobs created in the same instant
        db.execute(update(jobs).values(created_at=1000.0))
    seen, before = [], None
    while True:
        page, before = await store.page(2, before)
        seen += [job["id"] for job in page]
        if before is None:
            break
    assert seen == sorted(made, reverse=True)
    with pytest.raises(UnknownJob):
        await store.page(2, "0" * 32)


async def test_a_jobs_error_is_clipped_when_written(store: JobStore) -> None:
    job, _ = await store.enqueue("ci", ["v2.10.0"], None)
    assert await store.claim_next("runner", 30) is not None
    assert await store.finish(job["id"], "runner", "failed", [], "registry said: " + "e" * 100_000 + "\nend")
    stored = (await store.get(job["id"]) or {})["error"]
    assert len(stored) <= MAX_ERROR_CHARS + 40 and stored.startswith("registry said: ") and stored.endswith("end")
    assert "\n" not in stored and "characters cut" in stored
    assert (await store.recent())[0]["error"] == stored


# -- replays ----------------------------------------------------------------------------------------------


async def test_a_release_that_just_succeeded_is_not_queued_again(store: JobStore) -> None:
    done, _ = await store.enqueue("ci", ["v2.10.0"], "original")
    assert await store.claim_next("runner", 30) is not None
    assert await store.finish(done["id"], "runner", SUCCEEDED, [], None)
    replay, created = await store.enqueue("ci", ["v2.10.0"], "replayed-under-a-new-id", done_within=600)
    assert replay["id"] == done["id"] and not created
    resent, created = await store.enqueue("ci", ["v2.10.0"], "replayed-under-a-new-id", done_within=600)
    assert resent["id"] == done["id"] and not created  # the replay's delivery id is noted too
    hub, created = await store.enqueue("dockerhub", ["v2.10.0"], None, done_within=600)
    assert hub["id"] == done["id"] and not created
    # without a window (the schedule), or once the success is older than the window, a job is queued
    other, created = await store.enqueue("ci", ["v2.11.0"], None, done_within=600)
    assert created and other["id"] != done["id"]
    with store.engine.begin() as db:
        db.execute(update(jobs).where(jobs.c.id == done["id"]).values(finished_at=jobs.c.finished_at - 601))
    later, created = await store.enqueue("ci", ["v2.10.0"], "a-later-delivery", done_within=600)
    assert created and later["id"] != done["id"]


async def test_a_release_that_just_failed_is_queued_again(store: JobStore) -> None:
    failed, _ = await store.enqueue("ci", ["v2.10.0"], None)
    assert await store.claim_next("runner", 30) is not None
    assert await store.finish(failed["id"], "runner", "failed", [], "tag not found")
    retry, created = await store.enqueue("ci", ["v2.10.0"], None, done_within=600)
    assert created and retry["id"] != failed["id"]
    merged, created = await store.enqueue("ci", ["v2.10.0"], "while-it-is-queued", done_within=600)
    assert merged["id"] == retry["id"] and not created  # an active job still takes the delivery


def test_a_replayed_delivery_is_answered_with_the_job_that_succeeded(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, database: dict[str, Any]
) -> None:
    seed_release(source)
    with running(service_config(tmp_path, source, target, **database)) as service:
        first = service.signed({"version": VERSION}, delivery="delivery-original")
        assert first.status_code == 202
        job = service.wait_done(first.json()["id"])
        assert job["state"] == "succeeded", job["error"]
        replay = service.signed({"version": VERSION}, delivery="delivery-replayed")  # same body, new id
        assert replay.status_code == 200, replay.text
        assert replay.json()["id"] == job["id"] and replay.json()["duplicate"] is True
        push = {"push_data": {"tag": VERSION}, "repository": {"repo_name": "projecthami/hami"}}
        hub = service.post(f"/hooks/dockerhub/{DOCKERHUB_TOKEN}", json.dumps(push).encode())
        assert hub.status_code == 200 and hub.json()["id"] == job["id"] and hub.json()["duplicate"] is True
        assert [j["id"] for j in service.jobs()] == [job["id"]]
    assert "nothing queued" in service.log.read_text()
    assert_no_traceback(service)


# -- serve with an unusable state directory or database -----------------------------------------------------


def serve_once(tmp_path: Path, **extra: Any) -> list[str]:
    """`mirror serve` with this config: it must exit 2 with one line on stderr, within the bound."""
    config = write_config(tmp_path / "bad.yaml", Nowhere(), [Nowhere()], service={"api_token": API_TOKEN}, **extra)
    done = run_bounded("serve", "--config", str(config), "--port", str(free_port()), cwd=tmp_path, seconds=60)
    lines = done.error_lines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    return [str(json.loads(lines[0])["msg"])]


def test_serve_with_an_unusable_state_dir_or_database_is_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    (line,) = serve_once(tmp_path, state_dir=str(a_file / "state"))
    assert line.startswith(f"state_dir {a_file / 'state'}: cannot create it or write in it: "), line
    (line,) = serve_once(tmp_path, state_dir=str(tmp_path / "state"), database_url=f"sqlite:///{a_file}/mirror.db")
    assert line.startswith("database sqlite:///") and "cannot open the job store: " in line, line
    assert (tmp_path / "state").is_dir()  # the directory was fine; only the database was not


def test_serve_with_an_unreachable_postgres_is_one_line_without_the_password(tmp_path: Path, postgres: Any) -> None:
    nobody = f"postgresql+psycopg://mirror:db-s3cret-pw@127.0.0.1:{free_port()}/mirror"  # nothing listens
    (line,) = serve_once(tmp_path, state_dir=str(tmp_path / "state"), database_url=nobody)
    assert "cannot open the job store: " in line and "db-s3cret-pw" not in line, line
    assert "mirror:***@127.0.0.1" in line
    missing = postgres.url("no_such_database").replace("postgres@", "postgres:db-s3cret-pw@")
    (line,) = serve_once(tmp_path, state_dir=str(tmp_path / "state"), database_url=missing)
    assert "no_such_database" in line and "does not exist" in line and "db-s3cret-pw" not in line, line
