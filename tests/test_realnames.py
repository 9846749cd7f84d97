"""The shipped config against registries at Docker Hub's and ACR's real host names (see tests/realnames.py):
`docker.io` in the config must reach `registry-1.docker.io` for every request, tag lists included, and
never Docker's web site."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from mirror.demo.localregistry import AccessEntry, read_access_log
from tests.realnames import ACR_SERVICE, ACR_USER, HUB_SERVICE
from tests.sigstore_instance import HAMI_IDENTITY

ROOT = Path(__file__).parents[1]
NAMESPACE = "hami-mirror"


@dataclass
class World:
    directory: Path
    process: subprocess.Popen[bytes]
    ready: dict[str, Any]

    def mirror(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`mirror ARGS` inside the world's network and mount namespaces, trusting its CA."""
        # change directory inside the mount namespace: a directory opened outside it is another mount there
        command = ["nsenter", "--target", str(self.ready["pid"]), "--net", "--mount", "--"]
        command += ["sh", "-c", 'cd "$0" && exec "$@"', str(cwd), sys.executable, "-m", "mirror", *args]
        environment = {**os.environ, "SSL_CERT_FILE": self.ready["ca"], **(env or {})}
        return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=300)

    def access_log(self, registry: str) -> list[AccessEntry]:
        return read_access_log(self.directory / registry / "registry.log")

    def stop(self) -> dict[str, Any]:
        """Stop the world; what its servers saw (written first, as the world stops). A world still closing its
        servers after 30 s is killed once its summary is there; without one, the failure shows where it hung."""
        summary = self.directory / "summary.json"
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.send_signal(signal.SIGUSR1)  # its threads' stacks, into world.log
                time.sleep(1)
                self.process.kill()
                self.process.wait()
                log = (self.directory.parent / "world.log").read_text(errors="replace")
                assert summary.exists(), f"the world did not stop within 30 s:\n{log[-6000:]}"
        return dict(json.loads(summary.read_text()))


def start_world(tmp_path: Path, *flags: str) -> World:
    """`python -m tests.realnames` in a network and mount namespace of its own, once its ready.json is there
    (written whole: it appears renamed into place)."""
    directory = tmp_path / "world"
    log = (tmp_path / "world.log").open("wb")
    command = ["unshare", "--net", "--mount", "--", sys.executable, "-m", "tests.realnames", str(directory), *flags]
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 60
    while not (directory / "ready.json").exists():
        assert process.poll() is None, (tmp_path / "world.log").read_text()
        assert time.monotonic() < deadline, "the world did not start"
        time.sleep(0.1)
    return World(directory, process, json.loads((directory / "ready.json").read_text()))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    running = start_world(tmp_path)
    yield running
    running.stop()


def shipped_config(tmp_path: Path) -> Path:
    """config/mirror.yaml as a user fills it in: the namespace and the account name, nothing else."""
    text = (ROOT / "config" / "mirror.yaml").read_text()
    assert text.count("my-namespace") == 1 and text.count("my-account") == 1
    path = tmp_path / "mirror.yaml"
    path.write_text(text.replace("my-namespace", NAMESPACE).replace("my-account", ACR_USER[0]))
    return path


def with_shipped_signature_rule(config: Path, trusted_root: str) -> None:
    """Uncomment the config's `signatures:` example, as a user turns it on, and point it at the world's root."""
    lines = config.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# signatures:"))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("#"))
    lines[start:end] = [line.removeprefix("# ") for line in lines[start:end]]
    data = yaml.safe_load("\n".join(lines))
    data["signatures"]["trusted_root"] = trusted_root  # the world's own Sigstore instance: no network here
    config.write_text(yaml.safe_dump(data))


def requests(entries: list[AccessEntry], method: str, contains: str) -> list[str]:
    """Requests that were answered (a 401 challenge before the token is not counted)."""
    return [e.path for e in entries if e.method == method and contains in e.path and e.status != 401]


