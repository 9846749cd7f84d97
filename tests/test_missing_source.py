"""A source image that is not there, reported for what is missing: the repository (a misspelt name) or the tag.
A manifest HEAD's 404 has no body to tell the two apart, so only then is the source asked for the first page of
the repository's tag list; where that look-up fails, the tag is blamed as the HEAD alone would."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from tests.faultproxy import Fault, FaultProxy
from tests.support import requests_since, write_config
from tests.test_sync import VERSION, seed_release

MISSPELT = [{"name": "hami", "source": "projecthami/hamii", "tag": "{version}"}]
LOOKUP = "/v2/projecthami/hamii/tags/list?n=1"


def mirror_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("mirror: ")]


def test_a_misspelt_repository_is_named_not_its_tag(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target], images=MISSPELT)
    mark = len(source.access_log())

    assert main(["sync", VERSION, "--config", str(config)]) == 1

    err = capsys.readouterr().err
    said = f"{source.host}/projecthami/hamii:{VERSION}: repository projecthami/hamii not found at the source"
    assert [line for line in mirror_lines(err) if said in line], err
    assert "tag not found" not in err and "Traceback" not in err
    gets = [(e.path, e.status) for e in requests_since(source, mark) if e.method == "GET"]
    assert gets == [(LOOKUP, 404)]  # one look-up, one tag long


@pytest.mark.parametrize(("status", "code"), [(503, "UNAVAILABLE"), (401, "UNAUTHORIZED"), (500, "")])
def test_a_look_up_that_fails_leaves_the_tag_blamed(
    tmp_path: Path,
    source_proxy: FaultProxy,
    target: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
    status: int,
    code: str,
) -> None:
    """The look-up only refines the message: its own failure is never the image's."""
    source_proxy.add(Fault("status", method="GET", path=r"/tags/list", status=status, code=code, count=1000))
    config = write_config(tmp_path / "mirror.yaml", source_proxy, [target], images=MISSPELT)

    assert main(["sync", VERSION, "--config", str(config)]) == 1

    err = capsys.readouterr().err
    lines = mirror_lines(err)
    assert len(lines) == 1 and lines[0].endswith(f"projecthami/hamii:{VERSION}: tag not found at the source"), err
    assert {e.status for e in source_proxy.log if "/tags/list" in e.path} == {status}  # asked, and failed


def test_an_image_that_is_there_costs_the_source_no_look_up(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    mark = len(source.access_log())

    assert main(["sync", VERSION, "--config", str(config)]) == 0  # a no-op: HEADs only

    assert {e.method for e in requests_since(source, mark)} == {"HEAD"}
    assert not [e for e in source.access_log() if "/tags/list" in e.path]
