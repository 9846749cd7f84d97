"""RAM logins to ACR at Alibaba Cloud's real names (tests/aliyunworld.py), driven by the OFFICIAL SDKs'
own request code: `alibabacloud-credentials` (RRSA's `oidc_role_arn`, the default chain, AccessKeys) and
`alibabacloud-cr20181201` (`GetAuthorizationToken`, namespaces, repositories), run inside the world's network and
mount namespaces, then a real `docker-registry` push with the temporary login. These tests prove the world answers
as the real services do, and refuses what they refuse; mirror's own credential source is tested against it
elsewhere (run mirror inside with `AliyunWorld.run`)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin

import httpx
import pytest

ROOT = Path(__file__).parents[1]
CR_ENDPOINT = "cr.cn-hangzhou.aliyuncs.com"


@dataclass
class AliyunWorld:
    directory: Path
    process: subprocess.Popen[bytes]
    ready: dict[str, Any]
    started_in: float

    @property
    def ready_path(self) -> str:
        return str(self.directory / "ready.json")

    def environment(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """This process's environment without any Alibaba Cloud or CA settings, plus the world's must-haves (no ECS
        metadata, no CLI profile, its CA) and `extra`."""
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("ALIBABA_CLOUD_") and k not in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
        }
        must = {k: self.ready["env"][k] for k in self.ready["env"] if not k.startswith("ALIBABA_CLOUD_")}
        must |= {"ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true", "ALIBABA_CLOUD_CLI_PROFILE_DISABLED": "true"}
        return {**base, **must, **(extra or {})}

    def run(
        self, *command: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """`command` inside the world's network and mount namespaces (its names, its CA); e.g.
        `world.run(sys.executable, "-m", "mirror", "sync", ..., env=world.ready["env"])` for mirror with RRSA."""
        nsenter = ["nsenter", "--target", str(self.ready["pid"]), "--net", "--mount", "--"]
        # change directory inside the mount namespace: a directory opened outside it is another mount there
        shell = ["sh", "-c", 'cd "$0" && exec "$@"', str(cwd), *command]
        return subprocess.run(
            [*nsenter, *shell], env=self.environment(env), capture_output=True, text=True, timeout=timeout
        )

    def inside(
        self, function: str, *args: str, env: dict[str, str] | None = None, module: str = "tests.test_aliyun_world"
    ) -> Any:
        """`function(ready.json path, *args)` of `module` (this one unless given), run inside the world; its JSON
        answer."""
        code = f"import json, sys\nfrom {module} import {function} as f\nprint('\\n' + json.dumps(f(*sys.argv[1:])))"
        done = self.run(sys.executable, "-c", code, self.ready_path, *args, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def snapshot(self) -> dict[str, Any]:
        """What the world has seen so far (SIGUSR1 writes summary.json; the world keeps running)."""
        summary = self.directory / "summary.json"
        summary.unlink(missing_ok=True)
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not summary.exists():
            assert time.monotonic() < deadline, "no summary"
            time.sleep(0.05)
        return dict(json.loads(summary.read_text()))

    def stop(self) -> dict[str, Any]:
        """Stop the world; what its servers saw."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)
        return dict(json.loads((self.directory / "summary.json").read_text()))


