"""The container image and the Kubernetes manifests: valid, complete, and runnable by the real CLI."""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from mirror.cli import build_parser
from mirror.commands.sync import EXIT_FAILED
from mirror.service.hooks import check_signature
from mirror.settings import load_settings

ROOT = Path(__file__).parents[1]
DEPLOY = ROOT / "deploy" / "base"
OVERLAYS = ROOT / "deploy" / "overlays"
KUBERNETES = "1.37.0"


def manifests() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        if path.name in ("kustomization.yaml", "mirror.yaml"):
            continue
        found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def workloads() -> dict[str, dict[str, Any]]:
    docs = dict((doc["kind"], doc) for _, doc in manifests())
    return {
        "CronJob": docs["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"],
        "Deployment": docs["Deployment"]["spec"]["template"]["spec"],
    }


@pytest.mark.parametrize(("name", "doc"), manifests(), ids=[f"{n}:{d['kind']}" for n, d in manifests()])
def test_every_manifest_validates_against_the_kubernetes_schema(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_the_kustomization_lists_every_file() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    listed |= {f for generator in kustomization["configMapGenerator"] for f in generator["files"]}
    assert listed == {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}


@pytest.mark.parametrize("kind", ["CronJob", "Deployment"])
def test_workloads_run_the_real_entrypoint_with_arguments_it_accepts(kind: str) -> None:
    (container,) = workloads()[kind]["containers"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["mirror"]' in dockerfile
    args = build_parser().parse_args(container["args"])
    assert args.command == ("sync" if kind == "CronJob" else "serve")
    if kind == "CronJob":
        assert args.discover is True and args.print_files is True  # the files outlive the pod in its log
    assert Path(args.config) == Path("/etc/mirror/mirror.yaml")


@pytest.mark.parametrize("kind", ["CronJob", "Deployment"])
def test_workloads_are_locked_down(kind: str) -> None:
    pod = workloads()[kind]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"]["drop"] == ["ALL"]
    assert set(container["resources"]) == {"requests", "limits"}
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/tmp", "/var/lib/mirror", "/etc/mirror"} <= mounts  # the only writable paths are volumes


def built(directory: Path) -> list[dict[str, Any]]:
    """What `kubectl apply -k directory` would send: kustomize, as kubectl embeds it."""
    output = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=True).stdout
    return [doc for doc in yaml.safe_load_all(output) if doc]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in docs}


@pytest.mark.parametrize(
    "directory",
    [ROOT / "deploy", OVERLAYS / "postgres", OVERLAYS / "rrsa", OVERLAYS / "cronjob"],
    ids=["deploy", "overlays/postgres", "overlays/rrsa", "overlays/cronjob"],
)
def test_each_kustomization_builds_into_valid_manifests(directory: Path) -> None:
    docs = built(directory)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    assert {doc["metadata"].get("namespace") for doc in docs if doc["kind"] != "Namespace"} == {"mirror"}


