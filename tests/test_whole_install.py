"""The whole HAMi install's registries at their real names (tests/realnames.py with `--whole-install`): nvcr.io,
quay.io and ghcr.io behind same-host token realms, registry.k8s.io redirecting to its Artifact Registry host, and
HAMi-WebUI's chart repository beside HAMi's. These tests prove the world itself, with plain HTTP requests made
inside its namespace; mirror's own client is for the tests of the engine."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mirror.demo.shipped import uncomment_block
from mirror.oci import MANIFEST_ACCEPT
from tests.realnames import (
    ACR_USER,
    AR_HOST,
    GHCR_IMAGE,
    GHCR_REALM,
    NGC_API_KEY,
    NGC_USER,
    NVCR_PRIVATE,
    NVCR_REALM,
    QUAY_REALM,
)
from tests.support import beyond_heads
from tests.test_realnames import NAMESPACE, ROOT, World, shipped_config, start_world
from tests.test_samplewebui import EVERYTHING_ON, everything_run

DCGM = "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.7-3.5.0-ubuntu22.04"
PROMETHEUS = "quay.io/prometheus/prometheus:v2.54.1"
TOOLS = f"ghcr.io/{GHCR_IMAGE[0]}:{GHCR_IMAGE[1]}"
PRIVATE = f"nvcr.io/{NVCR_PRIVATE[0]}:{NVCR_PRIVATE[1]}"
KSM_PATH = "/v2/kube-state-metrics/kube-state-metrics/manifests/v2.13.0"


@pytest.fixture
def whole_world(tmp_path: Path) -> Iterator[World]:
    """The real-names world with the whole install's registries and charts (`--whole-install`)."""
    running = start_world(tmp_path, "--whole-install")
    yield running
    running.stop()


def inside(world: World, function: str, *args: str) -> Any:
    """`function(*args)` of this module, run inside the world's namespaces (its names, its CA); its JSON answer."""
    code = (
        f"import json, sys\nfrom tests.test_whole_install import {function} as f\nprint(json.dumps(f(*sys.argv[1:])))"
    )
    command = ["nsenter", "--target", str(world.ready["pid"]), "--net", "--mount", "--"]
    command += ["sh", "-c", 'cd "$0" && exec "$@"', str(ROOT), sys.executable, "-c", code, *args]
    environment = {**os.environ, "SSL_CERT_FILE": world.ready["ca"]}
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# --- what runs inside the namespace ---------------------------------------------------------------------------


def _split(reference: str) -> tuple[str, str, str]:
    """(API URL base, repository, tag or digest); Docker Hub's bare and docker.io names go to its API host."""
    name, at, digest = reference.partition("@")
    if not at:
        name, _, digest = reference.rpartition(":")
    host, _, repository = name.partition("/")
    if "." not in host and ":" not in host:
        host, repository = "docker.io", name
    host = "registry-1.docker.io" if host == "docker.io" else host
    return f"https://{host}", repository, digest


def _pull(
    client: httpx.Client, method: str, url: str, credentials: tuple[str, str] | None = None
) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """A registry request with the bearer dance, following redirects by hand (no Authorization across hosts);
    the answer and every hop as (url, status, challenge)."""
    hops: list[dict[str, Any]] = []
    headers = {"Accept": MANIFEST_ACCEPT}
    for _ in range(4):
        response = client.request(method, url, headers=headers)
        challenge = response.headers.get("WWW-Authenticate", "")
        hops.append({"url": url, "status": response.status_code, "challenge": challenge})
        if response.status_code == 401 and challenge.startswith("Bearer ") and "Authorization" not in headers:
            params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
            query = {k: v for k, v in params.items() if k in ("service", "scope")}
            answer = client.get(params["realm"], params=query, auth=credentials)
            headers = {**headers, "Authorization": f"Bearer {answer.json()['token']}"}
        elif response.status_code in (301, 302, 307, 308):
            url = response.headers["Location"]
            headers = {"Accept": MANIFEST_ACCEPT}  # a new host: start again, anonymously
        else:
            return response, hops
    raise AssertionError(f"too many hops: {hops}")


def probe_registries(*references: str) -> dict[str, Any]:
    """Anonymous manifest HEADs of each reference, and the private nvcr.io image with and without the API key."""
    with httpx.Client(timeout=30) as client:
        found: dict[str, Any] = {}
        for reference in references:
            base, repository, ref = _split(reference)
            response, hops = _pull(client, "HEAD", f"{base}/v2/{repository}/manifests/{ref}")
            found[reference] = {
                "status": response.status_code,
                "digest": response.headers.get("Docker-Content-Digest"),
                "hops": hops,
            }
        base, repository, tag = _split(PRIVATE)
        url = f"{base}/v2/{repository}/manifests/{tag}"
        anonymous, _ = _pull(client, "HEAD", url)
        keyed, _ = _pull(client, "HEAD", url, (NGC_USER, NGC_API_KEY))
        found["private"] = {
            "anonymous": anonymous.status_code,
            "with key": keyed.status_code,
            "digest": keyed.headers.get("Docker-Content-Digest"),
        }
        return found


