"""The config's doors, tried end to end through the real CLI with what a broken or hostile setup brings: a config
file that is not UTF-8, nested 5000 deep, an alias bomb, oversized; values that would hang or mean something
else (infinite timeouts, `true` for a count, an empty output path, names ACR, Helm or Kubernetes refuse);
MIRROR_* variables that set nothing; a password file that cannot be sent; versions with 100,000 digits.

Each is `python -m mirror sync` as a subprocess under `prlimit --as` (support.MEMORY_LIMIT) that must exit 2
within BOUND seconds, with a few short lines on stderr (no traceback), nothing written, and no request at the
registry the config names: a loopback HTTP server that records every request it gets."""

from __future__ import annotations

import http.server
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import BoundedRun, http_server, run_bounded, write_config

BOUND = 60.0  # seconds a refused run may take: it is refused while loading the config, in a second or two
MAX_LINE = 500  # characters of one line on stderr
MAX_LINES = 10


@dataclass
class Recorder:
    """Where the config's source and target registry is: any request that reaches it is a failure here."""

    host: str
    requests: list[str] = field(default_factory=list)


@pytest.fixture
def registry() -> Iterator[Recorder]:
    recorder = Recorder("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _record(self) -> None:
            recorder.requests.append(f"{self.command} {self.path}")
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _record

    with http_server(Handler) as server:
        recorder.host = f"127.0.0.1:{server.server_address[1]}"
        yield recorder


def config_text(tmp_path: Path, registry: Recorder, **extra: Any) -> str:
    """A config that would mirror from and to `registry`, writing under tmp_path/out."""
    return write_config(tmp_path / "mirror.yaml", registry, [registry], **extra).read_text(encoding="utf-8")


def refused(
    tmp_path: Path, registry: Recorder, config: Path, *args: str, env: dict[str, str] | None = None
) -> list[str]:
    """Run `mirror sync ARGS --config CONFIG` bounded; assert exit 2, short stderr, nothing written, no request."""
    before = sorted(p.name for p in tmp_path.iterdir())
    done: BoundedRun = run_bounded(
        "sync", *(args or ("v2.10.0",)), "--config", str(config), cwd=tmp_path, env=env, seconds=BOUND
    )
    lines = done.error_lines()
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert 0 < len(lines) <= MAX_LINES and all(len(line) < MAX_LINE for line in lines), lines
    assert lines[0].startswith("mirror: "), lines
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written where an empty path points
    assert registry.requests == []
    return lines


def write(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "mirror.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


ALIAS_BOMB = "\n".join(
    [
        "lol0: &l0 [a, a, a, a, a, a, a, a, a]",
        *(f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)),
    ]
)


# -- the file's shape ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hostile", "detail"),
    [
        (b"# \xff\xfe not UTF-8\n", "is not UTF-8 text (byte 0xff at offset "),
        ("values: {extra: {deep: " + "[" * 5000 + "]" * 5000 + "}}\n", "nested deeper than 64 levels"),
        ("values: {extra: " + "{a: " * 5000 + "1" + "}" * 5001 + "\n", "nested deeper than 64 levels"),
        (ALIAS_BOMB + "\n", "more than 100000 values, aliases expanded"),
        ("# " + "x" * (2 * 1024 * 1024) + "\n", "larger than 1024 KiB"),
        ("_env_prefix: ''\n", "'_env_prefix': unknown key"),
    ],
    ids=["not-utf8", "lists-5000-deep", "mappings-5000-deep", "alias-bomb", "2-mib", "settings-keyword"],
)
def test_a_hostile_config_file_is_one_line_naming_it(
    tmp_path: Path, registry: Recorder, hostile: str | bytes, detail: str
) -> None:
    base = config_text(tmp_path, registry).encode("utf-8")
    config = write(tmp_path, base + (hostile if isinstance(hostile, bytes) else hostile.encode("utf-8")))
    lines = refused(tmp_path, registry, config)
    assert str(config) in lines[0] and any(detail in line for line in lines), lines


