"""Configuration: YAML, environment overrides, and clear errors before any network traffic."""

from __future__ import annotations

import hashlib
import hmac
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
    monkeypatch.setenv("MIRROR_TRANSFER__BLOB_CONCURRENCY", "7")
    settings = load_settings(path)
    assert settings.output_dir == Path("/data/out")
    assert settings.source.registry == "mirror.gcr.io"
    assert settings.transfer.blob_concurrency == 7
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
        (
            lambda d: d["targets"][0].update(registry="http://registry.cn-hangzhou.aliyuncs.com/"),
            "write the host alone ('registry.cn-hangzhou.aliyuncs.com'; plain_http under registries: for http)",
        ),
        (
            lambda d: d["targets"][0].update(registry="oci://robot:Sup3rS3cret@registry.example.com/ns"),
            "invalid registry host 'oci://registry.example.com/ns': write the host alone ('registry.example.com')",
        ),
        (
            lambda d: d["targets"][0].update(registry="registry.cn-hangzhou.aliyuncs.com/my-ns"),
            "write the host alone ('registry.cn-hangzhou.aliyuncs.com')",
        ),
        (lambda d: d["images"][0].update(tag="{release}"), "images.0.tag"),
        (lambda d: d["images"][0].update(name="a/b"), "images.0.name"),
        (lambda d: d["images"][0].update(source="Upper/Case"), "images.0.source"),
        (lambda d: d["images"][0].update(values_keys=["a..b"]), "images.0.values_keys"),
        (lambda d: d.update(targets=[]), "targets: List should have at least 1 item"),
        (lambda d: d.update(typo_key=1), "typo_key: unknown key"),
        (lambda d: d.update(output_dri="out"), "output_dri: unknown key; did you mean output_dir?"),
        (
            lambda d: d["targets"][0].update(namespce="x"),
            "targets.0.namespce: unknown key; did you mean namespace?",
        ),
        (
            lambda d: d.update(registries={"r.example": {"plain_htp": True}}),
            "registries.r.example.plain_htp: unknown key; did you mean plain_http?",
        ),
        (lambda d: d["targets"].append(dict(d["targets"][0])), "duplicate name(s) hz"),
        # names `uname -m` gives, which no index uses: the filter would silently keep nothing of that platform
        (
            lambda d: d["targets"][0].update(platforms=["linux/x86_64"]),
            "targets.0.platforms.0: 'linux/x86_64': OCI indexes name that architecture amd64: linux/amd64",
        ),
        (
            lambda d: d["targets"][0].update(platforms=["linux/aarch64"]),
            "OCI indexes name that architecture arm64: linux/arm64",
        ),
        (lambda d: d["targets"][0].update(platforms=["linux/arm64/8"]), "a variant is written v8: linux/arm64/v8"),
        (lambda d: d.update(transfer={"blob_concurrency": 0}), "transfer.blob_concurrency"),
        (
            lambda d: d.update(transfer={"blob_concurrency": 10}),
            "run_blob_concurrency (8) must be at least blob_concurrency (10)",
        ),
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
    (with_changes(schedule="0 0 * * 8"), "schedule", "day_of_week field '8': weekday '8' is not 0-7"),
    (with_changes(schedule="0 0 * *"), "schedule", "5 fields"),
    (with_changes(discovery={"versions": ">=2.7"}), "discovery.versions", "'>=2.7'"),
    (with_changes(discovery={"versions": "~2.7.0"}), "discovery.versions", "'~2.7.0'"),
    (with_changes(webhook={"secret": ""}), "webhook.secret", "at least 16 bytes"),
    (with_changes(webhook={"secret": "short"}), "webhook.secret", "at least 16 bytes"),
    (with_changes(webhook={"dockerhub_token": "abc"}), "webhook.dockerhub_token", "at least 16 bytes"),
    (
        with_changes(webhook={"dockerhub_token": "d" * 20, "dockerhub_token_file": "/etc/hostname"}),
        "webhook",
        "dockerhub token",
    ),
    (with_changes(webhook={"secret_file": "/nonexistent/secret"}), "webhook.secret_file", "not a readable file"),
    (with_changes(service={"api_token": "tiny"}), "service.api_token", "at least 16 bytes"),
    (with_changes(service={"api_token_file": "/nonexistent/token"}), "service.api_token_file", "not a readable"),
    (with_changes(database_url="mysql://x/y"), "database_url", "postgresql"),
    (
        with_changes(
            registries={
                "registry.cn-hangzhou.aliyuncs.com": {"username": "u", "password_env": "MIRROR_TEST_UNSET_PASSWORD"}
            }
        ),
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
        "password: give one of password, password_env, not several",
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
        ("MIRROR_VALUES__EXTRA", "{bad", "MIRROR_VALUES__EXTRA: not valid JSON for a part of values"),
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


# -- odd values are refused at load, each in one line naming the key -----------------------------------------

ACR_PERSONAL = "registry.cn-hangzhou.aliyuncs.com"
ACR_ENTERPRISE = "inst-registry.cn-beijing.cr.aliyuncs.com"


def target_with(**changes: object) -> dict[str, object]:
    return with_changes(targets=[{"name": "hz", "registry": ACR_PERSONAL, "namespace": "ns", **changes}])


def chart_install(**changes: object) -> dict[str, object]:
    return with_changes(
        chart={"repository": "https://charts.example/hami"},
        charts=[{"repository": "https://charts.example/webui", "name": "hami-webui", **changes}],
    )


ODD_VALUES = [
    # a number that never ends: every float the config holds is finite and has a ceiling
    (with_changes(retry={"max_elapsed": float("inf")}), "retry.max_elapsed", "finite number"),
    (with_changes(retry={"base_delay": float("nan")}), "retry.base_delay", "finite number"),
    (with_changes(transfer={"read_timeout": float("inf")}), "transfer.read_timeout", "finite number"),
    (with_changes(retry={"max_delay": 1e9}), "retry.max_delay", "less than or equal to 3600"),
    (with_changes(pull_budget={"max_wait": 1e9}), "pull_budget.max_wait", "less than or equal to 86400"),
    (with_changes(pull_budget={"poll_interval": 1e9}), "pull_budget.poll_interval", "less than or equal"),
    (with_changes(lock_timeout=float("inf")), "lock_timeout", "finite number"),
    (with_changes(lock_timeout=1e9), "lock_timeout", "less than or equal to 86400"),
    (with_changes(shutdown_grace=1e9), "shutdown_grace", "less than or equal to 3600"),
    (with_changes(service={"body_seconds": float("inf")}), "service.body_seconds", "finite number"),
    # a yes is not a count, and a count is not a yes
    (with_changes(transfer={"blob_concurrency": True}), "transfer.blob_concurrency", "not true/false"),
    (with_changes(transfer={"read_timeout": True}), "transfer.read_timeout", "not true/false"),
    (with_changes(chart={"max_images": False}), "chart.max_images", "not true/false"),
    (target_with(referrers=1), "targets.0.referrers", "expected true or false"),
    (with_changes(registries={"r.example": {"plain_http": 0}}), "registries.r.example.plain_http", "true or false"),
    # an empty path is the current directory
    (with_changes(output_dir=""), "output_dir", "empty path"),
    (with_changes(state_dir=" "), "state_dir", "empty path"),
    (with_changes(spool={"dir": ""}), "spool.dir", "empty path"),
    (with_changes(lock_dir=""), "lock_dir", "empty path"),
    (with_changes(docker_config=""), "docker_config", "empty path"),
    (with_changes(registries={"r.example": {"password_file": ""}}), "registries.r.example.password_file", "empty"),
    (with_changes(webhook={"secret_file": ""}), "webhook.secret_file", "empty path"),
    (with_changes(service={"api_token_file": ""}), "service.api_token_file", "empty path"),
    (with_changes(signatures={"trusted_root": ""}), "signatures.trusted_root", "empty path"),
    (with_changes(registries={"r.example": {"username": " ", "password": "x"}}), "r.example.username", "empty"),
    (with_changes(registries={"r.example": {"username": "u", "password": ""}}), "r.example.password", "empty"),
    # namespaces ACR refuses
    (target_with(namespace="demo-"), "targets.0.namespace", "'demo-'"),
    (target_with(namespace="-demo"), "targets.0.namespace", "'-demo'"),
    (target_with(namespace="Demo"), "targets.0.namespace", "'Demo'"),
    (target_with(namespace="d"), "targets.0", "2-30 lower-case letters"),
    (target_with(namespace="a" * 31), "targets.0", "2-30 lower-case letters"),
    (target_with(namespace="de.mo"), "targets.0", "2-30 lower-case letters"),  # no '.' on Personal Edition
    (target_with(registry=ACR_ENTERPRISE, namespace="x/deeper"), "targets.0", "2-120 lower-case"),
    (target_with(registry=ACR_ENTERPRISE, namespace="a" * 121), "targets.0", "2-120 lower-case"),
    (target_with(registry="127.0.0.1:5000", namespace="demo_"), "targets.0.namespace", "'demo_'"),
    # names Helm and Kubernetes refuse, found before any image is copied
    (with_changes(values={"release": "Hami"}), "values.release", "not a Helm release name"),
    (with_changes(values={"release": "hami_2"}), "values.release", "not a Helm release name"),
    (with_changes(values={"release": "h" * 54}), "values.release", "at most 53 characters"),
    (with_changes(values={"kube_namespace": "kube.system"}), "values.kube_namespace", "not a Kubernetes namespace"),
    (with_changes(values={"kube_namespace": "n" * 64}), "values.kube_namespace", "at most 63 characters"),
    (chart_install(release="webui-"), "charts.0.release", "not a Helm release name"),
    (chart_install(namespace="Hami"), "charts.0.namespace", "not a Kubernetes namespace"),
    (chart_install(name="hami_webui"), "charts.0", "defaults to the chart's name 'hami_webui'"),
    (target_with(pull_secret="acr_pull"), "targets.0.pull_secret", "not a Kubernetes object name"),
    # free-form values that a values file cannot hold as given
    (with_changes(values={"extra": {"a": float("nan")}}), "values.extra", "not a finite number"),
    (chart_install(values={"a": {"b": b"\x00\x01"}}), "charts.0.values", "bytes value"),
    (with_changes(discovery={"versions": ">=" + "1" * 100_000 + ".0.0"}), "discovery.versions", "characters cut"),
    (with_changes(schedule="1," * 200 + "2 * * * *"), "schedule", "longer than 256 characters"),
]


@pytest.mark.parametrize(("data", "key", "detail"), ODD_VALUES, ids=[f"{m[1]}:{m[2]}" for m in ODD_VALUES])
def test_odd_values_are_refused_at_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, object], key: str, detail: str
) -> None:
    path = tmp_path / "mirror.yaml"
    path.write_text(yaml.dump(data))  # yaml.dump: the binary value is written as !!binary
    assert main(["sync", "v2.10.0", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert key in err and detail in err, err
    assert "Traceback" not in err and all(len(line) < 500 for line in err.splitlines()), err


@pytest.mark.parametrize(
    ("target", "namespace"),
    [
        (ACR_PERSONAL, "ab"),
        (ACR_PERSONAL, "a" * 30),
        (ACR_PERSONAL, "my_name-space9"),
        (ACR_ENTERPRISE, "my.team"),
        (ACR_ENTERPRISE, "team/sub/deeper"),
        ("127.0.0.1:5000", "x"),  # not ACR: the OCI spec's path components
        ("harbor.example.com", "a.b/c__d"),
    ],
)
def test_namespaces_acr_takes_still_load(tmp_path: Path, target: str, namespace: str) -> None:
    data = with_changes(targets=[{"name": "t", "registry": target, "namespace": namespace}])
    assert load_settings(config_file(tmp_path, data)).targets[0].namespace == namespace


def test_helm_and_kubernetes_names_that_are_valid_still_load(tmp_path: Path) -> None:
    data = chart_install(name="hami-webui", release="r" * 53, namespace="n" * 63)
    data["values"] = {"release": "my-hami2", "kube_namespace": "gpu-system", "extra": {"a": [1, 2.5, None, "x"]}}
    settings = load_settings(config_file(tmp_path, data))
    assert settings.charts[0].release == "r" * 53 and settings.values.release == "my-hami2"


def test_numbers_and_booleans_from_the_environment_still_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIRROR_TRANSFER__BLOB_CONCURRENCY", "8")
    monkeypatch.setenv("MIRROR_TRANSFER__READ_TIMEOUT", "90.5")
    monkeypatch.setenv("MIRROR_CHART__PUBLISH", "false")
    monkeypatch.setenv("MIRROR_CHART__REPOSITORY", "https://charts.example/hami")
    settings = load_settings(config_file(tmp_path, VALID))
    assert settings.transfer.blob_concurrency == 8 and settings.transfer.read_timeout == 90.5
    assert settings.chart is not None and settings.chart.publish is False


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("MIRROR_TRANSFER__READ_TIMEOUT", "inf", "transfer.read_timeout (set by the environment variable"),
        ("MIRROR_RETRY__MAX_ELAPSED", "nan", "retry.max_elapsed (set by the environment variable"),
        (
            "MIRROR_OUTPUT_DIR",
            "",
            "output_dir (set by the environment variable MIRROR_OUTPUT_DIR): an empty",
        ),
        ("MIRROR_BOGUS", "1", "MIRROR_BOGUS: not a setting"),
        ("MIRROR_TRANSFERS__X", "1", "MIRROR_TRANSFERS__X: not a setting; did you mean MIRROR_TRANSFER?"),
        ("MIRROR_OUTPUTDIR", "/x", "MIRROR_OUTPUTDIR: not a setting; did you mean MIRROR_OUTPUT_DIR?"),
        ("MIRROR_TRANSFER_BLOB_CONCURRENCY", "8", "did you mean MIRROR_TRANSFER__BLOB_CONCURRENCY?"),
        ("MIRROR_WEBHOOK_SECRET", "0123456789abcdef0", "did you mean MIRROR_WEBHOOK__SECRET?"),
        ("MIRROR_REGISTRIES__r.example__PASWORD", "pw", "did you mean MIRROR_REGISTRIES__r.example__PASSWORD?"),
        ("MIRROR_TARGETS__0__NAMESPACE", "ns2", "MIRROR_TARGETS is set whole"),
        ("MIRROR_VALUES__EXTRA", "[" * 5000 + "]" * 5000, "MIRROR_VALUES__EXTRA: its JSON value is nested deeper"),
        ("MIRROR_VALUES__EXTRA" + "__A" * 3000, "1", "nested deeper than 64 keys"),
    ],
    ids=lambda v: v[:40] if isinstance(v, str) else str(v),
)
def test_a_variable_that_sets_nothing_or_nothing_usable_is_named(
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
    assert named in err, err
    assert "Traceback" not in err and all(len(line) < 500 for line in err.splitlines()), err


def test_variables_that_are_not_settings_but_expected_are_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = config_file(
        tmp_path,
        with_changes(registries={"r.example": {"username": "u", "password_env": "MIRROR_ACR_PASSWORD"}}),
    )
    monkeypatch.setenv("MIRROR_CONFIG", str(path))
    monkeypatch.setenv("MIRROR_ACR_PASSWORD", "named by password_env")
    # what Kubernetes sets for deploy/base/service.yaml's Service `mirror` (enableServiceLinks)
    for name, value in {
        "MIRROR_SERVICE_HOST": "10.0.0.7",
        "MIRROR_SERVICE_PORT": "80",
        "MIRROR_SERVICE_PORT_HTTP": "80",
        "MIRROR_PORT": "tcp://10.0.0.7:80",
        "MIRROR_PORT_80_TCP": "tcp://10.0.0.7:80",
        "MIRROR_PORT_80_TCP_PROTO": "tcp",
        "MIRROR_PORT_80_TCP_PORT": "80",
        "MIRROR_PORT_80_TCP_ADDR": "10.0.0.7",
    }.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.registry("r.example").password_value() == "named by password_env"


def test_an_empty_mirror_config_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIRROR_CONFIG", "")
    with pytest.raises(ConfigError, match="MIRROR_CONFIG is set but empty"):
        load_settings()


# -- hostile shapes in the file: one line naming the file, never a traceback ----------------------------------


BOMB = "\n".join(
    [
        "lol0: &l0 [a, a, a, a, a, a, a, a, a]",
        *(f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)),
    ]
)


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        (b"targets: [\xff\xfe]\n", "is not UTF-8 text (byte 0xff at offset 10)"),
        ("values: {extra: {a: " + "[" * 5000 + "]" * 5000 + "}}", "nested deeper than 64 levels"),
        ("values: {extra: " + "{a: " * 5000 + "1" + "}" * 5001, "nested deeper than 64 levels"),
        (BOMB, "more than 100000 values, aliases expanded"),
        ("a: &a [1, *a]", "alias *a is used inside its own anchor"),
        ("# " + "x" * (1024 * 1024), "larger than 1024 KiB"),
        ("_env_prefix: ''\n_cli_parse_args: true\n", "'_env_prefix': unknown key"),
        ("1: one\n", "1: unknown key"),
        ("targets: [unclosed", "line 1, column 19"),
        (
            "registries:\n  a.example: {plain_http: true}\nsource: {registry: b.example}\nregistries: {}\n",
            "line 4, column 1: key 'registries' appears twice in one mapping (first on line 1)",
        ),
        ("values: {extra: {a: 1, b: 2, a: 3}}", "key 'a' appears twice in one mapping"),
    ],
    ids=[
        "not-utf8",
        "deep-lists",
        "deep-maps",
        "alias-bomb",
        "self-alias",
        "too-large",
        "init-keywords",
        "int-key",
        "bad",
        "key-twice",
        "nested-key-twice",
    ],
)
def test_a_hostile_file_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | bytes, detail: str
) -> None:
    path = tmp_path / "mirror.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert main(["sync", "v2.10.0", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and detail in err, err
    assert "Traceback" not in err and all(len(line) < 500 for line in err.splitlines()), err


