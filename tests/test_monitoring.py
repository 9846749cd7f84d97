"""deploy/monitoring/: the alert rules checked and unit-tested by promtool, the PrometheusRule kept identical to
them, the rules and the dashboard using only names the service exports, the ServiceMonitor pointed at the real
Service, and the metrics behind the alerts (mirror/service/metrics.py)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mirror.engine.outcomes import Copied, Drift, Failed, UpToDate
from mirror.registry.ratelimit import RateLimit
from mirror.report import ImageResult, ReleaseResult, TargetResult
from mirror.service.metrics import Metrics

ROOT = Path(__file__).parents[1]
MONITORING = ROOT / "deploy" / "monitoring"
BASE = ROOT / "deploy" / "base"
RULES = MONITORING / "rules.yaml"
RULES_TEST = MONITORING / "rules_test.yaml"
DASHBOARD = MONITORING / "dashboard.json"

# kube-state-metrics' names the rules and the dashboard may use besides the service's own
KUBE_STATE_METRICS = {
    "kube_cronjob_created",
    "kube_cronjob_spec_suspend",
    "kube_cronjob_status_last_successful_time",
    "kube_job_failed",
    "kube_job_owner",
    "kube_job_status_failed",
    "kube_job_status_start_time",
}
# what the dashboard's variables stand for when its expressions are parsed
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "1d", "$__interval": "1m", "$job": ".+"}
PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left"}
PROMQL_WORDS |= {"group_right", "inf", "nan", "atan2"}


# -- helpers -------------------------------------------------------------------------------------------------


def promtool(*args: str, cwd: Path = MONITORING) -> subprocess.CompletedProcess[str]:
    """promtool is part of the test environment (scripts/bootstrap.sh installs Debian's prometheus package): its
    absence fails the tests, it does not skip them."""
    found = shutil.which("promtool")
    assert found is not None, "promtool is missing: run scripts/bootstrap.sh (it installs Debian's prometheus)"
    return subprocess.run([found, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def rules() -> list[dict[str, Any]]:
    return [rule for group in load_yaml(RULES)["groups"] for rule in group["rules"]]


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in rules() if "alert" in rule}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions, keywords, labels (in
    braces or grouping clauses), strings, durations or numbers."""
    text = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^{}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.:])[a-zA-Z_:][a-zA-Z0-9_:]*+(?!\s*\()", text):
        if match.group().lower() not in PROMQL_WORDS:
            names.add(match.group())
    return names


def observed_metrics() -> Metrics:
    """A service's metrics after a failed job and a succeeded one: a copy, a tag left alone, a verified tag."""
    metrics = Metrics(now=1000.0)
    copied = Copied("sha256:" + "a" * 64, "copy", {"uploaded": 3, "mounted": 1, "present": 2}, 4096)
    release = ReleaseResult(
        "v2.10.0",
        images=[
            ImageResult(
                "hami",
                "docker.io/projecthami/hami:v2.10.0",
                targets=[
                    TargetResult("cn-hangzhou", "ns/hami:v2.10.0", copied),
                    TargetResult("cn-beijing", "ns/hami:v2.10.0", Drift("points at sha256:" + "b" * 64)),
                ],
            ),
            ImageResult(
                "hami-scheduler",
                "docker.io/projecthami/hami-scheduler:v2.10.0",
                targets=[TargetResult("cn-hangzhou", "ns/hami-scheduler:v2.10.0", UpToDate("sha256:" + "c" * 64))],
            ),
        ],
        source_rate_limit=RateLimit(remaining=37, limit=100, window_seconds=21600),
    )
    metrics.observe([], 5.0, False, 2000.0)
    metrics.observe([release], 42.0, True, 3000.0)
    metrics.count_retry_status(429)
    metrics.observe_given_up()
    return metrics


def samples(metrics: Metrics) -> dict[str, float]:
    found = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}"] = sample.value
    return found


