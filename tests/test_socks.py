"""`HTTPS_PROXY=socks5://...` as mirror reads it, and the SOCKS5 tunnel's odd answers. A real SOCKS5 proxy
(microsocks) carries whole runs in tests/test_socks_world.py and, here, HTTP/2 hosts' requests (httpx's own
transport) to an origin it cannot log in to or reach; a scripted one on loopback answers what a real proxy seldom
does (each refusal code, another protocol, an answer cut short), for origins at names nothing here resolves."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from mirror.engine.upload import is_transient
from mirror.errors import Kind
from mirror.registry.errors import RegistryUnreachable
from mirror.registry.pool import pooled_transport
from mirror.registry.proxy import Proxy, ProxyRefused, ProxyRules, ProxySettingError, parse_proxy
from tests.forwardproxy import SocksProxy, socks_proxy

LIMITS = httpx.Limits(max_connections=4, max_keepalive_connections=4)
GRANTED = bytes([5, 0, 0, 1, 0, 0, 0, 0, 0, 0])  # succeeded, bound to 0.0.0.0:0


def test_a_socks5_proxy_is_read_with_its_login_and_never_shows_it() -> None:
    proxy = parse_proxy("SOCKS5://svc%40corp:p%3Ass@proxy.corp", "HTTPS_PROXY")
    assert (proxy.host, proxy.port, proxy.socks, proxy.login) == ("proxy.corp", 1080, True, ("svc@corp", "p:ss"))
    assert proxy.authorization is None and proxy.url == "socks5://proxy.corp:1080"
    assert "p:ss" not in repr(proxy) + str(proxy) + proxy.url
    assert parse_proxy("socks5h://proxy.corp:9050", "HTTPS_PROXY") == Proxy("proxy.corp", 9050, socks=True)


def test_a_socks5_login_longer_than_its_field_is_refused_at_load() -> None:
    with pytest.raises(ProxySettingError) as refused:
        parse_proxy(f"socks5://user:{'x' * 256}@proxy:1080", "HTTPS_PROXY")
    assert "1 to 255 bytes" in str(refused.value) and "xxx" not in str(refused.value)


@dataclass
class ScriptedSocks:
    """A SOCKS5 proxy on loopback: takes the greeting (and a login), reads the CONNECT request, answers `reply`
    (CLOSE: closes instead). A granted tunnel answers a request sent through it with a 200 saying `tunnelled`."""

    reply: bytes
    method: int = 0  # the way in it chooses, whatever was offered
    port: int = 0
    greetings: list[bytes] = field(default_factory=list)
    logins: list[bytes] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)  # each CONNECT request as it came
    tunnelled: list[bytes] = field(default_factory=list)  # the first line sent through each tunnel

    def url(self, login: str = "") -> str:
        return f"socks5://{login + '@' if login else ''}127.0.0.1:{self.port}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readexactly(2)
            self.greetings.append(head + await reader.readexactly(head[1]))
            writer.write(bytes([5, self.method]))
            if self.method == 2:
                self.logins.append(await self._login(reader))
                writer.write(b"\x01\x00")
            self.requests.append(await self._request(reader))
            if self.reply != CLOSE:
                writer.write(self.reply)
            if self.reply == GRANTED:
                self.tunnelled.append((await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")[0])
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntunnelled")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def _login(reader: asyncio.StreamReader) -> bytes:
        version, length = await reader.readexactly(2)
        user = await reader.readexactly(length)
        (length,) = await reader.readexactly(1)
        return bytes([version]) + user + b":" + await reader.readexactly(length)

    @staticmethod
    async def _request(reader: asyncio.StreamReader) -> bytes:
        head = await reader.readexactly(4)
        size = {1: 4, 4: 16}.get(head[3])
        if size is None:  # a name, its length first
            (size,) = await reader.readexactly(1)
            head += bytes([size])
        return head + await reader.readexactly(size + 2)


CLOSE = b"close"


@asynccontextmanager
async def scripted_socks(reply: bytes, method: int = 0) -> AsyncIterator[ScriptedSocks]:
    proxy = ScriptedSocks(reply, method)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    proxy.port = server.sockets[0].getsockname()[1]
    async with server:
        yield proxy


async def get_through(url: str, proxy_url: str, http2: bool = False) -> httpx.Response:
    proxies = ProxyRules.from_environment({"HTTPS_PROXY": proxy_url, "HTTP_PROXY": proxy_url})
    transport = pooled_transport(LIMITS, verify=True, http2=http2, proxies=proxies)
    async with httpx.AsyncClient(transport=transport, timeout=5) as client:
        return await client.get(url)


async def test_an_origin_is_asked_for_by_its_name_with_the_login() -> None:
    async with scripted_socks(CLOSE, method=2) as proxy:
        with pytest.raises(httpx.ConnectError):
            await get_through("https://registry.example:5000/v2/", proxy.url("svc:pw"))
    assert proxy.greetings == [b"\x05\x01\x02"]  # one way offered: username/password
    assert proxy.logins == [b"\x01svc:pw"]
    assert proxy.requests == [b"\x05\x01\x00\x03\x10registry.example\x13\x88"]  # by name, not resolved here


async def test_a_plain_http_origin_goes_through_the_tunnel_as_it_would_go_direct() -> None:
    """Not sent to the proxy whole as an HTTP proxy gets it: the tunnel reaches the origin, which gets the
    request's ordinary form. An address is asked for as one."""
    async with scripted_socks(GRANTED) as proxy:
        response = await get_through("http://10.1.2.3:5000/v2/?n=1", proxy.url())
    assert response.status_code == 200 and response.text == "tunnelled"
    assert proxy.greetings == [b"\x05\x01\x00"]  # no login: none offered
    assert proxy.requests == [b"\x05\x01\x00\x01" + socket.inet_aton("10.1.2.3") + b"\x13\x88"]
    assert proxy.tunnelled == [b"GET /v2/?n=1 HTTP/1.1"]


