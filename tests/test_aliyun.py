"""mirror logging in to an ACR Enterprise instance with a RAM identity, the official SDKs' own request code running
against STS, the ACR OpenAPI and the instance's registry at their real names (tests/aliyunworld.py): RRSA and
AccessKeys, logins that lapse mid-run, namespaces missing, and every refusal as one line with nothing written."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_aliyun_world import AliyunWorld, start_world

HOST = "mirror-test-registry.cn-hangzhou.cr.aliyuncs.com"


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[AliyunWorld]:
    """The world of tests/aliyunworld.py; its options by indirect parametrization."""
    running = start_world(tmp_path / "aliyun", tmp_path / "aliyun.log", getattr(request, "param", {}))
    yield running
    running.stop()


def config(world: AliyunWorld, tmp_path: Path, namespace: str = "hami-system", **login: Any) -> Path:
    source = world.ready["source"]
    data = {
        "source": {"registry": source["host"]},
        "targets": [{"name": "hz", "registry": HOST, "namespace": namespace}],
        "images": [{"name": "hami", "source": source["repository"]}],
        "registries": {source["host"]: {"plain_http": True}, HOST: {"aliyun": login}},
        "output_dir": str(tmp_path / "out"),
        "state_dir": str(tmp_path / "state"),
        "values": {"unmirrored": "warn"},  # one image of HAMi's: the rest of its keys stay, said in the file
        "retry": {"base_delay": 0.05, "max_delay": 0.5, "max_elapsed": 30},
    }
    path = tmp_path / "mirror.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def mirror(world: AliyunWorld, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    done = world.run(sys.executable, "-m", "mirror", *args, "--json", cwd=tmp_path, env=env)
    return done


def secrets_of(world: AliyunWorld) -> list[str]:
    keys = world.ready["access_keys"]
    return [keys["with_permission"]["access_key_secret"], keys["without_permission"]["access_key_secret"]]


def rrsa(world: AliyunWorld) -> dict[str, str]:
    return {k: v for k, v in world.ready["env"].items() if k.startswith("ALIBABA_CLOUD_")}


def access_key(world: AliyunWorld, which: str = "with_permission") -> dict[str, str]:
    """The AccessKey pair's variables; with temporary STS keys (a CI job's), their security token too."""
    key = world.ready["access_keys"][which]
    env = {
        "ALIBABA_CLOUD_ACCESS_KEY_ID": key["access_key_id"],
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": key["access_key_secret"],
    }
    if "security_token" in key:
        env["ALIBABA_CLOUD_SECURITY_TOKEN"] = key["security_token"]
    return env


def test_rrsa_end_to_end_sync_and_discover_with_no_stored_secret(tmp_path: Path, world: AliyunWorld) -> None:
    path = config(world, tmp_path, credentials="oidc_role_arn")
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=rrsa(world))
    assert done.returncode == 0, done.stderr
    (image,) = json.loads(done.stdout)["images"]
    assert image["targets"][0]["verified"] is True
    assert image["targets"][0]["digest"] == world.ready["source"]["digest"]  # byte for byte
    again = mirror(world, tmp_path, "sync", "--discover", "--config", str(path), env=rrsa(world))
    assert again.returncode == 0, again.stderr
    (release,) = json.loads(again.stdout)
    assert release["images"][0]["targets"][0]["action"] == "up-to-date"
    summary = world.stop()
    assert summary["leaks"] == [], summary["leaks"]
    assert {call["role"] for call in summary["sts_calls"]} == {world.ready["role_arn"]}
    tokens = [call for call in summary["openapi_calls"] if call["action"] == "GetAuthorizationToken"]
    assert tokens and all(call["status"] == 200 and call["signature_verified"] for call in tokens)
    assert {call["credential"] for call in tokens} == {"sts"} or all(call["access_key_id"] for call in tokens)
    # the realm saw temporary logins only (and the anonymous pull check), each one still valid
    assert {login["credential"] for login in summary["realm_logins"]} <= {"valid", "anonymous"}
    for secret in (*secrets_of(world), Path(world.ready["token_file"]).read_text().strip()):
        assert secret not in done.stdout + done.stderr + again.stdout + again.stderr


def test_the_sdks_debug_switch_prints_no_credential(tmp_path: Path, world: AliyunWorld) -> None:
    """`DEBUG=sdk` (a switch the Alibaba Cloud SDKs read from the environment) makes them print every request's
    headers on stderr, the STS security token among them; a run with it set prints none of what it was issued."""
    path = config(world, tmp_path, credentials="oidc_role_arn")
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env={**rrsa(world), "DEBUG": "sdk"})
    assert done.returncode == 0, done.stderr
    summary = world.stop()
    issued = summary["secrets_issued"]
    assert any(secret.startswith("CAIS") for secret in issued)  # the STS token of the run's role session
    said = done.stdout + done.stderr
    for secret in (*issued, Path(world.ready["token_file"]).read_text().strip()):
        assert secret not in said
    assert "x-acs-security-token" not in said.lower(), done.stderr


def test_the_access_key_path_and_the_default_chain(tmp_path: Path, world: AliyunWorld) -> None:
    for credentials in ("access_key", "default"):
        path = config(world, tmp_path, credentials=credentials)
        done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=access_key(world))
        assert done.returncode == 0, done.stderr
    principals = {call["principal"] for call in world.stop()["openapi_calls"]}
    assert principals == {"user/mirror-ci"}


@pytest.mark.parametrize("world", [{"login_seconds": 4, "slow_blobs": 2}], indirect=True)
def test_a_copy_longer_than_the_login_completes_with_the_login_renewed(tmp_path: Path, world: AliyunWorld) -> None:
    path = config(world, tmp_path, credentials="oidc_role_arn")
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=rrsa(world))
    assert done.returncode == 0, done.stderr
    summary = world.stop()
    logins = [c for c in summary["openapi_calls"] if c["action"] == "GetAuthorizationToken" and c["status"] == 200]
    assert len(logins) >= 2  # renewed before it lapsed
    assert {login["credential"] for login in summary["realm_logins"]} <= {"valid", "anonymous", "expired"}


def test_a_missing_namespace_is_explained_in_one_line_or_created(tmp_path: Path, world: AliyunWorld) -> None:
    explained = config(world, tmp_path, namespace="mirror-new", credentials="access_key")
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(explained), env=access_key(world))
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.startswith("mirror: ")]
    assert len(lines) == 1 and "namespace mirror-new" in lines[0] and "CreateNamespace" in lines[0], done.stderr
    dry = config(world, tmp_path, namespace="mirror-new", credentials="access_key", provision=True)
    planned = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(dry), "--dry-run", env=access_key(world))
    # the plan cannot read a namespace that is not there yet; it says what a real run would do, and creates nothing
    assert "namespace mirror-new on " in planned.stderr and "missing; would be created" in planned.stderr
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(dry), env=access_key(world))
    assert done.returncode == 0, done.stderr
    actions = [call["action"] for call in world.stop()["openapi_calls"] if call["status"] == 200]
    assert actions.count("CreateNamespace") == 1  # by the provisioning run, never by the dry run


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("untrusted role", "AuthenticationFail"),
        ("no permission", "cr:GetAuthorizationToken"),
        ("unknown instance", "cri-nosuchinstance0"),
    ],
)
def test_refusals_are_one_line_and_nothing_is_written(
    tmp_path: Path, world: AliyunWorld, case: str, expected: str
) -> None:
    if case == "untrusted role":
        env = {**rrsa(world), "ALIBABA_CLOUD_ROLE_ARN": world.ready["untrusted_role_arn"]}
        path = config(world, tmp_path, credentials="oidc_role_arn")
    elif case == "no permission":
        env = access_key(world, "without_permission")
        path = config(world, tmp_path, credentials="access_key")
    else:
        env = access_key(world)
        path = config(world, tmp_path, credentials="access_key", instance_id="cri-nosuchinstance0")
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=env)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.startswith("mirror: ")]
    assert len(lines) == 1 and expected in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    summary = world.stop()
    assert [r for r in summary["registry_requests"] if r["method"] in ("PUT", "POST", "PATCH")] == []
    for secret in secrets_of(world):
        assert secret not in done.stdout + done.stderr


def test_the_default_chain_asks_the_sts_endpoint_rrsa_names(tmp_path: Path, world: AliyunWorld) -> None:
    """`credentials: default` on ACK: RRSA's step of the chain goes to ALIBABA_CLOUD_STS_ENDPOINT (the VPC STS the
    webhook injects), as `oidc_role_arn` does; the library alone would ask the public sts.aliyuncs.com."""
    env = rrsa(world)
    assert env["ALIBABA_CLOUD_STS_ENDPOINT"] == "sts-vpc.cn-hangzhou.aliyuncs.com"
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(config(world, tmp_path)), env=env)
    assert done.returncode == 0, done.stderr
    summary = world.stop()
    assert [(call["host"], call["outcome"]) for call in summary["sts_calls"]] == [
        ("sts-vpc.cn-hangzhou.aliyuncs.com", "ok")
    ]
    assert summary["leaks"] == []


@pytest.mark.parametrize("credentials", ["oidc_role_arn", "default"])
def test_sts_out_of_reach_is_one_line_without_the_request(tmp_path: Path, world: AliyunWorld, credentials: str) -> None:
    """The SDK's own error for an STS it cannot reach quotes the whole request URL, the OIDC token (a JWT) in its
    query string; the line mirror prints keeps what went wrong and none of the request."""
    env = {**rrsa(world), "ALIBABA_CLOUD_STS_ENDPOINT": "127.0.0.1:1"}  # loopback of the world: nothing listens
    path = config(world, tmp_path, credentials=credentials)
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=env)
    assert done.returncode == 1, done.stderr
    token = Path(world.ready["token_file"]).read_text().strip()
    said = done.stdout + done.stderr
    for secret in (token, *token.split(".")):
        assert secret not in said
    assert "OIDCToken" not in said and "Action=" not in said and "RoleArn=" not in said, done.stderr
    assert "Traceback" not in said
    lines = [line for line in done.stderr.splitlines() if line.startswith("mirror: ")]
    assert len(lines) == 1 and "port=1" in lines[0], done.stderr
    assert "Connection refused" in lines[0], lines[0]  # `default` with RRSA's variables is oidc_role_arn itself
    assert world.stop()["sts_calls"] == []


def test_an_sdk_error_quoting_an_answer_keeps_its_credentials_out() -> None:
    """The credentials library quotes STS's whole answer when it lacks a field: the secret comes first."""
    from alibabacloud_credentials.exceptions import CredentialException

    from mirror.aliyun.login import describe

    answer = {"Credentials": {"AccessKeySecret": "s3cret-of-the-key", "AccessKeyId": "STS.abc", "Expiration": "x"}}
    error = CredentialException(f"error retrieving credentials from oidc_role_arn result: {json.dumps(answer)}")
    said = describe(error)
    assert "s3cret-of-the-key" not in said and "error retrieving credentials from oidc_role_arn" in said, said


