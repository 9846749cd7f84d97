"""Chart-driven releases against real registries, a real chart repository and real Helm (helm-python-sdk):
the chart names the images, mirror copies every one it can run, publishes the chart, and proves the values by
rendering the chart with them."""

from __future__ import annotations

import functools
import io
import random
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import httpx
import pytest
import yaml

from mirror.chart.archive import ChartError, open_chart
from mirror.chart.publish import publish_chart
from mirror.chart.render import RenderRequest, render_images
from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from mirror.demo.sample import MiB, SampleImage, push_single
from mirror.demo.samplechart import ChartRepository, chart_files, chart_repository, hami_chart, package
from mirror.oci import Manifest
from mirror.registry import RegistryClient
from mirror.settings import ChartSettings
from tests.support import manifest_bytes, manifest_digest, requests_since, sync_json, with_client, write_config
from tests.test_print_files import extract
from tests.test_sync import VERSION, seed_release

CHART_VERSION = "2.10.0"
EXTRA_IMAGES = (("jettech/kube-webhook-certgen", "v1.5.2"), ("projecthami/mock-device-plugin", "1.0.1"))


def seed_chart_images(source: LocalRegistry) -> dict[str, SampleImage]:
    """Every Docker Hub image the test chart can run, at the source."""
    hami, certgen = seed_release(source)
    images = {"projecthami/hami": hami, "liangjw/kube-webhook-certgen": certgen}
    for seed, (repository, tag) in enumerate(EXTRA_IMAGES, start=10):
        images[repository] = with_client(
            source, functools.partial(_push_small, repository=repository, tag=tag, seed=seed)
        )
    return images


