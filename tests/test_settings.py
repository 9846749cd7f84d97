"""Configuration: YAML, environment overrides, and clear errors before any network traffic."""

from __future__ import annotations

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