def test_aliases_within_the_bound_still_load(tmp_path: Path) -> None:
    shared = "registries:\n  r.example: &plain {plain_http: true}\n  s.example: *plain\n"
    settings = load_settings(config_file(tmp_path, yaml.safe_dump(VALID) + shared))
    assert settings.registry("s.example").plain_http is True


def test_a_merged_mapping_merged_again_deeper_keeps_its_own_overrides(tmp_path: Path) -> None:
    """A shallower merge of an anchored mapping that itself merges and overrides rewrites its keys in place before
    it is built: its override must not read as a key written twice."""
    extra = (
        "values:\n  extra:\n    defaults: &d {pullPolicy: IfNotPresent, tag: x}\n"
        "    scheduler:\n      image: &s {<<: *d, tag: y}\n    devicePlugin: {<<: *s}\n"
    )
    settings = load_settings(config_file(tmp_path, yaml.safe_dump(VALID) + extra))
    assert settings.values.extra["scheduler"]["image"]["tag"] == "y"
    assert settings.values.extra["devicePlugin"] == {"pullPolicy": "IfNotPresent", "tag": "y", "nvidiaDriverRoot": "/"}


def test_a_merged_mapping_may_repeat_a_key_its_own_keys_override(tmp_path: Path) -> None:
    shared = "registries:\n  r.example: &base {plain_http: true, http2: true}\n  s.example: {<<: *base, http2: false}\n"
    settings = load_settings(config_file(tmp_path, yaml.safe_dump(VALID) + shared))
    assert settings.registry("s.example").plain_http is True and settings.registry("s.example").http2 is False


