"""A chart repository's login written in its URL (`https://robot:token@host/charts`) is sent, and never shown: not
in a refusal (stderr, the service's job records), a retry's log line or a config error."""

from __future__ import annotations

import asyncio
import base64
import http.server
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mirror.chart.archive import ChartArchive, ChartError
from mirror.chart.source import ChartLocation, FetchLimits, every_chart, fetch_each_chart, published_versions
from mirror.demo.ports import free_port
from mirror.demo.samplechart import ChartRepository, hami_chart
from mirror.demo.serving import serve
from mirror.engine.jobs import helm_repo_flags
from mirror.reference import without_userinfo
from mirror.registry.retry import RetryPolicy
from mirror.settings import ConfigError, load_settings
from tests.test_settings import config_file, with_changes

TOKEN = "s3cr3t-t0ken"
LOGIN = "Basic " + base64.b64encode(f"robot:{TOKEN}".encode()).decode()
LIMITS = FetchLimits(max_bytes=16 * 1024 * 1024, timeout=30, retry=RetryPolicy(attempts=2, base_delay=0.01))


@contextmanager
def guarded(repository: ChartRepository) -> Iterator[str]:
    """`repository` served at /charts to the login robot:TOKEN only (401 without it); yields the origin."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            base, _, file_name = self.path.rpartition("/")
            body = repository.body(file_name) if base == "/charts" else None
            status = 200 if body is not None else 404
            if self.headers.get("Authorization") != LOGIN:
                status, body = 401, None
            self.send_response(status)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    with serve(Handler) as server:
        yield f"127.0.0.1:{server.server_address[1]}"


def with_login(host: str, path: str = "/charts", token: str = TOKEN) -> str:
    return f"http://robot:{token}@{host}{path}"


def charts_of(location: ChartLocation, version: str) -> dict[str, ChartArchive]:
    return every_chart(asyncio.run(fetch_each_chart(location, [version], LIMITS)))


def test_the_login_in_the_url_is_sent() -> None:
    repository = ChartRepository()
    repository.add("hami", "2.10.0", hami_chart("registry.example"))
    with guarded(repository) as host:
        location = ChartLocation(with_login(host), "hami")
        assert asyncio.run(published_versions(location, LIMITS, None)) == ["2.10.0"]
        assert charts_of(location, "2.10.0")["2.10.0"].name == "hami"
    assert str(location) == f"http://{host}/charts/hami"


Failure = Callable[[str], None]  # given the repository's host, a read that raises ChartError


def _no_such_path(host: str) -> None:
    charts_of(ChartLocation(with_login(host, "/elsewhere"), "hami"), "2.10.0")


def _no_such_chart(host: str) -> None:
    charts_of(ChartLocation(with_login(host), "hami-webui"), "1.3.0")


def _not_published(host: str) -> None:
    charts_of(ChartLocation(with_login(host), "hami"), "9.9.9")


def _wrong_digest(host: str) -> None:
    charts_of(ChartLocation(with_login(host), "tampered"), "1.0.0")


def _wrong_login(host: str) -> None:
    asyncio.run(published_versions(ChartLocation(with_login(host, token=TOKEN + "-old"), "hami"), LIMITS, None))


def _nobody_there(host: str) -> None:
    # retried once, then refused: the retry's log line is checked too
    charts_of(ChartLocation(with_login(f"127.0.0.1:{free_port()}"), "hami"), "2.10.0")


FAILURES: list[tuple[Failure, str]] = [
    (_no_such_path, "/elsewhere/index.yaml answered 404"),
    (_no_such_chart, "has no chart named 'hami-webui'"),
    (_not_published, "not published in http://{host}/charts/index.yaml"),
    (_wrong_digest, "/charts/tampered-1.0.0.tgz has sha256"),
    (_wrong_login, "/charts/index.yaml answered 401"),
    (_nobody_there, "ConnectError"),
]


@pytest.mark.parametrize(("fail", "detail"), FAILURES, ids=[failure[0].__name__.strip("_") for failure in FAILURES])
def test_every_refusal_shows_the_repository_without_its_login(
    caplog: pytest.LogCaptureFixture, fail: Failure, detail: str
) -> None:
    repository = ChartRepository()
    repository.add("hami", "2.10.0", hami_chart("registry.example"))
    repository.add("tampered", "1.0.0", b"not the chart", claimed_digest="0" * 64)
    caplog.set_level(logging.INFO)
    with guarded(repository) as host, pytest.raises(ChartError) as refused:
        fail(host)
    message = str(refused.value)
    assert detail.format(host=host) in message, message
    assert "http://127.0.0.1:" in message and TOKEN not in message and "robot" not in message, message
    assert TOKEN not in caplog.text, caplog.text


@pytest.mark.parametrize(
    ("repository", "detail"),
    [
        ("https://robot:s3cr3t-t0ken@charts example/hami", "'https://charts example/hami': expected https://host/path"),
        (
            "oci://robot:s3cr3t-t0ken@registry.example/charts",
            "'oci://registry.example/charts': an oci:// chart is read",
        ),
    ],
    ids=["not-a-url", "oci-login"],
)
def test_a_refused_repository_url_is_quoted_without_its_login(tmp_path: Path, repository: str, detail: str) -> None:
    data = with_changes(chart={"repository": repository})
    with pytest.raises(ConfigError) as refused:
        load_settings(config_file(tmp_path, data))
    assert f"chart.repository: {detail}" in str(refused.value), refused.value
    assert TOKEN not in str(refused.value), refused.value


@pytest.mark.parametrize(
    ("repository", "flags"),
    [
        (f"https://robot:{TOKEN}@charts.example.com/hami", "--repo https://charts.example.com/hami --username robot"),
        ("https://charts.example.com/hami", "--repo https://charts.example.com/hami"),
    ],
)
def test_the_printed_install_line_names_the_repository_without_its_password(repository: str, flags: str) -> None:
    """The `helm install` line goes to stdout, the job record and the chat channels."""
    assert helm_repo_flags(repository).startswith(flags)
    assert TOKEN not in helm_repo_flags(repository)
    assert ("--password '<password>'" in helm_repo_flags(repository)) == ("robot" in repository)


@pytest.mark.parametrize("mark", ["/", "?", "#"])
def test_a_login_whose_password_ends_the_host_part_is_refused_and_never_shown(tmp_path: Path, mark: str) -> None:
    """`https://bob:s3cr/tTok@host/...` parses as host `bob:s3cr` and path `/tTok@host/...`: it would reach Helm
    and every message with the password in it."""
    password = f"s3cr{mark}tTok"
    repository = f"https://bob:{password}@charts.example.com/hami"
    with pytest.raises(ConfigError) as refused:
        load_settings(config_file(tmp_path, with_changes(chart={"repository": repository, "name": "hami"})))
    assert "percent-encode" in str(refused.value)
    assert "tTok" not in str(refused.value)
    assert "tTok" not in without_userinfo(f"GET {repository}/index.yaml answered 401")
    assert "tTok" not in helm_repo_flags(repository)
