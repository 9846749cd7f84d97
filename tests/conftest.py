from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.demo import ports
from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.ports import free_port
from mirror.service.store import JobStore
from tests.faultproxy import FaultProxy, fault_proxy
from tests.postgres import Postgres, start_postgres
from tests.test_service import Service, service_config
from tests.test_store import FakeClock


def pytest_configure(config: pytest.Config) -> None:
    """Each test worker chooses its servers' ports from its own share: no two workers hand out the same one."""
    import os

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw"):
        ports.use_share(int(worker.removeprefix("gw")), int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))


# Every test talks to loopback or to a network namespace of its own: a proxy the machine's environment names
# (for its package mirrors) must not carry the real-names world's hosts. The proxy tests set their own.
PROXY_VARIABLES = {"http_proxy", "https_proxy", "no_proxy", "all_proxy"}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("MIRROR_") or name.lower() in PROXY_VARIABLES:
            monkeypatch.delenv(name)


@pytest.fixture
def source(tmp_path: Path) -> Iterator[LocalRegistry]:
    registry = start_registry(tmp_path / "source")
    yield registry
    registry.stop()


@pytest.fixture
def target(tmp_path: Path) -> Iterator[LocalRegistry]:
    registry = start_registry(tmp_path / "target")
    yield registry
    registry.stop()


@pytest.fixture
def source_proxy(source: LocalRegistry) -> Iterator[FaultProxy]:
    """`source` behind a proxy that injects the faults a test adds (tests/faultproxy.py)."""
    with fault_proxy(source.port) as proxy:
        yield proxy


@pytest.fixture
def target_proxy(target: LocalRegistry) -> Iterator[FaultProxy]:
    with fault_proxy(target.port) as proxy:
        yield proxy


@pytest.fixture
def acr_like(tmp_path: Path) -> Iterator[LocalRegistry]:
    """A target that refuses non-image manifest classes, as ACR's personal edition does."""
    registry = start_registry(tmp_path / "acr", image_manifests_only=True)
    yield registry
    registry.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    server = start_postgres()
    yield server
    server.stop()


@pytest.fixture
def database_url(postgres: Postgres) -> str:
    """An empty database of its own for each test."""
    return postgres.new_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A job store's database, once on each backend: a file of SQLite, an empty PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    return str(request.getfixturevalue("database_url"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def job_store(store_url: str, clock: FakeClock) -> Iterator[JobStore]:
    opened = JobStore(store_url, clock=clock)
    yield opened
    opened.close()


@pytest.fixture
def store(job_store: JobStore) -> JobStore:
    return job_store


@pytest.fixture
def service(tmp_path: Path, source: LocalRegistry, target: LocalRegistry) -> Iterator[Service]:
    """`mirror serve` on a free port, copying from `source` to `target` (tests/test_service.py's config)."""
    running = Service(service_config(tmp_path, source, target), free_port())
    running.start()
    yield running
    running.stop()