# -- files the config names: readable, UTF-8, not empty, checked before any request ---------------------------


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        (b"\xff\xfepassword", "is not UTF-8 text"),
        (b"", "is empty"),
        (b" \n\t\n", "is empty"),
        (b"x" * (64 * 1024 + 1), "is larger than 64 KiB"),
    ],
    ids=["not-utf8", "empty", "whitespace", "too-large"],
)
def test_a_password_file_that_cannot_be_sent_is_refused_at_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, detail: str
) -> None:
    secret = tmp_path / "password"
    secret.write_bytes(content)
    data = with_changes(registries={"r.example": {"username": "u", "password_file": str(secret)}})
    assert main(["sync", "v2.10.0", "--config", str(config_file(tmp_path, data))]) == 2
    err = capsys.readouterr().err
    assert f"registries.r.example.password_file: {secret} {detail}" in err, err


@pytest.mark.parametrize(
    ("key", "content", "detail"),
    [
        ("webhook.secret_file", b"\xff" * 32, "is not UTF-8 text"),
        ("service.api_token_file", b"   \n", "is empty"),
        ("docker_config", b'{"auths": ', "is not JSON"),
        ("docker_config", b"[]", "is not a JSON object"),
        ("docker_config", b"\xff{}", "is not UTF-8 text"),
        ("signatures.trusted_root", b"[" * 100_000, "is not JSON (RecursionError)"),
    ],
)
def test_other_files_the_config_names_are_checked_at_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, content: bytes, detail: str
) -> None:
    named = tmp_path / "named-file"
    named.write_bytes(content)
    section, _, field = key.rpartition(".")
    data = with_changes(**({section: {field: str(named)}} if section else {field: str(named)}))
    assert main(["sync", "v2.10.0", "--config", str(config_file(tmp_path, data))]) == 2
    err = capsys.readouterr().err
    assert f"{key}: {named} {detail}" in err, err