def probe_blob_and_redirects() -> dict[str, Any]:
    """A dcgm-exporter layer read through nvcr.io's front (and hashed); registry.k8s.io's answers; and a naive
    client that carries its Authorization header across registry.k8s.io's redirect."""
    with httpx.Client(timeout=30) as client:
        base, repository, tag = _split(DCGM)
        index, _ = _pull(client, "GET", f"{base}/v2/{repository}/manifests/{tag}")
        child = index.json()["manifests"][0]["digest"]
        manifest, _ = _pull(client, "GET", f"{base}/v2/{repository}/manifests/{child}")
        layer = manifest.json()["layers"][-1]
        blob, _ = _pull(client, "GET", f"{base}/v2/{repository}/blobs/{layer['digest']}")
        version = client.get("https://registry.k8s.io/v2/")
        redirect = client.head(f"https://registry.k8s.io{KSM_PATH}")
        blob_redirect = client.get("https://registry.k8s.io/v2/kube-state-metrics/kube-state-metrics/blobs/sha256:ab")
        leak = {"Authorization": "Basic bmFpdmU6Y2xpZW50"}
        client.head(f"https://registry.k8s.io{KSM_PATH}", headers=leak)
        client.head(redirect.headers["Location"], headers=leak)
        return {
            "layer": {"sha256": "sha256:" + hashlib.sha256(blob.content).hexdigest(), "size": len(blob.content)},
            "expected": {"sha256": layer["digest"], "size": layer["size"]},
            "v2": {"status": version.status_code, "api": version.headers.get("Docker-Distribution-Api-Version")},
            "manifest": {"status": redirect.status_code, "location": redirect.headers.get("Location")},
            "blob": {"status": blob_redirect.status_code, "location": blob_redirect.headers.get("Location")},
        }


def fetch_webui_chart(directory: str) -> dict[str, Any]:
    """HAMi-WebUI's repository index and its newest chart (written to `directory`, checked against the index)."""
    with httpx.Client(timeout=30) as client:
        index = yaml.safe_load(client.get("https://project-hami.github.io/HAMi-WebUI/index.yaml").content)
        hami = yaml.safe_load(client.get("https://project-hami.github.io/HAMi/index.yaml").content)
        entries = sorted(index["entries"]["hami-webui"], key=lambda e: tuple(map(int, e["version"].split("."))))
        newest = entries[-1]
        raw = client.get(f"https://project-hami.github.io/HAMi-WebUI/{newest['urls'][0]}").content
        (Path(directory) / "hami-webui.tgz").write_bytes(raw)
        return {
            "versions": [e["version"] for e in entries],
            "digest ok": hashlib.sha256(raw).hexdigest() == newest["digest"],
            "hami versions": sorted(e["version"] for e in hami["entries"]["hami"]),
        }


# --- the tests ------------------------------------------------------------------------------------------------


def test_the_new_registries_answer_anonymous_pulls_with_the_seeded_digests(whole_world: World) -> None:
    seeded = whole_world.ready["image_digests"]
    found = inside(whole_world, "probe_registries", DCGM, PROMETHEUS, TOOLS)
    for reference in (DCGM, PROMETHEUS, TOOLS):
        assert found[reference]["status"] == 200, found[reference]
        assert found[reference]["digest"] == seeded[reference]
    # nvcr.io's challenge names no service; quay.io's and ghcr.io's do
    assert found[DCGM]["hops"][0]["challenge"] == (
        f'Bearer realm="{NVCR_REALM}",scope="repository:nvidia/k8s/dcgm-exporter:pull"'
    )
    assert 'service="quay.io"' in found[PROMETHEUS]["hops"][0]["challenge"]
    assert 'realm="https://ghcr.io/token",service="ghcr.io"' in found[TOOLS]["hops"][0]["challenge"]
    assert found["private"] == {"anonymous": 401, "with key": 200, "digest": seeded[PRIVATE]}

    other = inside(whole_world, "probe_blob_and_redirects")
    assert other["layer"] == other["expected"]  # streamed through the front intact
    assert other["v2"] == {"status": 200, "api": "registry/2.0"}
    assert other["manifest"] == {
        "status": 307,
        "location": f"https://{AR_HOST}/v2/k8s-artifacts-prod/images{KSM_PATH[3:]}",
    }
    assert other["blob"]["status"] == 307
    assert other["blob"]["location"].startswith(f"https://{AR_HOST}/v2/k8s-artifacts-prod/images/kube-state")

    summary = whole_world.stop()
    tokens = summary["realm_tokens"]
    assert {(t["user"], t["service"], tuple(t["scopes"])) for t in tokens[NVCR_REALM]} == {
        (None, None, ("repository:nvidia/k8s/dcgm-exporter:pull",)),
        (None, None, (f"repository:{NVCR_PRIVATE[0]}:pull",)),
        (NGC_USER, None, (f"repository:{NVCR_PRIVATE[0]}:pull",)),
    }
    assert {(t["user"], t["service"]) for t in tokens[QUAY_REALM]} == {(None, "quay.io")}
    assert [t["scopes"] for t in tokens[GHCR_REALM]] == [[f"repository:{GHCR_IMAGE[0]}:pull"]]
    # only the naive client's header reached either redirect host; the bearer dance at the Artifact Registry
    # host used that host's own tokens, which are not counted as leaks
    assert summary["redirect_authorization"] == {
        "registry.k8s.io": [KSM_PATH],
        AR_HOST: [f"/v2/k8s-artifacts-prod/images{KSM_PATH[3:]}"],
    }


