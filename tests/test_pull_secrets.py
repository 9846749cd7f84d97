"""A pull secret reaches every pod in the form its chart takes, and the proof names each pod it does not reach.

HAMi's chart renders `global.imagePullSecrets` through its `common.images.pullSecrets`, one `- name: {{ . }}` per
entry: it takes plain names, and a `{name: acr-pull}` renders as a secret named `map[name:acr-pull]`.
dcgm-exporter passes its list through `toYaml` (`{name: ...}` entries); kube-prometheus-stack takes both.
HAMi-WebUI's own Deployment renders no pull secret at all. Every chart here is rendered by real Helm
(helm-python-sdk) and read back as the cluster would; the sync runs against Debian's registry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from mirror.chart.archive import ChartArchive, open_chart
from mirror.chart.images import PodPull, image_blocks, pod_pulls, pull_secret_paths
from mirror.chart.merge import deep_merge
from mirror.chart.proof import NO_SECRET, OTHER_FORM, WITH_SECRET, check_rendering
from mirror.chart.render import Rendering, render_install
from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.samplechart import ChartRepository, chart_files, hami_chart, package
from mirror.demo.samplewebui import webui_chart
from mirror.engine import deliver
from mirror.naming import flat_name
from mirror.settings import ACR_REGISTRIES, TargetSettings
from mirror.values import PointedBlock, build_values, pull_registry
from tests.support import sync_json
from tests.test_chart import CHART_VERSION, chart_config, seed_chart_images
from tests.test_install import Install, install_config
from tests.test_install import install as whole_install  # noqa: F401 - a fixture
from tests.test_samplewebui import EVERYTHING_ON
from tests.test_sync import VERSION

TARGET = TargetSettings(name="t", registry="crpi-abc123.cn-hangzhou.personal.cr.aliyuncs.com", namespace="ns")
VPC = pull_registry(TARGET)  # a crpi- instance: no anonymous pull at all
AT_TARGET = frozenset({f"{VPC}/ns/"})
SECRET = [{"name": "acr-pull"}]


def pointed(archive: ChartArchive) -> list[PointedBlock]:
    """Every block of the chart that is not already at ACR, pointed at its copy."""
    blocks = image_blocks(archive, "1.32.0")
    return [
        PointedBlock(b, flat_name(b.source, "docker.io")) for b in blocks if not b.registry.endswith("aliyuncs.com")
    ]


def manifests(raw: bytes, values: dict[str, Any], release: str, namespace: str) -> Iterator[tuple[str, Any]]:
    """(template, document) of everything Helm's SDK renders with the values."""
    with helm_python.Chart.load_archive(raw) as chart:
        rendered = chart.render(values, name=release, namespace=namespace, is_install=True)
    for template, text in rendered.items():
        for document in yaml.safe_load_all(text) if template.endswith(".yaml") else ():
            if isinstance(document, dict):
                yield template, document


def pod_specs_at_target(raw: bytes, values: dict[str, Any], release: str, namespace: str) -> dict[str, Any]:
    """Each workload's pod spec that pulls from the target, read from the manifests as the cluster reads them:
    `kind name` -> the pod spec (a CronJob's inside its job template)."""
    found = {}
    for _, document in manifests(raw, values, release, namespace):
        spec = document.get("spec", {})
        spec = spec.get("jobTemplate", {}).get("spec", spec)
        pod = spec.get("template", {}).get("spec", spec if "containers" in spec else {})
        if any(str(c.get("image", "")).startswith(VPC) for c in pod.get("containers", [])):
            found[f"{document['kind']} {document['metadata']['name']}"] = pod
    return found


def rendered_pods(raw: bytes, values: dict[str, Any], release: str, namespace: str) -> list[PodPull]:
    return [pod for template, doc in manifests(raw, values, release, namespace) for pod in pod_pulls(doc, template)]


