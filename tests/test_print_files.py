"""`mirror sync --print-files`: a CronJob's pod, and the files it wrote, are gone when the run ends; its log
stays. The values and RBAC files are printed whole, and the README's one-liner takes each back out of what
`kubectl logs` shows (stdout and stderr together) byte for byte."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import push_multiarch
from tests.support import with_client, write_config
from tests.test_sync import VERSION, seed_release

ROOT = Path(__file__).parents[1]


def extract(log: str, name: str, target: str = "t0") -> str:
    """The README's one-liner, as written there, for this target's folder and file."""
    found = re.search(r"awk '([^']+)' > hami-ack-values\.yaml", (ROOT / "README.md").read_text())
    assert found is not None, "the README's one-liner"
    program = found[1].replace("cn-hangzhou", target).replace("hami-ack-values.yaml", name)
    return subprocess.run(["awk", program], input=log, capture_output=True, text=True, check=True).stdout


def sync_printing(config: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mirror", "sync", *args, "--config", str(config), "--print-files"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # as `kubectl logs` shows a container's output
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    return done.stdout


def test_the_files_come_back_out_of_the_log_byte_for_byte(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target], output_dir=str(tmp_path / "out"))
    log = sync_printing(config, VERSION)
    written = tmp_path / "out" / "t0"
    for name in ("hami-ack-values.yaml", "hami-scheduler-dra-rbac.yaml"):
        assert f"==> {written / name} <==" in log
        assert extract(log, name) == (written / name).read_text()
        assert yaml.safe_load_all(extract(log, name))
    values = yaml.safe_load(extract(log, "hami-ack-values.yaml"))
    assert values["devicePlugin"]["image"]["repository"] == "mirrored/hami"


def test_a_discovery_runs_log_gives_the_newest_releases_file_alone(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """A discovery run prints each release's files too (`t0/<version>/...`): the one-liner takes the newest's."""
    seed_release(source)
    with_client(source, lambda c: push_multiarch(c, "projecthami/hami", "v2.9.0", seed=9))
    config = write_config(tmp_path / "mirror.yaml", source, [target], discovery={"versions": ">=2.9.0", "newest": 2})
    log = sync_printing(config, "--discover")
    assert log.count("hami-ack-values.yaml <==") == 2  # v2.9.0's in t0/v2.9.0/, the newest's in t0/
    taken = extract(log, "hami-ack-values.yaml")
    assert taken == (tmp_path / "out" / "t0" / "hami-ack-values.yaml").read_text()
    assert taken.startswith(f"# HAMi {VERSION} ") and taken.count("# HAMi ") == 1


def test_print_files_and_json_are_one_or_the_other(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mirror", "sync", VERSION, "--json", "--print-files"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "not allowed with argument" in done.stderr
