"""ACR as it really is: refused manifest classes, rewritten indexes, platform filters, pull secrets,
edition rules and the ACK bundle. The ACR-like target is a real registry with ACR's manifest policy."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mirror import acr
from mirror.chart.source import HELM_CONFIG
from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.engine.policy import SOURCE_DIGEST_ANNOTATION
from mirror.oci import DOCKER_MANIFEST, OCI_EMPTY, OCI_INDEX, OCI_MANIFEST, Manifest, sha256_digest
from mirror.registry import RegistryClient, RegistryError
from mirror.settings import ConfigError, load_settings
from mirror.values import dra_rbac, scheduler_service_account
from tests.support import (
    beyond_heads,
    manifest_bytes,
    manifest_digest,
    requests_since,
    sync_json,
    with_client,
    write_config,
)
from tests.test_sync import VERSION, seed_release


def index_of(registry: LocalRegistry, repository: str, ref: str) -> dict[str, Any]:
    return dict(json.loads(manifest_bytes(registry, repository, ref)))


def hami_result(report: dict[str, Any]) -> dict[str, Any]:
    return dict(report["images"][0]["targets"][0])


def test_auto_rewrites_the_index_when_acr_refuses_attestations(
    tmp_path: Path, source: LocalRegistry, acr_like: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    hami, _ = seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [acr_like])

    code, report, err = sync_json(config, capsys, VERSION)

    assert code == 0, err
    result = hami_result(report)
    source_index = json.loads(hami.manifests[hami.digest])
    runnable = [e["digest"] for e in source_index["manifests"] if e["platform"]["os"] != "unknown"]
    attestations = [e["digest"] for e in source_index["manifests"] if e["platform"]["os"] == "unknown"]
    rewrite = result["rewrite"]
    assert rewrite["source_digest"] == hami.digest != rewrite["target_digest"] == result["digest"]
    assert sorted(d["digest"] for d in rewrite["dropped"]) == sorted(attestations)
    assert all("unknown manifest class" in d["reason"] for d in rewrite["dropped"])
    target_index = index_of(acr_like, "mirrored/hami", VERSION)
    assert [e["digest"] for e in target_index["manifests"]] == runnable  # same children, same order
    assert target_index["mediaType"] == source_index["mediaType"]
    assert target_index["annotations"][SOURCE_DIGEST_ANNOTATION] == hami.digest
    for digest in runnable:  # each platform's manifest byte for byte
        assert manifest_bytes(acr_like, "mirrored/hami", digest) == hami.manifests[digest]
    assert "index rewritten" not in err  # the report says it; stderr has no failure lines
    assert result["verified"] is True and report["values"]

    # the re-run recognises its own rewrite: no drift, nothing fetched from the source but HEADs
    mark = len(source.access_log())
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert hami_result(report)["action"] == "up-to-date"
    assert hami_result(report)["rewrite"]["target_digest"] == rewrite["target_digest"]
    assert beyond_heads(requests_since(source, mark)) == []


def test_drop_rewrites_up_front(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    hami, _ = seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target], target_options={"attestations": "drop"})
    code, report, err = sync_json(config, capsys, VERSION, "--dry-run")
    assert code == 0, err
    assert "leave out 2 index entries" in hami_result(report)["plan"]
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    dropped = hami_result(report)["rewrite"]["dropped"]
    assert {d["reason"] for d in dropped} == {"not an image (attestations: drop)"}
    pushed = {e.path.rsplit("/", 1)[1] for e in target.access_log() if e.method == "PUT" and "/manifests/" in e.path}
    assert not pushed & {d["digest"] for d in dropped}  # never even tried
    assert manifest_digest(target, "mirrored/hami", VERSION) == hami_result(report)["digest"] != hami.digest


def test_keep_into_a_permissive_target_is_byte_for_byte(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    hami, _ = seed_release(source)
    for policy in ("keep", "auto"):
        config = write_config(tmp_path / f"{policy}.yaml", source, [target], target_options={"attestations": policy})
        code, report, err = sync_json(config, capsys, VERSION)
        assert code == 0, err
        assert "rewrite" not in hami_result(report)
        assert manifest_digest(target, "mirrored/hami", VERSION) == hami.digest


def test_platform_filter_writes_a_filtered_index(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    hami, _ = seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target], target_options={"platforms": ["linux/amd64"]})
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    source_index = json.loads(hami.manifests[hami.digest])
    by_platform = {f"{e['platform']['os']}/{e['platform']['architecture']}": e for e in source_index["manifests"]}
    amd64 = by_platform["linux/amd64"]["digest"]
    arm64 = by_platform["linux/arm64"]["digest"]
    kept = [e["digest"] for e in index_of(target, "mirrored/hami", VERSION)["manifests"]]
    amd64_attestation = next(
        e["digest"]
        for e in source_index["manifests"]
        if e.get("annotations", {}).get("vnd.docker.reference.digest") == amd64
    )
    assert kept == [amd64, amd64_attestation]
    assert manifest_digest(target, "mirrored/hami", arm64) is None
    reasons = {d["reason"] for d in hami_result(report)["rewrite"]["dropped"]}
    assert reasons == {"platform filter", "describes a filtered platform"}


def test_a_filter_that_leaves_nothing_is_refused(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target], target_options={"platforms": ["linux/s390x"]})
    code, _, err = sync_json(config, capsys, VERSION)
    assert code == 1 and "no image is left after the platform filter" in err
    assert manifest_digest(target, "mirrored/hami", VERSION) is None


# -- the class refusal: one predicate (acr.refuses_manifest_class) for the copy, the referrers and the chart ------

PLUGIN_CONFIG = "application/vnd.docker.plugin.v1+json"
LAYER = b"a layer"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"


async def push_refusal(client: RegistryClient, config_type: str, manifest_type: str) -> RegistryError:
    """Push a manifest with this config type into the ACR-like registry; what it answers."""
    config = b"{}"
    for blob in (config, LAYER):
        await client.push_blob("ns/classes", sha256_digest(blob), blob)
    doc = {
        "schemaVersion": 2,
        "mediaType": manifest_type,
        "config": {"mediaType": config_type, "digest": sha256_digest(config), "size": len(config)},
        "layers": [{"mediaType": OCI_LAYER, "digest": sha256_digest(LAYER), "size": len(LAYER)}],
    }
    manifest = Manifest.parse(json.dumps(doc).encode(), manifest_type)
    with pytest.raises(RegistryError) as refused:
        await client.put_manifest("ns/classes", manifest.digest, manifest)
    return refused.value


@pytest.mark.parametrize(
    ("config_type", "manifest_type", "message"),
    [
        (OCI_EMPTY, OCI_MANIFEST, f"unknown manifest class for {OCI_EMPTY}"),  # an attestation, a bundle
        (HELM_CONFIG, OCI_MANIFEST, f"unknown manifest class for {HELM_CONFIG}"),  # a chart
        (PLUGIN_CONFIG, DOCKER_MANIFEST, "registry does not allow plugin manifest"),  # a class it knows, refused
    ],
)
def test_each_refusal_of_the_acr_like_registry_is_a_class_refusal(
    acr_like: LocalRegistry, config_type: str, manifest_type: str, message: str
) -> None:
    refused = with_client(acr_like, lambda client: push_refusal(client, config_type, manifest_type))
    assert (refused.status, refused.code, refused.message) == (403, "DENIED", message)
    assert acr.refuses_manifest_class(refused)


def test_acrs_own_answer_is_a_class_refusal() -> None:
    # FACTS: `denied: unknown manifest class for application/vnd.oci.empty.v1+json`, as docker prints it
    where = "registry.cn-hangzhou.aliyuncs.com/hami/hami@sha256:" + "1" * 64
    answer = RegistryError("push manifest", where, 403, "DENIED", f"unknown manifest class for {OCI_EMPTY}")
    assert acr.refuses_manifest_class(answer)


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (401, "UNAUTHORIZED", "authentication required"),
        (403, "DENIED", "requested access to the resource is denied"),  # no push right: a failure, not a class
        (500, "", "internal server error"),
        (500, "", f"unknown manifest class for {OCI_EMPTY}"),  # the words alone are not the refusal
        (400, "DIGEST_INVALID", "provided digest did not match uploaded content"),
        (400, "MANIFEST_BLOB_UNKNOWN", "blob unknown to registry"),
        (400, "MANIFEST_INVALID", "manifest invalid"),
        (415, "UNSUPPORTED", "The operation is unsupported."),
        (429, "TOOMANYREQUESTS", "pull rate limit"),
    ],
)
def test_other_answers_are_not_class_refusals(status: int, code: str, message: str) -> None:
    assert not acr.refuses_manifest_class(RegistryError("push manifest", "r.test/ns/r:v1", status, code, message))


def test_a_digest_mismatch_at_the_acr_like_registry_is_not_a_class_refusal(acr_like: LocalRegistry) -> None:
    index = Manifest.parse(json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}).encode())

    async def push_under_another_digest(client: RegistryClient) -> RegistryError:
        with pytest.raises(RegistryError) as refused:
            await client.put_manifest("ns/classes", "sha256:" + "0" * 64, index)
        return refused.value

    refused = with_client(acr_like, push_under_another_digest)
    assert (refused.status, refused.code) == (400, "DIGEST_INVALID")
    assert not acr.refuses_manifest_class(refused)


# -- pullability --------------------------------------------------------------------------------------


@pytest.fixture
def token_world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    from tests.test_token_auth import make_world

    yield from make_world(tmp_path, public=request.param)


@pytest.mark.parametrize(
    ("token_world", "expected_secret"),
    [
        (("projecthami", "liangjw", "mirrored/hami"), "acr-pull"),  # certgen's repository stays private
        (("projecthami", "liangjw", "mirrored"), None),  # both public: nodes pull anonymously
    ],
    indirect=["token_world"],
)
def test_pull_secret_exactly_when_anonymous_pulls_fail(
    token_world: Any, expected_secret: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_token_auth import PASSWORD, USER

    config = token_world.config({"username": USER, "password": PASSWORD})
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    pulls = {i["name"]: i["targets"][0]["anonymous_pull"] for i in report["images"]}
    assert pulls == {"hami": True, "kube-webhook-certgen": expected_secret is None}
    (values,) = report["values"]
    assert values["pull_secret"] == expected_secret
    written = yaml.safe_load(Path(values["path"]).read_text())
    if expected_secret:
        assert written["global"] == {"imagePullSecrets": ["acr-pull"]}  # as HAMi's chart renders it
        assert values["kubectl"].startswith("kubectl create secret docker-registry acr-pull -n kube-system ")
        assert "--docker-password=<your registry password>" in values["kubectl"] and PASSWORD not in values["kubectl"]
    else:
        assert "global" not in written and values["kubectl"] is None


def test_declared_pull_secret_is_always_used(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target], target_options={"pull_secret": "my-acr"})
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    written = yaml.safe_load(Path(report["values"][0]["path"]).read_text())
    assert written["global"] == {"imagePullSecrets": ["my-acr"]}


def test_new_personal_instances_never_allow_anonymous_pulls() -> None:
    assert acr.allows_anonymous_pull("crpi-abc123.cn-hangzhou.personal.cr.aliyuncs.com") is False
    assert acr.allows_anonymous_pull("registry.cn-hangzhou.aliyuncs.com") is None
    assert acr.allows_anonymous_pull("127.0.0.1:5000") is None


# -- editions, charts, the ACK bundle -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "edition"),
    [
        ("registry.cn-hangzhou.aliyuncs.com", acr.PERSONAL_CLASSIC),
        ("registry-intl.eu-central-1.aliyuncs.com", acr.PERSONAL_CLASSIC),
        ("crpi-abc123.cn-shanghai.personal.cr.aliyuncs.com", acr.PERSONAL_NEW),
        ("myinst-registry.cn-beijing.cr.aliyuncs.com", acr.ENTERPRISE),
        ("harbor.example.com", None),
    ],
)
def test_edition_from_the_host(host: str, edition: str | None) -> None:
    assert acr.edition_of(host) == edition


def test_personal_edition_refuses_deeper_paths_before_any_push(tmp_path: Path) -> None:
    base = {"images": [{"name": "hami", "source": "projecthami/hami"}]}
    deep = {**base, "targets": [{"name": "hz", "registry": "registry.cn-hangzhou.aliyuncs.com", "namespace": "a/b"}]}
    path = tmp_path / "mirror.yaml"
    path.write_text(yaml.safe_dump(deep))
    with pytest.raises(ConfigError, match=r"personal edition .* no deeper paths"):
        load_settings(path)
    enterprise = {
        **base,
        "targets": [{"name": "bj", "registry": "inst-registry.cn-beijing.cr.aliyuncs.com", "namespace": "ab/c"}],
    }
    path.write_text(yaml.safe_dump(enterprise))
    assert load_settings(path).targets[0].namespace == "ab/c"


def test_charts_before_2_7_are_refused_before_any_request(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "mirror.yaml", source, [target])
    marks = len(source.access_log()), len(target.access_log())
    assert main(["sync", "v2.6.1", "--config", str(config)]) == 2
    assert "flat values schema" in capsys.readouterr().err
    assert (len(source.access_log()), len(target.access_log())) == marks


@pytest.mark.parametrize(
    ("release", "account"),
    [("hami", "hami-scheduler"), ("my-hami", "my-hami-scheduler"), ("gpu", "gpu-hami-scheduler")],
)
def test_rbac_binds_the_releases_scheduler_account(release: str, account: str) -> None:
    from mirror.settings import ValuesSettings

    assert scheduler_service_account(release) == account
    role, binding = yaml.safe_load_all(dra_rbac(ValuesSettings(release=release)))
    assert role["kind"] == "ClusterRole" and role["rules"][0]["resources"] == [
        "resourceclaims",
        "resourceslices",
        "deviceclasses",
    ]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "kube-system"}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == "hami-scheduler-dra"


def test_the_bundle_is_written_next_to_the_values(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target], values={"release": "gpu"})
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    (values,) = report["values"]
    assert Path(values["rbac"]).parent == Path(values["path"]).parent
    assert "gpu-hami-scheduler" in Path(values["rbac"]).read_text()
    assert values["helm"].startswith("helm install gpu hami-charts/hami -n kube-system --version 2.10.0 -f ")


@pytest.mark.parametrize("token_world", [("projecthami", "liangjw")], indirect=True)
def test_every_path_keeps_the_pull_secret_for_a_target_that_refuses_anonymous_pulls(
    token_world: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """By hand (a first copy, then the fast path), by discovery (the CronJob's path) and through the service:
    the values always carry the pull secret a private target needs."""
    from mirror.demo.ports import free_port
    from tests.test_service import API_TOKEN, AUTH, SECRET, Service
    from tests.test_token_auth import PASSWORD, USER

    def secret_in(path: str) -> Any:
        return yaml.safe_load(Path(path).read_text()).get("global")

    service = {"api_token": API_TOKEN, "poll_seconds": 0.2}
    extra = {"state_dir": str(token_world.tmp / "state"), "webhook": {"secret": SECRET}, "service": service}
    config = token_world.config({"username": USER, "password": PASSWORD}, **extra)
    expected = {"imagePullSecrets": ["acr-pull"]}
    for args in ((), ()):  # a copy, then the fast path
        code, report, err = sync_json(config, capsys, VERSION, *args)
        assert code == 0, err
        assert report["values"][0]["pull_secret"] == "acr-pull" and secret_in(report["values"][0]["path"]) == expected
    assert main(["sync", "--discover", "--config", str(config), "--json"]) == 0
    (discovered,) = json.loads(capsys.readouterr().out)
    assert discovered["images"][0]["targets"][0]["action"] == "up-to-date"
    assert (
        discovered["values"][0]["pull_secret"] == "acr-pull" and secret_in(discovered["values"][0]["path"]) == expected
    )

    running = Service(config, free_port())
    running.start()
    try:
        job = running.wait_done(running.signed({"version": VERSION}).json()["id"])
        assert job["state"] == "succeeded", job["error"]
        text = httpx.get(f"{running.url}{job['values'][0]['url']}", headers=AUTH, timeout=5).text
    finally:
        running.stop()
    assert yaml.safe_load(text)["global"] == expected


@pytest.mark.parametrize(
    ("release", "extra", "account", "namespace"),
    [
        ("hami", {"fullnameOverride": "gpu-sharing"}, "gpu-sharing-scheduler", "kube-system"),
        ("hami", {"nameOverride": "vgpu"}, "hami-vgpu-scheduler", "kube-system"),
        ("my-vgpu", {"nameOverride": "vgpu"}, "my-vgpu-scheduler", "kube-system"),
        ("hami", {"namespaceOverride": "gpu-system"}, "hami-scheduler", "gpu-system"),
        ("r", {"fullnameOverride": "x" * 70}, "x" * 63, "kube-system"),  # cut to 63, as the chart's helper cuts
    ],
)
def test_rbac_follows_the_charts_name_and_namespace_overrides(
    release: str, extra: dict[str, str], account: str, namespace: str
) -> None:
    """The chart names its scheduler's ServiceAccount from fullnameOverride, nameOverride and the release, in the
    namespace namespaceOverride names: a binding to any other name never lets the scheduler take its lease."""
    from mirror.settings import ValuesSettings

    settings = ValuesSettings(release=release, extra=extra)
    _, binding = yaml.safe_load_all(dra_rbac(settings))
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
