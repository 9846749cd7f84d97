"""What a new user reads when the config is wrong: plain words naming the key, not pydantic's (an empty file, a
section written as a string, a version YAML reads as a number, a misspelt MIRROR_CONFIG), and one warning when
state_dir cannot be written."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.engine.statecache import LastDigests, RegistryNotes
from tests.support import write_config
from tests.test_sync import VERSION, seed_release

VALID = {
    "targets": [{"name": "hz", "registry": "registry.cn-hangzhou.aliyuncs.com", "namespace": "ns"}],
    "images": [{"name": "hami", "source": "projecthami/hami"}],
}
PYDANTIC_WORDS = ("Value error", "Input should be", "Extra inputs", "Settings", "(top level)", "Field required")


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *args: str) -> list[str]:
    """`mirror sync v2.10.0 --config FILE` with `text` as the file: exit 2, and stderr's lines."""
    path = tmp_path / "mirror.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["sync", "v2.10.0", "--config", str(path), *args]) == 2
    return capsys.readouterr().err.splitlines()


def with_changes(**changes: object) -> str:
    data: dict[str, object] = yaml.safe_load(yaml.safe_dump(VALID))
    data.update(changes)
    return yaml.safe_dump(data)


# -- 1. an empty file --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "\n\n", "# only\n# comments\n", "{}\n"], ids=["empty", "blank", "comments", "{}"])
def test_an_empty_config_file_says_so_and_what_it_must_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    (line,) = refused(tmp_path, capsys, text)
    assert line.startswith(f"mirror: config file {tmp_path / 'mirror.yaml'} holds no settings"), line
    assert "empty" in line and "source:" in line and "targets:" in line and "README.md" in line, line
    assert "Field required" not in line


def test_an_empty_file_with_the_settings_in_variables_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mirror.settings import load_settings

    (tmp_path / "mirror.yaml").write_text("# all of it from the environment\n")
    monkeypatch.setenv("MIRROR_TARGETS", '[{"name": "hz", "registry": "r.example", "namespace": "ns"}]')
    monkeypatch.setenv("MIRROR_IMAGES", '[{"name": "hami", "source": "projecthami/hami"}]')
    assert load_settings(tmp_path / "mirror.yaml").targets[0].name == "hz"


# -- 2. plain words, naming the key ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (with_changes(source="docker.io"), "  source: expected a mapping (registry: ...), got a string"),
        (with_changes(source=None), "  source: expected a mapping (registry: ...), got nothing (an empty value)"),
        (with_changes(targets={"hz": 1}), "  targets: expected a list, got a mapping"),
        (with_changes(registries=["r.example"]), "  registries: expected a mapping, got a list"),
        (with_changes(images=[]), "  images: name at least one image, or configure a chart: to take them from"),
        (with_changes(outptu_dir="out"), "  outptu_dir: unknown key; did you mean output_dir?"),
        (with_changes(typo_key=1), "  typo_key: unknown key"),
        (with_changes(_env_prefix=""), "  '_env_prefix': unknown key"),
        (
            with_changes(targets=[{"name": "hz", "registry": "r.example", "namespace": "n", "platforms": ["x"]}]),
            "  targets.0.platforms.0: 'x' is not a platform like linux/amd64",
        ),
    ],
    ids=["string", "null", "list", "mapping", "top-level", "did-you-mean", "unknown", "settings-keyword", "value"],
)
def test_a_mistake_is_said_in_plain_words_naming_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, said: str
) -> None:
    lines = refused(tmp_path, capsys, text)
    assert any(line.startswith(said) for line in lines), lines
    assert not any(word in line for line in lines for word in PYDANTIC_WORDS), lines