def start_world(directory: Path, log: Path, options: dict[str, Any]) -> AliyunWorld:
    command = ["unshare", "--net", "--mount", "--", sys.executable, "-m", "tests.aliyunworld", str(directory)]
    for name, value in options.items():  # faults as lists: {"openapi_faults": ["503", "drop"]}
        command += [f"--{name.replace('_', '-')}", ",".join(value) if isinstance(value, list) else str(value)]
    started = time.monotonic()
    with log.open("wb") as output:
        process = subprocess.Popen(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
    deadline = started + 60
    while not (directory / "ready.json").exists():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "the world did not start"
        time.sleep(0.05)
    ready = json.loads((directory / "ready.json").read_text())
    return AliyunWorld(directory, process, ready, time.monotonic() - started)


@pytest.fixture
def aliyun_world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[AliyunWorld]:
    """STS, the ACR OpenAPI, an Enterprise instance and a source registry at their names (tests/aliyunworld.py).
    Options by indirect parametrization: `{"login_seconds": 5, "sts_seconds": 30, "slow_blobs": 1}`, and faults
    (`{"openapi_faults": ["503", "throttling:1500", "drop"], "sts_faults": [...], "metadata_faults": ["stall"]}`)
    or `{"manual_namespace": "name"}` (a namespace with automatic repository creation off)."""
    options: dict[str, Any] = getattr(request, "param", {})
    world = start_world(tmp_path / "aliyun", tmp_path / "aliyun.log", options)
    yield world
    world.stop()


# --- what runs inside the namespace -------------------------------------------------------------------------------


def _ready(path: str) -> dict[str, Any]:
    return dict(json.loads(Path(path).read_text()))


def _cr(credential: Any = None, *, key: dict[str, str] | None = None, endpoint: str = CR_ENDPOINT, **extra: Any) -> Any:
    """An `alibabacloud_cr20181201` client on a credentials client, or on an AccessKey pair."""
    from alibabacloud_cr20181201.client import Client
    from alibabacloud_tea_openapi import utils_models

    config = utils_models.Config(endpoint=endpoint, region_id="cn-hangzhou", credential=credential, **extra)
    if key is not None:
        config.access_key_id, config.access_key_secret = key["access_key_id"], key["access_key_secret"]
    return Client(config)


def _oidc(ready: dict[str, Any], role: str, token_file: str, session: str = "mirror-test", **extra: Any) -> Any:
    from alibabacloud_credentials.client import Client
    from alibabacloud_credentials.models import Config

    return Client(
        Config(
            type="oidc_role_arn",
            role_arn=role,
            oidc_provider_arn=extra.pop("provider", ready["oidc_provider_arn"]),
            oidc_token_file_path=token_file,
            role_session_name=session,
            **extra,
        )
    )


def _token(client: Any, instance: str) -> dict[str, Any]:
    from alibabacloud_cr20181201 import models

    body = client.get_authorization_token(models.GetAuthorizationTokenRequest(instance_id=instance)).body
    return dict(body.to_map())


def _refusal(call: Callable[[], Any]) -> dict[str, Any]:
    """How an SDK call ended: its answer's body, or the service's error as the SDK surfaced it."""
    from alibabacloud_credentials.exceptions import CredentialException
    from alibabacloud_tea_openapi.exceptions import ClientException

    try:
        answer = call()
    except ClientException as error:
        return {"code": error.code, "status": error.status_code, "access_denied_detail": error.access_denied_detail}
    except CredentialException as error:
        # "error refreshing credentials from oidc_role_arn, http_code: 401, result: {...}"
        text = str(error)
        status = re.search(r"http_code: (\d+)", text)
        body = json.loads(text.partition("result: ")[2] or "{}")
        return {"code": body.get("Code"), "status": int(status[1]) if status else None, "sts": body}
    body = getattr(answer, "body", answer)
    return {"body": body.to_map() if hasattr(body, "to_map") else body}


def _probe(host: str, username: str, password: str, repository: str) -> dict[str, Any]:
    """A registry push with a temporary login, as any client does it: challenge, realm (Basic), then a blob upload,
    a manifest PUT and a manifest HEAD with the bearer token."""
    base = f"https://{host}"
    config = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'
    layer = b"probe layer for " + repository.encode()
    digests = ["sha256:" + hashlib.sha256(blob).hexdigest() for blob in (config, layer)]
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": digests[0],
                "size": len(config),
            },
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digests[1], "size": len(layer)}
            ],
        }
    ).encode()
    with httpx.Client(timeout=30) as http:
        first = http.get(f"{base}/v2/")
        challenge = dict(re.findall(r'(\w+)="([^"]*)"', first.headers.get("WWW-Authenticate", "")))
        result: dict[str, Any] = {"challenge": challenge, "uploads": []}
        scope = {"service": challenge["service"], "scope": f"repository:{repository}:pull,push"}
        answer = http.get(challenge["realm"], params=scope, auth=(username, password) if username else None)
        result["realm_status"] = answer.status_code
        if answer.status_code != 200:
            return result
        headers = {"Authorization": f"Bearer {answer.json()['token']}"}
        for blob, digest in zip((config, layer), digests, strict=True):
            start = http.post(f"{base}/v2/{repository}/blobs/uploads/", headers=headers)
            result["uploads"].append(start.status_code)
            if start.status_code != 202:
                result["refusal"] = start.json()
                return result
            location = urljoin(base, start.headers["Location"])
            joiner = "&" if "?" in location else "?"
            done = http.put(f"{location}{joiner}digest={quote(digest)}", content=blob, headers=headers)
            result["uploads"].append(done.status_code)
        kind = {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}
        url = f"{base}/v2/{repository}/manifests/probe"
        result["manifest"] = http.put(url, content=manifest, headers={**headers, **kind}).status_code
        result["head"] = http.head(url, headers={**headers, "Accept": kind["Content-Type"]}).status_code
        return result


