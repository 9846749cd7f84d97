"""First contact: `mirror --help` and each command's help are written for users, and answer without loading
the settings or HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import mirror.cli
from mirror.cli import main

HEAVY_MODULES = ("mirror.settings", "pydantic", "pydantic_settings", "httpx", "mirror.registry", "mirror.engine")


def help_of(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*args, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_mirror_help_names_the_commands_examples_config_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of([], capsys)
    assert "sync" in text and "serve" in text
    for example in ("mirror sync v2.10.0", "mirror sync --discover", "mirror serve --port 8080"):
        assert f"  {example}\n" in text
    assert "mirror sync v2.10.0 --dry-run --target cn-hangzhou" in text
    assert "$MIRROR_CONFIG" in text and "config/mirror.yaml" in text
    for code in ("0", "1", "2", "143"):
        assert f"\n  {code} " in text
    assert mirror.cli.__doc__ is not None
    assert "thin face" not in text and mirror.cli.__doc__.splitlines()[0] not in text


@pytest.mark.parametrize(
    ("command", "example"),
    [("sync", "mirror sync v2.10.0 --dry-run --target cn-hangzhou"), ("serve", "mirror serve --port 8080")],
)
def test_each_command_has_its_own_help(command: str, example: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of([command], capsys)
    assert text.startswith(f"usage: mirror {command} ")
    assert example in text and "--config FILE" in text and "config/mirror.yaml" in text and "exit codes:" in text


def test_help_fits_a_terminal(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # what argparse wraps the options to
    for command in ([], ["sync"], ["serve"]):
        wide = [line for line in help_of(command, capsys).splitlines() if len(line) > 80]
        assert wide == [], command


def test_help_loads_neither_settings_nor_http() -> None:
    shown = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mirror", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "mirror sync --discover" in shown.stdout
    timed = [line for line in shown.stderr.splitlines() if line.startswith("import time:")]
    imported = {line.rsplit("|", 1)[-1].strip() for line in timed}
    assert "mirror.cli" in imported  # the measure sees our own modules
    assert not imported & set(HEAVY_MODULES)


def test_the_command_leaves_quickly_yet_runs_exit_handlers_and_flushes(tmp_path: Path) -> None:
    """`mirror` skips the interpreter's teardown: what a caller relies on still happens (exit handlers, every
    line written to a pipe, the exit code)."""
    marker = tmp_path / "handlers-ran"
    script = (
        "import atexit, pathlib, sys\n"
        f"atexit.register(pathlib.Path({str(marker)!r}).write_text, 'yes')\n"
        "for _ in range(2000): print('x' * 99)\n"  # more than a pipe holds, the last lines still in the buffer
        "from mirror.cli import entry\n"
        f"entry(['sync', 'v2.10.0', '--config', {str(tmp_path / 'absent.yaml')!r}])\n"
    )
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=buffered)
    assert done.returncode == 2
    assert done.stdout == ("x" * 99 + "\n") * 2000
    assert f"config file {tmp_path / 'absent.yaml'} not found" in done.stderr
    assert marker.read_text() == "yes"


def test_the_collector_is_paused_for_the_imports_only() -> None:
    """`entry` loads the command's modules with the garbage collector off: by the time the command runs it is on
    again (a long copy makes garbage), with what the imports made frozen out of its way."""
    script = (
        "import gc\n"
        "import mirror.commands.sync as sync\n"
        "sync.run = lambda args: print(gc.isenabled(), gc.get_freeze_count() > 1000) or 0\n"
        "from mirror.cli import entry\n"
        "print(gc.isenabled())\n"
        "entry(['sync', 'v2.10.0'])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["sync"], "mirror sync: error: name a release version (e.g. v2.10.0), or --discover"),
        (["sync", "v2.10.0", "--discover"], "mirror sync: error: give release versions or --discover, not both"),
    ],
    ids=["no-version", "both"],
)
def test_a_mistyped_command_line_says_what_to_write_under_its_commands_usage(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "usage: mirror sync" in err, err


def test_an_option_is_written_whole(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["sync", "v2.10.0", "--dry"])  # argparse took it for --dry-run; `--fo` would have been --force
    assert exited.value.code == 2 and "unrecognized arguments: --dry" in capsys.readouterr().err


def test_config_may_come_before_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere.yaml"
    for args in (["--config", str(missing), "sync", "v2.10.0"], ["sync", "v2.10.0", "--config", str(missing)]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert str(missing) in err and "not found" in err, err
