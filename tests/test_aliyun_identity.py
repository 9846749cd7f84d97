"""Which RAM identity and which Enterprise instance the ACR login uses, against the world of tests/aliyunworld.py
(the SDKs' own request code): `credentials: default` resolved in the official chain's order and kept to it (RRSA's
passing failure at STS tried again, never traded for the node's ECS role), no thread left behind by the ECS role's
provider, a configured instance id the registry's challenge contradicts, a CreateNamespace whose answer was lost,
and a registry out of reach said as itself."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_aliyun import HOST, access_key, config, mirror
from tests.test_aliyun_world import AliyunWorld, start_world

MODULE = "tests.test_aliyun_identity"
METADATA_ON = {"ALIBABA_CLOUD_ECS_METADATA_DISABLED": "false", "ALIBABA_CLOUD_IMDSV1_DISABLED": "true"}


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[AliyunWorld]:
    """The world of tests/aliyunworld.py; its options by indirect parametrization."""
    running = start_world(tmp_path / "aliyun", tmp_path / "aliyun.log", getattr(request, "param", {}))
    yield running
    running.stop()


# --- what runs inside the world: mirror's own AcrLogin and provisioning ---------------------------------------------


def identity_logins(ready_path: str, specs: str) -> dict[str, Any]:
    """One AcrLogin per spec (`credentials`, optional `instance_id`), each asked for a login with the challenge's
    service as the registry's auth flow asks it; how each ended, and the threads alive before and after."""
    ready = json.loads(Path(ready_path).read_text())
    before = threading.active_count()
    results = [asyncio.run(_login(ready, spec)) for spec in json.loads(specs)]
    return {
        "results": results,
        "threads_before": before,
        "threads_after": threading.active_count(),
        "thread_names": sorted(thread.name for thread in threading.enumerate()),
    }


async def _login(ready: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    from mirror.aliyun.login import AcrLogin, LoginError, LoginOptions
    from mirror.registry.retry import RetryPolicy

    retry = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.01, max_elapsed=60)
    options = LoginOptions(HOST, ready["region"], spec["credentials"], spec.get("instance_id"), None, 10, retry)
    try:
        credentials = await AcrLogin(options)(ready["service"])
    except LoginError as exc:
        return {"ok": False, "message": str(exc), "kind": exc.kind.name}
    return {"ok": True, "origin": credentials.origin}


def provision_namespace(ready_path: str, namespace: str) -> dict[str, Any]:
    """`ensure_namespace` with `provision: true` for a namespace the instance lacks."""
    from mirror.aliyun.login import AcrLogin, LoginError, LoginOptions
    from mirror.aliyun.provision import ensure_namespace

    ready = json.loads(Path(ready_path).read_text())
    login = AcrLogin(LoginOptions(HOST, ready["region"], "access_key", ready["instance_id"], None, 10))

    async def ensure() -> dict[str, Any]:
        try:
            state = await ensure_namespace(login, ready["instance_id"], namespace, True, False)
        except LoginError as exc:
            return {"ok": False, "message": str(exc), "kind": exc.kind.name}
        return {"ok": True, "note": state.note, "creates_on_push": state.creates_on_push}

    return asyncio.run(ensure())


def _token_calls(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [call for call in summary["openapi_calls"] if call["action"] == "GetAuthorizationToken"]


def _said(done: Any) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("mirror: ")]


# --- the tests ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [{"sts_faults": ["503"]}], indirect=True)
def test_default_with_rrsa_tries_sts_again_and_never_takes_the_nodes_ecs_role(world: AliyunWorld) -> None:
    """`credentials: default` with RRSA's variables on a node whose ECS role answers too (ACK's worker role): one
    503 at STS is tried again at the STS endpoint RRSA names, as `oidc_role_arn` is, where the library's chain
    moved on to the metadata service and logged in as the node."""
    env = {**{k: v for k, v in world.ready["env"].items() if k.startswith("ALIBABA_CLOUD_")}, **METADATA_ON}
    out = world.inside("identity_logins", json.dumps([{"credentials": "default"}]), env=env, module=MODULE)
    summary = world.stop()

    [call] = _token_calls(summary)
    assert call["principal"] == "assumed-role/mirror-acr/mirror" and call["outcome"] == "success", call
    assert summary["metadata_requests"] == []
    assert [(call["host"], call["outcome"]) for call in summary["sts_calls"]] == [
        ("sts-vpc.cn-hangzhou.aliyuncs.com", "fault:503"),
        ("sts-vpc.cn-hangzhou.aliyuncs.com", "ok"),
    ]
    [result] = out["results"]
    assert result == {"ok": True, "origin": "ACR GetAuthorizationToken (default identity: oidc_role_arn)"}, result
    assert summary["leaks"] == []