# -- values accepted silently before -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"retry": {"max_elapsed": float("inf")}}, "retry.max_elapsed: Input should be a finite number"),
        ({"transfer": {"read_timeout": float("nan")}}, "transfer.read_timeout: Input should be a finite number"),
        ({"lock_timeout": 1e12}, "lock_timeout: Input should be less than or equal to 86400"),
        ({"pull_budget": {"max_wait": float("inf")}}, "pull_budget.max_wait: Input should be a finite number"),
        ({"transfer": {"blob_concurrency": True}}, "transfer.blob_concurrency: expected a number"),
        ({"target_options": {"namespace": "demo-"}}, "targets.0.namespace: 'demo-'"),
        ({"values": {"release": "HAMi_release"}}, "values.release: 'HAMi_release' is not a Helm release"),
        ({"values": {"kube_namespace": "kube_system"}}, "values.kube_namespace: 'kube_system' is not a"),
        ({"discovery": {"versions": ">=" + "7" * 100_000 + ".0.0"}}, "discovery.versions: version filter"),
    ],
    ids=["inf", "nan", "huge-timeout", "inf-wait", "bool-count", "namespace", "release", "kube-namespace", "filter"],
)
def test_an_odd_value_is_refused_naming_its_key(
    tmp_path: Path, registry: Recorder, extra: dict[str, Any], named: str
) -> None:
    settings = {key: value for key, value in extra.items() if key != "target_options"}
    options = extra.get("target_options")
    path = write_config(tmp_path / "mirror.yaml", registry, [registry], target_options=options, **settings)
    lines = refused(tmp_path, registry, path)
    assert any(named in line for line in lines), lines


def test_a_release_name_helm_refuses_is_found_before_any_image_is_copied(tmp_path: Path, registry: Recorder) -> None:
    charts = f"http://{registry.host}/charts"  # never asked: the names are refused first
    config = write_config(
        tmp_path / "mirror.yaml",
        registry,
        [registry],
        chart={"repository": charts},
        charts=[{"repository": charts, "name": "webui", "release": "web.ui", "namespace": "x" * 64}],
    )
    lines = refused(tmp_path, registry, config)
    assert any("charts.0.release: 'web.ui' is not a Helm release name" in line for line in lines)
    assert any("charts.0.namespace: " in line and "at most 63" in line for line in lines), lines


# -- the environment -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"MIRROR_OUTPUT_DIR": ""}, "output_dir (set by the environment variable MIRROR_OUTPUT_DIR): an empty path"),
        ({"MIRROR_BOGUS": "1"}, "MIRROR_BOGUS: not a setting"),
        ({"MIRROR_TRANSFERS__X": "1"}, "MIRROR_TRANSFERS__X: not a setting; did you mean MIRROR_TRANSFER?"),
        ({"MIRROR_TRANSFER__CONNECT_TIMEOUT": "inf"}, "MIRROR_TRANSFER__CONNECT_TIMEOUT): Input should be a finite"),
        ({"MIRROR_VALUES__EXTRA": "[" * 50_000 + "]" * 50_000}, "MIRROR_VALUES__EXTRA: its JSON value is nested"),
    ],
    ids=["empty-output-dir", "unknown", "misspelt-section", "inf", "deep-json"],
)
def test_a_variable_that_sets_nothing_usable_is_named(
    tmp_path: Path, registry: Recorder, env: dict[str, str], named: str
) -> None:
    config = write(tmp_path, config_text(tmp_path, registry))
    lines = refused(tmp_path, registry, config, env=env)
    assert any(named in line for line in lines), lines


def test_the_same_config_does_reach_the_registry(tmp_path: Path, registry: Recorder) -> None:
    """The control: without the hostile part (and with the variables a deployment sets), the run gets past
    loading and asks the registry, so `registry.requests == []` above says something."""
    config = write(tmp_path, config_text(tmp_path, registry))
    env = {"MIRROR_TRANSFER__BLOB_CONCURRENCY": "8", "MIRROR_SERVICE_HOST": "10.0.0.7", "MIRROR_PORT": "tcp://x:80"}
    done = run_bounded("sync", "v2.10.0", "--dry-run", "--config", str(config), cwd=tmp_path, env=env, seconds=BOUND)
    assert done.returncode != 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert registry.requests, done.stderr[-3000:]


# -- files the config names, and versions --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "detail"), [(b"\xffpassword\n", "is not UTF-8 text"), (b"\n", "is empty")], ids=["not-utf8", "empty"]
)
def test_a_password_file_that_cannot_be_sent_is_refused_before_any_request(
    tmp_path: Path, registry: Recorder, content: bytes, detail: str
) -> None:
    password = tmp_path / "password"
    password.write_bytes(content)
    data = yaml.safe_load(config_text(tmp_path, registry))
    data["registries"][registry.host] |= {"username": "mirror", "password_file": str(password)}
    lines = refused(tmp_path, registry, write(tmp_path, yaml.safe_dump(data)))
    assert any(f"registries.{registry.host}.password_file: {password} {detail}" in line for line in lines), lines


@pytest.mark.parametrize(
    "version", ["v" + "1" * 100_000 + ".0.0", "v1.2.3-" + "a" * 1000, "v1234567890.0.0"], ids=["100k", "long", "10"]
)
def test_a_version_too_long_to_be_one_is_refused_in_a_short_line(
    tmp_path: Path, registry: Recorder, version: str
) -> None:
    config = write(tmp_path, config_text(tmp_path, registry))
    lines = refused(tmp_path, registry, config, version)
    assert len(lines) == 1 and "invalid version" in lines[0], lines