def rrsa_push(ready_path: str, repository: str) -> dict[str, Any]:
    """RRSA with an explicit `oidc_role_arn` credentials client, GetAuthorizationToken, a push with the login."""
    ready = _ready(ready_path)
    credential = _oidc(ready, ready["role_arn"], ready["token_file"])
    login = _token(_cr(credential), ready["instance_id"])
    probe = _probe(ready["registry"], login["TempUsername"], login["AuthorizationToken"], repository)
    return {"login": {k: v for k, v in login.items() if k != "AuthorizationToken"}, "probe": probe}


def default_chain_push(ready_path: str, repository: str) -> dict[str, Any]:
    """The default credentials chain, from whatever the environment holds (RRSA variables or AccessKey ones)."""
    from alibabacloud_credentials.client import Client

    ready = _ready(ready_path)
    credential = Client()
    provider = credential.get_credential().provider_name
    login = _token(_cr(credential), ready["instance_id"])
    probe = _probe(ready["registry"], login["TempUsername"], login["AuthorizationToken"], repository)
    return {
        "provider": provider,
        "login": {k: v for k, v in login.items() if k != "AuthorizationToken"},
        "probe": probe,
    }


def access_key_provisioning(ready_path: str) -> dict[str, Any]:
    """The AccessKey path, provisioning as an Enterprise instance needs it, over the VPC names."""
    from alibabacloud_cr20181201 import models

    ready = _ready(ready_path)
    instance = ready["instance_id"]
    client = _cr(key=ready["access_keys"]["with_permission"], endpoint="cr-vpc.cn-hangzhou.aliyuncs.com")
    out: dict[str, Any] = {}
    login = _token(client, instance)
    user, password = login["TempUsername"], login["AuthorizationToken"]

    def namespace(name: str) -> dict[str, Any]:
        return _refusal(
            lambda: client.get_namespace(models.GetNamespaceRequest(instance_id=instance, namespace_name=name))
        )

    def create(name: str) -> dict[str, Any]:
        request = models.CreateNamespaceRequest(
            instance_id=instance, namespace_name=name, auto_create_repo=True, default_repo_type="PRIVATE"
        )
        return _refusal(lambda: client.create_namespace(request))

    out["existing"] = namespace(ready["namespace"])
    out["missing"] = namespace("mirror-new")
    out["push_before"] = _probe(ready["registry_vpc"], user, password, "mirror-new/hami")
    out["create"] = create("mirror-new")
    out["create_again"] = create("mirror-new")
    out["push_after"] = _probe(ready["registry_vpc"], user, password, "mirror-new/hami")
    repository = models.CreateRepositoryRequest(
        instance_id=instance, repo_namespace_name="mirror-new", repo_name="certgen", repo_type="PRIVATE", summary="x"
    )
    out["create_repository"] = _refusal(lambda: client.create_repository(repository))
    out["get_repository"] = _refusal(
        lambda: client.get_repository(
            models.GetRepositoryRequest(instance_id=instance, repo_namespace_name="mirror-new", repo_name="hami")
        )
    )
    out["list"] = _refusal(lambda: client.list_namespace(models.ListNamespaceRequest(instance_id=instance)))
    out["endpoint"] = _refusal(
        lambda: client.get_instance_endpoint(
            models.GetInstanceEndpointRequest(instance_id=instance, endpoint_type="internet", module_name="Registry")
        )
    )
    return out