def test_default_takes_the_access_key_before_rrsa(world: AliyunWorld) -> None:
    """Both the AccessKey variables and RRSA's are there: `default` is the AccessKey pair, as the library orders
    it, and says so; STS is never asked."""
    env = {**{k: v for k, v in world.ready["env"].items() if k.startswith("ALIBABA_CLOUD_")}, **access_key(world)}
    out = world.inside("identity_logins", json.dumps([{"credentials": "default"}]), env=env, module=MODULE)
    summary = world.stop()

    assert out["results"] == [{"ok": True, "origin": "ACR GetAuthorizationToken (default identity: access_key)"}]
    assert summary["sts_calls"] == [] and [c["principal"] for c in _token_calls(summary)] == ["user/mirror-ci"]


def test_logins_through_the_ecs_role_leave_no_thread_behind(world: AliyunWorld) -> None:
    """`mirror serve` makes a login per job: five with `default` (no AccessKey, no RRSA: the ECS role) and five
    with `ecs_ram_role`, each through the metadata service, start no thread that outlives them (the library's
    ECS provider starts a scheduler thread of its own unless told not to)."""
    specs = [{"credentials": "default"}] * 5 + [{"credentials": "ecs_ram_role"}] * 5
    out = world.inside("identity_logins", json.dumps(specs), env=METADATA_ON, module=MODULE)
    summary = world.stop()

    assert out["threads_after"] == out["threads_before"], out["thread_names"]
    assert not [name for name in out["thread_names"] if "APScheduler" in name], out["thread_names"]
    origins = [result.get("origin") for result in out["results"]]
    assert (
        origins
        == ["ACR GetAuthorizationToken (default identity: ecs_ram_role)"] * 5
        + ["ACR GetAuthorizationToken (ecs_ram_role identity)"] * 5
    ), out["results"]
    assert {call["principal"].split("/")[1] for call in _token_calls(summary)} == {"mirror-ecs"}


def test_an_instance_id_the_registrys_challenge_contradicts_stops_the_login(world: AliyunWorld) -> None:
    """`instance_id` names the account's other instance while the registry's challenge names its own: the login
    stops, naming both and the setting, and asks ACR for nothing (no login for the other instance)."""
    other = world.ready["other_instance_id"]
    specs = [{"credentials": "access_key", "instance_id": other}]
    out = world.inside("identity_logins", json.dumps(specs), env=access_key(world), module=MODULE)
    summary = world.stop()

    [result] = out["results"]
    assert result["ok"] is False and result["kind"] == "AUTH", result
    for words in (other, world.ready["instance_id"], f"registries.{HOST}.aliyun.instance_id"):
        assert words in result["message"], result
    assert summary["openapi_calls"] == []


def test_provision_creates_nothing_on_the_instance_a_wrong_id_names(tmp_path: Path, world: AliyunWorld) -> None:
    """`provision: true` and an `instance_id` that names the account's other instance: the namespace is not created
    there (nor anywhere); the run stops with one line naming both instances, and nothing is pushed."""
    other = world.ready["other_instance_id"]
    path = config(world, tmp_path, namespace="mirror-new", credentials="access_key", instance_id=other, provision=True)
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=access_key(world))
    summary = world.stop()

    assert done.returncode == 1, done.stderr
    [line] = _said(done)
    assert other in line and world.ready["instance_id"] in line and "aliyun.instance_id" in line, done.stderr
    assert "CreateNamespace" not in [call["action"] for call in summary["openapi_calls"]]
    assert summary["other_instance_namespaces"] == {} and "mirror-new" not in summary["namespaces"]
    assert [r for r in summary["registry_requests"] if r["method"] in ("PUT", "POST", "PATCH")] == []


@pytest.mark.parametrize("world", [{"openapi_faults": ["pass", "lost"]}], indirect=True)
def test_a_create_namespace_whose_answer_was_lost_is_taken_as_created(world: AliyunWorld) -> None:
    """CreateNamespace is done at ACR but its answer is lost: tried again, it answers NAMESPACE_ALREADY_EXIST,
    which is the namespace wanted, not a refusal."""
    result = world.inside("provision_namespace", "mirror-new", env=access_key(world), module=MODULE)
    summary = world.stop()

    assert result["ok"] is True and result["creates_on_push"] is True, result
    assert "namespace mirror-new" in result["note"] and "created" in result["note"], result
    calls = [(call["action"], call["outcome"]) for call in summary["openapi_calls"]]
    assert calls[:3] == [
        ("GetNamespace", "NAMESPACE_NOT_EXIST"),
        ("CreateNamespace", "fault:lost"),
        ("CreateNamespace", "NAMESPACE_ALREADY_EXIST"),
    ], calls
    assert summary["namespaces"]["mirror-new"]["created_by"] == "user/mirror-ci"


@pytest.mark.parametrize("world", [{"registry": "down"}], indirect=True)
def test_a_registry_out_of_reach_is_said_as_itself_not_as_a_missing_instance_id(
    tmp_path: Path, world: AliyunWorld
) -> None:
    """No `instance_id`, and nothing answers at the registry: the run stops with the registry's own failure (the
    connection refused), where it said only that no instance id was known."""
    path = config(world, tmp_path, credentials="access_key")
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=access_key(world))
    world.stop()

    assert done.returncode != 0, done.stderr
    [line] = _said(done)
    assert "registry unreachable" in line and "Errno 111" in line and HOST in line, line  # refused
    assert "set aliyun.instance_id" not in line, line