def test_the_postgres_overlay_runs_two_replicas_that_share_the_cronjobs_database() -> None:
    docs = by_kind(built(OVERLAYS / "postgres"))
    deployment = docs["Deployment"]["spec"]
    assert deployment["replicas"] == 2 and deployment["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert docs["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
    assert docs["PodDisruptionBudget"]["spec"]["selector"] == deployment["selector"]
    assert "PersistentVolumeClaim" not in docs  # nothing on disk: jobs, leases and values are in the database
    pods = [deployment["template"]["spec"], docs["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]]
    for pod in pods:
        (container,) = pod["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["MIRROR_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "mirror-database", "key": "url"}
        assert all("persistentVolumeClaim" not in volume for volume in pod["volumes"])
    anywhere = [rule for rule in docs["NetworkPolicy"]["spec"]["egress"] if "to" not in rule]
    assert {p["port"] for rule in anywhere for p in rule["ports"]} == {53, 443, 5432}  # and the base's ECS metadata
    database = next(d for d in built(OVERLAYS / "postgres") if d["metadata"]["name"] == "mirror-database")
    assert "<" in database["stringData"]["url"]  # a placeholder, never a real value


# What each kustomization under deploy/ runs that writes to the targets. On SQLite each pod keeps its per-target
# locks on its own volume, so the CronJob and the service run together only where both name one PostgreSQL
# database, whose advisory locks they share: a webhook job runs whenever a release is published, exactly when the
# CronJob's discovery copies it too, so schedules set apart do not keep them apart.
WRITERS = {
    "deploy": {"Deployment"},
    "deploy/base": {"Deployment"},
    "deploy/overlays/cronjob": {"CronJob"},
    "deploy/overlays/postgres": {"CronJob", "Deployment"},
    "deploy/overlays/rrsa": {"Deployment"},
}


def kustomizations() -> list[Path]:
    found = [ROOT / "deploy", DEPLOY, *sorted(p.parent for p in OVERLAYS.glob("*/kustomization.yaml"))]
    return [path for path in found if (path / "kustomization.yaml").exists()]


def running_writers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The pod specs that run mirror against the targets: the CronJob unless suspended, the Deployment unless
    scaled to nothing."""
    found: dict[str, dict[str, Any]] = {}
    for doc in docs:
        if doc["kind"] == "CronJob" and not doc["spec"].get("suspend", False):
            found["CronJob"] = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        if doc["kind"] == "Deployment" and doc["spec"].get("replicas", 1) > 0:
            found["Deployment"] = doc["spec"]["template"]["spec"]
    return found


def test_every_kustomization_is_placed_in_writers() -> None:
    assert {str(path.relative_to(ROOT)) for path in kustomizations()} == set(WRITERS)


@pytest.mark.parametrize("directory", kustomizations(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_cronjob_and_the_service_run_together_only_on_postgresqls_shared_locks(directory: Path) -> None:
    running = running_writers(built(directory))
    assert set(running) == WRITERS[str(directory.relative_to(ROOT))]
    if len(running) > 1:
        databases = []
        for pod in running.values():
            (container,) = pod["containers"]
            env = {e["name"]: e for e in container.get("env", [])}
            databases.append(env.get("MIRROR_DATABASE_URL", {}).get("valueFrom"))
        assert databases[0] is not None and all(database == databases[0] for database in databases), databases


def test_the_cronjob_overlay_runs_the_cronjob_alone() -> None:
    docs = built(OVERLAYS / "cronjob")
    kinds = by_kind(docs)
    assert {"Deployment", "Service", "PersistentVolumeClaim"}.isdisjoint(kinds)
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "Secret"} == {"mirror-registries"}
    assert kinds["NetworkPolicy"]["spec"]["ingress"] == []  # nothing listens
    cron = kinds["CronJob"]["spec"]
    assert cron["suspend"] is False and cron["concurrencyPolicy"] == "Forbid"  # one run at a time
    (container,) = cron["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.command == "sync" and args.discover is True and args.print_files is True


def test_the_cronjob_and_the_service_never_discover_at_once() -> None:
    """Where both run (the postgres overlay), their locks keep them off one target at once; the schedules set
    apart only spare the second run's work."""
    from mirror.cron import cron_trigger

    docs = by_kind(built(OVERLAYS / "postgres"))
    (container,) = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    service_cron = next(e["value"] for e in container["env"] if e["name"] == "MIRROR_SCHEDULE")
    cronjob = cron_trigger(docs["CronJob"]["spec"]["schedule"])
    service = cron_trigger(service_cron)
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    fires: list[set[datetime.datetime]] = []
    for trigger in (cronjob, service):
        times, moment = set(), start
        while moment < start + datetime.timedelta(days=7):
            moment = trigger.get_next_fire_time(None, moment + datetime.timedelta(seconds=1))
            times.add(moment)
        fires.append(times)
    assert fires[0] and fires[1] and not fires[0] & fires[1]
    # and a CronJob run, started as late as Kubernetes may start it, is over before the service's next discovery
    spec = docs["CronJob"]["spec"]
    late = spec["startingDeadlineSeconds"] + spec["jobTemplate"]["spec"]["activeDeadlineSeconds"]
    deadline = datetime.timedelta(seconds=late)
    assert all(min(s - c for s in fires[1] if s > c) > deadline for c in fires[0])


def assert_liveness_reads_the_heartbeat(container: dict[str, Any]) -> None:
    """The liveness probe's own command, run by this machine's sh, date and stat (the image's are Debian's too):
    it passes on the file the service touches, and fails on a stale one or none (mirror/service/heartbeat.py)."""
    (variable,) = [e for e in container["env"] if e["name"] == "MIRROR_SERVICE__HEARTBEAT_FILE"]
    command = container["livenessProbe"]["exec"]["command"]
    assert variable["value"] in command[-1]
    with tempfile.TemporaryDirectory() as scratch:
        alive = Path(scratch) / "alive"
        probe = [*command[:-1], command[-1].replace(variable["value"], str(alive))]
        assert subprocess.run(probe, capture_output=True, check=False).returncode != 0  # not written yet
        alive.touch()
        assert subprocess.run(probe, capture_output=True, check=False).returncode == 0
        os.utime(alive, (time.time() - 120, time.time() - 120))
        assert subprocess.run(probe, capture_output=True, check=False).returncode != 0


def test_the_service_is_probed_and_kept_to_one_replica() -> None:
    docs = dict((doc["kind"], doc) for _, doc in manifests())
    deployment = docs["Deployment"]["spec"]
    assert deployment["replicas"] == 1 and deployment["strategy"]["type"] == "Recreate"
    (container,) = deployment["template"]["spec"]["containers"]
    assert_liveness_reads_the_heartbeat(container)
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "internal"}
    # the probes and /metrics on the internal port, which the service is told of: the public one answers them 404
    env = {e["name"]: e.get("value") for e in container["env"]}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert str(ports["internal"]) == env["MIRROR_SERVICE__INTERNAL_PORT"]
    assert str(ports["http"]) == container["args"][container["args"].index("--port") + 1]
    cron = docs["CronJob"]["spec"]
    assert cron["concurrencyPolicy"] == "Forbid" and cron["jobTemplate"]["spec"]["activeDeadlineSeconds"] > 0
    # a run that failed (said, and posted) or was given bad input is not run again by Kubernetes: the channel
    # would hear it three times a schedule; a pod killed from outside is
    (mirror,) = cron["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    rules = cron["jobTemplate"]["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {
        "action": "FailJob",
        "onExitCodes": {"containerName": mirror["name"], "operator": "In", "values": [EXIT_FAILED, 2]},
    }
    assert rules[1]["action"] == "Ignore" and rules[1]["onPodConditions"] == [{"type": "DisruptionTarget"}]
    policy = docs["NetworkPolicy"]["spec"]
    anywhere = [rule for rule in policy["egress"] if "to" not in rule]
    assert {p["port"] for rule in anywhere for p in rule["ports"]} == {53, 443}
    # the ECS metadata service alone on port 80: an ECS RAM role's login asks it (ecs_ram_role, the default chain)
    (metadata,) = [rule for rule in policy["egress"] if "to" in rule]
    assert metadata == {"to": [{"ipBlock": {"cidr": "100.100.100.200/32"}}], "ports": [{"port": 80, "protocol": "TCP"}]}
    assert [p["port"] for rule in policy["ingress"] for p in rule["ports"]] == [ports["http"], ports["internal"]]


@pytest.mark.parametrize("directory", [DEPLOY, OVERLAYS / "cronjob", OVERLAYS / "postgres"], ids=lambda p: p.name)
def test_the_cronjob_runs_its_schedule_in_utc_as_the_service_does(directory: Path) -> None:
    """Without timeZone a CronJob's schedule is read in kube-controller-manager's zone; the service's (and
    README's) is UTC, and the schedules set apart (test_the_cronjob_and_the_service_never_discover_at_once) are
    apart only when both are read in one zone."""
    from zoneinfo import ZoneInfo

    spec = by_kind(built(directory))["CronJob"]["spec"]
    assert spec["timeZone"] == "Etc/UTC"
    assert ZoneInfo(spec["timeZone"]).utcoffset(datetime.datetime(2026, 7, 1)) == datetime.timedelta(0)


@pytest.mark.parametrize("directory", [DEPLOY, OVERLAYS / "postgres", OVERLAYS / "rrsa"], ids=lambda p: p.name)
def test_the_status_pages_cookie_is_secure_behind_a_tls_terminating_ingress(
    directory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Ingress ends TLS, so uvicorn sees http and `auto` would send the session cookie without Secure."""
    from mirror.settings.environment import variable_problems

    (container,) = by_kind(built(directory))["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MIRROR_SERVICE__SECURE_COOKIE"] == "always"
    assert variable_problems({"MIRROR_SERVICE__SECURE_COOKIE": "always"}) == []  # it names the setting
    docker_config = tmp_path / ".dockerconfigjson"
    docker_config.write_text('{"auths": {}}')
    monkeypatch.setenv("MIRROR_DOCKER_CONFIG", str(docker_config))
    monkeypatch.setenv("MIRROR_SERVICE__SECURE_COOKIE", env["MIRROR_SERVICE__SECURE_COOKIE"])
    assert load_settings(DEPLOY / "mirror.yaml").service.secure_cookie == "always"


def test_secrets_are_placeholders() -> None:
    for _, doc in manifests():
        if doc["kind"] == "Secret":
            for value in doc["stringData"].values():
                assert "<" in value  # never a real value


def test_the_configmap_config_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docker_config = tmp_path / ".dockerconfigjson"
    docker_config.write_text('{"auths": {}}')
    monkeypatch.setenv("MIRROR_DOCKER_CONFIG", str(docker_config))  # the Secret's mount point, here
    settings = load_settings(DEPLOY / "mirror.yaml")
    assert settings.targets[0].registry == "registry.cn-hangzhou.aliyuncs.com"
    assert settings.chart is not None and settings.chart.name == "hami" and settings.images == []


def test_hadolint_passes_on_the_dockerfile() -> None:
    hadolint = Path(__file__).parents[1] / ".venv" / "bin" / "hadolint"
    result = subprocess.run([str(hadolint), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_ci_example_signs_as_the_service_checks(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    lines = [line.strip() for line in readme.splitlines()]
    body_line = next(line for line in lines if line.startswith('body="'))
    sig_line = next(line for line in lines if line.startswith('sig="sha256='))
    script = f'{body_line}\n{sig_line}\nprintf "%s\\n%s" "$sig" "$body"\n'
    env = {"SECRET": "shared-secret", "TAG": "v2.10.0", "PATH": "/usr/bin:/bin"}
    output = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=True).stdout
    signature, body = output.split("\n", 1)
    assert re.fullmatch(r"sha256=[0-9a-f]{64}", signature)
    check_signature(b"shared-secret", body.encode(), signature)  # raises if they disagree
    with pytest.raises(Exception, match="bad signature"):
        check_signature(b"another-secret", body.encode(), signature)


def test_the_rrsa_overlay_stores_no_registry_secret_and_asks_for_the_role(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = built(OVERLAYS / "rrsa")
    kinds = by_kind(docs)
    assert kinds["ServiceAccount"]["metadata"]["annotations"] == {
        "pod-identity.alibabacloud.com/role-name": "mirror-acr"
    }
    assert kinds["Namespace"]["metadata"]["labels"]["pod-identity.alibabacloud.com/injection"] == "on"
    assert "mirror-registries" not in {d["metadata"]["name"] for d in docs if d["kind"] == "Secret"}
    pods = [
        kinds["Deployment"]["spec"]["template"]["spec"],
        kinds["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"],
    ]
    for pod in pods:
        assert all(volume.get("secret", {}).get("secretName") != "mirror-registries" for volume in pod["volumes"])
        (container,) = pod["containers"]
        assert all("registries" not in mount["mountPath"] for mount in container["volumeMounts"])
    # the config it mounts loads where the webhook has injected RRSA's variables and token
    config = tmp_path / "mirror.yaml"
    config.write_text(kinds["ConfigMap"]["data"]["mirror.yaml"].replace("<instance>", "hami"))
    token = tmp_path / "token"
    token.write_text("a.b.c")
    for name, value in {
        "ALIBABA_CLOUD_ROLE_ARN": "acs:ram::1234567890:role/mirror-acr",
        "ALIBABA_CLOUD_OIDC_PROVIDER_ARN": "acs:ram::1234567890:oidc-provider/ack-rrsa-c1",
        "ALIBABA_CLOUD_OIDC_TOKEN_FILE": str(token),
    }.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(config)
    login = settings.registry("hami-registry.cn-hangzhou.cr.aliyuncs.com").aliyun
    assert login is not None and login.credentials == "oidc_role_arn"
    assert settings.docker_config is None


def test_each_series_is_scraped_once() -> None:
    """Annotations on the Service as well as on its pods make the usual pair of scrape jobs (endpoints, pods)
    take every series twice: each alert would fire twice and the dashboard's totals double."""
    docs = dict((doc["kind"], doc) for _, doc in manifests())
    annotated = [
        kind
        for kind, metadata in (
            ("Service", docs["Service"]["metadata"]),
            ("pods", docs["Deployment"]["spec"]["template"]["metadata"]),
        )
        if "prometheus.io/scrape" in metadata.get("annotations", {})
    ]
    assert annotated == ["pods"]