@pytest.mark.parametrize("case", ["unknown instance", "user ACR has never seen"])
def test_a_refusal_that_is_not_a_missing_namespace_is_said_as_itself(
    tmp_path: Path, world: AliyunWorld, case: str
) -> None:
    """INSTANCE_NOT_EXIST (a wrong instance_id) and USER_NOT_EXIST (a RAM identity that never opened the ACR
    console) are not a missing namespace: no "create the namespace", and a dry run does not plan to create it."""
    if case == "unknown instance":
        env, instance, code = access_key(world), "cri-nosuchinstance0", "INSTANCE_NOT_EXIST"
        advice = f"check registries.{HOST}.aliyun.instance_id"
    else:
        env, instance, code = access_key(world, "never_in_acr"), world.ready["instance_id"], "USER_NOT_EXIST"
        advice = "open the Container Registry console once"
    for provision, dry_run in ((False, False), (True, True)):
        path = config(world, tmp_path, credentials="access_key", instance_id=instance, provision=provision)
        done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), *(["--dry-run"] * dry_run), env=env)
        assert done.returncode == 1, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.startswith("mirror: ")]
        assert len(lines) == 1 and code in lines[0] and advice in lines[0] and instance in lines[0], done.stderr
        assert "CreateNamespace" not in done.stderr and "would be created" not in done.stderr, done.stderr
    actions = [call["action"] for call in world.stop()["openapi_calls"]]
    assert "CreateNamespace" not in actions


