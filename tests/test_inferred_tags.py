"""A tag the chart's values leave empty, without Helm to render it (`chart.renderer: values`, or `auto` where no
Helm SDK is installed): `images.py` guesses the chart's appVersion, kube-state-metrics' template renders `v` +
appVersion, and the source registry settles which of the two it holds (`engine/charts.py`). The whole HAMi
install (HAMi, HAMi-WebUI with dcgm-exporter and kube-prometheus-stack, four source registries; `test_install.py`'s
world) relocated against real registries, whose access logs count what was asked; and where Helm rendered the
charts, nothing more is asked than before."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from mirror.chart.archive import open_chart
from mirror.chart.images import ImageBlock, every_subchart_on, tag_twin
from mirror.chart.merge import deep_merge
from mirror.demo.localregistry import AccessEntry, LocalRegistry
from mirror.demo.sample import push_single
from mirror.engine.charts import settle_guessed_tags
from mirror.engine.clients import Clients
from mirror.registry import RegistryClient
from mirror.settings import MirrorSettings
from mirror.values import ChartSpec
from tests.support import manifest_bytes, manifest_digest, requests_since, sync_json, with_client
from tests.test_install import Install, flat, install_config, rendered_images
from tests.test_install import install as whole_install  # noqa: F401 - a fixture
from tests.test_sync import VERSION

KSM = "kube-state-metrics/kube-state-metrics"
GUESS, CHOSEN = "2.13.0", "v2.13.0"  # kube-state-metrics' appVersion, and what its template renders
WITHOUT_HELM = {"chart": {"renderer": "values"}}


def tag_heads(entries: Sequence[AccessEntry]) -> Counter[str]:
    """The `HEAD`s of a manifest by tag (not by digest, nor cosign's `sha256-<hex>.sig` tags), by path."""
    heads = Counter[str]()
    for entry in entries:
        _, marker, reference = entry.path.partition("/manifests/")
        if entry.method == "HEAD" and marker and not reference.startswith("sha256"):
            heads[entry.path] += 1
    return heads


def manifest(repository: str, tag: str) -> str:
    return f"/v2/{repository}/manifests/{tag}"


def ksm_copy(install: Install) -> str:
    return f"mirrored/{flat(install, 'k8s', KSM)}"


def test_without_helm_kube_state_metrics_is_copied_at_the_v_tag_its_source_holds(
    tmp_path: Path,
    whole_install: Install,  # noqa: F811 - the fixture
    target: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    install = whole_install
    k8s = install.registries["k8s"]
    marks = {key: len(registry.access_log()) for key, registry in install.registries.items()}
    caplog.set_level(logging.INFO, logger="mirror")
    _, report, _ = sync_json(install_config(tmp_path, install, target, **WITHOUT_HELM), capsys, VERSION)

    # the image is looked for, found and copied at the tag the chart runs, byte for byte; the guess is nowhere
    (ksm,) = [image for image in report["images"] if KSM in image["source"]]
    assert ksm["source"] == f"{k8s.host}/{KSM}:{CHOSEN}" and ksm.get("error") is None, ksm
    assert [t["action"] for t in ksm["targets"]] == ["copied"]
    assert manifest_bytes(target, ksm_copy(install), CHOSEN) == manifest_bytes(k8s, KSM, CHOSEN)
    assert manifest_digest(target, ksm_copy(install), GUESS) is None
    assert [image["error"] for image in report["images"] if image.get("error")] == []
    # so HAMi-WebUI's values are no longer withheld for it
    assert report.get("withheld", []) == [], report["withheld"]
    (said,) = [r.getMessage() for r in caplog.records if "kube-prometheus-stack.kube-state-metrics.image" in r.message]
    assert f"{k8s.host}/{KSM}:{GUESS} is not at the source but {CHOSEN} is" in said, said

    # the source was asked once for the guess and once for its twin, whose answer the copy takes: nothing twice
    heads = {key: tag_heads(requests_since(registry, marks[key])) for key, registry in install.registries.items()}
    assert heads["k8s"][manifest(KSM, GUESS)] == 1
    assert heads["k8s"][manifest(KSM, CHOSEN)] == 1
    # a guess the source holds costs its one HEAD, which the copy takes, and its twin is never asked for
    assert heads["hub"][manifest("grafana/grafana", "11.2.0")] == 1
    assert heads["quay"][manifest("prometheus-operator/prometheus-operator", "v0.76.1")] == 1
    assert heads["hub"][manifest("projecthami/hami", "v2.10.0")] == 1  # HAMi's global.imageTag, guessed too
    twins = [path for counted in heads.values() for path in counted if path.endswith(("/v11.2.0", "/0.76.1"))]
    assert twins == []
    # a tag the values set is not checked: the copy's HEAD alone
    assert (
        heads["k8s"][manifest("ingress-nginx/kube-webhook-certgen", "v20221220-controller-v1.5.1-58-g787ea74b6")] == 1
    )


def test_without_helm_hami_webui_values_name_the_tag_the_source_settled(
    tmp_path: Path,
    whole_install: Install,  # noqa: F811 - the fixture
    target: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
) -> None:
    install = whole_install
    code, report, err = sync_json(install_config(tmp_path, install, target, **WITHOUT_HELM), capsys, VERSION)
    assert [v["chart_name"] for v in report["values"]] == ["hami", "hami-webui"], (report.get("errors"), err)
    assert code == 0, err
    webui = report["values"][1]
    values = yaml.safe_load(Path(webui["path"]).read_text())
    written = values["kube-prometheus-stack"]["kube-state-metrics"]["image"]
    assert written == {"registry": target.host, "repository": ksm_copy(install), "tag": CHOSEN}
    # proven by the values-only renderer, which reads the tag from the values rather than guess it
    assert webui["proof"]["ok"] is True and webui["proof"]["renderer"].startswith("values.yaml"), webui["proof"]
    verdicts = {(image["image"], image["verdict"]) for image in webui["proof"]["images"]}
    assert (f"{target.host}/{ksm_copy(install)}:{CHOSEN}", "mirrored") in verdicts
    # and real Helm, with every subchart on, renders the copy whatever its template would make of appVersion
    chart = install.charts.repository("/HAMi-WebUI").charts["hami-webui-1.3.0.tgz"]
    images = rendered_images(chart, deep_merge(values, every_subchart_on(open_chart(chart, "hami-webui"))))
    assert f"{target.host}/{ksm_copy(install)}:{CHOSEN}" in images


def test_where_helm_rendered_the_charts_the_source_is_asked_nothing_more(
    tmp_path: Path,
    whole_install: Install,  # noqa: F811 - the fixture
    target: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
) -> None:
    install = whole_install
    config = install_config(tmp_path, install, target)
    for run in ("first", "no-op"):
        marks = {key: len(registry.access_log()) for key, registry in install.registries.items()}
        code, report, err = sync_json(config, capsys, VERSION)
        assert code == 0, err
        assert all(v["proof"]["renderer"].startswith("Helm v") for v in report["values"]), report["values"]
        for key, registry in install.registries.items():
            heads = tag_heads(requests_since(registry, marks[key]))
            # each source tag the copies use, once (the copy's own HEAD), and no guess nor twin besides
            assert heads and set(heads.values()) == {1}, (run, key, heads)
        k8s = tag_heads(requests_since(install.registries["k8s"], marks["k8s"]))
        assert manifest(KSM, GUESS) not in k8s and k8s[manifest(KSM, CHOSEN)] == 1, (run, k8s)


# --- the check itself, against one registry ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tag", "twin"),
    [
        ("2.13.0", "v2.13.0"),
        ("v0.76.1", "0.76.1"),
        ("11.2.0-ubuntu22.04", "v11.2.0-ubuntu22.04"),
        ("latest", None),
        ("v", None),
        ("vnext", None),
        ("", None),
    ],
)
def test_a_version_tag_has_a_v_twin(tag: str, twin: str | None) -> None:
    assert tag_twin(tag) == twin


async def _seed_tags(client: RegistryClient) -> None:
    for seed, (repository, tag) in enumerate([("t/reverse", "1.2"), ("t/both", "2.0"), ("t/both", "v2.0")]):
        await push_single(client, repository, tag, layer_sizes=(1024,), seed=seed)


def _guessed(registry: LocalRegistry, key: str, repository: str, tag: str, **more: Any) -> ImageBlock:
    return replace(ImageBlock.at(key, registry.host, repository, tag), tag_inferred=True, **more)


def test_the_source_settles_a_guess_only_where_it_lacks_the_guess_and_holds_the_twin(
    source: LocalRegistry,
) -> None:
    with_client(source, _seed_tags)
    settings = MirrorSettings.model_validate(
        {
            "source": {"registry": source.host},
            "targets": [{"name": "t", "registry": "registry.cn-hangzhou.aliyuncs.com", "namespace": "ns"}],
            "chart": {"renderer": "values"},
            "registries": {source.host: {"plain_http": True}},
        }
    )
    spec = ChartSpec("webui", "webui", "hami", "webui-values.yaml", is_release_chart=False)
    blocks = [
        _guessed(source, "reverse.image", "t/reverse", "v1.2"),  # missing, its twin 1.2 there: taken
        _guessed(source, "both.image", "t/both", "2.0"),  # there (so is v2.0): kept, the twin not asked
        _guessed(source, "neither.image", "t/neither", "3.0"),  # neither there: kept
        _guessed(source, "word.image", "t/word", "latest"),  # no twin: not asked
        _guessed(source, "rendered.image", "t/reverse", "v1.2", tag_check="render"),  # Helm settled it
        ImageBlock.at("fixed.image", source.host, "t/reverse", "v1.2"),  # the values set it
        _guessed(source, "listed[0].image", "t/reverse", "v1.2", list_key="listed"),  # never copied
    ]
    mark = len(source.access_log())

    async def settle() -> list[ImageBlock]:
        async with Clients(settings) as clients:
            return await settle_guessed_tags(settings, spec, blocks, clients, "chart webui 1.0.0")

    settled = asyncio.run(settle())
    assert [(b.key, b.tag, b.tag_check) for b in settled] == [
        ("reverse.image", "1.2", "source"),
        ("both.image", "2.0", ""),
        ("neither.image", "3.0", ""),
        ("word.image", "latest", ""),
        ("rendered.image", "v1.2", "render"),
        ("fixed.image", "v1.2", ""),
        ("listed[0].image", "v1.2", ""),
    ]
    sent = requests_since(source, mark)
    asked = [
        ("t/reverse", "v1.2"),
        ("t/reverse", "1.2"),
        ("t/both", "2.0"),
        ("t/neither", "3.0"),
        ("t/neither", "v3.0"),
    ]
    assert tag_heads(sent) == Counter(manifest(repository, tag) for repository, tag in asked)
    assert [e for e in sent if e.method != "HEAD"] == []

    # every guess settled by a render (or none made): nothing sent, nothing changed
    rendered = [replace(b, tag_check="render") if b.tag_inferred else b for b in blocks]
    mark = len(source.access_log())

    async def settle_rendered() -> list[ImageBlock]:
        async with Clients(settings) as clients:
            return await settle_guessed_tags(settings, spec, rendered, clients, "chart webui 1.0.0")

    assert asyncio.run(settle_rendered()) == rendered
    assert requests_since(source, mark) == []
