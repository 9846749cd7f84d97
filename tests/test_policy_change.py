"""A change of a target's `platforms:` or `attestations:` reaches the target on the next run: the index there is
current only while it is what the policy now builds from the source tree, whether the run is forced or not.
A re-run under an unchanged policy stays a no-op: HEADs at the source, nothing written at the target."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import SampleImage
from mirror.engine.policy import POLICY_ANNOTATION, SOURCE_DIGEST_ANNOTATION, policy_of
from mirror.oci import Manifest
from tests.support import (
    beyond_heads,
    manifest_bytes,
    manifest_digest,
    requests_since,
    sync_json,
    with_client,
    write_config,
    writes,
)
from tests.test_round_trips import asked_twice
from tests.test_sync import VERSION, seed_release

BOTH = ["linux/amd64", "linux/arm64"]


def hami_at_target(report: dict[str, Any]) -> dict[str, Any]:
    return dict(report["images"][0]["targets"][0])


def platforms_listed(registry: LocalRegistry, repository: str) -> list[str]:
    index = json.loads(manifest_bytes(registry, repository, VERSION))
    return [f"{e['platform']['os']}/{e['platform']['architecture']}" for e in index["manifests"]]


def source_entries(image: SampleImage) -> list[str]:
    return [e["digest"] for e in json.loads(image.manifests[image.digest])["manifests"]]


def configured(tmp_path: Path, source: LocalRegistry, target: LocalRegistry, name: str, **policy: Any) -> Path:
    """A config of its own per policy, all sharing one state_dir and one output directory."""
    return write_config(tmp_path / f"{name}.yaml", source, [target], target_options=policy)


def sync_copies(config: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    """A run that must copy hami again, verify it and write the values pointing at the copy."""
    code, report, err = sync_json(config, capsys, VERSION, *flags)
    assert code == 0, err
    result = hami_at_target(report)
    assert result["action"] == "copied" and result["verified"] is True, result
    (values,) = report["values"]
    written = yaml.safe_load(Path(values["path"]).read_text())
    assert written["scheduler"]["extender"]["image"]["repository"] == "mirrored/hami"
    return result


def assert_no_op(config: Path, capsys: pytest.CaptureFixture[str], source: LocalRegistry, target: LocalRegistry) -> str:
    """A re-run under the same policy: up to date, only HEADs at the source, no read twice and no write at the
    target, where no manifest is read but a rewrite this run has not seen (every other is kept by digest);
    the digest the target tag holds."""
    source_mark, target_mark = len(source.access_log()), len(target.access_log())
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert hami_at_target(report)["action"] == "up-to-date"
    assert beyond_heads(requests_since(source, source_mark)) == []
    at_target = requests_since(target, target_mark)
    assert writes(at_target) == [] and asked_twice(at_target) == {}
    sources = {image["source_digest"] for image in report["images"]}
    rewrites = {t["digest"] for image in report["images"] for t in image["targets"]} - sources
    read = {e.path.rsplit("/", 1)[1] for e in at_target if e.method == "GET" and "/manifests/" in e.path}
    assert read <= rewrites
    return str(hami_at_target(report)["digest"])


@pytest.mark.parametrize("force", [False, True], ids=["plain", "forced"])
def test_widening_platforms_copies_the_new_platform_and_points_the_values_at_it(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str], force: bool
) -> None:
    hami, _ = seed_release(source)
    amd64_only = configured(tmp_path, source, target, "amd64", platforms=["linux/amd64"])
    sync_copies(amd64_only, capsys)
    assert platforms_listed(target, "mirrored/hami") == ["linux/amd64", "unknown/unknown"]
    assert assert_no_op(amd64_only, capsys, source, target) != hami.digest

    both = configured(tmp_path, source, target, "both", platforms=BOTH)
    result = sync_copies(both, capsys, *(["--force"] if force else []))

    # both platforms selected: nothing left out, so the copy is the source index byte for byte
    assert "rewrite" not in result and result["digest"] == hami.digest
    assert manifest_digest(target, "mirrored/hami", VERSION) == hami.digest
    assert platforms_listed(target, "mirrored/hami") == ["linux/amd64", "linux/arm64", *["unknown/unknown"] * 2]
    assert all(manifest_digest(target, "mirrored/hami", d) == d for d in source_entries(hami))
    assert assert_no_op(both, capsys, source, target) == hami.digest


def test_narrowing_platforms_rewrites_a_byte_exact_copy(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    hami, _ = seed_release(source)
    both = configured(tmp_path, source, target, "both", platforms=BOTH)
    assert sync_copies(both, capsys)["digest"] == hami.digest

    amd64_only = configured(tmp_path, source, target, "amd64", platforms=["linux/amd64"])
    result = sync_copies(amd64_only, capsys)

    assert result["rewrite"]["source_digest"] == hami.digest != result["digest"]
    assert manifest_digest(target, "mirrored/hami", VERSION) == result["digest"]
    assert platforms_listed(target, "mirrored/hami") == ["linux/amd64", "unknown/unknown"]
    assert assert_no_op(amd64_only, capsys, source, target) == result["digest"]


def test_attestations_from_drop_to_keep_copies_them_and_the_source_index(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    hami, _ = seed_release(source)
    drop = configured(tmp_path, source, target, "drop", attestations="drop")
    dropped = sync_copies(drop, capsys)
    assert platforms_listed(target, "mirrored/hami") == ["linux/amd64", "linux/arm64"]
    assert assert_no_op(drop, capsys, source, target) == dropped["digest"] != hami.digest

    keep = configured(tmp_path, source, target, "keep", attestations="keep")
    result = sync_copies(keep, capsys)

    assert "rewrite" not in result and result["digest"] == hami.digest
    assert manifest_bytes(target, "mirrored/hami", VERSION) == hami.manifests[hami.digest]
    assert all(manifest_digest(target, "mirrored/hami", d) == d for d in source_entries(hami))
    assert assert_no_op(keep, capsys, source, target) == hami.digest

    # and back: drop rewrites the byte-exact copy again
    assert sync_copies(drop, capsys)["digest"] == dropped["digest"]
    assert assert_no_op(drop, capsys, source, target) == dropped["digest"]


def test_widening_platforms_where_the_target_refuses_attestations_keeps_the_refusal_rewrite_current(
    tmp_path: Path, source: LocalRegistry, acr_like: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under `attestations: auto` the index at an ACR-like target lacks the entries it refused: that rewrite is
    what the policy builds there, so it stays current, and a wider platform list still reaches it."""
    hami, _ = seed_release(source)
    amd64_only = configured(tmp_path, source, acr_like, "amd64", platforms=["linux/amd64"])
    sync_copies(amd64_only, capsys)
    assert platforms_listed(acr_like, "mirrored/hami") == ["linux/amd64"]
    assert_no_op(amd64_only, capsys, source, acr_like)

    both = configured(tmp_path, source, acr_like, "both", platforms=BOTH)
    result = sync_copies(both, capsys)

    assert platforms_listed(acr_like, "mirrored/hami") == ["linux/amd64", "linux/arm64"]
    index = json.loads(manifest_bytes(acr_like, "mirrored/hami", VERSION))
    assert index["annotations"][SOURCE_DIGEST_ANNOTATION] == hami.digest
    assert result["digest"] == manifest_digest(acr_like, "mirrored/hami", VERSION)
    assert assert_no_op(both, capsys, source, acr_like) == result["digest"]