def test_every_image_the_served_webui_chart_runs_is_at_its_registry(tmp_path: Path, whole_world: World) -> None:
    """HAMi-WebUI's repository beside HAMi's; its newest chart, rendered by Helm with every part on, runs only
    images this world holds, each answering with the digest seeded (or pinned) for it."""
    fetched = inside(whole_world, "fetch_webui_chart", str(tmp_path))
    assert fetched == {"versions": ["1.2.0", "1.3.0"], "digest ok": True, "hami versions": ["2.10.0", "2.5.0", "2.9.0"]}
    run = everything_run((tmp_path / "hami-webui.tgz").read_bytes(), EVERYTHING_ON)
    webui, seeded = whole_world.ready["webui_digests"], whole_world.ready["image_digests"]
    assert f"projecthami/hami-webui-fe-oss@{webui['projecthami/hami-webui-fe-oss:v1.3.0']}" in run  # pinned
    assert len(run) == 9
    found = inside(whole_world, "probe_registries", *run)
    for reference in run:
        assert found[reference]["status"] == 200, (reference, found[reference])
        pin = reference.partition("@")[2]
        assert found[reference]["digest"] == (pin or seeded[reference]), reference
    ksm = found["registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.13.0"]["hops"]
    assert [hop["status"] for hop in ksm] == [307, 401, 200]  # redirected, then the Artifact Registry's own flow
    summary = whole_world.stop()
    assert summary["webui_chart_requests"] == ["/HAMi-WebUI/index.yaml", "/HAMi-WebUI/hami-webui-1.3.0.tgz"]
    assert summary["redirect_authorization"] == {"registry.k8s.io": [], AR_HOST: []}


# --- mirror itself, at the real names ---------------------------------------------------------------------------

SOURCE_LOGS = ("hub", "nvcr.io", "quay.io", AR_HOST)  # the registries behind the source names (access logs)
VPC = "registry-vpc.cn-hangzhou.aliyuncs.com"


def webui_config(tmp_path: Path) -> Path:
    """config/mirror.yaml as a user fills it in, with its HAMi-WebUI block turned on."""
    config = shipped_config(tmp_path)
    config.write_text(uncomment_block(config.read_text(), "charts"))
    return config


