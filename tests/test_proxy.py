"""HTTPS_PROXY, HTTP_PROXY and NO_PROXY as mirror reads them, and the CONNECT tunnel's odd answers. A real proxy
(tinyproxy) carries whole runs in tests/test_proxy_world.py; here a scripted one on loopback answers what a real
proxy seldom does (a refusal, a 502, bytes that are not HTTP, bytes before the tunnel is used), for origins at
names nothing here resolves: only the proxy is connected to."""

from __future__ import annotations

import asyncio
import base64
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from mirror.cli import main
from mirror.engine.upload import is_transient
from mirror.errors import Kind
from mirror.notify.events import Failed, Failure
from mirror.notify.send import notify
from mirror.registry.errors import RegistryUnreachable
from mirror.registry.pool import pooled_transport
from mirror.registry.proxy import Proxy, ProxyRefused, ProxyRules, ProxySettingError, bypassed, parse_proxy
from mirror.settings import NotifyChannelSettings, NotifySettings
from tests.support import write_config
from tests.test_sync import VERSION

LIMITS = httpx.Limits(max_connections=4, max_keepalive_connections=4)
SHAPE = "give the proxy as http://host:port or socks5://host:port"


def rules(**environ: str) -> ProxyRules:
    return ProxyRules.from_environment(environ)


def test_the_upper_case_variable_wins_and_an_empty_one_is_unset() -> None:
    both = rules(HTTPS_PROXY="http://upper:3128", https_proxy="http://lower:3128", http_proxy="plain:8080")
    assert both.https == Proxy("upper", 3128)
    assert both.http is not None and (both.http.host, both.http.port) == ("plain", 8080)  # no scheme: http://
    assert rules(HTTPS_PROXY="", https_proxy="http://lower:3128").https == Proxy("lower", 3128)
    assert rules(HTTPS_PROXY="http://proxy.corp").https == Proxy("proxy.corp", 80)
    assert rules() == ProxyRules()


def test_a_login_becomes_the_proxy_authorization_and_is_never_shown() -> None:
    proxy = parse_proxy("http://svc%40corp:p%3Ass@proxy.corp:3128", "HTTPS_PROXY")
    assert proxy.authorization == "Basic " + base64.b64encode(b"svc@corp:p:ss").decode()
    assert "p%3Ass" not in repr(proxy) + str(proxy) and "p:ss" not in repr(proxy) + str(proxy)
    assert str(proxy) == "proxy.corp:3128"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("socks4://user:hidden@proxy:1080", "a socks4:// proxy is not supported"),
        ("https://user:hidden@proxy:443", "a https:// proxy is not supported"),
        ("user:hidden@proxy:3128/x://", "that proxy is not supported"),  # no part of the login repeated
        ("http://user:hidden@:3128", SHAPE),
        ("http://user:hidden@proxy:99999", SHAPE),
        ("http://user:hidden@proxy:0", SHAPE),
        ("http://user:hidden@proxy:3128/path", SHAPE),
        # Python's URL errors quote the value whole: a full-width @ (typed by a Chinese input method), a bracket
        ("http://user:hidden\uff20corp@proxy:3128", SHAPE),
        ("http://user:hid[den@proxy:3128", SHAPE),
        ("http://user:hid\tden@proxy:3128", SHAPE),  # urlsplit drops a tab
        ("http://user:hid\x7fden@proxy:3128", SHAPE),
    ],
)
def test_a_proxy_mirror_cannot_use_is_refused_by_its_variable(value: str, said: str) -> None:
    with pytest.raises(ProxySettingError) as refused:
        rules(https_proxy=value)
    assert str(refused.value).startswith("https_proxy: ") and said in str(refused.value)
    assert "hidden" not in str(refused.value)


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "direct"),
    [
        ("registry.example.com", 443, "*", True),
        ("registry.example.com", 443, "example.com", True),  # the domain and the hosts under it
        ("example.com", 443, "example.com", True),
        ("example.com", 443, "EXAMPLE.com", True),
        ("example.com", 443, ".example.com", False),  # with its dot: only the hosts under it, as Go has it
        ("registry.example.com", 443, ".example.com", True),
        ("registry.example.com", 443, "*.example.com", True),
        ("example.com", 443, "*.example.com", False),
        ("notexample.com", 443, "example.com", False),  # a suffix of the name, not a domain of it
        ("registry.example.com", 443, "other.com, example.com", True),
        ("registry.example.com", 5000, "registry.example.com:5000", True),
        ("registry.example.com", 443, "registry.example.com:5000", False),  # another port
        ("10.1.2.3", 443, "10.0.0.0/8", True),
        ("10.1.2.3", 443, "10.1.2.3", True),
        ("10.1.2.3", 5000, "10.1.2.3:5000", True),
        ("10.1.2.3", 443, "10.1.2.3:5000", False),
        ("11.1.2.3", 443, "10.0.0.0/8", False),
        ("10.0.0.1", 443, "0.0.1", False),  # a domain entry never matches an address
        ("fd00::5", 443, "fd00::/8", True),
        ("2001:db8::1", 5000, "[2001:db8::1]:5000", True),
        ("2001:db8::1", 443, "2001:db8::1", True),
        ("xn--bcher-kva.example", 443, "bücher.example", True),  # names compare in their IDNA form
        ("registry.example.com", 443, "", False),
    ],
)
def test_no_proxy_sends_what_it_names_direct(host: str, port: int, no_proxy: str, direct: bool) -> None:
    entries = rules(NO_PROXY=no_proxy).no_proxy
    assert bypassed(host, port, entries) is direct


