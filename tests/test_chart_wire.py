"""The chart on the wire as Helm reads and writes it: a published chart's config in the types Helm's pull
unmarshals it into, an archive read as its storage host stores it whatever coding it is labelled with, and a
chart repository's login sent to the repository's own origin, whatever URL form its index uses, and nowhere else."""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import http.server
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python
import httpx
import pytest
import yaml

from mirror.chart.archive import ChartArchive, ChartError, open_chart
from mirror.chart.publish import publish_chart
from mirror.chart.source import ChartLocation, FetchLimits, _download_url, every_chart, fetch_each_chart
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.samplechart import chart_files, hami_chart, package
from mirror.demo.serving import serve
from mirror.registry import RegistryClient
from mirror.registry.retry import RetryPolicy
from tests.support import with_client

LIMITS = FetchLimits(max_bytes=16 * 1024 * 1024, timeout=30, retry=RetryPolicy(attempts=2, base_delay=0.01))
TOKEN = "s3cr3t-t0ken"
LOGIN = "Basic " + base64.b64encode(f"robot:{TOKEN}".encode()).decode()

# Valid to Helm, whose loader reads each of these scalars into a string field
UNQUOTED_CHART_YAML = """apiVersion: v2
name: demo
version: 1.0.0
appVersion: 1.16
description: 42
keywords: [gpu, 1.5]
annotations:
  example.com/weight: 1.10
  example.com/supported: true
maintainers:
  - name: ops
    email: 7
"""


def test_a_chart_whose_chart_yaml_holds_numbers_is_pulled_back_by_helm(source: LocalRegistry, tmp_path: Path) -> None:
    files = chart_files(source.host, "1.0.0", name="demo") | {"Chart.yaml": UNQUOTED_CHART_YAML}
    archive = open_chart(package(files, top="demo"), "test")
    published = with_client(source, lambda client: publish_chart(client, "charts/demo", archive))
    assert published.reference == f"{source.host}/charts/demo:1.0.0"

    # Helm's pull unmarshals the config into its chart.Metadata: a number in a string field fails it
    helm_python.pull(f"oci://{source.host}/charts/demo", version="1.0.0", plain_http=True, destination=str(tmp_path))
    pulled = (tmp_path / "demo-1.0.0.tgz").read_bytes()
    assert pulled == archive.raw
    with helm_python.Chart.load_archive(pulled) as chart:
        assert chart.metadata["appVersion"] == "1.16"

    config = json.loads(with_client(source, lambda client: _config_of(client, "charts/demo", "1.0.0")))
    assert config["appVersion"] == "1.16" and config["description"] == "42"
    assert config["keywords"] == ["gpu", "1.5"] and config["maintainers"] == [{"name": "ops", "email": "7"}]
    # as Chart.yaml writes it: the parsed value, 1.1, could not tell
    assert config["annotations"] == {"example.com/weight": "1.10", "example.com/supported": "true"}


async def _config_of(client: RegistryClient, repository: str, tag: str) -> bytes:
    manifest = await client.get_manifest(repository, tag)
    assert manifest.config is not None
    return await client.read_blob(repository, manifest.config)


