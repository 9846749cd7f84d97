"""`mirror serve` refusing to start, as a real process: a config's problems are a JSON log record each, read as
lines in `kubectl logs`, and a config that opens no door (no webhook secret or token, no API token, no schedule)
is refused in one line before anything listens, instead of reporting ready while answering every request 401."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from tests.test_service import API_TOKEN, DOCKERHUB_TOKEN, SECRET, Service, service_config

SHORT_SECRET = "short-secret-9"  # under 16 bytes: refused, and never shown


def refused(config: Path) -> tuple[int, str]:
    """Start `mirror serve` with `config`, expecting it to exit before it is ready: its exit code and its log."""
    running = Service(config, free_port())
    try:
        with pytest.raises(AssertionError, match="service exited"):
            running.start()
    finally:
        code = running.stop()  # a service that started after all is stopped, not left behind
    return code, running.log.read_text()


def edited(config: Path, **changes: Any) -> Path:
    """`config` with top-level keys set (a value of None removes the key)."""
    data = yaml.safe_load(config.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    config.write_text(yaml.safe_dump(data))
    return config


def test_each_problem_of_a_bad_config_is_a_readable_record(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    config = service_config(tmp_path, source, target)
    webhook = {"secret": SHORT_SECRET, "dockerhub_token": DOCKERHUB_TOKEN}
    odd_key = "out\x1b[31mput"  # a key with a terminal escape in it: named, escaped
    config = edited(config, output_dri="/data/out", webhook=webhook, lock_timeout=1e9, **{odd_key: 1})
    code, log = refused(config)
    assert code == 2, log
    records = [json.loads(line) for line in log.splitlines()]  # every line a JSON record
    messages = [str(record["msg"]) for record in records]
    assert all(record["level"] == "error" for record in records), records
    heading = f"config file {config}:"
    assert all(message.startswith(heading) for message in messages), messages
    problems = [message.removeprefix(heading).strip() for message in messages]
    for named in ("output_dri: ", "webhook.secret: ", "lock_timeout: ", "out\\x1b[31mput: "):
        assert len([p for p in problems if p.startswith(named)]) == 1, (named, problems)
    assert len(problems) == 4, problems
    assert not any("\\n" in message or "\n" in message for message in messages), messages
    assert "\x1b" not in log and SHORT_SECRET not in log


def test_a_service_with_nothing_to_serve_refuses_to_start(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """No webhook secret, no Docker Hub token, no API token, no schedule: every hook and /jobs would answer 401,
    and no job would ever run."""
    config = service_config(tmp_path, source, target, service={"lease_seconds": 3})
    data = yaml.safe_load(config.read_text())
    del data["service"]["api_token"]
    config = edited(config, webhook=None, service=data["service"])
    code, log = refused(config)
    assert code == 2, log
    (line,) = log.splitlines()
    message = json.loads(line)["msg"]
    assert message.startswith("nothing to serve: set webhook.secret_file"), message
    assert "service.api_token" in message and "schedule" in message, message
    assert not (tmp_path / "state").exists()  # refused before anything was made


def test_a_replica_on_postgresql_may_only_run_what_others_queue(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, database_url: str
) -> None:
    """No door of its own, but a shared job store: it runs the jobs the other replicas take in."""
    config = service_config(tmp_path, source, target, database_url=database_url)
    data = yaml.safe_load(config.read_text())
    del data["service"]["api_token"]
    config = edited(config, webhook=None, service=data["service"])
    running = Service(config, free_port())
    running.start()
    try:
        assert httpx.get(f"{running.url}/readyz", timeout=10).status_code == 200
    finally:
        running.stop()


@pytest.mark.parametrize("door", ["secret_file", "dockerhub_token", "api_token_file", "schedule"])
def test_any_one_door_is_enough_to_serve(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, door: str
) -> None:
    config = service_config(tmp_path, source, target)
    data = yaml.safe_load(config.read_text())
    del data["service"]["api_token"]
    del data["webhook"]
    secret = tmp_path / "door.secret"
    secret.write_text((API_TOKEN if door == "api_token_file" else SECRET) + "\n")
    if door == "secret_file":
        data["webhook"] = {"secret_file": str(secret)}
    elif door == "dockerhub_token":
        data["webhook"] = {"dockerhub_token": DOCKERHUB_TOKEN}
    elif door == "api_token_file":
        data["service"]["api_token_file"] = str(secret)
    else:
        data["schedule"] = "0 0 1 1 *"  # next: a 1st of January
    config.write_text(yaml.safe_dump(data))
    running = Service(config, free_port())
    running.start()
    try:
        assert httpx.get(f"{running.url}/readyz", timeout=10).status_code == 200
    finally:
        assert running.stopped_cleanly(), running.log.read_text()


def test_a_proxy_it_cannot_use_is_refused_before_anything_listens(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every job would fail on its first request: one line, with no login, and exit 2."""
    monkeypatch.setenv("HTTPS_PROXY", "https://user:hidden@proxy.corp:443")  # the test's own httpx takes it
    code, log = refused(service_config(tmp_path, source, target))
    assert code == 2, log
    (line,) = log.splitlines()
    said = "HTTPS_PROXY: a https:// proxy is not supported; give an http:// or a socks5:// one"
    assert json.loads(line)["msg"] == said
    assert "hidden" not in log