def refusals(ready_path: str) -> dict[str, Any]:
    """Everything the real services refuse, each through the SDK call that would meet it."""
    ready = _ready(ready_path)
    instance = ready["instance_id"]
    out: dict[str, Any] = {}
    out["untrusted_role"] = _refusal(_oidc(ready, ready["untrusted_role_arn"], ready["token_file"]).get_credential)
    missing_role = ready["role_arn"].rpartition("/")[0] + "/no-such-role"
    out["missing_role"] = _refusal(_oidc(ready, missing_role, ready["token_file"]).get_credential)
    wrong_provider = ready["oidc_provider_arn"] + "x"
    out["unknown_provider"] = _refusal(
        _oidc(ready, ready["role_arn"], ready["token_file"], provider=wrong_provider).get_credential
    )
    out["other_subject"] = _refusal(_oidc(ready, ready["role_arn"], ready["other_subject_token_file"]).get_credential)
    out["expired_token"] = _refusal(_oidc(ready, ready["role_arn"], ready["expired_token_file"]).get_credential)
    header, payload, signature = Path(ready["token_file"]).read_text().split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["exp"] += 86400  # a longer life than the issuer gave it
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    with tempfile.NamedTemporaryFile("w", suffix=".jwt", delete=False) as handle:
        handle.write(f"{header}.{forged}.{signature}")
    out["forged_token"] = _refusal(_oidc(ready, ready["role_arn"], handle.name).get_credential)
    os.unlink(handle.name)
    out["no_permission"] = _refusal(lambda: _token(_cr(key=ready["access_keys"]["without_permission"]), instance))
    wrong = {**ready["access_keys"]["with_permission"], "access_key_secret": "not-the-secret-0123456789abcd"}
    out["bad_signature"] = _refusal(lambda: _token(_cr(key=wrong), instance))
    unknown = {**ready["access_keys"]["with_permission"], "access_key_id": "LTAI5tNoSuchKey0123456789"}
    out["unknown_key"] = _refusal(lambda: _token(_cr(key=unknown), instance))
    good = _cr(key=ready["access_keys"]["with_permission"])
    out["unknown_instance"] = _refusal(lambda: _token(good, "cri-nosuchinstance"))
    sts = _oidc(ready, ready["role_arn"], ready["token_file"]).get_credential()
    mismatched = _cr(
        key={"access_key_id": sts.access_key_id, "access_key_secret": sts.access_key_secret},
        security_token=sts.security_token[:-4] + "AAAA",
    )
    out["mismatched_token"] = _refusal(lambda: _token(mismatched, instance))
    login = _token(good, instance)
    with httpx.Client(timeout=30) as http:
        scope = {"service": ready["service"], "scope": f"repository:{ready['namespace']}/probe:pull"}
        out["realm_wrong_password"] = http.get(
            ready["realm"], params=scope, auth=(login["TempUsername"], "x:y")
        ).status_code
        out["realm_anonymous_push"] = _probe(ready["registry"], "", "", f"{ready['namespace']}/anonymous")
    return out