def test_hamis_own_helper_renders_the_secret_by_name_on_every_pod_hooks_included() -> None:
    """A helper that renders pull secrets as HAMi's `common.images.pullSecrets` does (the sample chart's)."""
    raw = hami_chart("docker.io")
    archive = open_chart(raw, "hami")
    values = build_values(TARGET, pointed(archive), {}, "acr-pull", pull_secret_paths(archive))
    assert values["global"]["imagePullSecrets"] == ["acr-pull"]  # as HAMi's values.yaml shows it
    pods = pod_specs_at_target(raw, values, "hami", "kube-system")
    assert sorted(pods) == [
        "DaemonSet hami-hami-device-plugin",
        "Deployment hami-hami-scheduler",
        "Job hami-hami-admission-create",  # a pre-install hook
    ]
    assert {name: pod.get("imagePullSecrets") for name, pod in pods.items()} == dict.fromkeys(pods, SECRET)


def chart_with_values(values_yaml: str, name: str = "c") -> ChartArchive:
    files = {"Chart.yaml": f"apiVersion: v2\nname: {name}\nversion: 1.0.0\n", "values.yaml": values_yaml}
    return open_chart(package(files, name), name)


GLOBAL_FORMS = [
    # HAMi's values.yaml: the example above the key is a plain name
    ("global:\n  ## imagePullSecrets:\n  ##   - myRegistryKeySecretName\n  imagePullSecrets: []\n", ["acr-pull"]),
    # kube-prometheus-stack's: the example below it names the `name:` form first
    ('global:\n  imagePullSecrets: []\n  # - name: "image-pull-secret"\n  # or\n  # - "image-pull-secret"\n', SECRET),
    # a default with entries shows their form
    ("global:\n  imagePullSecrets: [{name: other}]\n", SECRET),
    # nothing shown: the Bitnami convention in global, which both-form charts take too
    ("global:\n  imagePullSecrets: []\n", ["acr-pull"]),
]


def test_global_takes_the_form_its_values_yaml_shows() -> None:
    for values_yaml, written in GLOBAL_FORMS:
        archive = chart_with_values(values_yaml)
        values = build_values(TARGET, [], {}, "acr-pull", pull_secret_paths(archive))
        assert values["global"]["imagePullSecrets"] == written, values_yaml


def test_a_top_level_list_takes_the_kubernetes_form_unless_its_values_yaml_shows_another() -> None:
    plain = chart_with_values("imagePullSecrets: []\n# - myRegistryKeySecretName\n")
    assert build_values(TARGET, [], {}, "acr-pull", pull_secret_paths(plain))["imagePullSecrets"] == ["acr-pull"]
    usual = chart_with_values("imagePullSecrets: []\nnameOverride: ''\n")
    assert build_values(TARGET, [], {}, "acr-pull", pull_secret_paths(usual))["imagePullSecrets"] == SECRET


def test_dcgm_exporter_and_kube_prometheus_stack_pods_get_it_and_the_webui_deployment_is_named() -> None:
    """Everything on: dcgm-exporter (`toYaml`), kube-prometheus-stack's operator, certgen hook Job and Prometheus
    resource, grafana and kube-state-metrics get the secret; HAMi-WebUI's own Deployment renders none, and the
    proof names it with the steps that give its ServiceAccount the secret."""
    raw = webui_chart()
    archive = open_chart(raw, "hami-webui")
    values = build_values(TARGET, pointed(archive), EVERYTHING_ON, "acr-pull", pull_secret_paths(archive))
    pods = rendered_pods(raw, values, "my-hami-webui", "hami")
    proof = check_rendering(Rendering("Helm", ()), set(), list(ACR_REGISTRIES), None, AT_TARGET, pods, "acr-pull")
    verdicts = {checked.pod.workload: checked.verdict for checked in proof.pods}
    assert verdicts == {
        "Deployment my-hami-webui": NO_SECRET,
        "DaemonSet my-hami-webui-dcgm-exporter": WITH_SECRET,
        "Deployment my-hami-webui-kube-prometh-operator": WITH_SECRET,
        "Job my-hami-webui-kube-prometh-admission-create": WITH_SECRET,
        "Prometheus my-hami-webui-kube-prometh-prometheus": WITH_SECRET,
        "Deployment my-hami-webui-grafana": WITH_SECRET,
        "Deployment my-hami-webui-kube-state-metrics": WITH_SECRET,
    }
    assert proof.ok  # nothing pulls from elsewhere: a warning with its way through, not a refusal
    patch = """'{"imagePullSecrets":[{"name":"acr-pull"}]}'"""
    assert proof.secret_warnings("hami") == [
        "Deployment my-hami-webui (hami-webui/templates/deployment.yaml) carries no pull secret (its chart renders "
        "none there), so its pods cannot pull from the target: after helm install, run kubectl -n hami patch "
        f"serviceaccount my-hami-webui -p {patch} && kubectl -n hami rollout restart deployment/my-hami-webui"
    ]
    listed = proof.to_json()["pods"]
    assert isinstance(listed, list) and len(listed) == len(verdicts)
    webui = "Deployment my-hami-webui", "hami-webui/templates/deployment.yaml", NO_SECRET, "my-hami-webui"
    assert dict(zip(("pod", "from", "verdict", "service_account"), webui, strict=True)) in listed