# -- 3. a string YAML reads as a number --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "key"),
    [
        ("chart: {repository: 'https://charts.example/hami', name: hami, kube_version: 1.32}", "chart.kube_version"),
        ("chart: {repository: 'https://charts.example/hami', name: hami, kube_version: 1.30}", "chart.kube_version"),
        ("discovery: {versions: 2}", "discovery.versions"),
        ("schedule: 0755", "schedule"),
    ],
    ids=["float", "trailing-zero", "int", "octal"],
)
def test_a_string_given_as_a_number_says_to_quote_it_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], written: str, key: str
) -> None:
    value = written.rpartition(": ")[2].rstrip("}")
    lines = refused(tmp_path, capsys, yaml.safe_dump(VALID) + written + "\n")
    assert f'  {key}: {value} is read as a number: quote it ("{value}")' in lines, lines


def test_a_secret_given_as_a_number_is_not_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registries = {"r.example": {"username": "mirror", "password": 918273645}}
    lines = refused(tmp_path, capsys, with_changes(registries=registries))
    assert "  registries.r.example.password: the value is read as a number: quote it" in lines, lines
    assert not any("918273645" in line for line in lines), lines


def test_a_number_from_a_variable_is_named_with_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRROR_CHART", '{"repository": "https://x.example/c", "name": "hami", "kube_version": 1.32}')
    lines = refused(tmp_path, capsys, yaml.safe_dump(VALID))
    said = "  chart.kube_version (set by the environment variable MIRROR_CHART): 1.32 is read as a number: quote it"
    assert any(line.startswith(said) for line in lines), lines


# -- 4. a misspelt MIRROR_CONFIG ---------------------------------------------------------------------------


def test_a_misspelt_mirror_config_is_named_with_the_variable_meant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRROR_CONIFG", str(tmp_path / "mine.yaml"))
    lines = refused(tmp_path, capsys, yaml.safe_dump(VALID))
    assert any(line.startswith("  MIRROR_CONIFG: not a setting; did you mean MIRROR_CONFIG (") for line in lines)


@pytest.mark.parametrize("stray", ["MIRROR_CONIFG", "MIRROR_CONF", "MIRROR_CONFIG_FILE"])
def test_a_missing_default_config_names_a_near_miss_of_mirror_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, stray: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(stray, str(tmp_path / "mine.yaml"))
    assert main(["sync", "v2.10.0"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"mirror: config file config/mirror.yaml not found ({stray} is set: did you mean MIRROR_CONFIG?)"


def test_a_missing_default_config_without_a_near_miss_says_only_that(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MIRROR_CHARTT", "1")  # near a setting, not MIRROR_CONFIG: said once the file is read
    assert main(["sync", "v2.10.0"]) == 2
    assert capsys.readouterr().err.splitlines() == ["mirror: config file config/mirror.yaml not found"]


# -- 5. a state_dir that cannot be written -----------------------------------------------------------------


def test_a_state_dir_that_cannot_be_written_is_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    state = a_file / "state"
    notes, digests = RegistryNotes(state), LastDigests(state)
    notes.note_referrers_api("r.example", answered=False)
    digests.put("r.example", "projecthami/hami", "v2.10.0", "sha256:" + "0" * 64)
    with caplog.at_level(logging.DEBUG, logger="mirror"):
        notes.save()
        digests.save()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"state_dir {state}: cannot write in it (Not a directory)" in warning
    assert "a re-run asks the registries again" in warning


def test_a_read_only_state_dir_warns_once_and_the_run_succeeds(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """state_dir on a file system mounted read-only (in a mount namespace of the run's own), the locks elsewhere."""
    seed_release(source)
    state = tmp_path / "state"
    state.mkdir()
    config = write_config(
        tmp_path / "mirror.yaml", source, [target], state_dir=str(state), lock_dir=str(tmp_path / "locks")
    )
    mount_then_run = 'mount -t tmpfs -o size=1m,ro tmpfs "$0" && exec "$@"'
    command = [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config)]
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", mount_then_run, str(state), *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line and "state_dir" in line]
    assert len(warnings) == 1, done.stderr
    assert f"state_dir {state}: cannot write in it (Read-only file system)" in warnings[0]
    assert "a re-run asks the registries again" in warnings[0]