def test_an_enterprise_namespace_with_a_path_is_looked_up_by_its_namespace(tmp_path: Path, world: AliyunWorld) -> None:
    """`namespace: hami-system/mirror` (the namespace, then the repositories' path, as the config allows on an
    Enterprise instance) was looked up whole: "namespace hami-system/mirror does not exist", whatever was there."""
    namespace = world.ready["namespace"]
    path = config(world, tmp_path, namespace=f"{namespace}/mirror", credentials="access_key")
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=access_key(world))
    looked_up = [call for call in world.stop()["openapi_calls"] if call["action"] == "GetNamespace"]
    assert looked_up and {call["outcome"] for call in looked_up} == {"success"}, (looked_up, done.stderr)
    assert "does not exist" not in done.stderr


def test_an_enterprise_target_not_ready_leaves_the_other_targets_to_go_on(tmp_path: Path, world: AliyunWorld) -> None:
    """A missing namespace at one Enterprise target (or its OpenAPI refusing, or out of reach) stopped the run
    before any copy: the healthy target got no copy and no values either, every scheduled run."""
    source = world.ready["source"]
    path = config(world, tmp_path, namespace="mirror-new", credentials="access_key")
    data = yaml.safe_load(path.read_text())
    data["targets"].append({"name": "local", "registry": source["host"], "namespace": "mirrored"})
    path.write_text(yaml.safe_dump(data))
    done = mirror(world, tmp_path, "sync", "v2.10.0", "--config", str(path), env=access_key(world))
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    (image,) = report["images"]
    assert [(t["target"], t["verified"]) for t in image["targets"]] == [("local", True)]
    assert [v["target"] for v in report["values"]] == ["local"]
    (error,) = report["errors"]
    assert error.startswith("target hz: nothing copied there: ") and "namespace mirror-new" in error
    assert (tmp_path / "out" / "local" / "hami-ack-values.yaml").is_file()
