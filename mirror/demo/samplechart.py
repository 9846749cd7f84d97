"""A sample chart shaped like HAMi's, and a classic Helm repository that serves it (the demo and the tests).

Like the real chart (its image and pull secret helpers behave as HAMi's do): empty tags resolved through
`global.imageTag`; kube-scheduler from another registry with the cluster's Kubernetes version as its tag; a
certgen image used only on Kubernetes < 1.22 and another on >= 1.22, in a pre-install hook Job; a mock device
plugin only with `mockDevicePlugin.enabled`; another vendor's image left empty; `global.imagePullSecrets`
rendered on every pod as `- name: <entry>` per entry (plain names).
"""

from __future__ import annotations

import hashlib
import http.server
import io
import ssl
import tarfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml

from mirror.demo.serving import serve

CHART_YAML = """apiVersion: v2
name: {name}
version: {version}
appVersion: "{version}"
kubeVersion: ">= 1.18.0-0"
"""

VALUES_YAML = """global:
  ## pull secrets for every pod, by name, for example:
  ##   - my-registry-secret
  imagePullSecrets: []
  imageTag: v{version}
scheduler:
  kubeScheduler:
    enabled: true
    image:
      registry: registry.cn-hangzhou.aliyuncs.com
      repository: google_containers/kube-scheduler
      tag: ""
      pullPolicy: IfNotPresent
      pullSecrets: []
  extender:
    image:
      registry: {registry}
      repository: projecthami/hami
      tag: ""
      pullPolicy: IfNotPresent
      pullSecrets: []
  patch:
    image:
      registry: {registry}
      repository: jettech/kube-webhook-certgen
      tag: v1.5.2
      pullSecrets: []
    imageNew:
      registry: {registry}
      repository: liangjw/kube-webhook-certgen
      tag: v1.1.1
      pullSecrets: []
devicePlugin:
  nvidiaDriverRoot: /usr/local/nvidia
  image:
    registry: {registry}
    repository: projecthami/hami
    tag: ""
    pullSecrets: []
  monitor:
    image:
      registry: {registry}
      repository: projecthami/hami
      tag: ""
      pullSecrets: []
mockDevicePlugin:
  enabled: false
  image:
    registry: {registry}
    repository: projecthami/mock-device-plugin
    tag: "1.0.1"
devices:
  ascend:
    image: ""
"""

# The helpers behave as the real chart's do where mirror cares: an image's registry, unless
# `global.imageRegistry` replaces it; an empty tag resolved through `global.imageTag` (kube-scheduler's through
# the cluster's version, the certgen images' not at all); and a pod's pull secrets, `global.imagePullSecrets`
# then the image blocks' own `pullSecrets`, written one `- name: <entry>` each, so the lists take plain names.
HELPERS = """{{- define "sample.ref" -}}
{{- $registry := .image.registry -}}
{{- if .root.Values.global.imageRegistry }}{{ $registry = .root.Values.global.imageRegistry }}{{ end -}}
{{- $tag := toString (.tag | default .image.tag) | trim -}}
{{- if $registry }}{{ $registry }}/{{ end }}{{ .image.repository }}:{{ $tag }}
{{- end -}}

{{- define "sample.releaseImage" -}}
{{- $tag := .image.tag | default .root.Values.global.imageTag -}}
{{- include "sample.ref" (dict "root" .root "image" .image "tag" $tag) -}}
{{- end -}}

{{- define "sample.kubeSchedulerImage" -}}
{{- $version := regexFind "^v[0-9]+[.][0-9]+[.][0-9]+" .Capabilities.KubeVersion.Version -}}
{{- $image := .Values.scheduler.kubeScheduler.image -}}
{{- include "sample.ref" (dict "root" . "image" $image "tag" ($image.tag | default $version)) -}}
{{- end -}}

{{- define "sample.pullSecrets" -}}
{{- $entries := list -}}
{{- range .root.Values.global.imagePullSecrets }}{{ $entries = append $entries . }}{{ end -}}
{{- range .images }}{{ range .pullSecrets }}{{ $entries = append $entries . }}{{ end }}{{ end -}}
{{- if $entries }}
imagePullSecrets:
{{- range $entries }}
  - name: {{ . }}
{{- end }}
{{- end -}}
{{- end -}}
"""

