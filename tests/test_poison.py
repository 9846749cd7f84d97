"""A poison job: one that kills the replica running it, every time (out of memory on a huge layer under the
pod's limit, say). Three `mirror serve` replicas on a real PostgreSQL, restarted when they die as Kubernetes
would: the job is claimed `service.max_attempts` times, then failed by the claim that finds its last lease run
out, naming who held it last, while a job queued beside it is copied.

The kill is real and made by the source: its blobs come from a CDN that, asked for a layer only the poison
release has, finds the process at the other end of that very connection and sends it SIGKILL."""

from __future__ import annotations

import asyncio
import http.server
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.ports import free_port
from mirror.demo.sample import push_multiarch
from mirror.service.store import JobStore
from mirror.settings import ConfigError, load_settings
from tests.support import answer_with_stored_file, blob_digest, http_server, manifest_digest, with_client
from tests.test_crash import wait_for
from tests.test_service import Service, service_config
from tests.test_sync import VERSION, seed_release

POISON = "v2.11.0"
LEASE = 6.0  # seconds; renewed every third
MAX_ATTEMPTS = 3  # service.max_attempts's default


def connections_to(server_port: int) -> dict[str, int]:
    """The loopback TCP connections to `server_port`: each client socket's inode (as a descriptor's link
    reads, `socket:[N]`) and its port."""
    found = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, inode = fields[1], fields[2], fields[9]
        if remote.endswith(f":{server_port:04X}"):
            found[f"socket:[{inode}]"] = int(local.rsplit(":", 1)[1], 16)
    return found


def sockets_of(pid: int) -> set[str]:
    links: set[str] = set()
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # gone already
        return links
    for descriptor in descriptors:
        try:
            links.add(os.readlink(f"/proc/{pid}/fd/{descriptor}"))
        except OSError:
            continue
    return links


def process_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat (R, S, T for stopped...)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@dataclass
class KillingCdn:
    """Serves a registry's blob storage, except that a GET of a `trap` blob kills the replica asking."""

    root: Path
    trap: set[str]
    replicas: list[Service]
    port: int = 0
    killed: list[int] = field(default_factory=list)  # the pids killed, in order
    unknown: int = 0  # trap requests from no replica, alive or killed here (must stay 0)
    ports_of_killed: set[int] = field(default_factory=set)  # their connections to this CDN at the kill
    lock: threading.Lock = field(default_factory=threading.Lock)

    def kill_asker(self, client_port: int) -> None:
        with self.lock:
            if client_port in self.ports_of_killed:  # another request of a replica killed already
                return
            connections = connections_to(self.port)
            alive = [s.process.pid for s in self.replicas if s.process is not None and s.process.poll() is None]
            ports = {pid: {connections[link] for link in sockets_of(pid) if link in connections} for pid in alive}
            asker = next((pid for pid, used in ports.items() if client_port in used), None)
            if asker is None:
                self.unknown += 1
                return
            # stopped first, so that it opens no connection between our look at its sockets and its death
            os.kill(asker, signal.SIGSTOP)
            wait_for(lambda: process_state(asker) in ("T", "t"), seconds=30)
            connections = connections_to(self.port)
            self.ports_of_killed |= ports[asker] | {connections[s] for s in sockets_of(asker) if s in connections}
            self.killed.append(asker)
            os.kill(asker, signal.SIGKILL)


@contextmanager
def killing_cdn(root: Path, trap: set[str], replicas: list[Service]) -> Iterator[KillingCdn]:
    cdn = KillingCdn(root, trap, replicas)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            if blob_digest(self.path) in cdn.trap:
                cdn.kill_asker(self.client_address[1])
                self.close_connection = True
                return
            self._answer(body=True)

        def _answer(self, body: bool) -> None:
            data = answer_with_stored_file(self, cdn.root)
            if data is not None and body:
                self.wfile.write(data)

    with http_server(Handler) as server:
        cdn.port = server.server_address[1]
        yield cdn