def test_an_unreadable_password_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "a-directory"
    directory.mkdir()
    data = with_changes(registries={"r.example": {"username": "u", "password_file": str(directory)}})
    assert main(["sync", "v2.10.0", "--config", str(config_file(tmp_path, data))]) == 2
    assert f"registries.r.example.password_file: {directory} is not a readable file" in capsys.readouterr().err


def test_password_env_that_is_set_but_blank_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ACR_PASSWORD", "  ")
    data = with_changes(registries={"r.example": {"username": "u", "password_env": "ACR_PASSWORD"}})
    assert main(["sync", "v2.10.0", "--config", str(config_file(tmp_path, data))]) == 2
    assert "registries.r.example.password_env: the variable ACR_PASSWORD is empty" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"password": "a-registry-password"}, "password is given without a username"),
        ({"password_env": "ACR_PASSWORD"}, "password_env is given without a username"),
        ({"password_file": "FILE"}, "password_file is given without a username"),
        ({"username": "robot"}, "username is given without a password"),
    ],
    ids=["password", "password_env", "password_file", "username"],
)
def test_half_a_registry_login_is_refused_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: dict[str, str], message: str
) -> None:
    """The config's login is sent only as a pair: half of one would be ignored, the run going on with a docker config
    or anonymously and its refusal naming neither."""
    monkeypatch.setenv("ACR_PASSWORD", "a-registry-password")
    secret = tmp_path / "password"
    secret.write_text("a-registry-password\n")
    entry = {key: str(secret) if value == "FILE" else value for key, value in given.items()}
    path = config_file(tmp_path, with_changes(registries={"registry.cn-hangzhou.aliyuncs.com": entry}))
    with pytest.raises(ConfigError) as refused:
        load_settings(path)
    assert f"registries.registry.cn-hangzhou.aliyuncs.com: {message}" in str(refused.value)
    assert "a-registry-password" not in str(refused.value)


