"""The whole HAMi install from the shipped config (its `charts:` block turned on): HAMi's chart and HAMi-WebUI with
its dcgm-exporter and kube-prometheus-stack subcharts, their images on four source registries, relocated in one
run against real registries, a real chart server and real Helm."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import httpx
import pytest
import yaml

from mirror.chart.archive import open_chart
from mirror.chart.images import every_subchart_on
from mirror.chart.merge import deep_merge
from mirror.chart.render import _container_images
from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.sample import push_single
from mirror.demo.samplechart import ChartServer, chart_server, hami_chart
from mirror.demo.samplewebui import FRONTEND, WEBUI_IMAGES, seed_webui_images, webui_chart, webui_images
from mirror.demo.shipped import shipped_config
from mirror.registry import RegistryClient
from mirror.registry.options import ClientOptions
from tests.support import beyond_heads, manifest_bytes, manifest_digest, requests_since, sync_json, with_client, writes
from tests.test_chart import seed_chart_images
from tests.test_sync import VERSION

SOURCE_KEYS = ("hub", "nvcr", "quay", "k8s")


@dataclass
class Install:
    registries: dict[str, LocalRegistry]  # hub (the config's source registry), nvcr, quay, k8s
    charts: ChartServer
    webui: dict[str, str]  # `repository:tag` -> digest, as seeded

    def hosts(self) -> dict[str, str]:
        return {key: registry.host for key, registry in self.registries.items()}

    def publish_webui(self, version: str) -> None:
        chart = webui_chart(self.webui, version, **self.hosts())
        self.charts.repository("/HAMi-WebUI").add("hami-webui", version, chart)


async def _seed(hosts: dict[str, str], versions: tuple[str, ...]) -> dict[str, str]:
    clients = {key: RegistryClient.open(host, ClientOptions(plain_http=True)) for key, host in hosts.items()}
    try:
        return await seed_webui_images(clients, versions)
    finally:
        await asyncio.gather(*(client.aclose() for client in clients.values()))


@pytest.fixture
def install(tmp_path: Path, source: LocalRegistry) -> Iterator[Install]:
    registries = {"hub": source}
    try:
        for key in SOURCE_KEYS[1:]:
            registries[key] = start_registry(tmp_path / key)
        seed_chart_images(source)
        with chart_server() as charts:
            charts.repository("/HAMi").add("hami", "2.10.0", hami_chart(source.host, "2.10.0"))
            hosts = {key: registry.host for key, registry in registries.items()}
            install = Install(registries, charts, asyncio.run(_seed(hosts, ("1.3.0",))))
            install.publish_webui("1.3.0")
            yield install
    finally:
        for key in SOURCE_KEYS[1:]:
            if key in registries:
                registries[key].stop()


def install_config(tmp_path: Path, install: Install, target: LocalRegistry, **changes: Any) -> Path:
    """The shipped config with its `charts:` block on, only the hosts changed (as the demo does)."""
    config = shipped_config("charts")
    config["source"] = {"registry": install.registries["hub"].host}
    config["targets"] = [{"name": "t0", "registry": target.host, "namespace": "mirrored"}]
    config["chart"]["repository"] = f"{install.charts.origin}/HAMi"
    config["charts"][0]["repository"] = f"{install.charts.origin}/HAMi-WebUI"
    hosts = [*install.hosts().values(), target.host]
    config["registries"] = {host: {"plain_http": True} for host in hosts}
    config["output_dir"] = str(tmp_path / "out")
    config["state_dir"] = str(tmp_path / "state")
    config["retry"] = {"base_delay": 0.05, "max_delay": 0.5, "max_elapsed": 30}
    for key, value in changes.items():
        config[key] = deep_merge(config.get(key) or {}, value) if isinstance(value, dict) else value
    path = tmp_path / "mirror.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def digest_of(registry: LocalRegistry, repository: str, ref: str) -> str:
    digest = manifest_digest(registry, repository, ref)
    assert digest is not None, f"{registry.host}/{repository}:{ref} is missing"
    return digest


def flat(install: Install, source_key: str, repository: str) -> str:
    """The naming rule, spelled out: the config's source registry by path alone, the others with their host."""
    host = "" if source_key == "hub" else install.registries[source_key].host.replace(":", "-") + "_"
    return host + repository.replace("/", "_")


def rendered_images(chart: bytes, values: dict[str, Any]) -> set[str]:
    """What real Helm renders for the chart with these values, every subchart switched on too."""
    with helm_python.Chart.load_archive(chart) as loaded:
        manifests = loaded.render(values, name="my-hami-webui", namespace="hami", is_install=True)
    return {
        image
        for template, text in manifests.items()
        if template.endswith(".yaml")
        for document in yaml.safe_load_all(text)
        for image in _container_images(document)
    }


