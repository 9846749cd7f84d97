"""`<output_dir>/<target>/hami-ack-values.yaml` is the newest release's: a run for an older release (a backport,
v2.9.3 after v2.10.0, by the service or by hand) writes its own folder and leaves the newest file alone; a run for
the same or a newer release replaces it. The release a file holds is read from its header."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.settings import MirrorSettings
from mirror.values import ChartInstall, ChartSpec, ValuesFile, write_values

TARGET = {"name": "t", "registry": "registry.cn-hangzhou.aliyuncs.com", "namespace": "my-ns"}
WEBUI = ChartSpec("hami-webui", "hami-webui", "hami-webui", "hami-webui-values.yaml", is_release_chart=False)


def settings(output: Path) -> MirrorSettings:
    images = [{"name": "hami", "source": "projecthami/hami"}]
    return MirrorSettings.model_validate({"targets": [TARGET], "images": images, "output_dir": str(output)})


def write(config: MirrorSettings, version: str, spec: ChartSpec | None = None) -> ValuesFile:
    """The values of `version`, written as the newest release of its run (every run of one version is)."""
    values = {"written_for": version}
    chart_version = "1.3.0" if spec is not None else None
    return write_values(
        config,
        config.targets[0],
        version,
        True,
        values,
        ChartInstall("hami-charts/hami"),
        spec=spec,
        chart_version_=chart_version,
    )


def holds(path: Path) -> str:
    """The release whose values the file holds."""
    (line,) = [line for line in path.read_text().splitlines() if line.startswith("written_for: ")]
    return line.removeprefix("written_for: ")


@pytest.mark.parametrize("spec", [None, WEBUI], ids=["hami", "another chart of the install"])
def test_an_older_release_synced_later_leaves_the_newest_file_alone(tmp_path: Path, spec: ChartSpec | None) -> None:
    config = settings(tmp_path)
    file_name = spec.file_name if spec is not None else "hami-ack-values.yaml"
    newest = tmp_path / "t" / file_name
    assert write(config, "v2.10.0", spec).path == newest
    assert holds(newest) == "v2.10.0"

    backport = write(config, "v2.9.3", spec)
    assert backport.path == tmp_path / "t" / "v2.9.3" / file_name  # and its helm line names that file
    assert f"-f {backport.path}" in backport.helm_command
    assert "written_for: v2.9.3" in backport.path.read_text()
    assert holds(newest) == "v2.10.0"
    assert write(config, "v2.10.0-rc.1", spec).path != newest  # a pre-release of it is older too

    assert write(config, "v2.10.0", spec).path == newest  # the same release again: rewritten
    assert write(config, "v2.10.1", spec).path == newest
    assert holds(newest) == "v2.10.1"


def test_a_pre_release_writes_its_own_folder_only_and_never_holds_the_newest_file(tmp_path: Path) -> None:
    """A CI hook for v2.11.0-rc.1 (or a hand run of it) took the newest file, and every later patch release was
    older than it (v2.10.1 < v2.11.0-rc.1): the newest file stayed a candidate until v2.11.0, if ever."""
    config = settings(tmp_path)
    newest = tmp_path / "t" / "hami-ack-values.yaml"
    assert write(config, "v2.10.0").path == newest
    candidate = write(config, "v2.11.0-rc.1")
    assert candidate.path == tmp_path / "t" / "v2.11.0-rc.1" / "hami-ack-values.yaml"
    assert holds(newest) == "v2.10.0"
    newest.write_text(newest.read_text().replace("written_for: v2.10.0", "written_for: v2.11.0-rc.1"))
    newest.write_text(newest.read_text().replace("v2.10.0", "v2.11.0-rc.1"))  # as an older mirror wrote it
    assert write(config, "v2.10.1").path == newest  # a release replaces a candidate left there
    assert holds(newest) == "v2.10.1"


def test_a_newest_file_that_names_no_release_is_replaced(tmp_path: Path) -> None:
    config = settings(tmp_path)
    newest = tmp_path / "t" / "hami-ack-values.yaml"
    newest.parent.mkdir(parents=True)
    newest.write_text("# written by hand\nscheduler: {}\n")
    assert write(config, "v2.9.3").path == newest
    assert holds(newest) == "v2.9.3"


def test_the_newest_folder_keeps_only_the_chart_archive_its_values_name(tmp_path: Path) -> None:
    """A target that refuses the chart artifact gets the .tgz beside the values: each release left one more in
    the newest folder, beside values whose `helm install` names another; once the chart is published, none."""
    config = settings(tmp_path)
    newest = tmp_path / "t"

    def delivered(version: str, archive: bool) -> ValuesFile:
        name = f"hami-{version.removeprefix('v')}.tgz"
        install = ChartInstall("", (name, b"chart " + version.encode())) if archive else ChartInstall("oci://x/hami")
        return write_values(config, config.targets[0], version, True, {"written_for": version}, install)

    delivered("v2.10.0", archive=True)
    (newest / "hami-webui-1.3.0.tgz").write_bytes(b"another chart's")
    latest = delivered("v2.10.1", archive=True)
    assert latest.chart == str(newest / "hami-2.10.1.tgz")
    assert sorted(p.name for p in newest.glob("*.tgz")) == ["hami-2.10.1.tgz", "hami-webui-1.3.0.tgz"]
    assert (newest / "v2.10.0" / "hami-2.10.0.tgz").exists()  # each release's own folder keeps its own
    delivered("v2.10.2", archive=False)
    assert sorted(p.name for p in newest.glob("*.tgz")) == ["hami-webui-1.3.0.tgz"]