def lapsing_login(ready_path: str) -> dict[str, Any]:
    """A login used at once, then again a second after its ExpireTime."""
    ready = _ready(ready_path)
    login = _token(_cr(key=ready["access_keys"]["with_permission"]), ready["instance_id"])
    expires = login["ExpireTime"] / 1000
    out: dict[str, Any] = {"lifetime": expires - time.time()}
    scope = {"service": ready["service"], "scope": f"repository:{ready['namespace']}/probe:pull,push"}
    auth = (login["TempUsername"], login["AuthorizationToken"])
    with httpx.Client(timeout=30) as http:
        out["fresh"] = http.get(ready["realm"], params=scope, auth=auth).status_code
        time.sleep(max(0.0, expires - time.time()) + 1)
        lapsed = http.get(ready["realm"], params=scope, auth=auth)
        out["lapsed"] = lapsed.status_code
        out["lapsed_body"] = lapsed.json()
        wrong = http.get(ready["realm"], params=scope, auth=(login["TempUsername"], "not-a-login"))
        out["wrong_body"] = wrong.json()
    return out


def sts_bounded(ready_path: str) -> dict[str, Any]:
    """STS credentials from RRSA: the login they get ends with them; once they lapse, the OpenAPI refuses them."""
    from alibabacloud_credentials.provider import OIDCRoleArnCredentialsProvider

    ready = _ready(ready_path)
    provider = OIDCRoleArnCredentialsProvider(
        role_arn=ready["role_arn"],
        oidc_provider_arn=ready["oidc_provider_arn"],
        oidc_token_file_path=ready["token_file"],
        role_session_name="bounded",
    )
    credentials = provider.get_credentials()
    key = {"access_key_id": credentials.get_access_key_id(), "access_key_secret": credentials.get_access_key_secret()}
    client = _cr(key=key, security_token=credentials.get_security_token())
    login = _token(client, ready["instance_id"])
    out = {"sts_expiration": credentials.get_expiration(), "expire_time": login["ExpireTime"]}
    time.sleep(max(0.0, credentials.get_expiration() - time.time()) + 1)
    out["after"] = _refusal(lambda: _token(client, ready["instance_id"]))
    with httpx.Client(timeout=30) as http:
        scope = {"service": ready["service"], "scope": f"repository:{ready['namespace']}/probe:pull"}
        auth = (login["TempUsername"], login["AuthorizationToken"])
        out["realm_after"] = http.get(ready["realm"], params=scope, auth=auth).status_code
    return out


def source_blob(ready_path: str) -> dict[str, Any]:
    """The seeded index at the source, and how long one layer GET takes."""
    ready = _ready(ready_path)
    source = ready["source"]
    base = f"http://{source['host']}/v2/{source['repository']}"
    accept = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json"
    with httpx.Client(timeout=60) as http:
        index = http.get(f"{base}/manifests/{source['tag']}", headers={"Accept": accept})
        child = http.get(f"{base}/manifests/{index.json()['manifests'][0]['digest']}", headers={"Accept": accept})
        layer = child.json()["layers"][-1]
        started = time.monotonic()
        blob = http.get(f"{base}/blobs/{layer['digest']}")
        seconds = time.monotonic() - started
    return {
        "digest": index.headers.get("Docker-Content-Digest"),
        "platforms": [m["platform"] for m in index.json()["manifests"]],
        "layers": len(child.json()["layers"]),
        "blob_ok": "sha256:" + hashlib.sha256(blob.content).hexdigest() == layer["digest"],
        "blob_size": len(blob.content),
        "seconds": seconds,
    }


def leaky_client(ready_path: str) -> dict[str, Any]:
    """A careless client: the temporary password in the realm's URL and sent to the registry itself."""
    ready = _ready(ready_path)
    login = _token(_cr(key=ready["access_keys"]["with_permission"]), ready["instance_id"])
    with httpx.Client(timeout=30) as http:
        params = {"service": ready["service"], "password": login["AuthorizationToken"]}
        realm = http.get(ready["realm"], params=params).status_code
        registry = http.get(
            f"https://{ready['registry']}/v2/", auth=(login["TempUsername"], login["AuthorizationToken"])
        ).status_code
    return {"realm": realm, "registry": registry}


