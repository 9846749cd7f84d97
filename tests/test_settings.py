"""Configuration: YAML, environment overrides, and clear errors before any network traffic."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.settings import ConfigError, load_settings
from tests.support import write_config


def config_file(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "mirror.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


VALID = {
    "targets": [{"name": "hz", "registry": "registry.cn-hangzhou.aliyuncs.com", "namespace": "ns"}],
    "images": [{"name": "hami", "source": "projecthami/hami"}],
}


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = config_file(tmp_path, VALID)
    monkeypatch.setenv("MIRROR_OUTPUT_DIR", "/data/out")
    monkeypatch.setenv("MIRROR_SOURCE__REGISTRY", "mirror.gcr.io")
    monkeypatch.setenv("MIRROR_TRANSFER__BLOB_CONCURRENCY", "9")
    settings = load_settings(path)
    assert settings.output_dir == Path("/data/out")
    assert settings.source.registry == "mirror.gcr.io"
    assert settings.transfer.blob_concurrency == 9
    assert settings.targets[0].namespace == "ns"  # untouched keys keep the file's value


def test_config_path_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIRROR_CONFIG", str(config_file(tmp_path, VALID)))
    assert load_settings().targets[0].name == "hz"


def test_password_is_secret(tmp_path: Path) -> None:
    data = {**VALID, "registries": {"registry.cn-hangzhou.aliyuncs.com": {"username": "u", "password": "hunter2"}}}
    settings = load_settings(config_file(tmp_path, data))
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings.model_dump())
    assert settings.registry("registry.cn-hangzhou.aliyuncs.com").password_value() == "hunter2"


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda d: d["targets"][0].pop("namespace"), "targets.0.namespace: Field required"),
        (lambda d: d["targets"][0].update(registry="no spaces allowed"), "targets.0.registry"),
        (lambda d: d["images"][0].update(tag="{release}"), "images.0.tag"),
        (lambda d: d["images"][0].update(name="a/b"), "images.0.name"),
        (lambda d: d["images"][0].update(source="Upper/Case"), "images.0.source"),
        (lambda d: d["images"][0].update(values_keys=["a..b"]), "images.0.values_keys"),
        (lambda d: d.update(targets=[]), "targets: List should have at least 1 item"),
        (lambda d: d.update(typo_key=1), "typo_key: Extra inputs are not permitted"),
        (lambda d: d["targets"].append(dict(d["targets"][0])), "duplicate name(s) hz"),
        (lambda d: d.update(transfer={"blob_concurrency": 0}), "transfer.blob_concurrency"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, mutate: object, key: str) -> None:
    data = yaml.safe_load(yaml.safe_dump(VALID))
    mutate(data)  # type: ignore[operator]
    with pytest.raises(ConfigError) as error:
        load_settings(config_file(tmp_path, data))
    assert key in str(error.value)


def test_unreadable_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=r"mirror\.yaml"):
        load_settings(config_file(tmp_path, "targets: [unclosed"))
    with pytest.raises(ConfigError, match="mapping"):
        load_settings(config_file(tmp_path, "- a list"))


def test_bad_env_value_names_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIRROR_TRANSFER__BLOB_CONCURRENCY", "many")
    with pytest.raises(ConfigError, match=r"transfer\.blob_concurrency"):
        load_settings(config_file(tmp_path, VALID))


@pytest.mark.parametrize("args", [["v2.10"], ["latest"], ["v2.10.0", "--target", "nope"]])
def test_bad_input_exits_2_and_touches_no_registry(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    marks = len(source.access_log()), len(target.access_log())
    assert main(["sync", *args, "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mirror: ")
    assert (len(source.access_log()), len(target.access_log())) == marks
    assert not (tmp_path / "out").exists()


def test_bad_config_exits_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = yaml.safe_load(yaml.safe_dump(VALID))
    del data["targets"][0]["registry"]
    assert main(["sync", "v2.10.0", "--config", str(config_file(tmp_path, data))]) == 2
    assert "targets.0.registry: Field required" in capsys.readouterr().err


# -- checked at load: every mistake is exit 2 with the key or the variable named ------------------------


def with_changes(**changes: object) -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load(yaml.safe_dump(VALID))
    data.update(changes)
    return data


LOAD_MISTAKES = [
    (with_changes(schedule="61 * * * *"), "schedule", "minute field '61'"),
    (with_changes(schedule="0 25 * * *"), "schedule", "hour field '25'"),
    (with_changes(schedule="0 0 * * mon-funday"), "schedule", "day_of_week field"),
    (with_changes(schedule="0 0 * *"), "schedule", "5 fields"),
    (with_changes(discovery={"versions": ">=2.7"}), "discovery.versions", "'>=2.7'"),
    (with_changes(discovery={"versions": "~2.7.0"}), "discovery.versions", "'~2.7.0'"),
    (with_changes(webhook={"secret": ""}), "webhook.secret", "at least 16 bytes"),
    (with_changes(webhook={"secret": "short"}), "webhook.secret", "at least 16 bytes"),
    (with_changes(webhook={"dockerhub_token": "abc"}), "webhook.dockerhub_token", "at least 16 bytes"),
    (with_changes(webhook={"secret_file": "/nonexistent/secret"}), "webhook.secret_file", "not a readable file"),
    (with_changes(service={"api_token": "tiny"}), "service.api_token", "at least 16 bytes"),
    (with_changes(service={"api_token_file": "/nonexistent/token"}), "service.api_token_file", "not a readable"),
    (with_changes(database_url="mysql://x/y"), "database_url", "postgresql"),
    (
        with_changes(registries={"registry.cn-hangzhou.aliyuncs.com": {"password_env": "MIRROR_TEST_UNSET_PASSWORD"}}),
        "registries.registry.cn-hangzhou.aliyuncs.com.password_env",
        "MIRROR_TEST_UNSET_PASSWORD is not set",
    ),
    (
        with_changes(registries={"r.example": {"password_env": "ACR.PASSWORD"}}),
        "registries.r.example.password_env",
        "not an environment variable name",
    ),
    (
        with_changes(registries={"r.example": {"password": "x", "password_env": "X"}}),
        "registries.r.example",
        "not several",
    ),
    (
        with_changes(signatures={"require": [{"repositories": ["projecthami/*"], "issuer": "https://i.example"}]}),
        "signatures.require.0",
        "exactly one of identity and identity_regexp",
    ),
    (
        with_changes(
            signatures={"require": [{"repositories": ["a/*"], "identity": "x", "identity_regexp": "y", "issuer": "z"}]}
        ),
        "signatures.require.0",
        "exactly one of identity and identity_regexp",
    ),
    (
        with_changes(signatures={"require": [{"repositories": ["a/*"], "identity_regexp": "(", "issuer": "z"}]}),
        "signatures.require.0.identity_regexp",
        "not a regular expression",
    ),
    (
        with_changes(signatures={"require": [{"repositories": [], "identity": "x", "issuer": "z"}]}),
        "signatures.require.0.repositories",
        "at least 1 item",
    ),
    (
        with_changes(signatures={"trusted_root": "/nonexistent/trusted_root.json"}),
        "signatures.trusted_root",
        "no such file",
    ),
]


@pytest.mark.parametrize(("data", "key", "detail"), LOAD_MISTAKES, ids=[m[1] + ":" + m[2] for m in LOAD_MISTAKES])
def test_config_mistakes_are_caught_at_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, object], key: str, detail: str
) -> None:
    assert main(["sync", "v2.10.0", "--config", str(config_file(tmp_path, data))]) == 2
    err = capsys.readouterr().err
    assert key in err and detail in err, err
    assert "Traceback" not in err


def test_a_secret_file_that_is_empty_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "webhook-secret"
    secret.write_text("\n")
    data = with_changes(webhook={"secret_file": str(secret)})
    assert main(["sync", "v2.10.0", "--config", str(config_file(tmp_path, data))]) == 2
    assert "webhook.secret_file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("MIRROR_TRANSFER__BLOB_CONCURRENCY", "many", "transfer.blob_concurrency (set by the environment variable "),
        ("MIRROR_SCHEDULE", "99 * * * *", "schedule (set by the environment variable MIRROR_SCHEDULE)"),
        ("MIRROR_TARGETS", "[{not json", "MIRROR_TARGETS: not valid JSON"),
        (
            "MIRROR_WEBHOOK__SECRET",
            "tiny-s3cret",
            "webhook.secret (set by the environment variable MIRROR_WEBHOOK__SECRET)",
        ),
    ],
)
def test_a_bad_variable_is_blamed_on_the_variable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    named: str,
) -> None:
    monkeypatch.setenv(variable, value)
    assert main(["sync", "v2.10.0", "--config", str(config_file(tmp_path, VALID))]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err, err
    assert value not in err or variable != "MIRROR_WEBHOOK__SECRET"  # a secret is never echoed


def test_password_env_reads_the_named_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACR_PASSWORD", "s3cret-from-env")
    data = with_changes(
        registries={"registry.cn-hangzhou.aliyuncs.com": {"username": "u", "password_env": "ACR_PASSWORD"}}
    )
    settings = load_settings(config_file(tmp_path, data))
    assert settings.registry("registry.cn-hangzhou.aliyuncs.com").password_value() == "s3cret-from-env"
    assert "s3cret" not in repr(settings)


def serve(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mirror", "serve", "--config", str(config), "--host", "127.0.0.1", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("changes", "args", "named"),
    [
        ({"schedule": "0 0 32 * *"}, ["--port", "0"], "day field '32'"),
        ({"webhook": {"secret_file": "/nonexistent/secret"}}, ["--port", "0"], "webhook.secret_file"),
        ({}, ["--port", "70000"], "--port 70000"),
    ],
)
def test_serve_refuses_bad_config_and_ports_in_one_line(
    tmp_path: Path, changes: dict[str, object], args: list[str], named: str
) -> None:
    done = serve(config_file(tmp_path, with_changes(**changes)), *args)
    assert done.returncode == 2
    assert named in done.stdout + done.stderr and "Traceback" not in done.stdout + done.stderr


def test_serve_on_a_taken_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = serve(config_file(tmp_path, VALID), "--port", str(taken.getsockname()[1]))
    assert done.returncode == 2
    output = (done.stdout + done.stderr).strip().splitlines()
    assert len(output) == 1 and "cannot listen on 127.0.0.1" in output[0], output
