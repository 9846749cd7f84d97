"""A sample chart shaped like HAMi's, and a classic Helm repository that serves it (the demo and the tests).

Like the real chart: empty tags resolved through `global.imageTag`; kube-scheduler from another
registry with the cluster's Kubernetes version as its tag; a certgen image used only on Kubernetes < 1.22
and another on >= 1.22; a mock device plugin only with `mockDevicePlugin.enabled`; another vendor's image
left empty.
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
  imageTag: v{version}
  imagePullSecrets: []
scheduler:
  kubeScheduler:
    image:
      registry: registry.cn-hangzhou.aliyuncs.com
      repository: google_containers/kube-scheduler
      tag: ""
      pullPolicy: IfNotPresent
  extender:
    image:
      registry: {registry}
      repository: projecthami/hami
      tag: ""
      pullPolicy: IfNotPresent
  patch:
    image:
      registry: {registry}
      repository: jettech/kube-webhook-certgen
      tag: v1.5.2
    imageNew:
      registry: {registry}
      repository: liangjw/kube-webhook-certgen
      tag: v1.1.1
devicePlugin:
  nvidiaDriverRoot: /usr/local/nvidia
  image:
    registry: {registry}
    repository: projecthami/hami
    tag: ""
  monitor:
    image:
      registry: {registry}
      repository: projecthami/hami
      tag: ""
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

HELPERS = """{{- define "hami.image" -}}
{{- $tag := .image.tag | default .root.Values.global.imageTag -}}
{{- printf "%s/%s:%s" .image.registry .image.repository $tag -}}
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
      {{- with .Values.global.imagePullSecrets }}
      imagePullSecrets: {{ toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: kube-scheduler
          {{- $kube := .Values.scheduler.kubeScheduler.image }}
          {{- $version := .Capabilities.KubeVersion.Version }}
          image: "{{ $kube.registry }}/{{ $kube.repository }}:{{ $kube.tag | default $version }}"
        - name: vgpu-scheduler-extender
          image: {{ include "hami.image" (dict "image" .Values.scheduler.extender.image "root" .) | quote }}
"""

PATCH = """apiVersion: batch/v1
kind: Job
metadata: {name: {{ .Release.Name }}-hami-admission-create}
spec:
  template:
    spec:
      restartPolicy: OnFailure
      containers:
        - name: create
          {{- if semverCompare ">=1.22-0" .Capabilities.KubeVersion.GitVersion }}
          image: {{ include "hami.image" (dict "image" .Values.scheduler.patch.imageNew "root" .) | quote }}
          {{- else }}
          image: {{ include "hami.image" (dict "image" .Values.scheduler.patch.image "root" .) | quote }}
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
      containers:
        - name: device-plugin
          image: {{ include "hami.image" (dict "image" .Values.devicePlugin.image "root" .) | quote }}
          env: [{name: DRIVER_ROOT, value: {{ .Values.devicePlugin.nvidiaDriverRoot | quote }}}]
        - name: vgpu-monitor
          image: {{ include "hami.image" (dict "image" .Values.devicePlugin.monitor.image "root" .) | quote }}
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
          image: {{ include "hami.image" (dict "image" .Values.mockDevicePlugin.image "root" .) | quote }}
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