def read(store: JobStore, job_id: str) -> dict[str, Any]:
    return asyncio.run(store.get(job_id)) or {}


def supervise(replicas: list[Service], done: Callable[[], bool], seconds: float = 300) -> None:
    """Restart each replica that dies, as Kubernetes restarts a pod, until `done`; every replica up at the end."""
    deadline = time.monotonic() + seconds
    while True:
        for replica in replicas:
            if replica.process is not None and replica.process.poll() is not None:
                replica.start()
        if done():
            return
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def metric(service: Service, name: str) -> float:
    text = httpx.get(f"{service.url}/metrics", timeout=10).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def test_a_job_that_kills_its_replica_is_given_up_and_the_queue_flows(
    tmp_path: Path, target: LocalRegistry, database_url: str
) -> None:
    replicas: list[Service] = []
    source_dir = tmp_path / "source"
    source_dir.mkdir()
    trap: set[str] = set()
    with killing_cdn(source_dir / "data", trap, replicas) as cdn:
        source = start_registry(source_dir, redirect_to=f"http://127.0.0.1:{cdn.port}")
        try:
            hami, certgen = seed_release(source)
            poison = with_client(source, lambda c: push_multiarch(c, "projecthami/hami", POISON, seed=99))
            trap |= set(poison.blobs) - set(hami.blobs) - set(certgen.blobs)
            assert trap
            config = service_config(
                tmp_path, source, target, service={"lease_seconds": LEASE}, database_url=database_url
            )
            replicas += [Service(config, free_port()) for _ in range(3)]
            for replica in replicas:
                replica.start()

            poisoned = replicas[0].signed({"version": POISON}).json()["id"]
            beside = replicas[1].signed({"version": VERSION}).json()["id"]  # queued after it
            store = JobStore(database_url)
            try:
                done = ("succeeded", "failed")
                supervise(replicas, lambda: all(read(store, i)["state"] in done for i in (poisoned, beside)))
                job, beside_job = read(store, poisoned), read(store, beside)
            finally:
                store.close()
            given_up = sum(metric(r, "mirror_jobs_given_up_total") for r in replicas)
        finally:
            for replica in replicas:
                replica.stop()
            source.stop()

    assert beside_job["state"] == "succeeded", beside_job["error"]
    assert manifest_digest(target, "mirrored/hami", VERSION) == hami.digest
    assert manifest_digest(target, "mirrored/hami", POISON) is None
    assert job["state"] == "failed" and job["attempts"] == MAX_ATTEMPTS, job
    assert cdn.unknown == 0 and len(cdn.killed) == MAX_ATTEMPTS  # each claim killed its replica; no fourth run
    last = cdn.killed[-1]
    assert job["error"].startswith(f"gave up after {MAX_ATTEMPTS} attempts: last held by "), job["error"]
    assert f":{last}:" in job["error"] and job["owner"] and f":{last}:" in job["owner"]
    assert " until 20" in job["error"] and job["finished_at"] > job["lease_expires_at"]
    assert given_up == 1  # decided once, by one replica's claim
    failed_lines = [line for line in replicas[0].log.read_text().splitlines() if "job failed: gave up after" in line]
    assert len(failed_lines) == 1 and '"level": "error"' in failed_lines[0] and poisoned in failed_lines[0]


def test_max_attempts_is_a_setting_from_1_to_100(tmp_path: Path) -> None:
    class Anywhere:
        host = "127.0.0.1:5000"

    assert load_settings(service_config(tmp_path, Anywhere(), Anywhere())).service.max_attempts == MAX_ATTEMPTS
    for fine in (1, 100):
        config = service_config(tmp_path, Anywhere(), Anywhere(), service={"max_attempts": fine})
        assert load_settings(config).service.max_attempts == fine
    for wrong in (0, 101, 2.5):
        config = service_config(tmp_path, Anywhere(), Anywhere(), service={"max_attempts": wrong})
        with pytest.raises(ConfigError, match=r"service\.max_attempts"):
            load_settings(config)
