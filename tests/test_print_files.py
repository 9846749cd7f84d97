"""`mirror sync --print-files`: a CronJob's pod, and the files it wrote, are gone when the run ends; its log
stays. The values and RBAC files are printed whole, and the README's one-liner takes each back out of what
`kubectl logs` shows (stdout and stderr together) byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from mirror.demo.localregistry import LocalRegistry
from tests.support import write_config
from tests.test_sync import VERSION, seed_release

ROOT = Path(__file__).parents[1]


def extract(log: str, name: str) -> str:
    """The README's one-liner, run as written there."""
    program = f"/^<== /{{f=0}} f; /^==> .*\\/{name} <==$/{{f=1}}"
    return subprocess.run(["awk", program], input=log, capture_output=True, text=True, check=True).stdout


def test_the_files_come_back_out_of_the_log_byte_for_byte(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target], output_dir=str(tmp_path / "out"))
    done = subprocess.run(
        [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config), "--print-files"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # as `kubectl logs` shows a container's output
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    written = tmp_path / "out" / "t0"
    for name in ("hami-ack-values.yaml", "hami-scheduler-dra-rbac.yaml"):
        assert f"==> {written / name} <==" in done.stdout
        assert extract(done.stdout, name) == (written / name).read_text()
        assert yaml.safe_load_all(extract(done.stdout, name))
    values = yaml.safe_load(extract(done.stdout, "hami-ack-values.yaml"))
    assert values["devicePlugin"]["image"]["repository"] == "mirrored/hami"


def test_print_files_and_json_are_one_or_the_other(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mirror", "sync", VERSION, "--json", "--print-files"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "not allowed with argument" in done.stderr
