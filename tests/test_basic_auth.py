"""A target behind Basic auth (htpasswd), as a self-hosted registry often is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
import yaml

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry, start_registry
from tests.support import write_config
from tests.test_sync import VERSION, seed_release

PASSWORD = "s3cret-Pa55"


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[LocalRegistry]:
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_bytes(b"pusher:" + bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)) + b"\n")
    registry = start_registry(tmp_path / "locked", htpasswd=htpasswd)
    yield registry
    registry.stop()


def configure(tmp_path: Path, source: LocalRegistry, locked: LocalRegistry, password_file: Path) -> Path:
    path = write_config(tmp_path / "mirror.yaml", source, [locked])
    data = yaml.safe_load(path.read_text())
    data["registries"][locked.host].update(username="pusher", password_file=str(password_file))
    path.write_text(yaml.safe_dump(data))
    return path


def test_sync_with_basic_credentials_from_a_password_file(
    tmp_path: Path, source: LocalRegistry, locked: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    assert main(["sync", VERSION, "--config", str(configure(tmp_path, source, locked, secret))]) == 0
    captured = capsys.readouterr()
    assert PASSWORD not in captured.out + captured.err
    statuses = {e.status for e in locked.access_log() if e.path.startswith("/v2/mirrored/")}
    assert 401 in statuses and 201 in statuses  # challenged once, then answered


def test_wrong_password_fails_cleanly_and_writes_nothing(
    tmp_path: Path, source: LocalRegistry, locked: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    secret = tmp_path / "password"
    secret.write_text("not-the-password")
    assert main(["sync", VERSION, "--config", str(configure(tmp_path, source, locked, secret))]) == 1
    err = capsys.readouterr().err
    failures = [line for line in err.splitlines() if line.startswith("mirror: ")]
    assert len(failures) == 2 and all("401" in line for line in failures)
    assert "not-the-password" not in err and "Traceback" not in err
    assert not any(e.status in (201, 202) for e in locked.access_log())
    assert not (tmp_path / "out").exists()
