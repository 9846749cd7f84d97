"""The output: checked before the first request (a run never copies only to fail at the end), and each
delivery's files written all together or not at all, on real file systems that are read-only or full (a
tmpfs mounted in a private mount namespace)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mirror.demo.localregistry import LocalRegistry
from tests.support import run_bounded, write_config
from tests.test_sync import VERSION, seed_release


def _in_mount_namespace(mount: Path, options: str, command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`command` with a fresh tmpfs (`options`: size, ro) at `mount`, seen by this process alone."""
    mount.mkdir(parents=True, exist_ok=True)
    script = 'mount -t tmpfs -o "$0" tmpfs "$1" && shift && exec "$@"'
    return subprocess.run(
        ["unshare", "--mount", "sh", "-c", script, options, str(mount), *command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _marks(*registries: LocalRegistry) -> list[int]:
    return [len(registry.access_log()) for registry in registries]


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_an_output_dir_that_is_a_file_stops_the_run_before_any_request(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    (tmp_path / "out").write_text("not a directory")
    marks = _marks(source, target)
    done = run_bounded("sync", VERSION, "--config", str(config), cwd=tmp_path, seconds=60)
    assert done.returncode == 1
    assert "output_dir" in _one_line(done.stderr) and str(tmp_path / "out") in done.stderr
    assert _marks(source, target) == marks  # not one request


@pytest.mark.parametrize(("options", "reason"), [("size=16m,ro", "Read-only file system"), ("size=1m", "MB free")])
def test_an_output_dir_read_only_or_nearly_full_stops_the_run_before_any_request(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, options: str, reason: str
) -> None:
    seed_release(source)
    marks = _marks(source, target)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    command = [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config)]
    done = _in_mount_namespace(tmp_path / "out", options, command, tmp_path)
    assert done.returncode == 1, done.stderr
    assert reason in _one_line(done.stderr)
    assert _marks(source, target) == marks  # not one request


WRITE_TWO_FOLDERS = """
import sys
from pathlib import Path
from mirror.output import write_all
root = Path(sys.argv[1])
small, large = b"values: 1\\n", b"x" * (3 * 1024 * 1024)  # the tmpfs holds 2 MB
try:
    write_all({root / "t0" / "v2.10.0" / "values.yaml": small, root / "t0" / "v2.10.0" / "hami.tgz": large,
               root / "t0" / "values.yaml": small, root / "t0" / "hami.tgz": large})
except OSError as exc:
    print("refused:", exc.strerror)
print(sorted(str(p.relative_to(root)) for p in root.rglob("*")))
"""


def test_a_delivery_that_does_not_fit_leaves_nothing_behind(tmp_path: Path) -> None:
    """The release's folder and the newest copy are one set: on a full disk neither is written, and no
    temporary file or empty folder is left."""
    command = [sys.executable, "-c", WRITE_TWO_FOLDERS, str(tmp_path / "out")]
    done = _in_mount_namespace(tmp_path / "out", "size=2m", command, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["refused: No space left on device", "[]"]


def test_a_delivery_replaces_the_previous_files_together(tmp_path: Path) -> None:
    from mirror.output import write_all

    first = {tmp_path / "t0" / "v1" / "a.yaml": "one", tmp_path / "t0" / "a.yaml": "one"}
    write_all(first)
    write_all({path: "two" for path in first})
    assert {p.read_text() for p in first} == {"two"}
    assert sorted(p.name for p in (tmp_path / "t0").rglob("*")) == ["a.yaml", "a.yaml", "v1"]  # no temporaries


KILLED_AT_THE_RENAME = """
import os, signal, sys
from pathlib import Path
from mirror import output

def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

output.os.replace = killed  # the temporary is written and flushed, the old file kept aside: then SIGKILL
output.write_all({Path(sys.argv[1]): "three"})
"""


def test_what_a_killed_write_left_goes_with_the_next_write_once_it_is_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL (the OOM killer, a liveness probe) between a temporary's flush and its rename leaves it and the old
    file's second name for good: the next write of that file removes them, once nobody has touched them for
    LEFTOVER_SECONDS (a write under way in another process is never one)."""
    from mirror import leftovers
    from mirror.output import write_all

    values = tmp_path / "t0" / "hami-ack-values.yaml"
    write_all({values: "one"})
    killed = subprocess.run([sys.executable, "-c", KILLED_AT_THE_RENAME, str(values)], capture_output=True)
    assert killed.returncode == -9
    left = sorted(p.name for p in values.parent.iterdir() if p.name != values.name)
    assert len(left) == 2 and any(name.endswith(".old") for name in left), left
    write_all({values: "two"})  # just left: kept
    assert sorted(p.name for p in values.parent.iterdir() if p.name != values.name) == left
    monkeypatch.setattr(leftovers, "LEFTOVER_SECONDS", 0.0)
    (values.parent / "notes.txt").write_text("someone else's")
    write_all({values: "three"})
    assert sorted(p.name for p in values.parent.iterdir()) == ["hami-ack-values.yaml", "notes.txt"]
    assert values.read_text() == "three"


def test_a_delivery_is_readable_as_any_file_its_user_writes(tmp_path: Path) -> None:
    """The values files are renamed from temporary files, which mkstemp makes 0600: they were readable by the
    writer's user only (a CronJob's volume read by another container, a user's shell)."""
    from mirror.output import write_all

    script = (
        "import os, sys; from pathlib import Path; from mirror.output import write_all; os.umask(0o027); "
        "write_all({Path(sys.argv[1]): 'values: 1'})"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "strict.yaml")], check=True)
    write_all({tmp_path / "t0" / "values.yaml": "values: 1"})
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "t0" / "values.yaml").stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE((tmp_path / "strict.yaml").stat().st_mode) == 0o640  # the writer's umask is honoured