def test_one_sync_relocates_hami_and_hami_webui_with_every_image_their_subcharts_can_run(
    tmp_path: Path, install: Install, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    config = install_config(tmp_path, install, target)
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err

    # every image each chart can run, kube-prometheus-stack's too (off by default), byte for byte
    sources = {image["source"] for image in report["images"]}
    for image in WEBUI_IMAGES:
        registry = install.registries[image.source]
        pinned = digest_of(registry, image.repository, image.tag) if image.pinned else None
        reference = f"{registry.host}/{image.repository}:{image.tag}" + (f"@{pinned}" if pinned else "")
        assert reference in sources
        at_target = manifest_bytes(target, f"mirrored/{flat(install, image.source, image.repository)}", image.tag)
        assert at_target == manifest_bytes(registry, image.repository, image.tag), image.name
    assert len(report["images"]) == 4 + len(WEBUI_IMAGES)  # HAMi's four, each WebUI image once

    # one values file per chart, in install order, each proven by real Helm
    hami, webui = report["values"]
    assert (hami["chart_name"], webui["chart_name"], webui["chart_version"]) == ("hami", "hami-webui", "1.3.0")
    assert webui["path"] == str(tmp_path / "out" / "t0" / "hami-webui-values.yaml")
    assert webui["helm"] == (
        f"helm install my-hami-webui oci://{target.host}/mirrored/hami-webui -n hami --create-namespace "
        f"--version 1.3.0 -f {webui['path']}"
    )
    assert manifest_digest(target, "mirrored/hami-webui", "1.3.0") is not None  # the chart, next to its images
    for entry in (hami, webui):
        assert entry["proof"]["ok"] is True and entry["proof"]["renderer"].startswith("Helm v4"), entry["proof"]
    verdicts = {(i["image"], i["verdict"]) for i in webui["proof"]["images"]}
    fe = install.webui[f"{FRONTEND}:v1.3.0"]
    assert (f"{target.host}/mirrored/projecthami_hami-webui-fe-oss@{fe}", "mirrored") in verdicts
    assert any("(every subchart on)" in i["from"] for i in webui["proof"]["images"])  # kps proven too

    # each block in its own shape; the pinned digest kept (the copy is byte-exact)
    values = yaml.safe_load(Path(webui["path"]).read_text())
    assert values["image"]["frontend"] == {"repository": f"{target.host}/mirrored/projecthami_hami-webui-fe-oss"}
    dcgm = flat(install, "nvcr", "nvidia/k8s/dcgm-exporter")
    assert values["dcgm-exporter"]["image"] == {"repository": f"{target.host}/mirrored/{dcgm}"}
    prometheus = values["kube-prometheus-stack"]["prometheus"]["prometheusSpec"]["image"]
    assert prometheus == {
        "registry": target.host,
        "repository": f"mirrored/{flat(install, 'quay', 'prometheus/prometheus')}",
    }

    # real Helm, with the values written and every subchart on: nothing pulls from anywhere but the target
    chart = install.charts.repository("/HAMi-WebUI").charts["hami-webui-1.3.0.tgz"]
    images = rendered_images(chart, deep_merge(values, every_subchart_on(open_chart(chart, "hami-webui"))))
    assert len(images) >= 6 and all(image.startswith(f"{target.host}/mirrored/") for image in images), images
    assert f"{target.host}/mirrored/projecthami_hami-webui-fe-oss@{fe}" in images

    # a re-run sends each source only HEADs (and the referrers listing, which these registries answer 404)
    marks = {key: len(registry.access_log()) for key, registry in install.registries.items()}
    target_mark = len(target.access_log())
    code, again, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert {t["action"] for image in again["images"] for t in image["targets"]} == {"up-to-date"}
    for key, registry in install.registries.items():
        sent = requests_since(registry, marks[key])
        assert sent and beyond_heads(sent) == [], (key, beyond_heads(sent))
    assert writes(requests_since(target, target_mark)) == []


def test_a_pinned_digest_the_source_no_longer_serves_fails_with_one_line(
    tmp_path: Path, install: Install, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    hub = install.registries["hub"]
    pinned = install.webui[f"{FRONTEND}:v1.3.0"]
    assert httpx.delete(f"{hub.url}/v2/{FRONTEND}/manifests/{pinned}").status_code == 202
    code, report, err = sync_json(install_config(tmp_path, install, target), capsys, VERSION)
    assert code == 1
    lines = [line for line in err.splitlines() if line.startswith("mirror: ")]
    assert lines == [
        f"mirror: {VERSION} projecthami_hami-webui-fe-oss: {hub.host}/{FRONTEND}:v1.3.0@{pinned}: "
        "the pinned digest is no longer served at the source"
    ], err
    assert not [e for e in hub.access_log() if "/tags/list" in e.path]  # a pinned digest is not looked up
    # HAMi's values are written; HAMi-WebUI's, which would pull the missing image, are not
    assert [v["chart_name"] for v in report["values"]] == ["hami"]
    assert not (tmp_path / "out" / "t0" / "hami-webui-values.yaml").exists()


def test_a_pinned_index_rewritten_at_an_acr_like_target_is_pinned_by_its_rewrite(
    tmp_path: Path, install: Install, acr_like: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """ACR's personal edition refuses BuildKit's attestation manifests: the WebUI's indexes lose them there, so
    the chart's digest would name nothing at the target. The values pin the digest the target holds."""
    code, report, err = sync_json(install_config(tmp_path, install, acr_like), capsys, VERSION)
    assert code == 0, err
    webui = next(v for v in report["values"] if v["chart_name"] == "hami-webui")
    values = yaml.safe_load(Path(webui["path"]).read_text())
    held = digest_of(acr_like, "mirrored/projecthami_hami-webui-fe-oss", "v1.3.0")
    assert held != install.webui[f"{FRONTEND}:v1.3.0"]
    assert values["image"]["frontend"]["digest"] == held
    assert (f"{acr_like.host}/mirrored/projecthami_hami-webui-fe-oss@{held}", "mirrored") in {
        (i["image"], i["verdict"]) for i in webui["proof"]["images"]
    }


def test_newest_follows_the_webui_repository_on_every_discovery_run(
    tmp_path: Path, install: Install, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    config = install_config(tmp_path, install, target)
    code, report, err = sync_json(config, capsys, "--discover")
    assert code == 0, err
    assert [v["chart_version"] for v in report[-1]["values"]] == ["2.10.0", "1.3.0"]

    install.webui |= asyncio.run(_seed(install.hosts(), ("1.4.0",)))
    install.publish_webui("1.4.0")
    code, report, err = sync_json(config, capsys, "--discover")
    assert code == 0, err
    webui = report[-1]["values"][1]
    assert webui["chart_version"] == "1.4.0" and "--version 1.4.0" in webui["helm"]
    new = install.webui[f"{FRONTEND}:v1.4.0"]
    assert digest_of(target, "mirrored/projecthami_hami-webui-fe-oss", "v1.4.0") == new

    pinned = install_config(
        tmp_path, install, target, charts=[{**yaml.safe_load(config.read_text())["charts"][0], "version": "1.3.0"}]
    )
    code, report, err = sync_json(pinned, capsys, VERSION)
    assert code == 0, err
    assert report["values"][1]["chart_version"] == "1.3.0"


def test_subcharts_enabled_mirrors_only_what_runs(
    tmp_path: Path, install: Install, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    config = install_config(tmp_path, install, target)
    data = yaml.safe_load(config.read_text())
    data["charts"][0]["subcharts"] = "enabled"
    config.write_text(yaml.safe_dump(data))
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    running = {i.repository for i in webui_images() if not i.enabled_by or i.enabled_by == ("dcgm-exporter.enabled",)}
    copied = {image["source"].split("@")[0].split("/", 1)[1].rsplit(":", 1)[0] for image in report["images"]}
    assert running <= copied and not ({i.repository for i in webui_images()} - running) & copied
    values = yaml.safe_load(Path(report["values"][1]["path"]).read_text())
    assert "kube-prometheus-stack" not in values


def test_two_sources_meeting_on_one_name_stop_the_run_before_anything_is_sent(
    tmp_path: Path, install: Install, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    clash = {"name": "projecthami_hami-webui-fe-oss", "source": "projecthami/hami"}
    config = install_config(tmp_path, install, target, images=[clash], values={"unmirrored": "warn"})
    code, _, err = sync_json(config, capsys, VERSION)
    assert code == 2
    assert "would both be copied to <namespace>/projecthami_hami-webui-fe-oss" in err and "Traceback" not in err
    assert [e for e in target.access_log() if e.path != "/v2/"] == []  # past the start-up probe, nothing


def test_a_pinned_image_whose_tag_moved_at_the_target_goes_to_a_tag_of_its_own(
    tmp_path: Path, install: Install, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """An upstream re-push of a tag the chart pins: the target's tag holds other bytes. Nodes pull the pinned
    copy by digest, so it goes to `pinned-<digest>` instead of stopping the chart as drift."""
    repository = "mirrored/projecthami_hami-webui-fe-oss"
    other = with_client(target, lambda c: push_single(c, repository, "v1.3.0", seed=77))
    code, report, err = sync_json(install_config(tmp_path, install, target), capsys, VERSION)
    assert code == 0, err
    pinned = install.webui[f"{FRONTEND}:v1.3.0"]
    (fe,) = [image for image in report["images"] if image["name"] == "projecthami_hami-webui-fe-oss"]
    assert fe["targets"][0]["reference"] == f"{target.host}/{repository}:pinned-{pinned[7:39]}"
    assert digest_of(target, repository, f"pinned-{pinned[7:39]}") == pinned
    assert digest_of(target, repository, "v1.3.0") == other.digest  # left alone
    webui = report["values"][1]
    assert (f"{target.host}/{repository}@{pinned}", "mirrored") in {
        (i["image"], i["verdict"]) for i in webui["proof"]["images"]
    }
