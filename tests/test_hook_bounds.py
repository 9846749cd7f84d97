"""What a webhook may queue: a Docker Hub push matches a configured image by registry and path (an image on
nvcr.io is not Docker Hub's repository of the same path), and the webhooks leave at most
`service.max_queued_jobs` jobs queued; past it they are answered 503 and queue nothing. The bound on the real
SQLite and PostgreSQL stores, and through a real `mirror serve`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from mirror.service import store as job_queue
from mirror.service.hooks import HookError, ci_request, dockerhub_version
from mirror.service.store import QUEUED, WAITING, JobStore
from mirror.settings import ConfigError, MirrorSettings, load_settings
from tests.test_crash import wait_for
from tests.test_service import DOCKERHUB_TOKEN, Service, service_config, target_lock_held
from tests.test_sync import VERSION, seed_release

LIMIT = 3


def settings_with(tmp_path: Path, source_registry: str, **extra: Any) -> MirrorSettings:
    config = {
        "source": {"registry": source_registry},
        "targets": [{"name": "t0", "registry": "registry.cn-hangzhou.aliyuncs.com", "namespace": "mirrored"}],
        "images": [
            {"name": "hami", "source": "projecthami/hami", "tag": "{version}"},
            {"name": "dcgm", "source": "nvidia/k8s/dcgm-exporter", "registry": "nvcr.io", "tag": "{version}-ubuntu"},
            {"name": "webui", "source": "projecthami/hami-webui-fe-oss", "registry": "docker.io", "tag": "{version}"},
        ],
        "values": {"unmirrored": "warn"},
        "output_dir": str(tmp_path / "out"),
        "state_dir": str(tmp_path / "state"),
        **extra,
    }
    path = tmp_path / "mirror.yaml"
    path.write_text(yaml.safe_dump(config))
    return load_settings(path)


def push(repository: str, tag: str) -> bytes:
    return json.dumps({"push_data": {"tag": tag}, "repository": {"repo_name": repository}}).encode()


def test_a_docker_hub_push_matches_only_images_whose_source_is_on_docker_hub(tmp_path: Path) -> None:
    settings = settings_with(tmp_path, "docker.io")
    with pytest.raises(HookError) as refused:  # Docker Hub's nvidia/k8s/dcgm-exporter is not nvcr.io's
        dockerhub_version(settings, push("nvidia/k8s/dcgm-exporter", "v2.10.0-ubuntu"))
    assert refused.value.status == 422 and "not one this service mirrors" in str(refused.value)
    assert dockerhub_version(settings, push("projecthami/hami", "2.10.0")) == "v2.10.0"
    assert dockerhub_version(settings, push("projecthami/hami-webui-fe-oss", "v2.11.0")) == "v2.11.0"


def test_a_push_matches_images_read_through_the_source_registry(tmp_path: Path) -> None:
    """`source.registry` names where the config reads Docker Hub's images (a pull-through mirror): a push of
    Docker Hub's repository matches the image there, and one with `registry: docker.io` too; nvcr.io's never."""
    settings = settings_with(tmp_path, "hub-mirror.example.com")
    assert dockerhub_version(settings, push("projecthami/hami", "v2.10.0")) == "v2.10.0"
    assert dockerhub_version(settings, push("projecthami/hami-webui-fe-oss", "v2.10.0")) == "v2.10.0"
    with pytest.raises(HookError):
        dockerhub_version(settings, push("nvidia/k8s/dcgm-exporter", "v2.10.0-ubuntu"))


def test_one_releases_deliveries_share_an_id_and_a_retagged_one_does_not(tmp_path: Path) -> None:
    """GitHub's published and released deliveries of one release make one job; a pre-release retagged as the
    release keeps its release id, and must still make a job of its own."""
    settings = settings_with(tmp_path, "docker.io", discovery={"versions": ">=2.7.0", "prereleases": True})

    def delivery(action: str, tag: str, prerelease: bool) -> str | None:
        body = {"action": action, "release": {"id": 7, "tag_name": tag, "prerelease": prerelease}}
        return ci_request(settings, json.dumps(body).encode(), "release").release_delivery

    published, released = delivery("published", VERSION, False), delivery("released", VERSION, False)
    assert published == released and str(published).startswith("github-release:7:")
    assert delivery("published", "v2.11.0-rc.1", True) != delivery("released", "v2.11.0", False)


def test_the_bound_is_a_setting_with_a_sane_range(tmp_path: Path) -> None:
    assert settings_with(tmp_path, "docker.io").service.max_queued_jobs == 20
    with pytest.raises(ConfigError, match="max_queued_jobs"):
        settings_with(tmp_path, "docker.io", service={"max_queued_jobs": 0})


async def queued(store: JobStore) -> list[dict[str, Any]]:
    jobs, _ = await store.page(200, state=QUEUED)
    return jobs


async def test_past_the_bound_nothing_is_queued(job_store: JobStore) -> None:
    for minor in range(LIMIT):
        assert (await job_store.enqueue("dockerhub", [f"v9.{minor}.0"], None, 600, LIMIT))[1]
    with pytest.raises(job_queue.QueueFull, match=r"3 jobs are queued.*service\.max_queued_jobs is 3"):
        await job_store.enqueue("dockerhub", ["v9.99.0"], "a-delivery", 600, LIMIT)
    assert len(await queued(job_store)) == LIMIT
    # a release already queued still takes its webhooks; the schedule is not bounded
    joined, created = await job_store.enqueue("ci", ["v9.0.0"], "a-delivery", 600, LIMIT)
    assert not created and joined["versions"] == ["v9.0.0"]
    assert (await job_store.enqueue("schedule", None, None))[1]  # it counts: four are queued
    for _ in range(2):  # two leave the queue: room for one more
        assert await job_store.claim_next("runner", 60) is not None
    assert (await job_store.enqueue("dockerhub", ["v9.99.0"], None, 600, LIMIT))[1]


async def test_a_waiting_follow_up_counts_towards_the_bound(job_store: JobStore) -> None:
    assert (await job_store.enqueue("dockerhub", ["v9.0.0"], None, 600, LIMIT))[1]
    assert await job_store.claim_next("runner", 60) is not None
    follow_up, created = await job_store.enqueue("dockerhub", ["v9.0.0"], None, 600, LIMIT)
    assert created and follow_up["state"] == WAITING
    for minor in range(1, LIMIT):
        assert (await job_store.enqueue("dockerhub", [f"v9.{minor}.0"], None, 600, LIMIT))[1]
    with pytest.raises(job_queue.QueueFull, match="3 jobs are queued"):
        await job_store.enqueue("dockerhub", ["v9.99.0"], None, 600, LIMIT)


async def test_concurrent_webhooks_never_pass_the_bound(job_store: JobStore) -> None:
    asked = (job_store.enqueue("dockerhub", [f"v9.{minor}.0"], None, 600, LIMIT) for minor in range(12))
    answers = await asyncio.gather(*asked, return_exceptions=True)
    assert sum(1 for answer in answers if isinstance(answer, tuple)) == LIMIT
    assert sum(1 for answer in answers if isinstance(answer, job_queue.QueueFull)) == 12 - LIMIT
    assert len(await queued(job_store)) == LIMIT


def test_a_full_queue_answers_503_and_queues_nothing(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """The first job waits at its target's lock; two more are queued; the next push is refused."""
    seed_release(source)
    config = service_config(tmp_path, source, target, service={"max_queued_jobs": 2}, shutdown_grace=1)
    with target_lock_held(tmp_path, target, None):
        service = Service(config, free_port())
        service.start()
        try:
            service.signed({"version": VERSION})
            wait_for(lambda: "waiting for another mirror sync" in service.log.read_text(), 30)
            hook = f"/hooks/dockerhub/{DOCKERHUB_TOKEN}"
            assert [service.post(hook, push("projecthami/hami", f"v2.{m}.0")).status_code for m in (11, 12)] == [
                202
            ] * 2
            refused = service.post(hook, push("projecthami/hami", "v2.13.0"))
            assert refused.status_code == 503 and refused.headers["retry-after"] == "60"
            assert (
                "service.max_queued_jobs is 2" in refused.json()["error"]
                and "nothing queued" in refused.json()["error"]
            )
            again = service.post(hook, push("projecthami/hami", "v2.11.0"))  # an already queued release: taken
            assert again.status_code == 202 and again.json()["duplicate"] is True
            assert sorted(v for job in service.jobs() for v in job["versions"]) == [VERSION, "v2.11.0", "v2.12.0"]
        finally:
            service.stop()
    assert "dockerhub webhook for v2.13.0 refused" in service.log.read_text()