# --- the tests ----------------------------------------------------------------------------------------------------


def _calls(summary: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [c for c in summary["openapi_calls"] if c["action"] == action]


def test_rrsa_login_through_the_sdks_pushes_to_the_instance(aliyun_world: AliyunWorld) -> None:
    result = aliyun_world.inside("rrsa_push", "hami-system/probe")
    summary = aliyun_world.stop()
    ready = aliyun_world.ready

    login, probe = result["login"], result["probe"]
    assert login["IsSuccess"] is True and login["Code"] == "success"
    assert login["TempUsername"] == ready["temp_username"]
    assert 3500 < login["ExpireTime"] / 1000 - time.time() <= 3600
    assert probe["challenge"] == {"realm": ready["realm"], "service": ready["service"]}
    assert probe["realm_status"] == 200
    assert probe["uploads"] == [202, 201, 202, 201] and probe["manifest"] == 201 and probe["head"] == 200

    [sts] = summary["sts_calls"]
    assert sts["outcome"] == "ok" and sts["role"] == ready["role_arn"]
    assert sts["subject"] == "system:serviceaccount:mirror:mirror" and sts["host"] == "sts.aliyuncs.com"
    [call] = _calls(summary, "GetAuthorizationToken")
    assert call["principal"] == "assumed-role/mirror-acr/mirror-test" and call["credential"] == "sts"
    assert call["signature"] == "ACS3-HMAC-SHA256" and call["signature_verified"] is True
    assert call["instance"] == ready["instance_id"] and call["outcome"] == "success"
    assert call["credentials_provider"] == "oidc_role_arn"
    [realm] = summary["realm_logins"]
    assert realm["credential"] == "valid" and realm["principal"] == "assumed-role/mirror-acr/mirror-test"
    assert realm["granted"] == ["hami-system/probe:pull,push"]
    assert summary["repositories"]["hami-system/probe"]["created_by"] == "push"
    assert summary["leaks"] == []


@pytest.mark.parametrize("chain", ["rrsa", "access_key"])
def test_the_default_chain_from_the_environment(aliyun_world: AliyunWorld, chain: str) -> None:
    ready = aliyun_world.ready
    if chain == "rrsa":
        env = dict(ready["env"])
    else:
        key = ready["access_keys"]["with_permission"]
        env = {
            "ALIBABA_CLOUD_ACCESS_KEY_ID": key["access_key_id"],
            "ALIBABA_CLOUD_ACCESS_KEY_SECRET": key["access_key_secret"],
        }
    result = aliyun_world.inside("default_chain_push", f"{ready['namespace']}/{chain}", env=env)
    summary = aliyun_world.stop()

    assert result["probe"]["manifest"] == 201 and result["probe"]["head"] == 200
    [call] = _calls(summary, "GetAuthorizationToken")
    assert call["signature_verified"] is True
    if chain == "rrsa":
        assert result["provider"] == "default/oidc_role_arn"
        assert call["principal"].startswith("assumed-role/mirror-acr/credentials-python-")
        assert [c["outcome"] for c in summary["sts_calls"]] == ["ok"]
    else:
        assert result["provider"] == "default/env"
        assert call["principal"] == "user/mirror-ci" and call["credential"] == "static"
        assert summary["sts_calls"] == []
    assert summary["leaks"] == []


def test_the_access_key_path_provisions_namespaces(aliyun_world: AliyunWorld) -> None:
    out = aliyun_world.inside("access_key_provisioning")
    summary = aliyun_world.stop()
    ready = aliyun_world.ready

    assert out["existing"]["body"]["IsSuccess"] is True
    assert out["existing"]["body"]["NamespaceName"] == ready["namespace"]
    assert out["missing"]["body"] == {"Code": "NAMESPACE_NOT_EXIST", "IsSuccess": False, "RequestId": ANY_ID}
    before = out["push_before"]
    assert before["challenge"]["realm"] == "https://dockerauth-ee-vpc.cn-hangzhou.aliyuncs.com/auth"
    assert before["realm_status"] == 200 and before["uploads"] == [403]
    assert before["refusal"]["errors"][0]["code"] == "DENIED"
    assert "namespace mirror-new does not exist" in before["refusal"]["errors"][0]["detail"][0]["Reason"]
    assert out["create"]["body"]["Code"] == "success"
    assert out["create_again"]["body"]["Code"] == "NAMESPACE_ALREADY_EXIST"
    after = out["push_after"]
    assert after["uploads"] == [202, 201, 202, 201] and after["manifest"] == 201 and after["head"] == 200
    assert out["create_repository"]["body"]["RepoId"].startswith("crr-")
    assert out["get_repository"]["body"]["RepoType"] == "PRIVATE"  # auto-created by the push, private
    names = [n["NamespaceName"] for n in out["list"]["body"]["Namespaces"]]
    assert names == [ready["namespace"], "mirror-new"] and out["list"]["body"]["TotalCount"] == "2"
    assert out["endpoint"]["body"]["Domains"] == [{"Domain": ready["registry"], "Type": "SYSTEM"}]

    assert {c["host"] for c in summary["openapi_calls"]} == {"cr-vpc.cn-hangzhou.aliyuncs.com"}
    assert all(c["principal"] == "user/mirror-ci" and c["signature_verified"] for c in summary["openapi_calls"])
    assert summary["namespaces"]["mirror-new"]["created_by"] == "user/mirror-ci"
    assert set(summary["repositories"]) == {"mirror-new/hami", "mirror-new/certgen"}
    denied = [r for r in summary["registry_requests"] if r["denied"]]
    assert [(r["method"], r["status"]) for r in denied] == [("POST", 403)]
    assert summary["leaks"] == []


class _AnyId:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and re.fullmatch(r"[0-9A-F-]{36}", other) is not None

    def __hash__(self) -> int:
        return 0


ANY_ID = _AnyId()


def test_refusals_carry_the_real_codes(aliyun_world: AliyunWorld) -> None:
    out = aliyun_world.inside("refusals")
    summary = aliyun_world.stop()

    def code(case: str) -> tuple[str | None, int | None]:
        return out[case]["code"], out[case]["status"]

    assert code("untrusted_role") == ("AuthenticationFail.NoPermission", 401)
    assert out["untrusted_role"]["sts"]["Message"] == "There is no permission"
    assert out["untrusted_role"]["sts"]["HostId"] == "sts.aliyuncs.com"
    assert code("missing_role") == ("EntityNotExist.Role", 404)
    assert code("unknown_provider") == ("AuthenticationFail.NoPermission", 401)
    assert out["unknown_provider"]["sts"]["Message"] == "No such OIDC Provider registered."
    assert code("other_subject") == ("AuthenticationFail.NoPermission", 401)
    assert code("expired_token") == ("AuthenticationFail.OIDCToken.Expired", 401)
    assert code("forged_token") == ("AuthenticationFail.OIDCToken.InvalidSignature", 401)
    assert code("no_permission") == ("Forbidden.RAM", 403)
    assert out["no_permission"]["access_denied_detail"]["AuthAction"] == "cr:GetAuthorizationToken"
    assert out["no_permission"]["access_denied_detail"]["NoPermissionType"] == "ImplicitDeny"
    assert code("bad_signature") == ("SignatureDoesNotMatch", 400)
    assert code("unknown_key") == ("InvalidAccessKeyId.NotFound", 404)
    assert code("mismatched_token") == ("InvalidSecurityToken.MismatchWithAccessKey", 400)
    assert out["unknown_instance"]["body"]["Code"] == "INSTANCE_NOT_EXIST"
    assert out["unknown_instance"]["body"]["IsSuccess"] is False
    assert out["realm_wrong_password"] == 401
    anonymous = out["realm_anonymous_push"]
    assert anonymous["realm_status"] == 200 and anonymous["uploads"] == [401]  # a token for nothing

    outcomes = {(c["role"].rpartition("/")[2], c["outcome"]) for c in summary["sts_calls"]}
    assert ("untrusted", "AuthenticationFail.NoPermission") in outcomes and ("mirror-acr", "ok") in outcomes
    by_outcome = {c["outcome"]: c for c in summary["openapi_calls"]}
    assert by_outcome["SignatureDoesNotMatch"]["signature_verified"] is False
    assert by_outcome["Forbidden.RAM"]["signature_verified"] is True
    assert by_outcome["Forbidden.RAM"]["principal"] == "user/no-acr"
    assert by_outcome["INSTANCE_NOT_EXIST"]["instance"] == "cri-nosuchinstance"
    assert [r["credential"] for r in summary["realm_logins"]] == ["unknown", "anonymous"]
    assert summary["leaks"] == []


@pytest.mark.parametrize("aliyun_world", [{"login_seconds": 15}], indirect=True)
def test_a_login_past_its_lifetime_is_refused_like_a_wrong_password(aliyun_world: AliyunWorld) -> None:
    out = aliyun_world.inside("lapsing_login")
    summary = aliyun_world.stop()

    # the lifetime issued (not a default), less the child's own way from the issue to its clock reading
    assert 5 < out["lifetime"] <= 15
    assert out["fresh"] == 200
    assert out["lapsed"] == 401 and out["lapsed_body"] == out["wrong_body"]
    assert [r["credential"] for r in summary["realm_logins"]] == ["valid", "expired", "unknown"]


@pytest.mark.parametrize("aliyun_world", [{"sts_seconds": 15}], indirect=True)
def test_sts_credentials_bound_the_login_and_lapse(aliyun_world: AliyunWorld) -> None:
    out = aliyun_world.inside("sts_bounded")
    summary = aliyun_world.stop()

    assert out["expire_time"] == out["sts_expiration"] * 1000  # the login ends with the STS credentials
    assert out["after"]["code"] == "InvalidSecurityToken.Expired" and out["after"]["status"] == 400
    assert out["realm_after"] == 401
    assert [c["lifetime"] for c in summary["sts_calls"]] == [15]


@pytest.mark.parametrize("aliyun_world", [{"slow_blobs": 1.5}], indirect=True)
def test_the_source_holds_the_sample_and_serves_blobs_slowly(aliyun_world: AliyunWorld) -> None:
    out = aliyun_world.inside("source_blob")
    summary = aliyun_world.stop()
    source = aliyun_world.ready["source"]

    assert out["digest"] == source["digest"] and source["blobs"] >= 7
    assert {p["architecture"] for p in out["platforms"]} == {"amd64", "arm64", "unknown"}
    assert out["layers"] == 3 and out["blob_ok"] and out["blob_size"] == 1024 * 1024
    assert out["seconds"] >= 1.5
    [blob] = [r for r in summary["source_requests"] if "/blobs/" in r["path"]]
    assert blob["seconds"] >= 1.5 and blob["status"] == 200


def test_secrets_where_they_do_not_belong_are_reported(aliyun_world: AliyunWorld) -> None:
    out = aliyun_world.inside("leaky_client")
    summary = aliyun_world.stop()

    assert out == {"realm": 200, "registry": 401}
    leaks = {(leak["kind"], leak["service"], leak["where"]) for leak in summary["leaks"]}
    assert leaks == {
        ("registry_password", "realm", "query:password"),
        ("registry_password", "registry", "header:authorization(basic)"),
    }


def test_the_world_starts_quickly(aliyun_world: AliyunWorld) -> None:
    assert aliyun_world.started_in < 15
    snapshot = aliyun_world.snapshot()
    assert snapshot["namespaces"].keys() == {"hami-system"} and snapshot["leaks"] == []
    assert aliyun_world.process.poll() is None  # a snapshot does not stop it
