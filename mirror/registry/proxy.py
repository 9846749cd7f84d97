"""An HTTP proxy between mirror and the hosts it talks to, named the way Docker, skopeo and curl read it:
`HTTPS_PROXY` for HTTPS origins, `HTTP_PROXY` for plain-HTTP ones (each also in lower case; the upper case wins),
`NO_PROXY` for the hosts reached directly. As Go's HTTP client (and so Docker and skopeo) does, `localhost` and
loopback addresses are never proxied: a local registry stays local whatever the environment says.

A connection through the proxy is a CONNECT tunnel (`open_tunnel`), with TLS inside it for an HTTPS origin, so
the proxy sees host names and ports, never a request or a credential meant for a registry. Plain-HTTP origins
are tunnelled too: the proxy must allow CONNECT to their ports. The proxy itself is spoken to in plain HTTP
(`http://[user:password@]host[:port]`); its login, if any, goes in `Proxy-Authorization` and is never shown."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import h11
import httpx

from mirror.errors import Kind, MirrorError
from mirror.registry.sockets import SocketStream
from mirror.untrusted import clip

MAX_ANSWER_BYTES = 16 * 1024  # a proxy's answer to CONNECT: a status line and a few headers
DEFAULT_PORT = 80  # of an `http://` proxy URL without one, as Go's client reads it
TRANSIENT_ANSWERS = frozenset({502, 503, 504})  # the proxy could not reach the origin, or is overloaded
LOGIN_REFUSALS = frozenset({407, 401})  # 407 by the book; tinyproxy answers a CONNECT's bad login with 401


class ProxySettingError(MirrorError):
    """A proxy variable mirror cannot use (another scheme, no host, a bad port); nothing was sent."""

    kind = Kind.USAGE


@dataclass(frozen=True, slots=True)
class Proxy:
    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)  # the Proxy-Authorization header's value
    url: str = field(default="", repr=False)  # as given, login included: for httpx's own (HTTP/2) transport

    def __str__(self) -> str:
        return f"{_bracketed(self.host)}:{self.port}"


@dataclass(frozen=True, slots=True)
class ProxyRules:
    """Which proxy, if any, each origin is reached through."""

    https: Proxy | None = None
    http: Proxy | None = None
    no_proxy: tuple[str, ...] = ()  # NO_PROXY's entries, lower case

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> ProxyRules:
        https, http = _variable(environ, "HTTPS_PROXY"), _variable(environ, "HTTP_PROXY")
        no_proxy = (environ.get("NO_PROXY") or environ.get("no_proxy") or "").lower()
        return cls(
            https=parse_proxy(https[1], https[0]) if https else None,
            http=parse_proxy(http[1], http[0]) if http else None,
            no_proxy=tuple(entry.strip() for entry in no_proxy.split(",") if entry.strip()),
        )

    def for_origin(self, scheme: str, host: str, port: int) -> Proxy | None:
        proxy = self.https if scheme == "https" else self.http
        if proxy is None or _is_local(host) or bypassed(host.lower().rstrip("."), port, self.no_proxy):
            return None
        return proxy

    def for_url(self, url: httpx.URL) -> Proxy | None:
        return self.for_origin(url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))


DIRECT = ProxyRules()


def _variable(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """(the variable's name as set, its value), the upper-case spelling first; an empty one is unset."""
    for spelling in (name, name.lower()):
        if environ.get(spelling):
            return spelling, environ[spelling]
    return None


def parse_proxy(value: str, variable: str) -> Proxy:
    """`http://[user:password@]host[:port]` (or `host:port`, taken as http://). Refusals name the variable and
    show no login."""
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme.lower() != "http":
        raise ProxySettingError(f"{variable}: a {parts.scheme}:// proxy is not supported; give an http:// one")
    try:
        host, port = parts.hostname, parts.port or DEFAULT_PORT
    except ValueError:
        host, port = None, 0
    if not host or not 0 < port < 65536 or parts.path not in ("", "/"):
        raise ProxySettingError(f"{variable}: give the proxy as http://host:port (a login may go before the host)")
    authorization = None
    if parts.username is not None:
        login = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = "Basic " + base64.b64encode(login).decode("ascii")
    return Proxy(host, port, authorization, text)


def bypassed(host: str, port: int, no_proxy: tuple[str, ...]) -> bool:
    """Whether NO_PROXY sends `host:port` direct: `*` (everything), an IP address or CIDR range, `host` or
    `host:port`, a domain (`example.com` or `.example.com`: the domain and the hosts under it)."""
    address = _ip(host)
    for entry in no_proxy:
        if entry == "*":
            return True
        if address is not None and _ip_entry_matches(entry, address):
            return True
        name, _, entry_port = entry.rpartition(":") if _has_port(entry) else (entry, "", "")
        if entry_port and entry_port != str(port):
            continue
        domain = name.removeprefix("*").removeprefix(".").rstrip(".")
        if domain and (host == domain or host.endswith("." + domain)):
            return True
    return False


def _has_port(entry: str) -> bool:
    head, colon, tail = entry.rpartition(":")
    return bool(colon) and tail.isdigit() and not head.endswith(":") and "]" not in tail


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _ip_entry_matches(entry: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    try:
        return address in ipaddress.ip_network(entry.strip("[]"), strict=False)
    except ValueError:
        return False


def _is_local(host: str) -> bool:
    address = _ip(host)
    return host.lower().rstrip(".") == "localhost" if address is None else address.is_loopback


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def open_tunnel(stream: SocketStream, proxy: Proxy, host: str, port: int, within: float | None) -> None:
    """Ask `proxy`, connected on `stream`, for a tunnel to `host:port`, in at most `within` seconds. A refusal is
    httpx.ProxyError (not retried); the proxy failing to reach the origin (502-504) is a ConnectError, as a
    direct connection's failure is."""
    authority = f"{_bracketed(host)}:{port}".encode("ascii")
    headers = [(b"Host", authority)]
    if proxy.authorization:
        headers.append((b"Proxy-Authorization", proxy.authorization.encode("ascii")))
    protocol = h11.Connection(our_role=h11.CLIENT, max_incomplete_event_size=MAX_ANSWER_BYTES)
    request = protocol.send(h11.Request(method=b"CONNECT", target=authority, headers=headers))
    try:
        async with asyncio.timeout(within):
            await stream.write(request + (protocol.send(h11.EndOfMessage()) or b""))
            answer = await _answer(protocol, stream, proxy)
    except TimeoutError:
        raise httpx.ConnectTimeout(f"proxy {proxy} did not open a tunnel to {authority.decode()} in time") from None
    status = answer.status_code
    if status in TRANSIENT_ANSWERS:
        raise httpx.ConnectError(_refusal(proxy, authority, answer))
    if not 200 <= status < 300:
        raise httpx.ProxyError(_refusal(proxy, authority, answer))
    if protocol.trailing_data[0]:  # the origin speaks only once the client has: nothing may come first
        raise httpx.ProxyError(f"proxy {proxy} sent bytes of its own into the tunnel to {authority.decode()}")


async def _answer(protocol: h11.Connection, stream: SocketStream, proxy: Proxy) -> h11.Response:
    while True:
        try:
            event = protocol.next_event()
        except h11.RemoteProtocolError as error:
            raise httpx.ProxyError(f"proxy {proxy} answered CONNECT with something else than HTTP: {error}") from None
        if isinstance(event, h11.Response):
            return event
        if event is h11.NEED_DATA:
            data = await stream.read(MAX_ANSWER_BYTES)
            if not data:
                raise httpx.ProxyError(f"proxy {proxy} closed the connection instead of answering CONNECT")
            protocol.receive_data(data)
        elif not isinstance(event, h11.InformationalResponse):
            raise httpx.ProxyError(f"proxy {proxy} answered CONNECT with {type(event).__name__}")


def _refusal(proxy: Proxy, authority: bytes, answer: h11.Response) -> str:
    reason = clip(answer.reason.decode("latin-1"), 100)
    said = f"proxy {proxy} answered {answer.status_code} {reason}".rstrip() + f" to CONNECT {authority.decode()}"
    if answer.status_code in LOGIN_REFUSALS:
        return said + (": it refused the login in the proxy URL" if proxy.authorization else ": it wants a login")
    return said


class ProxyRouting(httpx.AsyncBaseTransport):
    """Each request to the transport its origin's proxy (or none) calls for, each transport made when first
    needed: for httpx's own transport, which takes one proxy for every origin."""

    def __init__(self, rules: ProxyRules, make: Callable[[Proxy | None], httpx.AsyncBaseTransport]) -> None:
        self._rules = rules
        self._make = make
        self._transports: dict[Proxy | None, httpx.AsyncBaseTransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        proxy = self._rules.for_url(request.url)
        transport = self._transports.get(proxy)
        if transport is None:
            transport = self._transports[proxy] = self._make(proxy)
        return await transport.handle_async_request(request)

    async def aclose(self) -> None:
        for transport in self._transports.values():
            await transport.aclose()


def environment_proxies() -> ProxyRules:
    """The rules this process's environment sets: read when a run opens its clients, so one that is refused stops
    the run before anything is sent."""
    return ProxyRules.from_environment(os.environ)