def test_one_sync_with_the_shipped_config_relocates_hami_hami_webui_and_dcgm_exporter(
    tmp_path: Path, whole_world: World
) -> None:
    """Done when: one `mirror sync v2.10.0` with the shipped config (WebUI on) relocates HAMi, HAMi-WebUI and
    its subcharts from Docker Hub, nvcr.io, quay.io and registry.k8s.io to ACR: every image each chart can run,
    byte for byte, digest-pinned, each chart's values proven by real Helm; a re-run sends the sources HEADs."""
    config = webui_config(tmp_path)
    env = {"ACR_PASSWORD": ACR_USER[1]}
    done = whole_world.mirror("sync", "v2.10.0", "--config", str(config), "--json", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    sources = {image["source"].split("/", 1)[0] for image in report["images"]}
    assert sources == {"registry-1.docker.io", "nvcr.io", "quay.io", "registry.k8s.io"}
    assert all(t["verified"] for image in report["images"] for t in image["targets"])
    seeded = whole_world.ready["image_digests"]
    webui = whole_world.ready["webui_digests"]
    by_name = {image["name"]: image for image in report["images"]}
    dcgm = by_name["nvcr.io_nvidia_k8s_dcgm-exporter"]
    assert dcgm["source_digest"] == seeded[DCGM] and dcgm["targets"][0]["digest"] == seeded[DCGM]  # byte-exact
    ksm = by_name["registry.k8s.io_kube-state-metrics_kube-state-metrics"]  # through the redirect
    assert ksm["source_digest"] == seeded["registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.13.0"]

    hami, webui_values = report["values"]
    assert (hami["chart_name"], webui_values["chart_name"]) == ("hami", "hami-webui")
    for entry in (hami, webui_values):
        assert entry["proof"]["ok"] is True and entry["proof"]["renderer"].startswith("Helm v4"), entry["proof"]
    values = yaml.safe_load((tmp_path / webui_values["path"]).read_text())
    frontend = values["image"]["frontend"]
    assert frontend["repository"] == f"{VPC}/{NAMESPACE}/projecthami_hami-webui-fe-oss"
    # ACR's personal edition refuses the index's attestation manifests: the values pin the index it holds
    held = by_name["projecthami_hami-webui-fe-oss"]["targets"][0]["digest"]
    assert frontend["digest"] == held != webui["projecthami/hami-webui-fe-oss:v1.3.0"]
    assert (f"{VPC}/{NAMESPACE}/projecthami_hami-webui-fe-oss@{held}", "mirrored") in {
        (i["image"], i["verdict"]) for i in webui_values["proof"]["images"]
    }
    assert values["dcgm-exporter"]["image"] == {"repository": f"{VPC}/{NAMESPACE}/nvcr.io_nvidia_k8s_dcgm-exporter"}
    # this ACR allows no anonymous pull: global in the Bitnami form every chart here takes, dcgm-exporter's own
    # list in the Kubernetes form its `toYaml` passes through
    assert values["global"]["imagePullSecrets"] == ["acr-pull"]
    assert values["dcgm-exporter"]["imagePullSecrets"] == [{"name": "acr-pull"}]
    assert webui_values["helm"].startswith("helm install my-hami-webui ") and " -n hami " in webui_values["helm"]
    made = "kubectl create namespace hami --dry-run=client -o yaml | kubectl apply -f - && "
    assert webui_values["kubectl"].startswith(made + "kubectl create secret docker-registry acr-pull -n hami ")
    # HAMi-WebUI's own Deployment renders no pull secret: named, with the steps that let its pods pull
    assert "warnings" not in hami
    (warning,) = webui_values["warnings"]
    assert warning.startswith("Deployment my-hami-webui (hami-webui/templates/deployment.yaml) carries no pull secret")
    assert "kubectl -n hami patch serviceaccount my-hami-webui -p " in warning

    marks = {name: len(whole_world.access_log(name)) for name in SOURCE_LOGS}
    again = whole_world.mirror("sync", "v2.10.0", "--config", str(config), "--json", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    for name in SOURCE_LOGS:
        sent = whole_world.access_log(name)[marks[name] :]
        assert sent and beyond_heads(sent) == [], (name, beyond_heads(sent))
    summary = whole_world.stop()
    assert summary["website_hits"] == [] and summary["cdn_authorization"] == []
    assert summary["redirect_authorization"] == {"registry.k8s.io": [], AR_HOST: []}  # no credential of ours
    for realm in (NVCR_REALM, QUAY_REALM):
        assert {token["user"] for token in summary["realm_tokens"][realm]} == {None}  # public: anonymous
    assert ACR_USER[1] not in done.stdout + done.stderr + again.stdout + again.stderr


def test_private_nvcr_images_take_an_ngc_key_and_ghcr_images_come_anonymously(
    tmp_path: Path, whole_world: World
) -> None:
    config = webui_config(tmp_path)
    data = yaml.safe_load(config.read_text())
    del data["chart"], data["charts"]
    data["images"] = [
        {"name": "dcgm-private", "registry": "nvcr.io", "source": NVCR_PRIVATE[0], "tag": NVCR_PRIVATE[1]},
        {"name": "webui-tools", "registry": "ghcr.io", "source": GHCR_IMAGE[0], "tag": GHCR_IMAGE[1]},
    ]
    data["values"] = {"unmirrored": "warn"}  # HAMi's own keys are not these images'
    data["registries"]["nvcr.io"] = {"username": NGC_USER, "password_env": "NGC_API_KEY"}
    config.write_text(yaml.safe_dump(data))
    env = {"ACR_PASSWORD": ACR_USER[1], "NGC_API_KEY": NGC_API_KEY}
    done = whole_world.mirror("sync", "v2.10.0", "--config", str(config), "--json", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    digests = {image["name"]: image["targets"][0]["digest"] for image in json.loads(done.stdout)["images"]}
    assert digests == {
        "dcgm-private": whole_world.ready["image_digests"][PRIVATE],
        "webui-tools": whole_world.ready["image_digests"][TOOLS],
    }
    summary = whole_world.stop()
    assert {t["user"] for t in summary["realm_tokens"][NVCR_REALM]} == {NGC_USER}
    assert {t["user"] for t in summary["realm_tokens"][GHCR_REALM]} == {None}
    assert NGC_API_KEY not in done.stdout + done.stderr
