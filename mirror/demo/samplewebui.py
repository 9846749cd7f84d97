"""A chart shaped like HAMi-WebUI's, its subcharts, and the images each part can run (the tests' material).

The chart is `hami-webui` (`charts/hami-webui` in Project-HAMi/HAMi-WebUI), packaged as `helm package` lays it
out, with its two dependencies inside it as the real repository serves them. Each chart's templates and values
are files under `charts/<chart>/` beside this module (`chart_tree`); the `_helpers.tpl` files and the versioned
`Chart.yaml`s are written here. The charts:

- `hami-webui` itself: `image.frontend` and `image.backend` have no `registry` key, a bare Docker Hub name in
  `repository` and a `digest` that wins over the tag (rendered `repository@digest`, as the real
  `hami-webui.image` helper does); `imagePullSecrets: []` is in the values, but the Deployment does not render
  it, and no values give its ServiceAccount one (nor do the real chart's): on a private target its pods pull only
  once that ServiceAccount is given the secret;
- `charts/dcgm-exporter-3.5.0.tgz` (NVIDIA's chart, enabled by `dcgm-exporter.enabled: true`): the host inside
  `image.repository` (`nvcr.io/nvidia/k8s/dcgm-exporter`), `image.tag` set, and the DaemonSet falling back to
  the chart's appVersion (`3.5.0`) when the tag is emptied;
- `charts/kube-prometheus-stack-62.6.0.tgz` (disabled by `kube-prometheus-stack.enabled: false`): a small stand-in
  for the real hundred-template chart with a few of its real image blocks `{registry, repository, tag, sha}` and
  their templates, all honouring `global.imageRegistry` the Bitnami way: the operator's Deployment (its image,
  and the config reloader's image passed as an argument), the certgen Job of its admission webhooks, and the
  `Prometheus` custom resource whose `spec.image` the operator runs (not a container of any workload); and its
  own subcharts `charts/grafana-8.5.1.tgz`, `charts/kube-state-metrics-5.25.1.tgz` (dependencies by version
  range, `8.5.*`/`5.25.*`, enabled by `grafana.enabled`/`kubeStateMetrics.enabled` while their values sit under
  `grafana:`/`kube-state-metrics:`) and the `charts/crds/` directory subchart (CRDs, no images). The parent's
  values turn most of it off, as the real ones do: with `kube-prometheus-stack.enabled: true` alone, only
  Prometheus and kube-state-metrics run.

Public names:

- `REAL_HOSTS`: source key -> the registry the real charts name (`hub` docker.io, `nvcr` nvcr.io, `quay`
  quay.io, `k8s` registry.k8s.io).
- `REAL_DIGESTS`: the real chart 1.3.0's frontend and backend pins, keyed `repository:tag`.
- `WebuiImage` and `webui_images(version="1.3.0") -> tuple[WebuiImage, ...]`: every image a part of the chart can
  run, with the key of its block in the parent's values, its source, tag, how it is rendered and the values that
  turn it on. `WEBUI_IMAGES` is `webui_images()`.
- `webui_chart(digests=None, version="1.3.0", hub=None, nvcr="nvcr.io", quay="quay.io", k8s="registry.k8s.io")
  -> bytes`: the packaged chart. `digests` maps `repository:tag` to a digest (what `seed_webui_images` returns);
  the frontend and backend are pinned when theirs is there (None: `REAL_DIGESTS`), else the values carry no
  `digest` key, as older charts did. `hub=None` writes Docker Hub names exactly as the real charts do (bare
  `projecthami/hami-webui-fe-oss`, grafana's `registry: docker.io`); a host such as `127.0.0.1:5000` is put
  inside `repository` for blocks without a `registry` key, into `registry` for blocks with one. The other hosts
  go the same way (nvcr.io inside dcgm-exporter's `repository`, quay.io and registry.k8s.io into `registry`).
- `dcgm_exporter_chart(nvcr)`, `kube_prometheus_stack_chart(hub, quay, k8s)`, `grafana_chart(hub)`,
  `kube_state_metrics_chart(k8s)`: the parts.
- `seed_webui_images(clients, versions=("1.3.0",), prefixes=None) -> dict[str, str]` (async): pushes every image
  of those versions, given one `RegistryClient` per source key (the same client may serve several keys);
  `prefixes` puts a source's repositories under a path (registry.k8s.io's images live at
  `k8s-artifacts-prod/images/<name>` on the host it redirects to). Returns `repository:tag` -> digest, with the
  charts' names (no prefix). The frontend, backend and dcgm-exporter are multi-arch, the rest single images;
  every layer is a few tens of KiB.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from string import Template

from mirror.demo.sample import push_multiarch, push_single
from mirror.demo.samplechart import package
from mirror.registry import RegistryClient

KiB = 1024
REAL_HOSTS = {"hub": "docker.io", "nvcr": "nvcr.io", "quay": "quay.io", "k8s": "registry.k8s.io"}
FRONTEND, BACKEND = "projecthami/hami-webui-fe-oss", "projecthami/hami-webui-be-oss"
REAL_DIGESTS = {
    f"{FRONTEND}:v1.3.0": "sha256:b40bbec2b963932545a8b7ac15efef3ec087c76dce4da0ea4c3659fa2abd695e",
    f"{BACKEND}:v1.3.0": "sha256:7057047c7c2f7838cd190b3dc7263d503bbcf5d8e52642bc703227d137bc029d",
}

DCGM_VERSION, DCGM_APP_VERSION, DCGM_TAG = "3.5.0", "3.5.0", "3.3.7-3.5.0-ubuntu22.04"
KPS_VERSION, KPS_APP_VERSION = "62.6.0", "v0.76.1"  # the operator's version is the chart's appVersion
PROMETHEUS_TAG = "v2.54.1"
CERTGEN_TAG = "v20221220-controller-v1.5.1-58-g787ea74b6"
GRAFANA_VERSION, GRAFANA_APP_VERSION = "8.5.1", "11.2.0"
KSM_VERSION, KSM_APP_VERSION = "5.25.1", "2.13.0"
KPS = "kube-prometheus-stack"


@dataclass(frozen=True, slots=True)
class WebuiImage:
    part: str  # the chart whose template runs it
    key: str  # its block in the parent's values
    source: str  # a key of REAL_HOSTS
    repository: str  # the name at the source, without the host
    tag: str  # what the chart runs by default (an empty tag in the values resolved the chart's way)
    rendered_as: str  # "container", "Prometheus spec.image" or "operator argument"
    enabled_by: tuple[str, ...]  # parent values keys that must all be true for it to run (none: always)
    pinned: bool = False  # the values carry a digest, which the template prefers to the tag
    multiarch: bool = False

    @property
    def reference(self) -> str:
        """As the chart renders it with the real hosts (Docker Hub's bare names spelled out as docker.io)."""
        return f"{REAL_HOSTS[self.source]}/{self.repository}:{self.tag}"

    @property
    def name(self) -> str:
        return f"{self.repository}:{self.tag}"


_OPERATOR = (f"{KPS}.enabled", f"{KPS}.prometheusOperator.enabled")
_HOOKS = (*_OPERATOR, f"{KPS}.prometheusOperator.admissionWebhooks.enabled")
SUBCHART_IMAGES = (  # the same for every WebUI version: its subcharts' own images, off unless enabled
    WebuiImage(
        "dcgm-exporter",
        "dcgm-exporter.image",
        "nvcr",
        "nvidia/k8s/dcgm-exporter",
        DCGM_TAG,
        "container",
        ("dcgm-exporter.enabled",),
        multiarch=True,
    ),
    WebuiImage(
        KPS,
        f"{KPS}.prometheus.prometheusSpec.image",
        "quay",
        "prometheus/prometheus",
        PROMETHEUS_TAG,
        "Prometheus spec.image",
        (f"{KPS}.enabled", f"{KPS}.prometheus.enabled"),
    ),
    WebuiImage(
        KPS,
        f"{KPS}.prometheusOperator.image",
        "quay",
        "prometheus-operator/prometheus-operator",
        KPS_APP_VERSION,
        "container",
        _OPERATOR,
    ),
    WebuiImage(
        KPS,
        f"{KPS}.prometheusOperator.prometheusConfigReloader.image",
        "quay",
        "prometheus-operator/prometheus-config-reloader",
        KPS_APP_VERSION,
        "operator argument",
        _OPERATOR,
    ),
    WebuiImage(
        KPS,
        f"{KPS}.prometheusOperator.admissionWebhooks.patch.image",
        "k8s",
        "ingress-nginx/kube-webhook-certgen",
        CERTGEN_TAG,
        "container",
        (*_HOOKS, f"{KPS}.prometheusOperator.admissionWebhooks.patch.enabled"),
    ),
    WebuiImage(
        "grafana",
        f"{KPS}.grafana.image",
        "hub",
        "grafana/grafana",
        GRAFANA_APP_VERSION,
        "container",
        (f"{KPS}.enabled", f"{KPS}.grafana.enabled"),
    ),
    WebuiImage(
        "kube-state-metrics",
        f"{KPS}.kube-state-metrics.image",
        "k8s",
        "kube-state-metrics/kube-state-metrics",
        f"v{KSM_APP_VERSION}",
        "container",
        (f"{KPS}.enabled", f"{KPS}.kubeStateMetrics.enabled"),
    ),
)


def webui_images(version: str = "1.3.0") -> tuple[WebuiImage, ...]:
    return (
        WebuiImage("hami-webui", "image.frontend", "hub", FRONTEND, f"v{version}", "container", (), True, True),
        WebuiImage("hami-webui", "image.backend", "hub", BACKEND, f"v{version}", "container", (), True, True),
        *SUBCHART_IMAGES,
    )


WEBUI_IMAGES = webui_images()


def chart_tree(chart: str) -> dict[str, str]:
    """The chart's files as they sit under `charts/<chart>/` beside this module (values.yaml and Chart.yaml
    may hold `$names` for `string.Template`); the helpers and Chart.yaml with versions are written here."""
    tree: dict[str, str] = {}

    def walk(folder: Traversable, prefix: str) -> None:
        for entry in folder.iterdir():
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            else:
                tree[f"{prefix}{entry.name}"] = entry.read_text(encoding="utf-8")

    walk(resources.files("mirror.demo") / "charts" / chart, "")
    return tree


def _inside(host: str | None, repository: str) -> str:
    """A `repository` that carries its host (no `registry` key); None keeps Docker Hub's bare name."""
    return repository if host is None else f"{host}/{repository}"


# --- hami-webui --------------------------------------------------------------------------------------------

NAMING = """{{- define "@.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc @NAME | trimSuffix "-" -}}
{{- end -}}

{{- define "@.fullname" -}}
@OVERRIDE{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc @FULL | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc @FULL | trimSuffix "-" -}}
{{- end -}}
@END{{- end -}}

{{- define "@.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}
"""
FULLNAME_OVERRIDE = """{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc @FULL | trimSuffix "-" -}}
{{- else -}}
"""
PULL_SECRETS = """{{- define "@.imagePullSecrets" -}}
{{- range @SECRETS }}
  {{- if eq (typeOf .) "map[string]interface {}" }}
- {{ toYaml . | trim }}
  {{- else }}
- name: {{ . }}
  {{- end }}
{{- end }}
{{- end -}}
"""
SELECTOR_LABELS = """{{- define "@.selectorLabels" -}}
app.kubernetes.io/name: {{ include "@.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
"""


def naming_helpers(chart: str, name_length: int = 63, fullname_length: int = 63, override: bool = True) -> str:
    """The name, fullname and namespace helpers of `helm create`, with each upstream chart's name lengths and
    with or without its fullnameOverride."""
    fullname = NAMING.replace("@OVERRIDE", FULLNAME_OVERRIDE if override else "")
    fullname = fullname.replace("@END", "{{- end -}}\n" if override else "")
    text = fullname.replace("@NAME", str(name_length)).replace("@FULL", str(fullname_length))
    return text.replace("@.", chart + ".")


def pull_secrets_helper(chart: str, secrets: str) -> str:
    return PULL_SECRETS.replace("@SECRETS", secrets).replace("@.", chart + ".")


def selector_labels_helper(chart: str) -> str:
    return SELECTOR_LABELS.replace("@.", chart + ".")


WEBUI_HELPERS = (
    naming_helpers("hami-webui")
    + selector_labels_helper("hami-webui")
    + """
{{/*
An image reference: a digest, when set, wins over the tag and renders repository@digest.
*/}}
{{- define "hami-webui.image" -}}
{{- $repository := required (printf "image.%s.repository is required" .name) .image.repository -}}
{{- $digest := default "" .image.digest -}}
{{- if $digest -}}
{{- if not (regexMatch "^sha256:[a-f0-9]{64}$" $digest) -}}
{{- fail (printf "image.%s.digest must be a sha256 digest" .name) -}}
{{- end -}}
{{- printf "%s@%s" $repository $digest -}}
{{- else -}}
{{- $appVersion := required "Chart.appVersion is required when an image digest is not set" .appVersion -}}
{{- $defaultTag := ternary $appVersion (printf "v%s" $appVersion) (hasPrefix "v" $appVersion) -}}
{{- printf "%s:%s" $repository (default $defaultTag .image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "hami-webui.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "hami-webui.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "hami-webui.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hami-webui.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}
"""
)


def webui_chart(
    digests: Mapping[str, str] | None = None,
    version: str = "1.3.0",
    hub: str | None = None,
    nvcr: str = "nvcr.io",
    quay: str = "quay.io",
    k8s: str = "registry.k8s.io",
) -> bytes:
    """The packaged chart, subcharts included as `.tgz` under `charts/`."""
    pins = REAL_DIGESTS if digests is None else digests

    def digest_line(repository: str) -> str:
        digest = pins.get(f"{repository}:v{version}")
        return f'    digest: "{digest}"\n' if digest else ""

    tree = chart_tree("hami-webui")
    values = Template(tree["values.yaml"]).substitute(
        version=version,
        frontend=_inside(hub, FRONTEND),
        backend=_inside(hub, BACKEND),
        frontend_digest=digest_line(FRONTEND),
        backend_digest=digest_line(BACKEND),
    )
    files: dict[str, str | bytes] = {
        **tree,
        "Chart.yaml": Template(tree["Chart.yaml"]).substitute(
            version=version, dcgm_version=DCGM_VERSION, kps_version=KPS_VERSION
        ),
        "values.yaml": values,
        "templates/_helpers.tpl": WEBUI_HELPERS,
        f"charts/dcgm-exporter-{DCGM_VERSION}.tgz": dcgm_exporter_chart(nvcr),
        f"charts/{KPS}-{KPS_VERSION}.tgz": kube_prometheus_stack_chart(hub, quay, k8s),
    }
    return package(files, top="hami-webui")


# --- dcgm-exporter -----------------------------------------------------------------------------------------

DCGM_CHART = f"""apiVersion: v2
name: dcgm-exporter
description: A Helm chart for DCGM exporter
version: "{DCGM_VERSION}"
kubeVersion: ">= 1.19.0-0"
appVersion: "{DCGM_APP_VERSION}"
sources:
- https://github.com/nvidia/dcgm-exporter
home: https://github.com/nvidia/dcgm-exporter/
keywords: [gpu, cuda, compute, monitoring, telemetry, tesla]
"""

DCGM_HELPERS = (
    naming_helpers("dcgm-exporter")
    + selector_labels_helper("dcgm-exporter")
    + """
{{- define "dcgm-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ default (include "dcgm-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else -}}
{{ default "default" .Values.serviceAccount.name }}
{{- end -}}
{{- end -}}
"""
)


def dcgm_exporter_chart(nvcr: str = "nvcr.io") -> bytes:
    tree = chart_tree("dcgm-exporter")
    values = Template(tree["values.yaml"]).substitute(repository=f"{nvcr}/nvidia/k8s/dcgm-exporter", tag=DCGM_TAG)
    files = {**tree, "Chart.yaml": DCGM_CHART, "values.yaml": values, "templates/_helpers.tpl": DCGM_HELPERS}
    return package(files, top="dcgm-exporter")


# --- kube-prometheus-stack (a small stand-in) --------------------------------------------------------------

KPS_CHART = f"""apiVersion: v2
name: {KPS}
description: >-
  kube-prometheus-stack collects Kubernetes manifests, Grafana dashboards, and Prometheus rules combined with
  documentation and scripts to provide easy to operate end-to-end Kubernetes cluster monitoring with Prometheus
  using the Prometheus Operator. (A small stand-in: a few of its image blocks and templates.)
type: application
version: {KPS_VERSION}
appVersion: {KPS_APP_VERSION}
kubeVersion: ">=1.19.0-0"
home: https://github.com/prometheus-operator/kube-prometheus
dependencies:
  - name: crds
    version: "0.0.0"
    condition: crds.enabled
  - name: kube-state-metrics
    version: "5.25.*"
    repository: https://prometheus-community.github.io/helm-charts
    condition: kubeStateMetrics.enabled
  - name: grafana
    version: "8.5.*"
    repository: https://grafana.github.io/helm-charts
    condition: grafana.enabled
"""

KPS_HELPERS = (
    naming_helpers("kube-prometheus-stack", name_length=50, fullname_length=26)
    + pull_secrets_helper("kube-prometheus-stack", ".Values.global.imagePullSecrets")
    + """
{{- define "kube-prometheus-stack.labels" }}
release: {{ $.Release.Name | quote }}
heritage: {{ $.Release.Service | quote }}
app.kubernetes.io/part-of: {{ template "kube-prometheus-stack.name" . }}
chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}
"""
)


def kube_prometheus_stack_chart(hub: str | None = None, quay: str = "quay.io", k8s: str = "registry.k8s.io") -> bytes:
    tree = chart_tree(KPS)
    values = Template(tree["values.yaml"]).substitute(
        quay=quay, k8s=k8s, certgen_tag=CERTGEN_TAG, prometheus_tag=PROMETHEUS_TAG
    )
    files: dict[str, str | bytes] = {
        **tree,
        "Chart.yaml": KPS_CHART,
        "values.yaml": values,
        "templates/_helpers.tpl": KPS_HELPERS,
        f"charts/grafana-{GRAFANA_VERSION}.tgz": grafana_chart(hub),
        f"charts/kube-state-metrics-{KSM_VERSION}.tgz": kube_state_metrics_chart(k8s),
    }
    return package(files, top=KPS)


# --- grafana (kube-prometheus-stack's subchart) --------------------------------------------------------------

GRAFANA_CHART = f"""apiVersion: v2
name: grafana
version: {GRAFANA_VERSION}
appVersion: {GRAFANA_APP_VERSION}
kubeVersion: "^1.8.0-0"
description: The leading tool for querying and visualizing time series and metrics.
home: https://grafana.com
type: application
"""

GRAFANA_HELPERS = (
    naming_helpers("grafana", override=False)
    + """
{{/*
The registry of an image, with a trailing slash: global.imageRegistry when set, else the image's own.
*/}}
{{- define "grafana.imageRegistry" -}}
{{- if .root.Values.global.imageRegistry }}
{{- printf "%s/" .root.Values.global.imageRegistry }}
{{- else if .imageRoot.registry }}
{{- printf "%s/" .imageRoot.registry }}
{{- end }}
{{- end }}

{{- define "grafana.imagePullSecrets" -}}
{{- $root := .root }}
{{- range (concat .root.Values.global.imagePullSecrets .imagePullSecrets) }}
{{- if eq (typeOf .) "map[string]interface {}" }}
- {{ toYaml (dict "name" (tpl .name $root)) | trim }}
{{- else }}
- name: {{ tpl . $root }}
{{- end }}
{{- end }}
{{- end }}
"""
)


def grafana_chart(hub: str | None = None) -> bytes:
    tree = chart_tree("grafana")
    files = {
        **tree,
        "Chart.yaml": GRAFANA_CHART,
        "values.yaml": Template(tree["values.yaml"]).substitute(registry=hub or REAL_HOSTS["hub"]),
        "templates/_helpers.tpl": GRAFANA_HELPERS,
    }
    return package(files, top="grafana")


# --- kube-state-metrics (kube-prometheus-stack's subchart) ---------------------------------------------------

KSM_CHART = f"""apiVersion: v2
name: kube-state-metrics
description: Install kube-state-metrics to generate and expose cluster-level metrics
keywords: [metric, monitoring, prometheus, kubernetes]
type: application
version: {KSM_VERSION}
appVersion: {KSM_APP_VERSION}
home: https://github.com/kubernetes/kube-state-metrics/
"""

KSM_HELPERS = (
    naming_helpers("kube-state-metrics", override=False)
    + pull_secrets_helper("kube-state-metrics", "(concat .Values.global.imagePullSecrets .imagePullSecrets)")
    + """
{{/*
The image to use for kube-state-metrics
*/}}
{{- define "kube-state-metrics.image" -}}
{{- if .Values.image.sha }}
{{- if .Values.global.imageRegistry }}
{{- printf "%s/%s:%s@%s" .Values.global.imageRegistry .Values.image.repository (default (printf "v%s" .Chart.AppVersion) .Values.image.tag) .Values.image.sha }}
{{- else }}
{{- printf "%s/%s:%s@%s" .Values.image.registry .Values.image.repository (default (printf "v%s" .Chart.AppVersion) .Values.image.tag) .Values.image.sha }}
{{- end }}
{{- else }}
{{- if .Values.global.imageRegistry }}
{{- printf "%s/%s:%s" .Values.global.imageRegistry .Values.image.repository (default (printf "v%s" .Chart.AppVersion) .Values.image.tag) }}
{{- else }}
{{- printf "%s/%s:%s" .Values.image.registry .Values.image.repository (default (printf "v%s" .Chart.AppVersion) .Values.image.tag) }}
{{- end }}
{{- end }}
{{- end }}
"""  # noqa: E501 - the real template's lines
)


def kube_state_metrics_chart(k8s: str = "registry.k8s.io") -> bytes:
    tree = chart_tree("kube-state-metrics")
    files = {
        **tree,
        "Chart.yaml": KSM_CHART,
        "values.yaml": Template(tree["values.yaml"]).substitute(registry=k8s),
        "templates/_helpers.tpl": KSM_HELPERS,
    }
    return package(files, top="kube-state-metrics")


# --- the images, pushed -------------------------------------------------------------------------------------


async def seed_webui_images(
    clients: Mapping[str, RegistryClient],
    versions: Sequence[str] = ("1.3.0",),
    prefixes: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Push every image the chart of each version can run, each to its source's client; `repository:tag` ->
    digest. The frontend and backend are OCI indexes with BuildKit attestations, dcgm-exporter a Docker
    manifest list (two platforms each), the rest single Docker manifests."""
    digests: dict[str, str] = {}
    images = {image.name: image for version in versions for image in webui_images(version)}
    for seed, image in enumerate(images.values(), start=100):
        client = clients[image.source]
        repository = (prefixes or {}).get(image.source, "") + image.repository
        if image.part == "hami-webui":
            pushed = await push_multiarch(client, repository, image.tag, layer_sizes=(48 * KiB,), seed=seed)
        elif image.multiarch:
            pushed = await push_multiarch(
                client, repository, image.tag, layer_sizes=(64 * KiB,), docker=True, seed=seed
            )
        else:
            pushed = await push_single(client, repository, image.tag, layer_sizes=(32 * KiB,), seed=seed)
        digests[image.name] = pushed.digest
    return digests
