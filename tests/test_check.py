"""`mirror check`: the config read as sync and serve read it, said in plain lines, with nothing sent to the
registries or the chart repository (their own logs are read to prove it)."""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import pytest

from mirror.cron import cron_trigger
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.samplechart import chart_repository
from tests.support import write_config


def check(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mirror", "check", "--config", str(config), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)


def asked(*registries: LocalRegistry) -> list[int]:
    """How many requests each registry has answered (its start-up's own probe among them)."""
    return [len(registry.access_log()) for registry in registries]


def test_a_release_is_shown_image_by_image_where_it_goes_and_nothing_is_sent(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    config = write_config(tmp_path / "mirror.yaml", source, [target], target_options={"vpc_registry": "pull.example"})
    before = asked(source, target)
    done = check(config, "2.10.0")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "config: valid"
    assert f"  t0: push to {target.host}/mirrored" in lines
    assert "    nodes pull from pull.example/mirrored" in lines
    assert "release v2.10.0:" in lines
    assert f"  hami: {source.host}/projecthami/hami:v2.10.0" in lines
    assert f"    -> t0: {target.host}/mirrored/hami:v2.10.0" in lines
    assert f"    -> t0: {target.host}/mirrored/kube-webhook-certgen:v1.1.1" in lines
    assert asked(source, target) == before


def test_a_chart_config_names_the_chart_and_asks_the_chart_repository_nothing(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    with chart_repository() as served:
        login = served.url.replace("http://", "http://robot:s3cr3t-chart-t0ken@")  # a login in the URL: never shown
        chart = {"repository": login, "name": "hami"}
        config = write_config(tmp_path / "mirror.yaml", source, [target], images=[], chart=chart)
        before = asked(source, target)
        done = check(config, "v2.10.0")
        assert done.returncode == 0, done.stderr
        assert f"chart: hami from {served.url}: its images are read from it at each sync" in done.stdout
        assert "s3cr3t" not in done.stdout + done.stderr and "robot" not in done.stdout
        assert served.requests == [] and asked(source, target) == before


def test_the_schedules_next_runs_are_the_schedulers_own(tmp_path: Path, source: LocalRegistry) -> None:
    config = write_config(tmp_path / "mirror.yaml", source, [source], schedule="30 */6 * * 1-5")
    done = check(config)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("schedule: ")]
    shown = [datetime.datetime.strptime(t, "%Y-%m-%d %H:%M UTC") for t in line.split("next: ")[1].split(", ")]
    assert len(shown) == 3 and shown == sorted(set(shown))
    trigger = cron_trigger("30 */6 * * 1-5")
    for tick in shown:
        at = tick.replace(tzinfo=datetime.UTC)
        assert trigger.get_next_fire_time(None, at) == at  # a time the service's own trigger fires at
        assert at.minute == 30 and at.hour % 6 == 0 and at.weekday() < 5


def test_a_login_is_named_by_where_it_comes_from_never_by_its_secret(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    registries = {target.host: {"plain_http": True, "username": "robot", "password_env": "TARGET_PASSWORD"}}
    config = write_config(tmp_path / "mirror.yaml", source, [target], registries=registries)
    secret = "a-real-password-0123456789"
    done = check(config, env={"PATH": "/usr/bin:/bin", "TARGET_PASSWORD": secret})
    assert done.returncode == 0, done.stderr
    assert f"    login: registries.{target.host}: username and password_env TARGET_PASSWORD" in done.stdout
    assert secret not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["2.x"], "invalid version '2.x'"),
        (["--target", "nope"], "--target 'nope': no such target (configured: t0)"),
        (["--serve"], "nothing to serve: set webhook.secret_file"),
        (["--serve", "--port", "9090"], "service.internal_port 9090 is --port too"),
    ],
    ids=["a version", "a target", "a service with nothing to serve", "one port for both"],
)
def test_what_would_stop_a_run_or_the_service_is_exit_2_naming_it(
    tmp_path: Path, source: LocalRegistry, args: list[str], said: str
) -> None:
    before = asked(source)
    doors = {"api_token": "job-api-token-0123456789", "internal_port": 9090} if "--port" in args else {}
    done = check(write_config(tmp_path / "mirror.yaml", source, [source], service=doors), *args)
    assert done.returncode == 2 and said in done.stderr and done.stdout == ""
    assert asked(source) == before


def test_a_bad_config_is_exit_2_in_the_words_sync_uses(tmp_path: Path, source: LocalRegistry) -> None:
    config = write_config(tmp_path / "mirror.yaml", source, [source], transfer={"blob_concurrency": 0})
    done = check(config)
    sync = subprocess.run(
        [sys.executable, "-m", "mirror", "sync", "v2.10.0", "--config", str(config)], capture_output=True, text=True
    )
    assert done.returncode == sync.returncode == 2
    assert done.stderr == sync.stderr and "transfer.blob_concurrency" in done.stderr


@pytest.mark.parametrize("proxy", ["socks4://proxy.example:1080", "https://proxy.example:3128"])
def test_a_proxy_variable_a_run_cannot_use_is_exit_2_as_sync_says_it(
    tmp_path: Path, source: LocalRegistry, monkeypatch: pytest.MonkeyPatch, proxy: str
) -> None:
    """Only `--serve` looked at the proxy variables: a CronJob's config passed its check and every run stopped."""
    config = write_config(tmp_path / "mirror.yaml", source, [source])
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    done = check(config)
    sync = subprocess.run(
        [sys.executable, "-m", "mirror", "sync", "v2.10.0", "--dry-run", "--config", str(config)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == sync.returncode == 2
    assert done.stderr == sync.stderr and "HTTPS_PROXY" in done.stderr
