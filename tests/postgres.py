"""A throwaway PostgreSQL cluster for the tests: Debian's `initdb` and `postgres` on a free loopback port,
in its own temporary directory, stopped and removed at the end. As root the server runs as `postgres`."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from mirror.demo.ports import free_port


class PostgresMissing(RuntimeError):
    pass


def server_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise PostgresMissing("PostgreSQL not found: apt-get install -y postgresql (scripts/bootstrap.sh does)")
    return Path(found[-1]).parent


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class Postgres:
    workdir: Path
    port: int
    process: subprocess.Popen[bytes]

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as db:
            db.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_postgres() -> Postgres:
    bin_dir = server_bin()
    # not under pytest's tmp_path: the server user must be able to reach its directory
    workdir = Path(tempfile.mkdtemp(prefix="mirror-pg-"))
    data = workdir / "data"
    if os.geteuid() == 0:
        account = pwd.getpwnam("postgres")
        os.chown(workdir, account.pw_uid, account.pw_gid)
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]
    subprocess.run(_as_server_user(initdb), check=True, capture_output=True, cwd=workdir)
    port = free_port()
    options = ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200"]
    command = [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(workdir), *options]
    log = (workdir / "server.log").open("ab")
    process = subprocess.Popen(_as_server_user(command), stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    log.close()
    server = Postgres(workdir, port, process)
    _wait_ready(server, bin_dir)
    return server


def _wait_ready(server: Postgres, bin_dir: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"postgres exited: {(server.workdir / 'server.log').read_text(errors='replace')}")
        ready = subprocess.run(
            [str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(server.port), "-U", "postgres"],
            capture_output=True,
            check=False,
        )
        if ready.returncode == 0:
            return
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"postgres did not start within {timeout} s")