@pytest.mark.parametrize(
    ("reply", "method", "error", "said", "kind"),
    [
        (bytes([5, 5, 0, 1]), 0, httpx.ConnectError, "answered connection refused to CONNECT", Kind.UNAVAILABLE),
        (bytes([5, 4, 0, 1]), 0, httpx.ConnectError, "answered host unreachable to CONNECT", Kind.UNAVAILABLE),
        (bytes([5, 1, 0, 1]), 0, httpx.ConnectError, "general SOCKS server failure", Kind.UNAVAILABLE),
        (bytes([5, 2, 0, 1]), 0, ProxyRefused, "answered connection not allowed by ruleset", Kind.REFUSED),
        (bytes([5, 8, 0, 1]), 0, ProxyRefused, "answered address type not supported", Kind.REFUSED),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", 0, ProxyRefused, "something else than SOCKS5", Kind.REFUSED),
        (CLOSE, 0, httpx.ConnectError, "closed the connection before its SOCKS5 answer", Kind.UNAVAILABLE),
        (GRANTED, 0xFF, ProxyRefused, "it wants a login", Kind.AUTH),
    ],
)
async def test_a_socks_tunnel_not_opened_is_said_for_what_the_proxy_did(
    reply: bytes, method: int, error: type[Exception], said: str, kind: Kind
) -> None:
    """The proxy failing to reach the origin, or for now, is a failed connection, tried again; a refusal by its
    rules or a proxy speaking something else is not retried; a login it wants is a login failure."""
    async with scripted_socks(reply, method) as proxy:
        with pytest.raises(error) as raised:
            await get_through("https://registry.example/v2/", proxy.url())
    assert said in str(raised.value) and f"proxy 127.0.0.1:{proxy.port}" in str(raised.value)
    unreachable = RegistryUnreachable("GET", "registry.example/v2/", raised.value)
    assert unreachable.kind is kind and is_transient(unreachable) is (kind is Kind.UNAVAILABLE)