@pytest.mark.parametrize("ending", ["\n", "\r\n", " \n", "\t"])
def test_a_password_from_a_variable_or_a_file_is_sent_as_the_load_check_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    """A Secret made from a file keeps the file's newline: the check at load does not count it, nor is it sent,
    whether the password comes through a variable or a file."""
    monkeypatch.setenv("ACR_PASSWORD", "s3cret-password" + ending)
    secret = tmp_path / "password"
    secret.write_bytes(("s3cret-password" + ending).encode())
    logins = {
        "env.example": {"username": "u", "password_env": "ACR_PASSWORD"},
        "file.example": {"username": "u", "password_file": str(secret)},
    }
    settings = load_settings(config_file(tmp_path, with_changes(registries=logins)))
    assert settings.registry("env.example").password_value() == "s3cret-password"
    assert settings.registry("file.example").password_value() == "s3cret-password"


# -- Helm keys keep their case; inline secrets lose their newline ----------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "json_form"),
    [
        (
            "MIRROR_VALUES__EXTRA__devicePlugin__nvidiaDriverRoot",
            "/run/nvidia/driver",
            """MIRROR_VALUES__EXTRA='{"devicePlugin":{"nvidiaDriverRoot":"<value>"}}'""",
        ),
        (
            "MIRROR_VALUES__EXTRA__devicePlugin",
            "plugin-value-7",
            """MIRROR_VALUES__EXTRA='{"devicePlugin":"<value>"}'""",
        ),
        (
            "MIRROR_values__extra__grafana__adminPassword",
            "s3cret-admin-pw",
            """'{"grafana":{"adminPassword":"<value>"}}'""",
        ),
        (
            "MIRROR_VALUES__EXTRA__DEVICEPLUGIN",
            "plugin-value-8",
            """'{"DEVICEPLUGIN":"<value>"}' (each key as the chart spells it: devicePlugin, not DEVICEPLUGIN)""",
        ),
    ],
    ids=["two-keys-down", "one-key-down", "a-password", "upper-case"],
)
def test_a_variable_below_free_form_helm_values_is_refused_with_the_json_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, json_form: str
) -> None:
    """pydantic-settings reads variable names without case: devicePlugin.nvidiaDriverRoot arrived as
    deviceplugin.nvidiadriverroot, a key HAMi never reads. The whole-JSON form keeps the case."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as refused:
        load_settings(config_file(tmp_path, VALID))
    message = str(refused.value)
    assert f"{variable}: a variable's name loses the case of the Helm keys below MIRROR_VALUES__EXTRA" in message
    assert json_form in message, message
    assert value not in message  # a Helm value may be a password


def test_free_form_helm_values_set_whole_keep_their_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIRROR_VALUES__EXTRA", '{"devicePlugin":{"nvidiaDriverRoot":"/run/nvidia/driver"}}')
    settings = load_settings(config_file(tmp_path, with_changes(values={"extra": {"scheduler": {"leaderElect": 1}}})))
    assert settings.values.extra == {
        "scheduler": {"leaderElect": 1},
        "devicePlugin": {"nvidiaDriverRoot": "/run/nvidia/driver"},
    }


@pytest.mark.parametrize("ending", ["\n", "\r\n", " \n"])
def test_an_inline_secret_from_a_variable_is_used_without_its_newline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    """A Kubernetes Secret made from a file keeps its newline: as a file it was stripped, set through a variable
    it was not, and every webhook was refused and the job API locked out."""
    from mirror.service.hooks import check_bearer, check_signature

    monkeypatch.setenv("MIRROR_SERVICE__API_TOKEN", "job-api-token-0123456789" + ending)
    monkeypatch.setenv("MIRROR_WEBHOOK__SECRET", "webhook-shared-secret-0123" + ending)
    monkeypatch.setenv("MIRROR_WEBHOOK__DOCKERHUB_TOKEN", "dockerhub-token-0123456789" + ending)
    data = with_changes(registries={"r.example": {"username": "u", "password": "a-registry-password" + ending}})
    settings = load_settings(config_file(tmp_path, data))
    body = b'{"version":"v2.10.0"}'
    signature = "sha256=" + hmac.new(b"webhook-shared-secret-0123", body, hashlib.sha256).hexdigest()
    check_signature(settings.webhook.secret_value(), body, signature)
    check_bearer(settings.service.api_token_value(), "Bearer job-api-token-0123456789")
    assert settings.webhook.dockerhub_token_value() == b"dockerhub-token-0123456789"
    assert settings.registry("r.example").password_value() == "a-registry-password"


def test_an_inline_secret_is_measured_without_its_newline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIRROR_WEBHOOK__SECRET", "fifteen-bytes!!\n")  # 16 bytes with the newline, 15 sent
    with pytest.raises(ConfigError, match=r"webhook\.secret .*must be at least 16 bytes") as refused:
        load_settings(config_file(tmp_path, VALID))
    assert "fifteen" not in str(refused.value)


def test_values_set_for_something_else_keep_the_ack_driver_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ACK's driver root is a default of values.extra: setting extra for anything else must not drop it (the file
    was written without it, the proof passed, and HAMi's device plugin looked for the driver where ACK has none)."""
    settings = load_settings(config_file(tmp_path, with_changes(values={"extra": {"scheduler": {"leaderElect": 1}}})))
    assert settings.values.extra == {"scheduler": {"leaderElect": 1}, "devicePlugin": {"nvidiaDriverRoot": "/"}}
    monkeypatch.setenv("MIRROR_VALUES__EXTRA", '{"devicePlugin":{"resources":{}}}')
    settings = load_settings(config_file(tmp_path, VALID))
    assert settings.values.extra["devicePlugin"] == {"nvidiaDriverRoot": "/", "resources": {}}
    chart_default = with_changes(values={"extra": {"devicePlugin": {"nvidiaDriverRoot": None}}})
    monkeypatch.delenv("MIRROR_VALUES__EXTRA")
    assert load_settings(config_file(tmp_path, chart_default)).values.extra == {
        "devicePlugin": {"nvidiaDriverRoot": None}
    }