@dataclass
class StandIn:
    """A web server on loopback answering by path, each answer with its own headers; with `login`, 401 to a
    request without it. What it was asked is kept, each request's path and headers."""

    answers: dict[str, tuple[bytes, dict[str, str]]]
    login: str | None = None
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    origin: str = ""

    def answer(self, path: str, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        self.seen.append((path, headers))
        if self.login is not None and headers.get("Authorization") != self.login:
            return 401, b"", {}
        if path not in self.answers:
            return 404, b"", {}
        body, extra = self.answers[path]
        return 200, body, extra

    def headers_for(self, path: str) -> list[dict[str, str]]:
        return [headers for seen_path, headers in self.seen if seen_path == path]


@contextmanager
def serving(stand_in: StandIn) -> Iterator[StandIn]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            status, body, extra = stand_in.answer(self.path, dict(self.headers.items()))
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serve(Handler) as server:
        stand_in.origin = f"http://127.0.0.1:{server.server_address[1]}"
        yield stand_in


def index_yaml(*entries: tuple[str, str, bytes]) -> bytes:
    """A classic repository's index.yaml for chart `hami`: (version, download URL, archive) each."""
    listed = [
        {"name": "hami", "version": version, "urls": [url], "digest": hashlib.sha256(raw).hexdigest()}
        for version, url, raw in entries
    ]
    return yaml.safe_dump({"apiVersion": "v1", "entries": {"hami": listed}}).encode()


def fetched(location: ChartLocation, *versions: str) -> dict[str, ChartArchive]:
    return every_chart(asyncio.run(fetch_each_chart(location, list(versions), LIMITS)))


def test_a_chart_versioned_with_a_v_is_the_releases_chart() -> None:
    """Helm takes `version: v2.11.0`; the release v2.11.0's chart is then looked up as `2.11.0` and was reported
    not published, which stopped the run for every release."""
    raw = hami_chart("registry.example", "v2.11.0")
    answers: dict[str, tuple[bytes, dict[str, str]]] = {
        "/index.yaml": (index_yaml(("v2.11.0", "hami-v2.11.0.tgz", raw)), {}),
        "/hami-v2.11.0.tgz": (raw, {}),
    }
    with serving(StandIn(answers)) as stand_in:
        charts = fetched(ChartLocation(stand_in.origin, "hami"), "2.11.0")
    assert charts["2.11.0"].version == "v2.11.0" and charts["2.11.0"].raw == raw


def test_an_archive_its_storage_host_labels_gzip_arrives_as_stored() -> None:
    """S3 or CloudFront serve a .tgz uploaded with `Content-Encoding: gzip` metadata so labelled: the digest the
    index gives is over the stored bytes, which Helm's getter reads without decoding."""
    raw = hami_chart("registry.example")
    index = index_yaml(("2.10.0", "hami-2.10.0.tgz", raw))
    answers = {
        "/charts/index.yaml": (gzip.compress(index), {"Content-Encoding": "gzip"}),  # coded in transit: decoded
        "/charts/hami-2.10.0.tgz": (raw, {"Content-Type": "application/x-tar", "Content-Encoding": "gzip"}),
    }
    with serving(StandIn(answers)) as stand_in:
        chart = fetched(ChartLocation(f"{stand_in.origin}/charts", "hami"), "2.10.0")["2.10.0"]
    assert chart.raw == raw and chart.name == "hami"
    assert [h.get("Accept-Encoding") for h in stand_in.headers_for("/charts/hami-2.10.0.tgz")] == ["identity"]


def test_the_repository_login_goes_to_its_own_host_whatever_the_url_form_and_nowhere_else() -> None:
    """ChartMuseum's --chart-url (and Artifactory, Harbor) list absolute URLs on the repository's own host:
    Helm sends the repository's login to them. An archive on another host gets none."""
    on_own_host, elsewhere = hami_chart("registry.example"), hami_chart("registry.example", "2.9.0")
    other = StandIn({"/archive/hami-2.9.0.tgz": (elsewhere, {})})
    repository = StandIn({}, login=LOGIN)
    with serving(other), serving(repository):
        repository.answers = {
            "/charts/index.yaml": (
                index_yaml(
                    ("2.10.0", f"{repository.origin}/files/hami-2.10.0.tgz", on_own_host),
                    ("2.9.0", f"{other.origin}/archive/hami-2.9.0.tgz", elsewhere),
                    ("2.8.0", f"{repository.origin}/files/missing.tgz", elsewhere),
                ),
                {},
            ),
            "/files/hami-2.10.0.tgz": (on_own_host, {}),
        }
        location = ChartLocation(repository.origin.replace("//", f"//robot:{TOKEN}@") + "/charts", "hami")
        charts = fetched(location, "2.10.0", "2.9.0")
        with pytest.raises(ChartError) as refused:
            fetched(location, "2.8.0")
    assert charts["2.10.0"].raw == on_own_host and charts["2.9.0"].raw == elsewhere
    assert [h.get("Authorization") for h in repository.headers_for("/files/hami-2.10.0.tgz")] == [LOGIN]
    assert [h.get("Authorization") for h in other.headers_for("/archive/hami-2.9.0.tgz")] == [None]
    # sent (a 404, not a 401), and not shown
    assert "/files/missing.tgz answered 404" in str(refused.value), refused.value
    assert TOKEN not in str(refused.value) and "robot" not in str(refused.value), refused.value


@pytest.mark.parametrize(
    ("url", "login_sent"),
    [
        ("hami-2.10.0.tgz", True),
        ("https://charts.example.com/files/hami-2.10.0.tgz", True),
        ("https://charts.example.com:443/files/hami-2.10.0.tgz", True),  # the scheme's own port, written out
        ("http://charts.example.com/files/hami-2.10.0.tgz", False),  # another scheme: the login in plain text
        ("https://charts.example.com:8443/files/hami-2.10.0.tgz", False),
        ("https://cdn.example.com/files/hami-2.10.0.tgz", False),
        ("//cdn.example.com/files/hami-2.10.0.tgz", False),
        ("https://other:pass@charts.example.com/files/hami-2.10.0.tgz", False),  # its own login, kept
    ],
)
def test_the_login_goes_with_the_repositorys_scheme_host_and_port_only(url: str, login_sent: bool) -> None:
    location = ChartLocation(f"https://robot:{TOKEN}@charts.example.com/charts", "hami")
    resolved = httpx.URL(_download_url(location, {"urls": [url]}, "chart hami 2.10.0"))
    assert (resolved.password == TOKEN) == login_sent, resolved