def test_a_secret_in_a_form_the_chart_does_not_take_is_told_from_a_missing_one() -> None:
    """HAMi's helper given `{name: acr-pull}` renders a secret named `map[name:acr-pull]`: the render says so."""
    raw = hami_chart("docker.io")
    archive = open_chart(raw, "hami")
    places = [place.other_form() for place in pull_secret_paths(archive)]
    values = build_values(TARGET, pointed(archive), {}, "acr-pull", places)
    assert values["global"]["imagePullSecrets"] == SECRET
    pods = rendered_pods(raw, values, "hami", "kube-system")
    proof = check_rendering(Rendering("Helm", ()), set(), [], None, AT_TARGET, pods, "acr-pull")
    assert {checked.verdict for checked in proof.pods} == {OTHER_FORM} and len(proof.pods) == 3
    assert proof.secret_in_another_form
    warning = next(w for w in proof.secret_warnings("kube-system") if w.startswith("DaemonSet"))
    assert "in a form its chart does not take (name: map[name:acr-pull])" in warning
    assert "kubectl -n kube-system rollout restart daemonset/hami-hami-device-plugin" in warning


SPEC = (
    "{imagePullSecrets: {{ toJson .Values.imagePullSecrets }}, serviceAccountName: runner, "
    'initContainers: [{name: init, image: "{{ .Values.image }}"}], '
    'containers: [{name: main, image: "{{ .Values.image }}"}]}'
)
KINDS = f"""apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: sts}}
spec:
  template:
    spec: {SPEC}
---
apiVersion: batch/v1
kind: CronJob
metadata: {{name: cron, namespace: jobs}}
spec:
  jobTemplate:
    spec:
      template:
        spec: {SPEC}
---
apiVersion: v1
kind: Pod
metadata: {{name: bare}}
spec: {SPEC}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: forgot}}
spec:
  template:
    spec:
      containers: [{{name: main, image: "{{{{ .Values.image }}}}"}}]
"""


def test_every_kind_of_pod_is_read_with_its_pull_secrets_and_service_account() -> None:
    files = {"Chart.yaml": "apiVersion: v2\nname: kinds\nversion: 1.0.0\n", "templates/kinds.yaml": KINDS}
    raw = package(files, "kinds")
    values = {"image": f"{VPC}/ns/library_busybox:1.36", "imagePullSecrets": SECRET}
    pods = rendered_pods(raw, values, "kinds", "default")
    assert {(p.workload, p.namespace, p.service_account, p.pull_secrets) for p in pods} == {
        ("StatefulSet sts", "", "runner", ("acr-pull",)),
        ("CronJob cron", "jobs", "runner", ("acr-pull",)),
        ("Pod bare", "", "runner", ("acr-pull",)),
        ("Deployment forgot", "", "default", ()),
    }
    assert all(len(p.images) == (1 if p.name == "forgot" else 2) for p in pods)  # init containers too
    proof = check_rendering(Rendering("Helm", ()), set(), [], None, AT_TARGET, pods, "acr-pull")
    (missing,) = proof.pods_without_secret
    assert missing.pod.workload == "Deployment forgot"
    assert proof.secret_warnings("default")[0].endswith(
        'kubectl -n default patch serviceaccount default -p \'{"imagePullSecrets":[{"name":"acr-pull"}]}\' '
        "&& kubectl -n default rollout restart deployment/forgot"
    )