def test_loopback_is_never_proxied_and_each_scheme_has_its_own_proxy() -> None:
    """As Go's client (Docker, skopeo) has it: a local registry stays local whatever the environment says."""
    both = rules(HTTPS_PROXY="http://secure:3128", HTTP_PROXY="http://plain:3128")
    for host in ("127.0.0.1", "127.0.0.9", "::1", "localhost", "LOCALHOST."):
        assert both.for_origin("https", host, 443) is None
    assert both.for_origin("https", "registry.example.com", 443) == both.https
    assert both.for_origin("http", "registry.example.com", 5000) == both.http
    assert rules(HTTPS_PROXY="http://secure:3128").for_origin("http", "registry.example.com", 80) is None
    assert rules(HTTPS_PROXY="http://s:1", NO_PROXY="Example.COM").for_origin("https", "a.example.com", 443) is None


RESET, CLOSE = b"", b"close"


@dataclass
class ScriptedProxy:
    """A proxy on loopback. A CONNECT it answers with `answer` and closes (RESET: resets the connection, CLOSE:
    closes it unanswered); a request sent to it whole (a plain-HTTP origin's) it answers with a 200 saying
    `forwarded`, or with `answer` where that is a 407."""

    answer: bytes
    port: int = 0
    heads: list[list[bytes]] = field(default_factory=list)  # each request's head as it came, line by line

    def url(self, login: str = "") -> str:
        return f"http://{login + '@' if login else ''}127.0.0.1:{self.port}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head.split(b"\r\n")[:-2])
            if not head.startswith(b"CONNECT ") and not self.answer.startswith(b"HTTP/1.1 407"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nforwarded")
            elif self.answer == CLOSE:
                pass
            elif self.answer == RESET:
                writer.transport.set_write_buffer_limits(0)
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close is a reset
            else:
                writer.write(self.answer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def scripted_proxy(answer: bytes) -> AsyncIterator[ScriptedProxy]:
    proxy = ScriptedProxy(answer)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    proxy.port = server.sockets[0].getsockname()[1]
    async with server:
        yield proxy


async def get_through(proxy: ScriptedProxy, url: str, login: str = "", http2: bool = False) -> httpx.Response:
    proxies = rules(HTTP_PROXY=proxy.url(login), HTTPS_PROXY=proxy.url(login))
    transport = pooled_transport(LIMITS, verify=True, http2=http2, proxies=proxies)
    async with httpx.AsyncClient(transport=transport, timeout=5) as client:
        return await client.get(url)


async def test_an_https_origin_is_reached_through_a_tunnel_with_the_login() -> None:
    async with scripted_proxy(b"HTTP/1.1 200 Connection established\r\n\r\n") as proxy:
        with pytest.raises(httpx.ConnectError):  # the proxy closes the tunnel at once: its opening is what counts
            await get_through(proxy, "https://registry.example:5000/v2/", login="svc:pw")
    (connect,) = proxy.heads
    assert connect[0] == b"CONNECT registry.example:5000 HTTP/1.1"
    assert b"Host: registry.example:5000" in connect
    assert b"Proxy-Authorization: Basic " + base64.b64encode(b"svc:pw") in connect


async def test_a_plain_http_origin_is_sent_to_the_proxy_whole_with_the_login() -> None:
    """As Go's client and curl send it: proxies commonly allow CONNECT to port 443 only."""
    async with scripted_proxy(RESET) as proxy:
        response = await get_through(proxy, "http://registry.example:5000/v2/?n=1", login="svc:pw")
    assert response.status_code == 200 and response.text == "forwarded"
    (request,) = proxy.heads
    assert request[0] == b"GET http://registry.example:5000/v2/?n=1 HTTP/1.1"
    assert b"Host: registry.example:5000" in request
    assert b"Proxy-Authorization: Basic " + base64.b64encode(b"svc:pw") in request


REFUSALS = [
    (b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n", ProxyRefused, "answered 407 Proxy Authentication Required"),
    (b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", ProxyRefused, "answered 403 Forbidden to CONNECT"),
    (b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n", httpx.ConnectError, "answered 502 Bad Gateway"),
    (b"HTTP/1.1 500 Unable to connect\r\n\r\n", httpx.ConnectError, "answered 500 Unable to connect"),  # tinyproxy
]


@pytest.mark.parametrize(
    ("answer", "error", "said"),
    [
        *REFUSALS,
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", ProxyRefused, "something else than HTTP"),
        (b"HTTP/1.1 200 OK\r\n\r\nhello", ProxyRefused, "sent bytes of its own into the tunnel"),
        (RESET, httpx.ConnectError, "Connection reset"),  # nothing of the request left: sent again
        (CLOSE, httpx.ConnectError, "closed the connection instead of answering CONNECT"),
    ],
)
async def test_a_tunnel_not_opened_is_said_for_what_the_proxy_did(
    answer: bytes, error: type[Exception], said: str
) -> None:
    """A 502-504 or a reset is the proxy failing to reach the origin: a ConnectError, which the retry layer tries
    again; a refusal or a proxy speaking nonsense is ProxyRefused, which it does not."""
    async with scripted_proxy(answer) as proxy:
        with pytest.raises(error) as raised:
            await get_through(proxy, "https://registry.example/v2/")
    assert said in str(raised.value) and f"proxy 127.0.0.1:{proxy.port}" in str(raised.value)


@pytest.mark.parametrize(("answer", "error", "said"), REFUSALS)
async def test_http2_hosts_tell_a_refusal_as_the_others_do(answer: bytes, error: type[Exception], said: str) -> None:
    """httpx's own transport (HTTP/2 hosts) raises ProxyError for any answer, a 502 included, naming no proxy."""
    async with scripted_proxy(answer) as proxy:
        with pytest.raises(error) as raised:
            await get_through(proxy, "https://registry.example/v2/", login="svc:hidden", http2=True)
    assert said in str(raised.value) and f"proxy 127.0.0.1:{proxy.port}" in str(raised.value)
    assert [head[0] for head in proxy.heads] == [b"CONNECT registry.example:443 HTTP/1.1"]
    assert b"Proxy-Authorization: Basic " + base64.b64encode(b"svc:hidden") in proxy.heads[0]


@pytest.mark.parametrize(
    ("cause", "kind"),
    [
        (ProxyRefused("proxy p:1 answered 407", 407), Kind.AUTH),
        (ProxyRefused("proxy p:1 answered 403", 403), Kind.REFUSED),
        (ProxyRefused("proxy p:1 answered CONNECT with something else than HTTP"), Kind.REFUSED),
        (httpx.ConnectError("proxy p:1 answered 502"), Kind.UNAVAILABLE),
    ],
)
def test_a_proxys_refusal_fails_a_copy_for_good(cause: Exception, kind: Kind) -> None:
    """Not retried step by step, blob by blob, as a passing network failure is."""
    unreachable = RegistryUnreachable("GET", "registry.example/x", cause)
    assert unreachable.kind is kind and is_transient(unreachable) is (kind is Kind.UNAVAILABLE)


async def test_a_plain_http_origins_login_refused_by_the_proxy_is_the_proxys() -> None:
    """A 407 to a request sent whole comes from the proxy, never the origin: said so, not retried."""
    async with scripted_proxy(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n") as proxy:
        with pytest.raises(ProxyRefused) as raised:
            await get_through(proxy, "http://registry.example:5000/v2/", login="svc:hidden")
    assert str(raised.value) == (
        f"proxy 127.0.0.1:{proxy.port} answered 407 Proxy Authentication Required to GET registry.example:5000: "
        "it refused the login in the proxy URL"
    )
    assert raised.value.status == 407


async def test_a_proxy_that_refuses_connections_is_named() -> None:
    async with scripted_proxy(RESET) as proxy:
        port = proxy.port
    with pytest.raises(httpx.ConnectError) as raised:  # the server is closed: nothing listens there now
        await get_through(ScriptedProxy(RESET, port), "https://registry.example/v2/")
    assert str(raised.value).startswith(f"proxy 127.0.0.1:{port}: ")


async def test_notifications_go_through_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    async with scripted_proxy(RESET) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url())
        monkeypatch.setenv("HOOK_URL", "http://hooks.example/services/T0/B0/x")
        channel = NotifyChannelSettings(name="oncall", kind="slack", url_env="HOOK_URL")
        event = Failed("v2.10.0", (Failure("hami", "t0", "tag not found"),))
        (sent,) = await notify(NotifySettings(channels=[channel], timeout=5, deadline=20), [event])
    assert sent.error is None
    assert [head[0] for head in proxy.heads] == [b"POST http://hooks.example/services/T0/B0/x HTTP/1.1"]


def test_a_sync_with_a_proxy_it_cannot_use_exits_2_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "socks4://user:hidden@proxy.corp:1080")
    config = write_config(tmp_path / "mirror.yaml", Unreachable(), [Unreachable()])
    assert main(["sync", VERSION, "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "HTTPS_PROXY: a socks4:// proxy is not supported; give an http:// or a socks5:// one" in err
    assert "hidden" not in err


@dataclass(frozen=True)
class Unreachable:
    """A registry host nothing serves: a run that sent a request to it would fail otherwise than expected."""

    host: str = "127.0.0.1:9"