def test_the_shipped_config_syncs_a_release_from_docker_hub_to_acr(tmp_path: Path, world: World) -> None:
    config = shipped_config(tmp_path)
    done = world.mirror(
        "sync", "v2.10.0", "--config", str(config), "--json", cwd=tmp_path, env={"ACR_PASSWORD": ACR_USER[1]}
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    sources = {image["name"]: image for image in report["images"]}
    assert sources["projecthami_hami"]["source"] == "registry-1.docker.io/projecthami/hami:v2.10.0"
    assert sources["projecthami_hami"]["source_digest"] == world.ready["digests"]["projecthami/hami"]
    for image in report["images"]:
        (target,) = image["targets"]
        assert target["verified"] is True
        assert target["reference"].startswith(f"registry.cn-hangzhou.aliyuncs.com/{NAMESPACE}/")
    values = yaml.safe_load((tmp_path / "out" / "cn-hangzhou" / "hami-ack-values.yaml").read_text())
    assert values["devicePlugin"]["image"] == {
        "registry": "registry-vpc.cn-hangzhou.aliyuncs.com",
        "repository": f"{NAMESPACE}/projecthami_hami",
    }
    assert values["global"]["imagePullSecrets"]  # the repositories are private: nodes need the pull secret
    assert values["scheduler"]["patch"]["imageNew"]["registry"] == "registry-vpc.cn-hangzhou.aliyuncs.com"
    assert values["mockDevicePlugin"]["image"]["repository"] == f"{NAMESPACE}/projecthami_mock-device-plugin"
    # both certgen images: the chart runs one or the other by Kubernetes version
    assert {image["name"] for image in report["images"]} == {
        "projecthami_hami",
        "liangjw_kube-webhook-certgen",
        "jettech_kube-webhook-certgen",
        "projecthami_mock-device-plugin",
    }
    (delivered,) = report["values"]
    assert delivered["proof"]["ok"] is True and delivered["proof"]["renderer"].startswith("Helm v4")
    assert {i["image"] for i in delivered["proof"]["images"]} >= {
        f"registry-vpc.cn-hangzhou.aliyuncs.com/{NAMESPACE}/projecthami_hami:v2.10.0",
        "registry.cn-hangzhou.aliyuncs.com/google_containers/kube-scheduler:v1.32.0",
    }
    # this personal edition refuses the Helm chart's manifest class: the .tgz goes beside the values
    assert (
        delivered["chart"].endswith("out/cn-hangzhou/hami-2.10.0.tgz") and "manifest class" in delivered["chart_note"]
    )

    hub, acr = world.access_log("hub"), world.access_log("acr")
    summary = world.stop()
    assert summary["website_hits"] == []  # nothing went to docker.io itself
    assert summary["chart_requests"] == ["/HAMi/index.yaml", "/HAMi/hami-2.10.0.tgz"]
    assert summary["cdn_requests"] > 0 and summary["cdn_authorization"] == []  # blobs via the CDN, no credentials
    assert {t["service"] for t in summary["hub_tokens"]} == {HUB_SERVICE}
    assert {t["user"] for t in summary["hub_tokens"]} == {None}  # anonymous pulls from Docker Hub
    assert {t["service"] for t in summary["acr_tokens"]} == {ACR_SERVICE}
    assert ACR_USER[0] in {t["user"] for t in summary["acr_tokens"]}
    assert requests(hub, "HEAD", "/v2/projecthami/hami/manifests/v2.10.0")
    assert requests(acr, "PUT", f"/v2/{NAMESPACE}/projecthami_hami/manifests/v2.10.0")
    assert ACR_USER[1] not in done.stdout + done.stderr


def test_the_shipped_signature_rule_admits_the_release_hami_signed(tmp_path: Path, world: World) -> None:
    """HAMi's index is signed in this world as its release workflow signs it; the rule checks it at Docker Hub
    (the bundle's blob fetched through the CDN) before anything is copied to ACR."""
    config = shipped_config(tmp_path)
    with_shipped_signature_rule(config, world.ready["trusted_root"])
    env = {"ACR_PASSWORD": ACR_USER[1]}
    done = world.mirror("sync", "v2.10.0", "--config", str(config), "--json", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    images = {image["name"]: image for image in json.loads(done.stdout)["images"]}
    assert images["projecthami_hami"]["signature"]["signer"] == HAMI_IDENTITY
    assert images["projecthami_hami"]["signature"]["via"] == "referrers"
    assert all("signature" not in image for name, image in images.items() if name != "projecthami_hami")
    assert (tmp_path / "out" / "cn-hangzhou" / "hami-ack-values.yaml").is_file()
    summary = world.stop()
    assert summary["cdn_authorization"] == [] and summary["website_hits"] == []


def test_a_rule_names_images_as_people_write_them_and_one_naming_nothing_is_said(tmp_path: Path, world: World) -> None:
    """The engine names Docker Hub's images registry-1.docker.io/...; a rule written docker.io/... names them
    too (it checked nothing before: every image went through unchecked). A rule naming no image of the run
    is a warning."""
    config = shipped_config(tmp_path)
    with_shipped_signature_rule(config, world.ready["trusted_root"])
    data = yaml.safe_load(config.read_text())
    (rule,) = data["signatures"]["require"]
    rule["repositories"] = ["docker.io/projecthami/hami", "index.docker.io/liangjw/*", "docker.io/nosuch/*"]
    config.write_text(yaml.safe_dump(data))
    env = {"ACR_PASSWORD": ACR_USER[1]}
    done = world.mirror("sync", "v2.10.0", "--config", str(config), "--json", cwd=tmp_path, env=env)
    images = {image["name"]: image for image in json.loads(done.stdout)["images"]}
    assert images["projecthami_hami"]["signature"]["signer"] == HAMI_IDENTITY
    certgen = images["liangjw_kube-webhook-certgen"]
    assert done.returncode != 0 and "not mirrored" in certgen["error"]  # unsigned: refused, nothing copied
    assert "signature" not in images["jettech_kube-webhook-certgen"]
    assert "signatures.require: 'docker.io/nosuch/*' names no image of this run" in done.stderr
    assert "'docker.io/projecthami/hami' names no image" not in done.stderr
    assert not (tmp_path / "out" / "cn-hangzhou" / "hami-ack-values.yaml").exists()
    world.stop()


def test_the_shipped_config_discovers_releases_at_docker_hub(tmp_path: Path, world: World) -> None:
    config = shipped_config(tmp_path)
    env = {"ACR_PASSWORD": ACR_USER[1]}
    done = world.mirror("sync", "--discover", "--config", str(config), "--json", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    # the chart repository publishes 2.5.0 (outside >=2.7.0), 2.9.0 and 2.10.0
    assert [release["version"] for release in json.loads(done.stdout)] == ["v2.9.0", "v2.10.0"]
    # by the image's tags instead: v2.5.0, v2.9.0, v2.10.0, v2.11.0-rc.1 (a pre-release), latest
    by_tags = {**env, "MIRROR_DISCOVERY__SOURCE": "tags"}
    again = world.mirror("sync", "--discover", "--config", str(config), "--json", cwd=tmp_path, env=by_tags)
    assert again.returncode == 0, again.stderr
    assert [release["version"] for release in json.loads(again.stdout)] == ["v2.9.0", "v2.10.0"]
    hub, acr = world.access_log("hub"), world.access_log("acr")
    summary = world.stop()
    assert summary["website_hits"] == []
    # once a run: its discovery (by tags: which tagged releases have a chart) and its charts read the same index
    assert summary["chart_requests"].count("/HAMi/index.yaml") == 2
    assert len(requests(hub, "GET", "/v2/projecthami/hami/tags/list")) == 1  # at the API host
    for version in ("v2.9.0", "v2.10.0"):
        # the re-run copied nothing
        assert len(requests(acr, "PUT", f"/v2/{NAMESPACE}/projecthami_hami/manifests/{version}")) == 1
    assert not requests(acr, "PUT", "manifests/v2.5.0") and not requests(acr, "PUT", "rc.1")


def test_acr_written_with_capitals_and_its_port_gets_its_credentials(tmp_path: Path, world: World) -> None:
    """A host as people paste it (`Registry.CN-Hangzhou.Aliyuncs.com:443`): httpx writes a request's origin in
    lower case without the default port, and the registry's 401s went unanswered; over TLS at ACR's real name."""
    config = shipped_config(tmp_path)
    written = "Registry.CN-Hangzhou.Aliyuncs.com:443"
    config.write_text(config.read_text().replace("registry.cn-hangzhou.aliyuncs.com", written))
    env = {"ACR_PASSWORD": ACR_USER[1]}
    done = world.mirror("sync", "v2.10.0", "--config", str(config), "--json", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert all(image["targets"][0]["verified"] for image in json.loads(done.stdout)["images"])
    assert ACR_USER[1] not in done.stdout + done.stderr


def test_the_aliases_reach_the_same_api_host(tmp_path: Path, world: World) -> None:
    config = shipped_config(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["source"]["registry"] = "index.docker.io"
    config.write_text(yaml.safe_dump(data))
    env = {"ACR_PASSWORD": ACR_USER[1]}
    done = world.mirror("sync", "--discover", "--config", str(config), "--dry-run", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert world.stop()["website_hits"] == []


def test_a_wrong_password_is_one_line_per_image(tmp_path: Path, world: World) -> None:
    config = shipped_config(tmp_path)
    done = world.mirror(
        "sync", "v2.10.0", "--config", str(config), cwd=tmp_path, env={"ACR_PASSWORD": "wrong-password"}
    )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("mirror: ")]
    assert len(errors) == 4 and all("registry.cn-hangzhou.aliyuncs.com" in line for line in errors), done.stderr
    assert "Traceback" not in done.stderr and "wrong-password" not in done.stderr
