"""A release synced through a real forward proxy (Debian's tinyproxy, with a Basic login, CONNECT to 443 only), in
the world of Docker Hub, ACR and HAMi's chart repository at their real names over TLS (tests/realnames.py):
every host the run reaches goes through a CONNECT tunnel with TLS inside it, NO_PROXY sends ACR direct, HTTP/2
goes through the tunnel too, and a refused proxy login is one line that shows no password."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.forwardproxy import ForwardProxy, forward_proxy
from tests.realnames import ACR_USER
from tests.test_realnames import NAMESPACE, World, requests, shipped_config, start_world

LOGIN = ("mirror", "proxy-s3cret")
HUB, HUB_AUTH, CDN = "registry-1.docker.io", "auth.docker.io", "production.cloudflare.docker.com"
ACR, ACR_AUTH, CHARTS = (
    "registry.cn-hangzhou.aliyuncs.com",
    "dockerauth.cn-hangzhou.aliyuncs.com",
    "project-hami.github.io",
)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    running = start_world(tmp_path)
    yield running
    running.stop()


@pytest.fixture
def proxy(tmp_path: Path, world: World) -> Iterator[ForwardProxy]:
    inside = ("nsenter", "--target", str(world.ready["pid"]), "--net", "--mount", "--")
    with forward_proxy(tmp_path / "proxy", login=LOGIN, prefix=inside) as running:
        yield running


def hosts(tunnels: list[str]) -> set[str]:
    assert all(tunnel.endswith(":443") for tunnel in tunnels), tunnels
    return {tunnel.rsplit(":", 1)[0] for tunnel in tunnels}


def sync(world: World, config: Path, tmp_path: Path, **env: str) -> dict[str, object]:
    done = world.mirror("sync", "v2.10.0", "--config", str(config), "--json", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert LOGIN[1] not in done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert isinstance(report, dict) and report["ok"] is True
    return report


def test_a_release_goes_through_the_proxy_and_no_proxy_goes_direct(
    tmp_path: Path, world: World, proxy: ForwardProxy
) -> None:
    config = shipped_config(tmp_path)
    env = {"ACR_PASSWORD": ACR_USER[1], "HTTPS_PROXY": proxy.url()}

    sync(world, config, tmp_path, **env, NO_PROXY=".aliyuncs.com")
    cold = proxy.tunnels()
    assert hosts(cold) == {HUB, HUB_AUTH, CDN, CHARTS}  # ACR and its token server went direct
    assert requests(world.access_log("acr"), "PUT", f"/v2/{NAMESPACE}/projecthami_hami/manifests/v2.10.0")
    values = yaml.safe_load((tmp_path / "out" / "cn-hangzhou" / "hami-ack-values.yaml").read_text())
    assert values["devicePlugin"]["image"]["registry"] == "registry-vpc.cn-hangzhou.aliyuncs.com"

    sync(world, config, tmp_path, **env)  # a no-op, everything through the proxy
    again = proxy.tunnels()[len(cold) :]
    assert hosts(again) == {HUB, HUB_AUTH, CHARTS, ACR, ACR_AUTH}  # no blob read: no CDN


def test_http2_goes_through_the_tunnel(tmp_path: Path, world: World, proxy: ForwardProxy) -> None:
    assert_http2_through(tmp_path, world, proxy.url(), proxy.tunnels)


def assert_http2_through(tmp_path: Path, world: World, proxy_url: str, tunnels: Callable[[], list[str]]) -> None:
    """A release synced with Docker Hub over HTTP/2 (httpx's own transport) through the proxy at `proxy_url`,
    whose `tunnels` name Docker Hub, its token server and ACR."""
    config = shipped_config(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["registries"][HUB] = {"http2": True}
    config.write_text(yaml.safe_dump(data))

    sync(world, config, tmp_path, ACR_PASSWORD=ACR_USER[1], HTTPS_PROXY=proxy_url)

    assert {HUB, HUB_AUTH, ACR} <= hosts(tunnels())
    log = (world.directory / "hub" / "registry.log").read_text(errors="replace")
    assert '"HEAD /v2/projecthami/hami/manifests/v2.10.0 HTTP/2.0"' in log


def test_a_refused_proxy_login_is_said_without_the_password(tmp_path: Path, world: World, proxy: ForwardProxy) -> None:
    config = shipped_config(tmp_path)
    wrong = proxy.url(("mirror", "not-the-password"))
    env = {"ACR_PASSWORD": ACR_USER[1], "HTTPS_PROXY": wrong}
    seeded = len(world.access_log("hub"))

    done = world.mirror("sync", "v2.10.0", "--config", str(config), cwd=tmp_path, env=env)

    assert done.returncode == 1
    said = f"proxy {proxy.address}:{proxy.port} answered 401 Unauthorized to CONNECT {CHARTS}:443"
    assert said + ": it refused the login in the proxy URL" in done.stderr, done.stderr
    assert "not-the-password" not in done.stderr and "Traceback" not in done.stderr
    assert len(world.access_log("hub")) == seeded  # nothing reached the registry