def assert_stateless_no_op(config: Path, capsys: pytest.CaptureFixture[str], source: LocalRegistry) -> None:
    """A re-run that kept nothing of the runs before it (a CronJob's emptyDir): still nothing but HEADs at the
    source (on Docker Hub each manifest GET is a counted pull), the index and its children read at the target."""
    shutil.rmtree(tmp_state(config))
    mark = len(source.access_log())
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert {t["action"] for image in report["images"] for t in image["targets"]} == {"up-to-date"}
    assert beyond_heads(requests_since(source, mark)) == []


def tmp_state(config: Path) -> Path:
    return Path(yaml.safe_load(config.read_text())["state_dir"])


@pytest.mark.parametrize(
    ("policy", "refusing"),
    [({"platforms": ["linux/amd64"]}, False), ({}, True), ({"platforms": BOTH}, False)],
    ids=["platform-rewrite", "acr-refusal-rewrite", "filter-keeping-every-image"],
)
def test_a_rewrite_is_judged_current_by_the_policy_it_records_not_by_the_source(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    acr_like: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
    policy: dict[str, Any],
    refusing: bool,
) -> None:
    seed_release(source)
    config = configured(tmp_path, source, acr_like if refusing else target, "policy", **policy)
    sync_copies(config, capsys)
    assert_stateless_no_op(config, capsys, source)


def test_a_rewrite_from_before_policies_were_recorded_is_current_without_a_source_read(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """An index an older mirror rewrote records no policy: trusted as before where the source tree is not kept;
    where it is, judged by what the policy selects from it (a wider one copies)."""
    hami, _ = seed_release(source)
    amd64_only = configured(tmp_path, source, target, "amd64", platforms=["linux/amd64"])
    sync_copies(amd64_only, capsys)
    doc = json.loads(manifest_bytes(target, "mirrored/hami", VERSION))
    del doc["annotations"][POLICY_ANNOTATION]
    older = Manifest.parse(json.dumps(doc).encode(), doc["mediaType"])
    with_client(target, lambda c: c.put_manifest("mirrored/hami", VERSION, older))
    assert older.digest == manifest_digest(target, "mirrored/hami", VERSION) and policy_of(older) is None

    both = configured(tmp_path, source, target, "both", platforms=BOTH)  # the first run kept the source tree
    assert sync_copies(both, capsys)["digest"] == hami.digest

    with_client(target, lambda c: c.put_manifest("mirrored/hami", VERSION, older))
    assert_stateless_no_op(both, capsys, source)  # not judged: that would take the source's index and children
    assert manifest_digest(target, "mirrored/hami", VERSION) == older.digest


def drop_manifest(registry: LocalRegistry, repository: str, digest: str) -> None:
    """The registry loses one manifest of a repository (its link in distribution's storage), as a clean-up would."""
    revisions = registry.storage / "docker/registry/v2/repositories" / repository / "_manifests/revisions/sha256"
    link = revisions / digest.removeprefix("sha256:") / "link"
    assert link.exists(), link
    link.unlink()


@pytest.mark.parametrize("platforms", [None, BOTH], ids=["no-filter", "filter-keeping-every-image"])
def test_a_byte_exact_copy_missing_a_child_is_copied_again_without_state(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str], platforms: Any
) -> None:
    """Where the policy is judged from the copy's own tree, a copy that lost a child cannot be read whole: it is
    copied again, as verification would have found, not failed on every run."""
    seed_release(source)
    config = configured(tmp_path, source, target, "policy", **({"platforms": platforms} if platforms else {}))
    sync_copies(config, capsys)
    drop_manifest(
        target, "mirrored/hami", json.loads(manifest_bytes(target, "mirrored/hami", VERSION))["manifests"][0]["digest"]
    )
    shutil.rmtree(tmp_state(config))
    assert sync_copies(config, capsys)["verified"] is True