def test_the_warnings_of_a_chart_with_many_pods_without_the_secret_are_a_few_then_how_many_more() -> None:
    """Each warning goes into the values file's header and the report: 300 pods made 300 lines there."""
    pods = [
        PodPull("Deployment", f"app-{n:03d}", "", f"t/app-{n:03d}.yaml", (f"{VPC}/ns/app:v1",), ()) for n in range(300)
    ]
    proof = check_rendering(Rendering("Helm", ()), set(), [], None, AT_TARGET, pods, "acr-pull")
    assert len(proof.pods_without_secret) == 300
    warnings = proof.secret_warnings("default")
    assert len(warnings) == 11 and warnings[0].startswith("Deployment app-000 ")
    assert warnings[-1] == "and 290 more pods without the pull secret (the report's proof lists each pod)"
    assert len(proof.to_json()["pods"]) == 300  # type: ignore[arg-type]


def test_a_sync_that_needs_a_pull_secret_writes_it_as_hamis_chart_renders_it(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_chart_images(source)
    config = chart_config(tmp_path, source, target, {"repository": repository.url}, target_options=PULL_SECRET)
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    (entry,) = report["values"]
    assert entry["kubectl"].startswith("kubectl create secret docker-registry acr-pull -n kube-system ")
    values = yaml.safe_load(Path(entry["path"]).read_text())
    assert values["global"]["imagePullSecrets"] == ["acr-pull"]
    raw = repository.charts[f"hami-{CHART_VERSION}.tgz"]
    with helm_python.Chart.load_archive(raw) as chart:
        rendered = chart.render(values, name="hami", namespace="kube-system", is_install=True)
    secrets = []
    for template, text in rendered.items():
        for document in yaml.safe_load_all(text) if template.endswith(".yaml") else ():
            pod = (document or {}).get("spec", {}).get("template", {}).get("spec", {})
            if any(c["image"].startswith(target.host) for c in pod.get("containers", [])):
                secrets.append(pod.get("imagePullSecrets"))
    assert secrets == [SECRET] * 3
    # Helm fetches the published chart itself: from the push host, logged in, as the repository is private
    login = f"helm registry login {target.host} --username <your account name> && "
    assert entry["helm"].startswith(login + f"helm install hami oci://{target.host}/mirrored/hami -n kube-system ")


PULL_SECRET = {"pull_secret": "acr-pull"}


@pytest.fixture
def repository(source: LocalRegistry) -> Iterator[ChartRepository]:
    from mirror.demo.samplechart import chart_repository

    with chart_repository() as served:
        served.add("hami", CHART_VERSION, package(chart_files(source.host, CHART_VERSION)))
        yield served


# --- through the sync: the proof's own render decides the form and names the pods ---------------------------------


def test_a_whole_install_that_needs_a_pull_secret_names_the_webui_deployment_with_its_way_through(
    tmp_path: Path,
    whole_install: Install,  # noqa: F811 - the fixture
    target: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """HAMi's pods and every subchart's get the secret; HAMi-WebUI's own Deployment renders none in any version:
    its values are still written (nothing pulls from elsewhere), with a warning naming it and the kubectl steps
    that give its ServiceAccount the secret, in the file, the report and the summary before its helm line."""
    targets = [{"name": "t0", "registry": target.host, "namespace": "mirrored", **PULL_SECRET}]
    config = install_config(tmp_path, whole_install, target, targets=targets)
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    hami, webui = report["values"]
    assert "warnings" not in hami and {pod["verdict"] for pod in hami["proof"]["pods"]} == {WITH_SECRET}
    assert webui["proof"]["ok"] is True
    (warning,) = webui["warnings"]
    patch = """'{"imagePullSecrets":[{"name":"acr-pull"}]}'"""
    assert warning == (
        "Deployment my-hami-webui (hami-webui/templates/deployment.yaml) carries no pull secret (its chart renders "
        "none there), so its pods cannot pull from the target: after helm install, run kubectl -n hami patch "
        f"serviceaccount my-hami-webui -p {patch} && kubectl -n hami rollout restart deployment/my-hami-webui"
    )
    assert f"# WARNING: {warning}\n" in Path(webui["path"]).read_text()
    verdicts = {pod["pod"]: pod["verdict"] for pod in webui["proof"]["pods"]}
    assert verdicts.pop("Deployment my-hami-webui") == NO_SECRET and set(verdicts.values()) == {WITH_SECRET}
    assert "DaemonSet my-hami-webui-dcgm-exporter" in verdicts
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    printed = capsys.readouterr().out
    assert printed.index(f"WARNING: {warning}") < printed.index("helm install my-hami-webui ")


def test_a_chart_that_adds_the_global_list_to_its_own_carries_the_secret_once(
    tmp_path: Path,
    whole_install: Install,  # noqa: F811 - the fixture
    target: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kube-state-metrics renders `concat global.imagePullSecrets .imagePullSecrets`: given the secret in both,
    its pod named it twice, which server-side apply (Helm 4's default) refuses as a duplicate key. Its own list
    is left out after one more render; every other list stays, and each pod at the target carries it once."""
    renders: list[dict[str, Any]] = []

    def counted(archive: ChartArchive, values: dict[str, Any], *args: Any) -> Any:
        renders.append(values)
        return render_install(archive, values, *args)

    monkeypatch.setattr(deliver, "render_install", counted)
    targets = [{"name": "t0", "registry": target.host, "namespace": "mirrored", **PULL_SECRET}]
    config = install_config(tmp_path, whole_install, target, targets=targets)
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    webui = yaml.safe_load(Path(report["values"][1]["path"]).read_text())
    assert "imagePullSecrets" not in webui["kube-prometheus-stack"]["kube-state-metrics"]
    assert webui["dcgm-exporter"]["imagePullSecrets"] and webui["imagePullSecrets"]
    raw = webui_chart(whole_install.webui, "1.3.0", **whole_install.hosts())
    pods = {pod.workload: pod for pod in rendered_pods(raw, deep_merge(EVERYTHING_ON, webui), "my-hami-webui", "hami")}
    assert pods["Deployment my-hami-webui-kube-state-metrics"].pull_secrets == ("acr-pull",)
    assert all(pod.pull_secrets.count("acr-pull") <= 1 for pod in pods.values())
    assert len(renders) == 3  # HAMi's once; the webui's, then once more without kube-state-metrics' own list


def test_the_render_corrects_a_form_the_values_yaml_suggests_wrongly_and_renders_again_only_then(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A values.yaml whose example shows `{name: ...}` above HAMi's helper: the proof's render finds
    `map[name:acr-pull]` on every pod, the values are built and rendered once more in the other form, and that
    is what is written. With the example right (the sample as HAMi's values.yaml shows it), one render."""
    renders: list[dict[str, Any]] = []

    def counted(archive: ChartArchive, values: dict[str, Any], *args: Any) -> Any:
        renders.append(values)
        return render_install(archive, values, *args)

    monkeypatch.setattr(deliver, "render_install", counted)
    seed_chart_images(source)
    config = chart_config(tmp_path, source, target, {"repository": repository.url}, target_options=PULL_SECRET)
    assert sync_json(config, capsys, VERSION)[0] == 0
    assert len(renders) == 1
    files = chart_files(source.host, CHART_VERSION)
    files["values.yaml"] = files["values.yaml"].replace("##   - my-registry-secret", "##   - name: regcred")
    repository.add("hami", CHART_VERSION, package(files))
    renders.clear()
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert [r["global"]["imagePullSecrets"] for r in renders] == [SECRET, ["acr-pull"]]
    (entry,) = report["values"]
    assert yaml.safe_load(Path(entry["path"]).read_text())["global"]["imagePullSecrets"] == ["acr-pull"]
    assert "warnings" not in entry and {pod["verdict"] for pod in entry["proof"]["pods"]} == {WITH_SECRET}
