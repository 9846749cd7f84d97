"""A cross-repository mount the registry refuses falls back to an ordinary upload, as the distribution spec and
Docker's pusher have it, and no further mount is tried at that registry in the run: the mount's source is
often a guess. It failed the blob, and so the image, on every run. A repository that refuses the ordinary upload
too refused the mount for its own sake: the other repositories go on mounting.

The real refusal: a token server that grants a token for one repository at a time, so a mount's token has no
pull on its `from` repository and Debian's docker-registry answers 401 insufficient_scope. Other refusals (403,
404) from the fault proxy in front of a plain registry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mirror.demo.localregistry import AccessEntry, LocalRegistry
from tests.faultproxy import Fault, FaultProxy
from tests.support import blob_exists, manifest_digest
from tests.test_faults import sync
from tests.test_sync import VERSION, seed_release
from tests.test_token_auth import PASSWORD, USER, World, assert_copied, make_world, run_cli
from tests.tokenserver import TokenServer

TARGET_SERVICE = "target-registry:cn-test:1234"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    yield from make_world(tmp_path)


def one_repository_per_token(tokens: TokenServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """At the target, a token that pushes to a repository grants nothing on any other: a mount's token has no
    pull on the repository it names in `from`."""
    issue = tokens.issue

    def issue_for_one(user: str | None, service: str, scopes: list[str], method: str) -> dict[str, Any]:
        pushing = [scope for scope in scopes if scope.endswith(",push")]
        return issue(user, service, pushing if service == TARGET_SERVICE and pushing else scopes, method)

    monkeypatch.setattr(tokens, "issue", issue_for_one)


def mount_attempts(entries: list[AccessEntry]) -> list[AccessEntry]:
    return [e for e in entries if e.method == "POST" and "mount=" in e.path]


def uploaded(entries: list[AccessEntry], repository: str) -> set[str]:
    """The digests whose upload into `repository` the registry completed (201 to the closing PUT)."""
    closing = [e for e in entries if e.method == "PUT" and e.status == 201 and f"/v2/{repository}/blobs/" in e.path]
    return {e.path.split("digest=", 1)[1].split("&", 1)[0] for e in closing}


def test_a_mount_without_pull_on_its_source_falls_back_to_an_upload(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    one_repository_per_token(world.tokens, monkeypatch)
    config = world.config({"username": USER, "password": PASSWORD})

    code, output = run_cli(["sync", VERSION, "--config", str(config)], capsys)

    assert code == 0, output
    assert_copied(world)
    log = world.target.access_log()
    (refused,) = mount_attempts(log)  # one mount tried at this registry in the whole run
    assert refused.status == 401
    # every blob went up into each repository as an ordinary upload, the refused mount's blob among them
    assert uploaded(log, "mirrored/hami") == set(world.hami.blobs)
    assert uploaded(log, "mirrored/kube-webhook-certgen") == set(world.certgen.blobs)
    assert refused.path.split("mount=", 1)[1].split("&", 1)[0] in set(world.hami.blobs) | set(world.certgen.blobs)


def test_a_guess_that_is_not_there_ends_the_guesses_not_the_mounts(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    """A guessed source answered 404 (its repository not made yet): no more guesses, but a blob the run put into
    one repository is still mounted into the next rather than uploaded again."""
    hami, certgen = seed_release(source)
    refusal = Fault("status", method="POST", path=r"mount=", status=404, code="NAME_UNKNOWN", count=1)
    target_proxy.add(refusal)

    assert sync(tmp_path, source, target_proxy) == 0

    assert refusal.applied == 1
    after = [e.status for e in mount_attempts(target.access_log())]
    assert after and set(after) == {201}, after  # only known sources: the shared layer, mounted
    assert all(blob_exists(target, "mirrored/kube-webhook-certgen", digest) for digest in certgen.blobs)
    assert all(blob_exists(target, "mirrored/hami", digest) for digest in hami.blobs)


@pytest.mark.parametrize(("status", "code"), [(403, "DENIED"), (401, "UNAUTHORIZED")])
def test_a_mount_the_registry_refuses_falls_back_to_an_upload(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy, status: int, code: str
) -> None:
    hami, certgen = seed_release(source)
    refusal = Fault("status", method="POST", path=r"mount=", status=status, code=code, count=1000)
    target_proxy.add(refusal)

    assert sync(tmp_path, source, target_proxy) == 0

    assert refusal.applied == 1  # the first refusal ends the mounts at this registry for the run
    log = target.access_log()
    assert uploaded(log, "mirrored/hami") == set(hami.blobs)
    assert uploaded(log, "mirrored/kube-webhook-certgen") == set(certgen.blobs)
    assert all(blob_exists(target, "mirrored/hami", digest) for digest in hami.blobs)


def test_a_mount_that_works_is_tried_again(tmp_path: Path, source: LocalRegistry, target: LocalRegistry) -> None:
    """Mounts that the registry takes (201) or answers with an ordinary session (202) go on as before."""
    seed_release(source)
    assert sync(tmp_path, source, target) == 0
    attempts = mount_attempts(target.access_log())
    # 201: the layer both images share crossed the wire once; 202: a guess that lacked the blob, a session
    assert {e.status for e in attempts} == {201, 202}


def test_a_repository_that_refuses_every_upload_does_not_end_the_mounts_into_the_others(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    """The registry refuses a mount into a repository where the run may not push at all: the ordinary upload is
    refused too, so the refusal was the repository's, not the mounts'. The next repository still mounts every
    blob the run put into the first, where it uploaded each of them again (a cross-border trip per layer).

    Order by the proxy, not by timing: `hami-denied` starts once `hami` is there (its blobs are mounted from it);
    `hami-again` once `hami-denied`'s mount was refused."""
    seed_release(source)
    refused_mount = Fault("status", method="POST", path=r"/mirrored/hami-denied/.*mount=", status=403, code="DENIED")
    refused_mount.count = 1000
    refused_upload = Fault("status", method="POST", path=r"/mirrored/hami-denied/", status=403, code="DENIED")
    refused_upload.count = 1000

    def hami_pushed() -> bool:
        return any(
            e.method == "PUT" and e.status == 201 and "/v2/mirrored/hami/manifests/" in e.path for e in target_proxy.log
        )

    denied_waits = Fault(
        "stall", method="HEAD", path=r"/mirrored/hami-denied/", seconds=60, count=1000, until=hami_pushed
    )
    again_waits = Fault(
        "stall",
        method="HEAD",
        path=r"/mirrored/hami-again/",
        seconds=60,
        count=1000,
        until=lambda: refused_mount.applied > 0,
    )
    target_proxy.add(refused_mount, refused_upload, denied_waits, again_waits)
    images = [
        {"name": "hami", "source": "projecthami/hami", "tag": "{version}"},
        {"name": "hami-denied", "source": "projecthami/hami", "tag": "{version}"},
        {"name": "hami-again", "source": "projecthami/hami", "tag": "{version}"},
    ]
    mark = len(target.access_log())

    one_at_a_time = {"blob_concurrency": 1}  # so that hami-denied's later blobs come after its first refusal
    code = sync(tmp_path, source, target_proxy, images=images, values={"unmirrored": "warn"}, transfer=one_at_a_time)
    assert code == 1  # hami-denied

    assert refused_mount.applied >= 1 and refused_upload.applied >= 1
    # after its first refusal of each kind, no mount was tried into the repository that takes no push
    denied = [e for e in target_proxy.log if e.method == "POST" and "/mirrored/hami-denied/" in e.path]
    assert sum("mount=" in e.path for e in denied) == 1, denied
    assert (denied_waits.released, again_waits.released) == (denied_waits.applied, again_waits.applied)
    log = target.access_log()[mark:]
    again = [e for e in mount_attempts(log) if "/v2/mirrored/hami-again/" in e.path]
    assert again and {e.status for e in again} == {201}, again  # every blob mounted from mirrored/hami
    assert uploaded(log, "mirrored/hami-again") == set()  # none went up again
    assert manifest_digest(target, "mirrored/hami-again", VERSION) == manifest_digest(target, "mirrored/hami", VERSION)