SCHEDULER = """apiVersion: apps/v1
kind: Deployment
metadata: {name: {{ .Release.Name }}-hami-scheduler}
spec:
  selector: {matchLabels: {app: hami-scheduler}}
  template:
    metadata: {labels: {app: hami-scheduler}}
    spec:
      priorityClassName: system-node-critical
      {{- $images := list .Values.scheduler.extender.image }}
      {{- if .Values.scheduler.kubeScheduler.enabled }}
      {{- $images = append $images .Values.scheduler.kubeScheduler.image }}
      {{- end }}
      {{- include "sample.pullSecrets" (dict "root" . "images" $images) | nindent 6 }}
      containers:
        {{- if .Values.scheduler.kubeScheduler.enabled }}
        - name: kube-scheduler
          image: {{ include "sample.kubeSchedulerImage" . }}
        {{- end }}
        - name: vgpu-scheduler-extender
          image: {{ include "sample.releaseImage" (dict "root" . "image" .Values.scheduler.extender.image) }}
"""

PATCH = """apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-hami-admission-create
  annotations:
    helm.sh/hook: pre-install,pre-upgrade
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  template:
    spec:
      restartPolicy: OnFailure
      {{- if semverCompare ">=1.22-0" .Capabilities.KubeVersion.GitVersion }}
      {{- include "sample.pullSecrets" (dict "root" . "images" (list .Values.scheduler.patch.imageNew)) | nindent 6 }}
      {{- else }}
      {{- include "sample.pullSecrets" (dict "root" . "images" (list .Values.scheduler.patch.image)) | nindent 6 }}
      {{- end }}
      containers:
        - name: create
          {{- if semverCompare ">=1.22-0" .Capabilities.KubeVersion.GitVersion }}
          image: {{ include "sample.ref" (dict "root" . "image" .Values.scheduler.patch.imageNew) }}
          {{- else }}
          image: {{ include "sample.ref" (dict "root" . "image" .Values.scheduler.patch.image) }}
          {{- end }}
"""

DEVICE_PLUGIN = """apiVersion: apps/v1
kind: DaemonSet
metadata: {name: {{ .Release.Name }}-hami-device-plugin}
spec:
  selector: {matchLabels: {app: hami-device-plugin}}
  template:
    metadata: {labels: {app: hami-device-plugin}}
    spec:
      {{- include "sample.pullSecrets" (dict "root" . "images" (list .Values.devicePlugin.image)) | nindent 6 }}
      containers:
        - name: device-plugin
          image: {{ include "sample.releaseImage" (dict "root" . "image" .Values.devicePlugin.image) }}
          env: [{name: DRIVER_ROOT, value: {{ .Values.devicePlugin.nvidiaDriverRoot | quote }}}]
        - name: vgpu-monitor
          image: {{ include "sample.releaseImage" (dict "root" . "image" .Values.devicePlugin.monitor.image) }}
"""

MOCK = """{{- if .Values.mockDevicePlugin.enabled }}
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: {{ .Release.Name }}-mock-device-plugin}
spec:
  selector: {matchLabels: {app: mock}}
  template:
    metadata: {labels: {app: mock}}
    spec:
      containers:
        - name: mock
          {{- $image := .Values.mockDevicePlugin.image }}
          image: {{ include "sample.ref" (dict "root" . "image" $image "tag" .Values.mockDevicePlugin.tag) }}
{{- end }}
"""

NOTES = "HAMi is installed. Images: {{ .Values.scheduler.extender.image.repository }}\n"


def chart_files(registry: str, version: str = "2.10.0", name: str = "hami") -> dict[str, str]:
    return {
        "Chart.yaml": CHART_YAML.format(name=name, version=version),
        "values.yaml": VALUES_YAML.format(registry=registry, version=version),
        "templates/_helpers.tpl": HELPERS,
        "templates/scheduler.yaml": SCHEDULER,
        "templates/patch-job.yaml": PATCH,
        "templates/device-plugin.yaml": DEVICE_PLUGIN,
        "templates/mock-device-plugin.yaml": MOCK,
        "templates/NOTES.txt": NOTES,
    }