def exported_names() -> set[str]:
    """Every sample name the service's /metrics renders (with `_total`, `_bucket`, `_count`, ... suffixes)."""
    text = observed_metrics().render().decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_exprs() -> list[tuple[str, str]]:
    return [
        (f"{panel['title']} ({target['refId']})", target["expr"])
        for panel in dashboard()["panels"]
        for target in panel.get("targets", [])
    ]


def with_variables(expr: str) -> str:
    for variable, value in sorted(GRAFANA_VARIABLES.items(), key=lambda item: -len(item[0])):
        expr = expr.replace(variable, value)
    return expr


def promtool_parses(exprs: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Each expression as a recording rule, through `promtool check rules` (which parses every expression)."""
    file = tmp_path / "exprs.yaml"
    records = [{"record": f"check:expr_{i}", "expr": expr} for i, expr in enumerate(exprs)]
    file.write_text(yaml.safe_dump({"groups": [{"name": "check", "rules": records}]}))
    return promtool("check", "rules", str(file), cwd=tmp_path)


def schedule_period(cron: str) -> int:
    """The period of a cron schedule run every N hours at a fixed minute ("0 */6 * * *"), in seconds."""
    minute, hour, *rest = cron.split()
    assert minute.isdigit() and rest == ["*", "*", "*"], cron
    every = re.fullmatch(r"\*/(\d+)", hour)
    assert every is not None and 24 % int(every.group(1)) == 0, cron
    return int(every.group(1)) * 3600


def base_doc(kind: str) -> dict[str, Any]:
    for path in sorted(BASE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == kind:
                found: dict[str, Any] = doc
                return found
    raise AssertionError(f"no {kind} in deploy/base")


# -- the rules -----------------------------------------------------------------------------------------------


def test_promtool_checks_the_rule_file() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    tested = promtool("test", "rules", str(RULES_TEST))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_the_unit_tests_catch_an_alert_that_never_fires(tmp_path: Path) -> None:
    """With every alert's expression replaced by one that never fires, promtool fails each alert's test."""
    broken = load_yaml(RULES)
    for group in broken["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["expr"] = "vector(1) == 0"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(broken))
    shutil.copy(RULES_TEST, tmp_path / "rules_test.yaml")
    tested = promtool("test", "rules", "rules_test.yaml", cwd=tmp_path)
    assert tested.returncode != 0
    for name in alerts():
        assert f"alertname: {name}," in tested.stdout + tested.stderr, f"no test of {name} expects it to fire"


def test_every_alert_is_tested_firing_and_quiet() -> None:
    cases: dict[str, list[bool]] = {name: [] for name in alerts()}
    for test in load_yaml(RULES_TEST)["tests"]:
        for case in test.get("alert_rule_test", []):
            assert case["alertname"] in cases, f"a test of an alert that does not exist: {case['alertname']}"
            cases[case["alertname"]].append(bool(case.get("exp_alerts")))
    for name, fires in cases.items():
        assert True in fires, f"{name} is never made to fire"
        assert False in fires, f"{name} is never shown quiet"


def test_every_alert_has_a_severity_and_says_what_to_do() -> None:
    assert set(alerts()) == {
        "MirrorSyncJobsFailing",
        "MirrorServiceNoRecentSuccess",
        "MirrorCronJobFailed",
        "MirrorCronJobNoRecentSuccess",
        "MirrorDockerHubPullBudgetLow",
        "MirrorTargetDrift",
    }
    readme = (MONITORING / "README.md").read_text()
    for name, alert in alerts().items():
        assert alert["labels"]["severity"] in ("warning", "critical"), name
        assert set(alert["annotations"]) >= {"summary", "description"}, name
        assert len(alert["annotations"]["description"]) > 100, name
        assert f"`{name}`" in readme, f"{name} is not explained in deploy/monitoring/README.md"


def test_the_prometheusrule_wraps_the_same_groups() -> None:
    resource = load_yaml(MONITORING / "prometheusrule.yaml")
    assert resource["apiVersion"] == "monitoring.coreos.com/v1" and resource["kind"] == "PrometheusRule"
    assert resource["spec"] == {"groups": load_yaml(RULES)["groups"]}


def test_the_rules_use_only_names_the_service_exports_or_kube_state_metrics() -> None:
    exported = exported_names()
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    used: set[str] = set()
    for rule in rules():
        names = metric_names(rule["expr"])
        unknown = names - exported - KUBE_STATE_METRICS - recorded
        assert not unknown, f"{rule.get('alert') or rule.get('record')} uses names nobody exports: {unknown}"
        used |= names
    assert {"mirror_syncs_total", "mirror_drift", "mirror_dockerhub_pulls_remaining"} <= used
    assert {"mirror_store_last_successful_job_timestamp_seconds", "kube_cronjob_status_last_successful_time"} <= used
    assert "mirror_last_successful_job_timestamp_seconds" not in used  # a process's own, forgotten on restart
    assert {"kube_job_status_failed"} <= used and recorded <= used


def test_metric_names_finds_what_an_expression_selects() -> None:
    expr = (
        'sum by (namespace, job) (increase(mirror_syncs_total{result="failed", a=~"x|y"}[1h] offset 5m)) > 1e3'
        " and on (job) group_left () nope_metric unless ignoring (le) mirror:recorded * 2"
    )
    assert metric_names(expr) == {"mirror_syncs_total", "nope_metric", "mirror:recorded"}


def test_the_schedule_period_and_names_match_the_deployment() -> None:
    """The rules' parameter is the schedules' period, and they name the CronJob and namespace deploy/base uses."""
    (period,) = [rule for rule in rules() if rule.get("record") == "mirror:schedule_period_seconds"]
    parameter = re.fullmatch(r"vector\((\d+)\)", period["expr"].strip())
    assert parameter is not None, period["expr"]
    seconds = int(parameter.group(1))
    cronjob = base_doc("CronJob")
    (container,) = base_doc("Deployment")["spec"]["template"]["spec"]["containers"]
    service_schedule = {e["name"]: e.get("value") for e in container["env"]}["MIRROR_SCHEDULE"]
    assert seconds == schedule_period(cronjob["spec"]["schedule"]) == schedule_period(service_schedule)
    namespace = load_yaml(BASE / "kustomization.yaml")["namespace"]
    for name in ("MirrorCronJobFailed", "MirrorCronJobNoRecentSuccess"):
        expr = alerts()[name]["expr"]
        assert f'namespace="{namespace}"' in expr and f'"{cronjob["metadata"]["name"]}"' in expr
        assert re.findall(r'namespace="([^"]*)"', expr) == [namespace] * expr.count('namespace="')


# -- the metrics behind them ---------------------------------------------------------------------------------


def test_the_metrics_pass_promtools_lint() -> None:
    found = shutil.which("promtool")
    assert found is not None, "promtool is missing: run scripts/bootstrap.sh"
    linted = subprocess.run(
        [found, "check", "metrics"], input=observed_metrics().render().decode(), capture_output=True, text=True
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_a_fresh_service_exports_zero_failures_and_an_unknown_budget() -> None:
    """The first failure after a restart must be an increase (a counter born at 1 is not one to `increase()`), and
    a budget nobody has read yet must not look spent."""
    fresh = samples(Metrics(now=1234.0))
    assert fresh["mirror_syncs_total{result=failed}"] == 0 and fresh["mirror_syncs_total{result=succeeded}"] == 0
    assert fresh["mirror_blobs_total{outcome=uploaded}"] == 0
    assert math.isnan(fresh["mirror_dockerhub_pulls_remaining{}"])
    assert math.isnan(fresh["mirror_dockerhub_pulls_limit{}"])
    assert fresh["mirror_last_successful_job_timestamp_seconds{}"] == 0
    assert fresh["mirror_started_timestamp_seconds{}"] == 1234.0


def test_observing_jobs_sets_success_drift_and_the_budget() -> None:
    metrics = observed_metrics()
    seen = samples(metrics)
    assert seen["mirror_syncs_total{result=failed}"] == 2 and seen["mirror_syncs_total{result=succeeded}"] == 1
    assert seen["mirror_jobs_given_up_total{}"] == 1 and seen["mirror_rate_limited_responses_total{}"] == 1
    assert seen["mirror_last_successful_job_timestamp_seconds{}"] == 3000.0  # the succeeded job, not the failed one
    assert seen["mirror_drift{image=hami,tag=v2.10.0,target=cn-beijing}"] == 1
    assert seen["mirror_drift_timestamp_seconds{image=hami,tag=v2.10.0,target=cn-beijing}"] == 3000.0
    assert seen["mirror_drift{image=hami,tag=v2.10.0,target=cn-hangzhou}"] == 0
    assert seen["mirror_drift{image=hami-scheduler,tag=v2.10.0,target=cn-hangzhou}"] == 0
    assert "mirror_last_success_timestamp_seconds{image=hami,tag=v2.10.0,target=cn-beijing}" not in seen
    assert seen["mirror_last_success_timestamp_seconds{image=hami,tag=v2.10.0,target=cn-hangzhou}"] == 3000.0
    assert seen["mirror_dockerhub_pulls_remaining{}"] == 37 and seen["mirror_dockerhub_pulls_limit{}"] == 100
    assert seen["mirror_dockerhub_pulls_window_seconds{}"] == 21600
    assert seen["mirror_dockerhub_pulls_timestamp_seconds{}"] == 3000.0
    assert seen["mirror_bytes_copied_total{}"] == 4096 and seen["mirror_blobs_total{outcome=present}"] == 2

    # the drifted tag put back and verified: 0, its last sighting kept; a failed copy changes neither
    verified = TargetResult("cn-beijing", "ns/hami:v2.10.0", UpToDate("sha256:" + "a" * 64))
    failed = TargetResult("cn-hangzhou", "ns/hami:v2.10.0", Failed("push refused"))
    image = ImageResult("hami", "docker.io/projecthami/hami", targets=[verified, failed])
    again = ReleaseResult("v2.10.0", images=[image])
    metrics.observe([again], 3.0, False, 4000.0)
    later = samples(metrics)
    assert later["mirror_drift{image=hami,tag=v2.10.0,target=cn-beijing}"] == 0
    assert later["mirror_drift_timestamp_seconds{image=hami,tag=v2.10.0,target=cn-beijing}"] == 3000.0
    assert later["mirror_last_success_timestamp_seconds{image=hami,tag=v2.10.0,target=cn-beijing}"] == 4000.0
    assert later["mirror_last_success_timestamp_seconds{image=hami,tag=v2.10.0,target=cn-hangzhou}"] == 3000.0
    assert later["mirror_last_successful_job_timestamp_seconds{}"] == 3000.0  # this job failed
    assert later["mirror_dockerhub_pulls_remaining{}"] == 37  # no reading in this job: the last one stays


def test_one_releases_drift_is_kept_beside_another_release_verified_in_the_same_job() -> None:
    """A discovery job runs v2.9.0, then v2.10.0, of one image: v2.9.0's tag at the target points elsewhere, v2.10.0's
    copy verifies. Each tag has its own series, so v2.9.0's drift stays 1 (with no success of its own to clear it),
    and a later job of v2.10.0 alone does not clear it (labelled by image and target only, the last write won)."""

    def release(version: str, outcome: Drift | UpToDate) -> ReleaseResult:
        target = TargetResult("cn-hangzhou", f"registry.cn-hangzhou.aliyuncs.com:443/ns/hami:{version}", outcome)
        return ReleaseResult(version, images=[ImageResult("hami", "docker.io/projecthami/hami", targets=[target])])

    verified = release("v2.10.0", UpToDate("sha256:" + "a" * 64))
    metrics = Metrics(now=0.0)
    metrics.observe([release("v2.9.0", Drift("points at sha256:" + "b" * 64)), verified], 9.0, False, 1000.0)
    metrics.observe([verified], 2.0, True, 2000.0)
    seen = samples(metrics)
    old, new = "image=hami,tag=v2.9.0,target=cn-hangzhou", "image=hami,tag=v2.10.0,target=cn-hangzhou"
    assert seen[f"mirror_drift{{{old}}}"] == 1 and seen[f"mirror_drift_timestamp_seconds{{{old}}}"] == 1000.0
    assert f"mirror_last_success_timestamp_seconds{{{old}}}" not in seen
    assert seen[f"mirror_drift{{{new}}}"] == 0 and seen[f"mirror_last_success_timestamp_seconds{{{new}}}"] == 2000.0
    assert f"mirror_drift_timestamp_seconds{{{new}}}" not in seen


# -- the dashboard -------------------------------------------------------------------------------------------


def test_the_dashboard_is_importable_json_over_a_datasource_variable() -> None:
    board = dashboard()
    assert board["id"] is None and board["uid"] and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert metric_names(variables["job"]["definition"].removeprefix("label_values(").split(",")[0]) <= exported_names()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)) and ids
    taken: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"] and target["expr"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        columns, rows = range(grid["x"], grid["x"] + grid["w"]), range(grid["y"], grid["y"] + grid["h"])
        cells = {(x, y) for x in columns for y in rows}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


def test_every_dashboard_expression_parses(tmp_path: Path) -> None:
    exprs = [with_variables(expr) for _, expr in dashboard_exprs()]
    assert not [expr for expr in exprs if "$" in expr], "a Grafana variable the test does not know"
    checked = promtool_parses(exprs, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in checked.stdout


def test_the_parse_check_rejects_a_broken_expression(tmp_path: Path) -> None:
    checked = promtool_parses(["sum(rate(mirror_syncs_total[5m])"], tmp_path)
    assert checked.returncode != 0


def test_the_dashboards_drift_is_the_alerts_drift(tmp_path: Path) -> None:
    """Two replicas: one saw hami's tag moved, then the other verified the copy; certgen's drift came after its
    last verified copy; one job saw scheduler's v2.9.0 drifted and verified its v2.10.0. The drift panels, evaluated
    by promtool, show what MirrorTargetDrift reads: certgen and scheduler's v2.9.0 drifted, hami and scheduler's
    v2.10.0 not (plain `max(mirror_drift)` showed hami for as long as the first replica ran; by image and target
    only, scheduler's verified v2.10.0 hid its v2.9.0)."""
    panels = dict(dashboard_exprs())
    stat, table = panels["Tags drifted (A)"], panels["Drift per image, target and tag (A)"]
    rules = tmp_path / "drift.yaml"
    records = [
        {"record": "panel:drifted", "expr": with_variables(stat)},
        {"record": "panel:drift", "expr": with_variables(table)},
    ]
    rules.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": records}]}))
    one, two = {"job": "mirror", "instance": "10.0.0.1:8080"}, {"job": "mirror", "instance": "10.0.0.2:8080"}

    def series(name: str, labels: dict[str, str], image: str, value: int, tag: str = "v1") -> dict[str, str]:
        text = ", ".join(f'{k}="{v}"' for k, v in {**labels, "image": image, "target": "t0", "tag": tag}.items())
        return {"series": f"{name}{{{text}}}", "values": f"{value}x20"}

    inputs = [
        series("mirror_drift", one, "hami", 1),
        series("mirror_drift_timestamp_seconds", one, "hami", 100),
        series("mirror_last_success_timestamp_seconds", two, "hami", 200),
        series("mirror_drift", two, "hami", 0),
        series("mirror_drift", one, "certgen", 1),
        series("mirror_drift_timestamp_seconds", one, "certgen", 300),
        series("mirror_last_success_timestamp_seconds", two, "certgen", 200),
        series("mirror_drift", one, "scheduler", 1, "v2.9.0"),
        series("mirror_drift_timestamp_seconds", one, "scheduler", 400, "v2.9.0"),
        series("mirror_drift", one, "scheduler", 0, "v2.10.0"),
        series("mirror_last_success_timestamp_seconds", one, "scheduler", 400, "v2.10.0"),
    ]

    def row(image: str, value: int, tag: str = "v1") -> dict[str, Any]:
        return {"labels": f'panel:drift{{image="{image}", tag="{tag}", target="t0"}}', "value": value}

    expected = [
        {"expr": "panel:drifted", "eval_time": "10m", "exp_samples": [{"labels": "panel:drifted", "value": 2}]},
        {
            "expr": "panel:drift",
            "eval_time": "10m",
            "exp_samples": [
                row("certgen", 1),
                row("hami", 0),
                row("scheduler", 1, "v2.9.0"),
                row("scheduler", 0, "v2.10.0"),
            ],
        },
    ]
    test = {"interval": "1m", "input_series": inputs, "promql_expr_test": expected}
    (tmp_path / "drift_test.yaml").write_text(yaml.safe_dump({"rule_files": ["drift.yaml"], "tests": [test]}))
    tested = promtool("test", "rules", "drift_test.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_dashboard_uses_only_exported_names_and_shows_each_of_them() -> None:
    exported = exported_names()
    used: set[str] = set()
    for where, expr in dashboard_exprs():
        names = metric_names(with_variables(expr))
        assert names, where
        assert not names - exported - KUBE_STATE_METRICS, f"{where} uses names nobody exports: {names - exported}"
        used |= names
    shown = {
        "mirror_syncs_total",
        "mirror_sync_duration_seconds_bucket",
        "mirror_bytes_copied_total",
        "mirror_blobs_total",
        "mirror_last_success_timestamp_seconds",
        "mirror_last_successful_job_timestamp_seconds",
        "mirror_drift",
        "mirror_dockerhub_pulls_remaining",
        "mirror_rate_limited_responses_total",
        "mirror_jobs_given_up_total",
    }
    assert shown <= used, f"not on the dashboard: {shown - used}"


# -- the ServiceMonitor and the kustomization ----------------------------------------------------------------


def test_the_servicemonitor_scrapes_the_services_metrics_port() -> None:
    monitor = load_yaml(MONITORING / "servicemonitor.yaml")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["kind"] == "ServiceMonitor"
    service = base_doc("Service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector and selector.items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    # the Service's port leads to the container port the service serves /metrics on (service.internal_port: the
    # public port answers it 404), which the NetworkPolicy lets in
    (container,) = base_doc("Deployment")["spec"]["template"]["spec"]["containers"]
    (container_port,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert str(container_port["containerPort"]) == env["MIRROR_SERVICE__INTERNAL_PORT"]
    ingress = [p["port"] for rule in base_doc("NetworkPolicy")["spec"]["ingress"] for p in rule["ports"]]
    assert container_port["containerPort"] in ingress


def test_the_kustomization_builds_the_monitor_and_the_rules_apart_from_the_base() -> None:
    kustomization = load_yaml(MONITORING / "kustomization.yaml")
    assert set(kustomization["resources"]) == {"servicemonitor.yaml", "prometheusrule.yaml"}
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is missing (tests/test_deploy.py needs it too)"
    output = subprocess.run([kubectl, "kustomize", str(MONITORING)], capture_output=True, text=True, check=True)
    docs = [doc for doc in yaml.safe_load_all(output.stdout) if doc]
    assert sorted(doc["kind"] for doc in docs) == ["PrometheusRule", "ServiceMonitor"]
    namespace = load_yaml(BASE / "kustomization.yaml")["namespace"]
    assert {doc["metadata"]["namespace"] for doc in docs} == {namespace}
    (rule,) = [doc for doc in docs if doc["kind"] == "PrometheusRule"]
    assert rule["spec"]["groups"] == load_yaml(RULES)["groups"]
    # clusters without the Prometheus Operator's CRDs apply deploy/ unchanged
    for top in (ROOT / "deploy" / "kustomization.yaml", BASE / "kustomization.yaml"):
        assert not [r for r in load_yaml(top)["resources"] if "monitoring" in r], top


@pytest.mark.parametrize("name", ["rules.yaml", "rules_test.yaml", "servicemonitor.yaml", "prometheusrule.yaml"])
def test_each_yaml_file_is_one_document(name: str) -> None:
    docs = [doc for doc in yaml.safe_load_all((MONITORING / name).read_text()) if doc]
    assert len(docs) == 1 and isinstance(docs[0], dict)