@pytest.mark.parametrize(
    "values",
    [
        "values:\n  extra:\n    global: {imageRegistry: registry-vpc.cn-beijing.aliyuncs.com}\n",
        "chart: {repository: 'https://charts.example/hami'}\n"
        "charts:\n  - repository: https://charts.example/webui\n    name: hami-webui\n"
        "    values: {global: {imageRegistry: registry-vpc.cn-beijing.aliyuncs.com}}\n",
    ],
)
def test_values_that_set_global_image_registry_at_acr_are_refused(tmp_path: Path, values: str) -> None:
    """An ACR host there (old ACK guides set it) made every chart image read as already at home: nothing copied,
    the proof passed, and pods pulled paths never pushed. Clearing it, or naming where the images come from,
    stays allowed (the values written clear it)."""
    with pytest.raises(
        ConfigError, match=r"global\.imageRegistry 'registry-vpc.cn-beijing.aliyuncs.com' is a registry"
    ):
        load_settings(config_file(tmp_path, yaml.safe_dump(VALID) + values))
    for allowed in ("''", "quay-mirror.example"):  # clearing it; naming where the images come from
        load_settings(
            config_file(
                tmp_path, yaml.safe_dump(VALID) + values.replace("registry-vpc.cn-beijing.aliyuncs.com", allowed)
            )
        )


def test_two_targets_at_one_place_with_different_copies_are_refused(tmp_path: Path) -> None:
    """Same registry and namespace, one copying linux/amd64 only: each run moved the tags to its own index and the
    report called both verified. The same copy twice (values for two VPCs, say) stays allowed."""
    hz = {"name": "hz", "registry": "registry.cn-hangzhou.aliyuncs.com", "namespace": "ns"}
    amd64 = {**hz, "name": "hz-amd64", "platforms": ["linux/amd64"]}
    with pytest.raises(ConfigError, match=r"hz and hz-amd64 push to registry.cn-hangzhou.aliyuncs.com/ns with a"):
        load_settings(config_file(tmp_path, {**VALID, "targets": [hz, amd64]}))
    again = {**hz, "name": "hz-again", "vpc_registry": "registry-vpc.cn-shanghai.aliyuncs.com"}
    load_settings(config_file(tmp_path, {**VALID, "targets": [hz, again]}))
    both = {**hz, "platforms": ["linux/amd64", "linux/arm64"]}
    reversed_ = {**both, "name": "hz-reversed", "platforms": ["linux/arm64", "linux/amd64"]}  # one copy
    load_settings(config_file(tmp_path, {**VALID, "targets": [both, reversed_]}))
