"""A release synced through a real SOCKS5 proxy (Debian's microsocks, with a username/password login), in the world
of Docker Hub, ACR and HAMi's chart repository at their real names over TLS (tests/realnames.py): every host the
run reaches goes through the proxy's tunnel with TLS inside it, the names given to the proxy to resolve; HTTP/2
hosts go through it too (httpx's own transport); a refused login is one line that shows no password."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.forwardproxy import SocksProxy, socks_proxy
from tests.realnames import ACR_USER
from tests.test_proxy_world import ACR, ACR_AUTH, CDN, CHARTS, HUB, HUB_AUTH, assert_http2_through, hosts, sync
from tests.test_realnames import NAMESPACE, World, requests, shipped_config, start_world

LOGIN = ("mirror", "proxy-s3cret")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    running = start_world(tmp_path)
    yield running
    running.stop()


@pytest.fixture
def proxy(tmp_path: Path, world: World) -> Iterator[SocksProxy]:
    inside = ("nsenter", "--target", str(world.ready["pid"]), "--net", "--mount", "--")
    with socks_proxy(tmp_path / "socks", login=LOGIN, prefix=inside) as running:
        yield running


@pytest.mark.parametrize("scheme", ["socks5", "socks5h"])
def test_a_release_goes_through_the_socks_proxy(tmp_path: Path, world: World, proxy: SocksProxy, scheme: str) -> None:
    config = shipped_config(tmp_path)

    sync(world, config, tmp_path, ACR_PASSWORD=ACR_USER[1], HTTPS_PROXY=proxy.url(scheme=scheme))

    assert hosts(proxy.tunnels()) == {HUB, HUB_AUTH, CDN, CHARTS, ACR, ACR_AUTH}  # by name, each on 443
    assert requests(world.access_log("acr"), "PUT", f"/v2/{NAMESPACE}/projecthami_hami/manifests/v2.10.0")
    values = yaml.safe_load((tmp_path / "out" / "cn-hangzhou" / "hami-ack-values.yaml").read_text())
    assert values["devicePlugin"]["image"]["registry"] == "registry-vpc.cn-hangzhou.aliyuncs.com"


def test_http2_goes_through_the_socks_proxy(tmp_path: Path, world: World, proxy: SocksProxy) -> None:
    assert_http2_through(tmp_path, world, proxy.url(), proxy.tunnels)


def test_a_refused_socks_login_is_said_without_the_password(tmp_path: Path, world: World, proxy: SocksProxy) -> None:
    config = shipped_config(tmp_path)
    wrong = proxy.url(("mirror", "not-the-password"))
    seeded = len(world.access_log("hub"))

    env = {"ACR_PASSWORD": ACR_USER[1], "HTTPS_PROXY": wrong}
    done = world.mirror("sync", "v2.10.0", "--config", str(config), cwd=tmp_path, env=env)

    assert done.returncode == 1, done.stderr
    said = f"proxy {proxy.address}:{proxy.port} (SOCKS5): it refused the login in the proxy URL"
    assert said in done.stderr, done.stderr
    assert "not-the-password" not in done.stderr and "Traceback" not in done.stderr
    assert proxy.tunnels() == [] and len(world.access_log("hub")) == seeded  # nothing went through