@pytest.mark.parametrize(
    ("reply", "error", "said"),
    [
        (CLOSE, httpx.ConnectError, "(SOCKS5)"),  # httpcore's socksio: "Malformed reply", not an httpx error
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", httpx.ConnectError, "(SOCKS5)"),
        (bytes([5, 2, 0, 1, 0, 0, 0, 0, 0, 0]), ProxyRefused, "Connection not allowed by ruleset"),
        (bytes([5, 7, 0, 1, 0, 0, 0, 0, 0, 0]), ProxyRefused, "Command not supported"),
        (bytes([5, 5, 0, 1, 0, 0, 0, 0, 0, 0]), httpx.ConnectError, "Connection refused"),
    ],
)
async def test_http2_hosts_tell_what_the_socks_proxy_did_as_the_others_do(
    reply: bytes, error: type[Exception], said: str
) -> None:
    """httpx's own transport speaks SOCKS5 through httpcore and socksio, whose errors are neither httpx's nor
    mirror's: a proxy that drops the connection or speaks something else is a failed connection (tried again), a
    refusal by its rules is not retried, as on HTTP/1.1 hosts."""
    async with scripted_socks(reply) as proxy:
        with pytest.raises(error) as raised:
            await get_through("https://registry.example/v2/", proxy.url(), http2=True)
    assert f"proxy 127.0.0.1:{proxy.port} (SOCKS5)" in str(raised.value) and said in str(raised.value)


async def test_a_name_too_long_to_ask_a_socks_proxy_for_is_refused() -> None:
    """A SOCKS5 request carries a name of at most 255 bytes (a redirect may name any host)."""
    long_name = ".".join(["a" * 60] * 5)  # 304 characters, each label within DNS's 63
    async with scripted_socks(GRANTED) as proxy:
        with pytest.raises(ProxyRefused) as raised:
            await get_through(f"https://{long_name}/v2/", proxy.url())
    assert "longer than a SOCKS5 request can carry" in str(raised.value) and proxy.requests == []


def test_a_socks5_login_may_have_an_empty_password_as_gos_client_allows() -> None:
    assert parse_proxy("socks5://svc@proxy:1080", "HTTPS_PROXY").login == ("svc", "")
    with pytest.raises(ProxySettingError):
        parse_proxy("socks5://:secret@proxy:1080", "HTTPS_PROXY")  # a user is required


async def test_an_empty_password_goes_as_an_empty_field() -> None:
    async with scripted_socks(CLOSE, method=2) as proxy:
        with pytest.raises(httpx.ConnectError):
            await get_through("https://registry.example/v2/", proxy.url("svc"))
    assert proxy.logins == [b"\x01svc:"]


@pytest.fixture
def microsocks(tmp_path: Path) -> Iterator[SocksProxy]:
    with socket.socket() as probe:  # a free port on loopback
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with socks_proxy(tmp_path / "socks", login=("mirror", "proxy-s3cret"), port=port) as running:
        yield running


async def test_http2_hosts_tell_a_refused_socks_login_as_the_others_do(microsocks: SocksProxy) -> None:
    """httpx's own transport (HTTP/2 hosts) speaks SOCKS5 itself (socksio): its refusal is told as mirror's
    tunnel tells it, a login failure that shows no password."""
    with pytest.raises(ProxyRefused) as raised:
        await get_through("https://registry.example/v2/", microsocks.url(("mirror", "hidden")), http2=True)
    assert str(raised.value).startswith(f"proxy 127.0.0.1:{microsocks.port} (SOCKS5): ")
    assert "hidden" not in str(raised.value) and raised.value.status == 407
    assert RegistryUnreachable("GET", "registry.example/v2/", raised.value).kind is Kind.AUTH


async def test_http2_hosts_the_socks_proxy_cannot_reach_are_a_failed_connection(microsocks: SocksProxy) -> None:
    with socket.socket() as probe:  # nothing listens there
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    with pytest.raises(httpx.ConnectError) as raised:  # 0.0.0.0 is this machine, and not loopback: proxied
        await get_through(f"https://0.0.0.0:{closed}/v2/", microsocks.url(), http2=True)
    assert str(raised.value).startswith(f"proxy 127.0.0.1:{microsocks.port} (SOCKS5): Proxy Server could not connect")