def package(files: Mapping[str, str | bytes], top: str = "hami", extra: list[tarfile.TarInfo] | None = None) -> bytes:
    """A .tgz as `helm package` lays it out: every file under `<top>/`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(f"{top}/{path}")
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            archive.addfile(info, io.BytesIO(data))
        for info in extra or []:
            archive.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return buffer.getvalue()


def hami_chart(registry: str, version: str = "2.10.0") -> bytes:
    return package(chart_files(registry, version))


@dataclass
class ChartRepository:
    """A classic Helm repository: `index.yaml` and the `.tgz` files, served over HTTP at `url`."""

    charts: dict[str, bytes] = field(default_factory=dict)  # file name -> bytes
    digests: dict[str, str] = field(default_factory=dict)  # file name -> the digest the index claims
    versions: dict[str, tuple[str, str]] = field(default_factory=dict)  # file name -> (chart, version)
    requests: list[str] = field(default_factory=list)  # the paths asked of this repository
    url: str = ""

    def add(self, name: str, version: str, raw: bytes, claimed_digest: str | None = None) -> None:
        file_name = f"{name}-{version}.tgz"
        self.charts[file_name] = raw
        self.digests[file_name] = claimed_digest or hashlib.sha256(raw).hexdigest()
        self.versions[file_name] = (name, version)

    def index(self) -> bytes:
        entries: dict[str, list[dict[str, Any]]] = {}
        for file_name, (name, version) in self.versions.items():
            entries.setdefault(name, []).append(
                {"name": name, "version": version, "urls": [file_name], "digest": self.digests[file_name]}
            )
        return yaml.safe_dump({"apiVersion": "v1", "entries": entries}).encode()

    def body(self, file_name: str) -> bytes | None:
        return self.index() if file_name == "index.yaml" else self.charts.get(file_name)


@dataclass
class ChartServer:
    """One web server holding several classic repositories, each at its own base path (as
    `https://project-hami.github.io` serves `/HAMi/` and `/HAMi-WebUI/`)."""

    origin: str = ""  # scheme://host[:port], as clients reach it
    repositories: dict[str, ChartRepository] = field(default_factory=dict)  # base path ("/HAMi") -> repository
    requests: list[str] = field(default_factory=list)  # every path asked, in order, answered or not

    def repository(self, base_path: str) -> ChartRepository:
        """The repository at `base_path` (created empty the first time)."""
        path = "/" + base_path.strip("/")
        if path not in self.repositories:
            self.repositories[path] = ChartRepository(url=self.origin + path.rstrip("/"))
        return self.repositories[path]

    def route(self, path: str) -> tuple[ChartRepository, str] | None:
        """The repository a request path belongs to and the file it asks for; None for anything else."""
        base, _, file_name = path.split("?", 1)[0].rpartition("/")
        repository = self.repositories.get(base or "/")
        return (repository, file_name) if repository is not None and file_name else None


@contextmanager
def chart_server(
    address: tuple[str, int] = ("127.0.0.1", 0), tls: ssl.SSLContext | None = None, origin: str | None = None
) -> Iterator[ChartServer]:
    """Serve chart repositories from a background thread: on a free loopback port, or at `address` (over TLS
    when a server context is given, reached as `origin`). Add repositories with `server.repository(path)`."""
    served = ChartServer()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            served.requests.append(self.path)
            found = served.route(self.path)
            body = None
            if found is not None:
                repository, file_name = found
                repository.requests.append(self.path)
                body = repository.body(file_name)
            if body is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serve(Handler, address, tls) as server:
        served.origin = origin or f"http://127.0.0.1:{server.server_address[1]}"
        yield served


@contextmanager
def chart_repository(
    address: tuple[str, int] = ("127.0.0.1", 0), tls: ssl.SSLContext | None = None, base_url: str | None = None
) -> Iterator[ChartRepository]:
    """One repository on its own server: on a free loopback port at `/charts`, or at `address` (over TLS when a
    server context is given, reached as `base_url`)."""
    origin, path = None, "/charts"
    if base_url is not None:
        parts = urlsplit(base_url)
        origin, path = f"{parts.scheme}://{parts.netloc}", parts.path or "/"
    with chart_server(address, tls, origin) as server:
        yield server.repository(path)