async def _push_small(client: RegistryClient, repository: str, tag: str, seed: int) -> SampleImage:
    return await push_single(client, repository, tag, layer_sizes=(MiB // 4,), seed=seed)


async def _tag(client: RegistryClient, tag: str, index: Manifest) -> None:
    await client.put_manifest("projecthami/hami", tag, index)


@pytest.fixture
def repository(source: LocalRegistry) -> Iterator[ChartRepository]:
    with chart_repository() as served:
        served.add("hami", CHART_VERSION, hami_chart(source.host, CHART_VERSION))
        yield served


def chart_config(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, chart: dict[str, Any], **extra: Any
) -> Path:
    """A config that names only the chart and a target: no `images:`."""
    path = write_config(tmp_path / "mirror.yaml", source, [target], chart=chart, **extra)
    data = yaml.safe_load(path.read_text())
    del data["images"]
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_config_naming_only_the_chart_mirrors_every_image_it_can_run(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
) -> None:
    images = seed_chart_images(source)
    config = chart_config(tmp_path, source, target, {"repository": repository.url})
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    copied = {(i["source"], i["targets"][0]["verified"]) for i in report["images"]}
    assert copied == {
        (f"{source.host}/projecthami/hami:v2.10.0", True),
        (f"{source.host}/liangjw/kube-webhook-certgen:v1.1.1", True),
        (f"{source.host}/jettech/kube-webhook-certgen:v1.5.2", True),  # only on Kubernetes < 1.22
        (f"{source.host}/projecthami/mock-device-plugin:1.0.1", True),  # only with the mock enabled
    }  # kube-scheduler comes from ACR already: left where it is
    for (repository_name, tag), name in (
        (("projecthami/hami", "v2.10.0"), "projecthami_hami"),
        (("liangjw/kube-webhook-certgen", "v1.1.1"), "liangjw_kube-webhook-certgen"),
        (("jettech/kube-webhook-certgen", "v1.5.2"), "jettech_kube-webhook-certgen"),
        (("projecthami/mock-device-plugin", "1.0.1"), "projecthami_mock-device-plugin"),
    ):
        assert manifest_digest(target, f"mirrored/{name}", tag) == images[repository_name].digest

    (values_entry,) = report["values"]
    values = yaml.safe_load(Path(values_entry["path"]).read_text())
    mirrored = {"registry": target.host}
    assert values["scheduler"]["extender"]["image"] == {**mirrored, "repository": "mirrored/projecthami_hami"}
    assert values["devicePlugin"]["monitor"]["image"] == {**mirrored, "repository": "mirrored/projecthami_hami"}
    assert values["scheduler"]["patch"]["imageNew"] == {
        **mirrored,
        "repository": "mirrored/liangjw_kube-webhook-certgen",
    }
    assert values["scheduler"]["patch"]["image"] == {**mirrored, "repository": "mirrored/jettech_kube-webhook-certgen"}
    assert values["mockDevicePlugin"]["image"] == {**mirrored, "repository": "mirrored/projecthami_mock-device-plugin"}
    assert "kubeScheduler" not in values["scheduler"]
    assert values["devicePlugin"]["nvidiaDriverRoot"] == "/"

    # the proof: real Helm rendered the chart with these values; nothing comes from the source registry
    proof = values_entry["proof"]
    assert proof["renderer"].startswith("Helm v4") and proof["ok"] is True
    verdicts = {(i["image"], i["verdict"]) for i in proof["images"]}
    assert verdicts == {
        (f"{target.host}/mirrored/projecthami_hami:v2.10.0", "mirrored"),
        (f"{target.host}/mirrored/liangjw_kube-webhook-certgen:v1.1.1", "mirrored"),
        ("registry.cn-hangzhou.aliyuncs.com/google_containers/kube-scheduler:v1.32.0", "allowed registry"),
    }
    # the chart itself, at the target as an OCI chart that Helm installs from
    assert values_entry["chart"] == f"oci://{target.host}/mirrored/hami"
    assert values_entry["helm"].startswith(f"helm install hami oci://{target.host}/mirrored/hami -n kube-system ")
    assert "--version 2.10.0" in values_entry["helm"]
    pulled = helm_python.pull(
        f"oci://{target.host}/mirrored/hami", version=CHART_VERSION, plain_http=True, destination=str(tmp_path)
    )
    assert pulled is not None
    pulled_chart = (tmp_path / "hami-2.10.0.tgz").read_bytes()
    assert pulled_chart == repository.charts["hami-2.10.0.tgz"]  # the .tgz bytes unchanged
    # and what Helm installs from that copy with the written values pulls nothing from the source
    rendered = render_with_helm(pulled_chart, Path(values_entry["path"]))
    assert len(rendered) == 5 and not [image for image in rendered if image.startswith(source.host)]

    # the same proof, as a person reading a re-run's output sees it
    assert main(["sync", VERSION, "--config", str(config)]) == 0
    printed = capsys.readouterr().out
    assert "    proof (Helm v4" in printed and "): every image mirrored or allowed" in printed
    scheduler = "registry.cn-hangzhou.aliyuncs.com/google_containers/kube-scheduler:v1.32.0"
    assert f"      {scheduler}: allowed registry (" in printed


def test_a_users_values_that_name_another_image_point_at_its_copy(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`values:` that give the device plugin another repository and tag: that image is mirrored, and the written
    values point at its copy (not at the user's name under the target's host, where nothing was pushed)."""
    seed_chart_images(source)
    custom = with_client(source, lambda c: push_single(c, "projecthami/hami-custom", "v2.10.0-fix", seed=40))
    extra = {
        "devicePlugin": {
            "nvidiaDriverRoot": "/",
            "image": {"repository": "projecthami/hami-custom", "tag": "v2.10.0-fix"},
        }
    }
    config = chart_config(tmp_path, source, target, {"repository": repository.url}, values={"extra": extra})
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert manifest_digest(target, "mirrored/projecthami_hami-custom", "v2.10.0-fix") == custom.digest
    (entry,) = report["values"]
    values = yaml.safe_load(Path(entry["path"]).read_text())
    assert values["devicePlugin"] == {
        "image": {"registry": target.host, "repository": "mirrored/projecthami_hami-custom", "tag": "v2.10.0-fix"},
        "monitor": {"image": {"registry": target.host, "repository": "mirrored/projecthami_hami"}},
        "nvidiaDriverRoot": "/",
    }
    assert entry["proof"]["ok"] is True
    assert (f"{target.host}/mirrored/projecthami_hami-custom:v2.10.0-fix", "mirrored") in {
        (i["image"], i["verdict"]) for i in entry["proof"]["images"]
    }


def render_with_helm(chart_bytes: bytes, values_path: Path) -> list[str]:
    """Every container image of the chart as Helm renders it with the values file."""
    with helm_python.Chart.load_archive(chart_bytes) as chart:
        manifests = chart.render(yaml.safe_load(values_path.read_text()), name="hami", namespace="kube-system")
    images = []
    for name, text in manifests.items():
        for doc in yaml.safe_load_all(text) if name.endswith(".yaml") else []:
            pod = (doc or {}).get("spec", {}).get("template", {}).get("spec", {})
            images += [container["image"] for container in pod.get("containers", [])]
    return images


def test_the_service_serves_the_tgz_and_rbac_file_it_wrote_beside_the_values_from_any_replica(
    tmp_path: Path, source: LocalRegistry, acr_like: LocalRegistry, repository: ChartRepository
) -> None:
    """Where the target refuses the chart (ACR's personal edition), a job's install line named a .tgz inside the
    pod, and the RBAC file too: the job API served values only, so neither could be had (nor from another
    replica's disk). Both are kept with the job and served by it, whatever is left on disk."""
    from mirror.service.page import values_view
    from tests.test_service import AUTH, Service, service_config

    seed_chart_images(source)
    config = service_config(tmp_path, source, acr_like, chart={"repository": repository.url})
    data = yaml.safe_load(config.read_text())
    del data["images"]
    config.write_text(yaml.safe_dump(data))
    service = Service(config, free_port())
    service.start()
    try:
        job = service.wait_done(service.signed({"version": CHART_VERSION}, delivery="d-1").json()["id"])
        assert job["state"] == "succeeded", job["error"]
        served = {each["name"]: each for each in job["files"]}
        assert sorted(served) == ["hami-2.10.0.tgz", "hami-scheduler-dra-rbac.yaml"]
        (values_entry,) = job["releases"][0]["values"]
        rbac_on_disk = (Path(values_entry["path"]).parent / "hami-scheduler-dra-rbac.yaml").read_text()
        shutil.rmtree(tmp_path / "out")  # another replica's disk: nothing there
        tgz = httpx.get(f"{service.url}{served['hami-2.10.0.tgz']['url']}", headers=AUTH, timeout=10)
        rbac = httpx.get(f"{service.url}{served['hami-scheduler-dra-rbac.yaml']['url']}", headers=AUTH, timeout=10)
        anonymous = httpx.get(f"{service.url}{served['hami-2.10.0.tgz']['url']}", timeout=10)
        other = httpx.get(f"{service.url}/jobs/{job['id']}/files/t0/other.tgz", headers=AUTH, timeout=10)
    finally:
        service.stop()
    assert tgz.status_code == 200 and tgz.content == repository.charts["hami-2.10.0.tgz"]
    assert tgz.headers["content-type"] == "application/gzip"
    assert 'filename="hami-2.10.0.tgz"' in tgz.headers["content-disposition"]
    assert rbac.status_code == 200 and rbac.text == rbac_on_disk and "hami-scheduler-dra" in rbac.text
    assert anonymous.status_code == 401 and other.status_code == 404
    shown = values_view(job["id"], VERSION, values_entry)["files"]  # the status page's links
    assert sorted((each["name"], each["url"]) for each in shown) == [(n, served[n]["url"]) for n in sorted(served)]


def test_where_the_target_refuses_the_chart_the_tgz_goes_beside_the_values(
    tmp_path: Path,
    source: LocalRegistry,
    acr_like: LocalRegistry,
    repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_chart_images(source)
    config = chart_config(tmp_path, source, acr_like, {"repository": repository.url})
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    (values_entry,) = report["values"]
    beside = Path(values_entry["path"]).parent / "hami-2.10.0.tgz"
    assert beside.read_bytes() == repository.charts["hami-2.10.0.tgz"]
    assert values_entry["chart"] == str(beside)
    assert values_entry["helm"] == (
        f"helm install hami {beside} -n kube-system -f {values_entry['path']}"  # what was done, nothing else
    )
    assert "refused the chart artifact" in values_entry["chart_note"] and "manifest class" in values_entry["chart_note"]
    assert manifest_digest(acr_like, "mirrored/hami", "2.10.0") is None
    assert values_entry["proof"]["ok"] is True


def test_a_refused_chart_comes_back_out_of_a_cronjobs_log(
    tmp_path: Path, source: LocalRegistry, acr_like: LocalRegistry, repository: ChartRepository
) -> None:
    """A CronJob's pod and the .tgz written beside its values are gone when the run ends: `--print-files` prints
    the archive too, base64, and the README's one-liner with `base64 -d` takes it back out of the log."""
    seed_chart_images(source)
    config = chart_config(tmp_path, source, acr_like, {"repository": repository.url})
    done = subprocess.run(
        [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config), "--print-files"],
        cwd=Path(__file__).parents[1],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # as `kubectl logs` shows a container's output
        check=False,
    )
    assert done.returncode == 0, done.stdout.decode()
    encoded = extract(done.stdout.decode(), "hami-2.10.0.tgz.base64")  # the README's one-liner, as it says
    archive = subprocess.run(["base64", "-d"], input=encoded.encode(), capture_output=True, check=True).stdout
    assert archive == repository.charts["hami-2.10.0.tgz"]


def test_the_chart_can_come_from_an_oci_registry(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_chart_images(source)
    raw = hami_chart(source.host, CHART_VERSION)
    published = with_client(source, lambda c: publish_chart(c, "charts/hami", open_chart(raw, "test")))
    assert published.reference == f"{source.host}/charts/hami:2.10.0"
    config = chart_config(tmp_path, source, target, {"repository": f"oci://{source.host}/charts"})
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert report["values"][0]["proof"]["ok"] is True
    assert manifest_bytes(target, "mirrored/hami", "2.10.0") == manifest_bytes(source, "charts/hami", "2.10.0")
    # a re-run reads the chart's manifest from state_dir once its tag's HEAD names the same digest: a GET of it
    # is a counted pull where the chart is on Docker Hub
    mark = len(source.access_log())
    code, _, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    chart_reads = [f"{e.method} {e.path}" for e in source.access_log()[mark:] if "/charts/hami/manifests/" in e.path]
    assert chart_reads == ["HEAD /v2/charts/hami/manifests/2.10.0"], chart_reads


def test_explicit_images_take_their_keys_from_the_chart(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed_release(source)
    images = [
        {"name": "hami", "source": "projecthami/hami"},
        {"name": "kube-webhook-certgen", "source": "liangjw/kube-webhook-certgen", "tag": "v1.1.1"},
    ]
    config = write_config(
        tmp_path / "mirror.yaml", source, [target], images=images, chart={"repository": repository.url}, values={}
    )
    code, report, err = sync_json(config, capsys, VERSION)
    # the chart can also run jettech's certgen and the mock plugin, which this config does not mirror
    assert code == 1
    assert "values for t0 not written" in err and "scheduler.patch.image would still pull" in err
    assert "with images: set, the chart's other images are not mirrored: list them under images: too" in err
    assert "mockDevicePlugin.image would still pull" in err
    assert not (tmp_path / "out" / "t0" / "hami-ack-values.yaml").exists()
    assert manifest_digest(target, "mirrored/hami", "2.10.0") is None  # the chart is published only after its proof

    warned = write_config(
        tmp_path / "warn.yaml",
        source,
        [target],
        images=images,
        chart={"repository": repository.url},
        values={"unmirrored": "warn"},
    )
    code, report, err = sync_json(warned, capsys, VERSION)
    assert code == 0, err
    (values_entry,) = report["values"]
    text = Path(values_entry["path"]).read_text()
    values = yaml.safe_load(text)
    assert set(values["scheduler"]) == {"extender", "patch"} and set(values["scheduler"]["patch"]) == {"imageNew"}
    assert values["devicePlugin"]["image"]["repository"] == "mirrored/hami"
    assert "# WARNING: NOT MIRRORED: scheduler.patch.image would still pull" in text
    assert any("mockDevicePlugin.image" in w for w in values_entry["warnings"])
    assert "values written with an image left behind" in caplog.text


def test_an_image_copied_where_the_chart_is_published_is_refused_before_any_copy(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`name: hami` with the tag `2.10.0` is `<namespace>/hami:2.10.0`, the published chart's tag: the chart's
    push moved it and the values sent nodes to a chart (exit 0; drift on the next run)."""
    seed_release(source)
    index = Manifest.parse(manifest_bytes(source, "projecthami/hami", VERSION))
    with_client(source, lambda c: _tag(c, CHART_VERSION, index))
    images = [{"name": "hami", "source": "projecthami/hami", "tag": CHART_VERSION}]
    config = write_config(
        tmp_path / "mirror.yaml", source, [target], images=images, chart={"repository": repository.url}
    )
    mark = len(target.access_log())
    code, _, err = sync_json(config, capsys, VERSION)
    assert code == 2
    assert f"<namespace>/hami:{CHART_VERSION}, where the chart hami is published" in err
    assert requests_since(target, mark) == []


def test_the_chart_is_not_published_over_an_image_at_its_tag(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Someone else's image at `<namespace>/hami:2.10.0` stays: the chart is not pushed over it."""
    seed_chart_images(source)
    theirs = with_client(target, lambda c: push_single(c, "mirrored/hami", CHART_VERSION, seed=5))
    config = chart_config(tmp_path, source, target, {"repository": repository.url})
    code, _, err = sync_json(config, capsys, VERSION)
    assert code == 1
    assert f"publish chart {target.host}/mirrored/hami:{CHART_VERSION}: the tag holds {theirs.digest}" in err
    assert "not a Helm chart: left alone" in err
    assert manifest_digest(target, "mirrored/hami", CHART_VERSION) == theirs.digest


@pytest.mark.parametrize("kube_version", ["1.30.4", None], ids=["given", "default"])
def test_images_already_in_acr_are_mirrored_on_request_with_the_clusters_version(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    kube_version: str | None,
) -> None:
    """kube-scheduler's registry is ACR's: here the test source stands in for it. Mirrored, its tag is pinned to
    chart.kube_version; left at its default, that may be far from the cluster's own, and the run says so, once
    however many releases it mirrors."""
    hami = seed_chart_images(source)["projecthami/hami"]
    with_client(source, lambda c: _tag(c, "v2.9.0", Manifest.parse(hami.manifests[hami.digest])))
    tag = f"v{kube_version or ChartSettings().kube_version}"
    with_client(source, lambda c: push_single(c, "google_containers/kube-scheduler", tag, seed=30))
    for version in (CHART_VERSION, "2.9.0"):
        files = chart_files(source.host, version)
        files["values.yaml"] = files["values.yaml"].replace(
            "registry: registry.cn-hangzhou.aliyuncs.com", f"registry: {source.host}"
        )
        repository.add("hami", version, package(dict(files)))
    chart = {
        "repository": repository.url,
        "mirror_acr_images": True,
        **({"kube_version": kube_version} if kube_version else {}),
        "allowed_registries": [],
    }
    code, releases, err = sync_json(chart_config(tmp_path, source, target, chart), capsys, VERSION, "v2.9.0")
    assert code == 0, err
    report = next(release for release in releases if release["version"] == VERSION)
    values = yaml.safe_load(Path(report["values"][0]["path"]).read_text())
    assert values["scheduler"]["kubeScheduler"]["image"] == {
        "registry": target.host,
        "repository": "mirrored/google_containers_kube-scheduler",
        "tag": tag,  # the chart would otherwise ask for the cluster's own version
    }
    assert manifest_digest(target, "mirrored/google_containers_kube-scheduler", tag) is not None
    assert (f"{target.host}/mirrored/google_containers_kube-scheduler:{tag}", "mirrored") in {
        (i["image"], i["verdict"]) for i in report["values"][0]["proof"]["images"]
    }
    warned = f"chart.kube_version is not set: scheduler.kubeScheduler.image is pinned to {tag}"
    assert caplog.text.count(warned) == (0 if kube_version else 1), caplog.text


HOSTILE: list[tuple[str, Any, str]] = [
    ("traversal", lambda: package({"Chart.yaml": "name: hami\nversion: 2.10.0\n", "../../evil": "x"}), "unsafe path"),
    ("absolute", lambda: _with_member(tarfile.TarInfo("/etc/evil")), "unsafe path"),
    ("symlink", lambda: _with_member(_link("hami/templates/link.yaml", "/etc/passwd")), "link or a special file"),
    ("hardlink", lambda: _with_member(_link("hami/values2.yaml", "hami/values.yaml", hard=True)), "link or a special"),
    ("bomb", lambda: package({**chart_files("x"), "big.bin": bytes(80 * MiB)}), "unpacks to"),
    ("not gzip", lambda: b"PK\x03\x04 not a chart", "not a readable chart archive"),
    ("two tops", lambda: _two_tops(), "more than one top directory"),
    ("no Chart.yaml", lambda: package({"values.yaml": "a: 1\n"}), "no Chart.yaml"),
]


def _link(name: str, target: str, hard: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname = target
    return info


def _with_member(member: tarfile.TarInfo) -> bytes:
    return package(chart_files("x"), extra=[member])


def _two_tops() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in ("hami/Chart.yaml", "other/Chart.yaml"):
            data = b"name: hami\nversion: 2.10.0\n"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize(("case", "make", "message"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_archives_are_refused(case: str, make: Any, message: str) -> None:
    with pytest.raises(ChartError, match=message):
        open_chart(make(), "chart hami 2.10.0")


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("wrong digest", "the index says"),
        ("oversized", "limit 4096"),
        ("traversal", "unsafe path"),
        ("missing", "not published"),
    ],
)
def test_a_bad_chart_fails_cleanly_and_nothing_is_written(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
    case: str,
    message: str,
) -> None:
    seed_chart_images(source)
    mark = len(target.access_log())
    with chart_repository() as served:
        good = hami_chart(source.host, CHART_VERSION)
        if case == "wrong digest":
            served.add("hami", CHART_VERSION, good, claimed_digest="0" * 64)
        elif case == "oversized":
            noise = random.Random(3).randbytes(16 * 1024)  # does not compress: the archive is over 4096 bytes
            served.add("hami", CHART_VERSION, package({**chart_files(source.host), "files/noise.bin": noise}))
        elif case == "traversal":
            served.add("hami", CHART_VERSION, package({**chart_files(source.host), "../escape.yaml": "x"}))
        else:  # the chart is there, but not this version
            served.add("hami", "2.9.0", hami_chart(source.host, "2.9.0"))
        chart = {"repository": served.url, "max_bytes": 4096 if case == "oversized" else 16 * MiB}
        code, _, err = sync_json(chart_config(tmp_path, source, target, chart), capsys, VERSION)
    assert code == 1
    lines = [line for line in err.splitlines() if line.startswith("mirror: ")]
    assert len(lines) == 1 and lines[0].startswith("mirror: chart ") and message in lines[0], err
    assert "Traceback" not in err
    assert requests_since(target, mark) == []  # nothing sent to the target, nothing written
    assert not (tmp_path / "out").exists()


def test_discovery_follows_the_chart_repository(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
) -> None:
    images = seed_chart_images(source)
    index = Manifest.parse(manifest_bytes(source, "projecthami/hami", VERSION))
    with_client(source, functools.partial(_tag, tag="v2.11.0", index=index))  # an image, but no chart yet
    for version in ("2.5.0", "2.9.0"):
        repository.add("hami", version, hami_chart(source.host, version))
        with_client(source, functools.partial(_tag, tag=f"v{version}", index=index))
    config = chart_config(tmp_path, source, target, {"repository": repository.url})
    code, report, err = sync_json(config, capsys, "--discover")
    assert code == 0, err
    assert [release["version"] for release in report] == ["v2.9.0", "v2.10.0"]  # >=2.7.0; v2.11.0 has no chart
    assert manifest_digest(target, "mirrored/projecthami_hami", "v2.11.0") is None
    assert manifest_digest(target, "mirrored/projecthami_hami", "v2.9.0") == images["projecthami/hami"].digest
    # discovery and the fetch of both releases' charts read the index once: a round trip across the border each
    assert len([path for path in repository.requests if path.endswith("/index.yaml")]) == 1


def test_discovery_by_tags_leaves_a_release_whose_chart_is_not_out_for_a_later_run(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """HAMi pushes v2.11.0's images before its chart is published: with `discovery.source: tags` the run asked
    for every tagged release's chart first and stopped at the missing one, v2.10.0 not verified, its values not
    written, run after run until the chart came out."""
    images = seed_chart_images(source)
    index = Manifest.parse(manifest_bytes(source, "projecthami/hami", VERSION))
    with_client(source, functools.partial(_tag, tag="v2.11.0", index=index))  # an image, but no chart yet
    repository.add("hami", "2.9.0", hami_chart(source.host, "2.9.0"))
    with_client(source, functools.partial(_tag, tag="v2.9.0", index=index))
    discovery = {"source": "tags", "newest": 2}  # the two newest of the releases with a chart
    config = chart_config(tmp_path, source, target, {"repository": repository.url}, discovery=discovery)
    code, report, err = sync_json(config, capsys, "--discover")
    assert code == 0, err
    assert [release["version"] for release in report] == ["v2.9.0", VERSION]
    assert manifest_digest(target, "mirrored/projecthami_hami", VERSION) == images["projecthami/hami"].digest
    assert manifest_digest(target, "mirrored/projecthami_hami", "v2.11.0") is None
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("discovery: ")]
    waiting = "v2.11.0 left for a later run: tagged at the source, its chart not published yet in"
    assert said == [f"discovery: {waiting} {repository.url}"]


def test_renderers_say_which_was_used(source: LocalRegistry) -> None:
    archive = open_chart(hami_chart(source.host), "test")
    old = render_images(archive, {}, RenderRequest("hami", "kube-system", "1.20.0"), "sdk")
    assert f"{source.host}/jettech/kube-webhook-certgen:v1.5.2" in {i.reference for i in old.images}
    fallback = render_images(archive, {}, RenderRequest("hami", "kube-system", "1.32.0"), "values")
    assert fallback.renderer.startswith("values.yaml only")
    assert len(fallback.images) == 7  # every block, used or not


def test_a_release_whose_chart_cannot_be_had_leaves_the_others_of_the_run_to_go_on(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    repository: ChartRepository,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Discovery's `newest: 2`, and 2.9.0's index entry naming a digest its archive does not have (a .tgz
    uploaded again): the whole run stopped, v2.10.0 neither copied nor given values, on every scheduled run."""
    seed_chart_images(source)
    index = Manifest.parse(manifest_bytes(source, "projecthami/hami", VERSION))
    with_client(source, functools.partial(_tag, tag="v2.9.0", index=index))
    repository.add("hami", "2.9.0", hami_chart(source.host, "2.9.0"), claimed_digest="0" * 64)
    config = chart_config(tmp_path, source, target, {"repository": repository.url}, discovery={"newest": 2})
    code, report, err = sync_json(config, capsys, "--discover")
    assert code == 1, err
    older, newest = report
    assert older["version"] == "v2.9.0" and older["ok"] is False and older["images"] == []
    assert "hami 2.9.0" in older["errors"][0] and "sha256" in older["errors"][0]
    assert newest["version"] == VERSION and newest["ok"] is True and newest["values"]
    assert manifest_digest(target, "mirrored/projecthami_hami", VERSION) == index.digest
