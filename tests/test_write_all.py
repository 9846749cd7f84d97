"""A delivery's files are all new or all old: something in the way of a destination is refused before any file
is written, and a rename that fails part way (a real one: the destination is a mount point, in a private mount
namespace) puts back every file already replaced."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.output import OutputError, write_all
from tests.support import write_config
from tests.test_sync import VERSION, seed_release


def _tree(root: Path) -> dict[str, str]:
    """Every file under `root` (hidden ones too) and what it holds."""
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _old_delivery(root: Path) -> dict[Path, str]:
    old = {root / "v2.10.0" / "values.yaml": "old release\n", root / "values.yaml": "old newest\n"}
    for path, text in old.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return old


def _new_delivery(root: Path) -> dict[Path, str | bytes]:
    names = [root / "v2.10.0" / "values.yaml", root / "v2.10.0" / "rbac.yaml", root / "values.yaml"]
    return {path: "new\n" for path in names}  # the newest copy last: it is the one that fails


@pytest.mark.parametrize("in_the_way", ["a directory", "a symbolic link"])
def test_something_other_than_a_file_at_a_destination_is_refused_before_any_file_is_written(
    tmp_path: Path, in_the_way: str
) -> None:
    root = tmp_path / "out" / "t0"
    _old_delivery(root)
    (root / "values.yaml").unlink()
    if in_the_way == "a directory":
        (root / "values.yaml").mkdir()
    else:
        (root / "values.yaml").symlink_to(root / "v2.10.0" / "values.yaml")
    before = _tree(root)

    with pytest.raises(OutputError) as refused:
        write_all(_new_delivery(root))

    assert str(refused.value) == (
        f"{root / 'values.yaml'} is {in_the_way}, where this delivery writes a file: move it away (or remove it) "
        "and run again"
    )
    assert _tree(root) == before  # nothing renamed into place, no temporary file left


RENAME_UNDER_A_MOUNT = """
import sys
from pathlib import Path
from mirror.output import write_all
root = Path(sys.argv[1])
names = [root / "v2.10.0" / "values.yaml", root / "v2.10.0" / "rbac.yaml", root / "values.yaml"]
try:
    write_all({path: "new\\n" for path in names})
except OSError as exc:
    print("refused:", exc.strerror)
"""


def test_a_rename_that_fails_part_way_puts_back_the_files_already_replaced(tmp_path: Path) -> None:
    """The last destination is a regular file with a file mounted on it: renaming onto a mount point fails
    (EBUSY) after the release's folder got its new files."""
    root = tmp_path / "out" / "t0"
    _old_delivery(root)
    before = _tree(root)
    (tmp_path / "mounted").write_text("mounted\n")
    script = 'mount --bind "$0" "$1" && shift && exec "$@"'
    command = [sys.executable, "-c", RENAME_UNDER_A_MOUNT, str(root)]
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script, str(tmp_path / "mounted"), str(root / "values.yaml"), *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["refused: Device or resource busy"]
    assert _tree(root) == before  # the old release file back, the new rbac.yaml gone, nothing kept aside


def test_a_delivery_replacing_old_files_keeps_nothing_aside(tmp_path: Path) -> None:
    root = tmp_path / "out" / "t0"
    _old_delivery(root)
    write_all(_new_delivery(root))
    assert _tree(root) == {"v2.10.0/values.yaml": "new\n", "v2.10.0/rbac.yaml": "new\n", "values.yaml": "new\n"}


def test_a_sync_whose_newest_values_path_is_a_directory_writes_no_values_and_says_why(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    in_the_way = tmp_path / "out" / "t0" / "hami-ack-values.yaml"
    in_the_way.mkdir(parents=True)

    assert main(["sync", VERSION, "--config", str(config)]) == 1

    output = capsys.readouterr()
    assert f"values for t0 not written: {in_the_way} is a directory" in output.out + output.err
    assert _tree(tmp_path / "out") == {}  # neither the release's folder nor the newest copy
