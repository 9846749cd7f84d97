"""An HTTP proxy between mirror and the hosts it talks to, named the way Docker, skopeo and curl read it:
`HTTPS_PROXY` for HTTPS origins, `HTTP_PROXY` for plain-HTTP ones (each also in lower case; the upper case wins),
`NO_PROXY` for the hosts reached directly. As Go's HTTP client (and so Docker and skopeo) does, `localhost` and
loopback addresses are never proxied: a local registry stays local whatever the environment says.

A connection to an HTTPS origin through the proxy is a CONNECT tunnel (`open_tunnel`) with TLS inside it, so the
proxy sees host names and ports, never a request or a credential meant for a registry. A plain-HTTP origin's
requests are sent to the proxy whole (`http11.py`), as Go's client and curl send them: proxies commonly allow
CONNECT to port 443 only. The proxy itself is spoken to in plain HTTP (`http://[user:password@]host[:port]`);
its login, if any, goes in `Proxy-Authorization` and is never shown."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import h11
import httpx

from mirror.errors import Kind, MirrorError
from mirror.registry.sockets import SocketStream
from mirror.untrusted import clip, is_number

MAX_ANSWER_BYTES = 16 * 1024  # a proxy's answer to CONNECT: a status line and a few headers
# The schemes a proxy URL may have, each with the port of a URL without one, as Go's client reads them. Go reads
# `socks5h://` as `socks5://`: the proxy is given the origin's name, which it resolves
SCHEMES = {"http": 80, "socks5": 1080, "socks5h": 1080}
MAX_SOCKS_FIELD = 255  # bytes of a SOCKS5 user name or password (RFC 1929: one length byte)
# httpcore's words for the SOCKS5 replies that refuse (socks.py's REFUSING_REPLIES), the rest being failed connections
SOCKS_REFUSALS = ("Connection not allowed by ruleset", "Command not supported", "Address type not supported")
SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,15}")  # what a refusal may repeat of the value: a scheme's name
# Beside any 5xx (the proxy could not reach the origin: 502-504, tinyproxy's 500), the answers that say "again
# later": each is a failed connection, tried again
TRANSIENT_ANSWERS = frozenset({408, 429})
LOGIN_REFUSALS = frozenset({407, 401})  # 407 by the book; tinyproxy answers a CONNECT's bad login with 401


class ProxySettingError(MirrorError):
    """A proxy variable mirror cannot use (another scheme, no host, a bad port); nothing was sent."""

    kind = Kind.USAGE


@dataclass(frozen=True, slots=True)
class Proxy:
    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)  # the Proxy-Authorization header's value
    socks: bool = False  # a SOCKS5 proxy (socks.py): a tunnel for every origin, plain-HTTP ones too
    login: tuple[str, str] | None = field(default=None, repr=False)  # a SOCKS5 proxy's user and password

    def __str__(self) -> str:
        return f"{_bracketed(self.host)}:{self.port}"

    @property
    def url(self) -> str:
        """The proxy's URL without its login, for httpx's own transport (HTTP/2 hosts)."""
        return f"{'socks5' if self.socks else 'http'}://{self}"


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
        if proxy is None or _is_local(host) or bypassed(host, port, self.no_proxy):
            return None
        return proxy

    def for_url(self, url: httpx.URL) -> Proxy | None:
        host = url.raw_host.decode("ascii")  # the IDNA form, as the connection pool's origins have it
        return self.for_origin(url.scheme, host, url.port or (443 if url.scheme == "https" else 80))


DIRECT = ProxyRules()


def _variable(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """(the variable's name as set, its value), the upper-case spelling first; an empty one is unset."""
    for spelling in (name, name.lower()):
        if environ.get(spelling):
            return spelling, environ[spelling]
    return None


def parse_proxy(value: str, variable: str) -> Proxy:
    """`http://[user:password@]host[:port]` (or `host:port`, taken as http://), or `socks5://` (`socks5h://`) for
    a SOCKS5 proxy. Refusals name the variable and never show the value: it may hold a password, and Python's own
    URL errors quote it whole."""
    text = value.strip()
    shape = f"{variable}: give the proxy as http://host:port or socks5://host:port (a login may go before the host)"
    scheme, separator, _ = text.partition("://")
    scheme = scheme.lower() if separator else "http"
    if scheme not in SCHEMES:
        said = f"a {scheme}:// proxy" if SCHEME.fullmatch(scheme) else "that proxy"
        raise ProxySettingError(f"{variable}: {said} is not supported; give an http:// or a socks5:// one")
    if not text.isprintable() or " " in text:
        raise ProxySettingError(shape)
    try:
        parts = urlsplit(text if separator else "http://" + text)
        host, port = parts.hostname, parts.port
    except ValueError:  # an odd character in the login or the host; its message quotes the value
        raise ProxySettingError(shape) from None
    port = SCHEMES[scheme] if port is None else port
    if not host or not 0 < port < 65536 or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ProxySettingError(shape)
    login = None if parts.username is None else (unquote(parts.username), unquote(parts.password or ""))
    if scheme != "http":
        if login is not None and not _fits_socks(*login):
            raise ProxySettingError(f"{variable}: a SOCKS5 login's user is 1 to 255 bytes, its password 0 to 255")
        return Proxy(host, port, socks=True, login=login)
    authorization = None if login is None else "Basic " + base64.b64encode(":".join(login).encode()).decode("ascii")
    return Proxy(host, port, authorization)


def _fits_socks(user: str, password: str) -> bool:
    """RFC 1929's fields: a user of 1 to 255 bytes, a password of at most 255 (empty, as Go's client allows)."""
    return 0 < len(user.encode()) <= MAX_SOCKS_FIELD and len(password.encode()) <= MAX_SOCKS_FIELD


def bypassed(host: str, port: int, no_proxy: tuple[str, ...]) -> bool:
    """Whether NO_PROXY sends `host:port` direct, entry by entry as Go's client reads it: `*` (everything); an IP
    range (`10.0.0.0/8`); an IP address, with a port or not (`10.1.2.3`, `[fd00::1]:5000`); a domain, with a
    port or not: `example.com` is it and the hosts under it, `.example.com` and `*.example.com` only the hosts
    under it. Domain entries never match an IP address; names compare in their IDNA (ASCII) form."""
    address = _ip(host)
    name = host.lower()
    for entry in no_proxy:
        if entry == "*":
            return True
        if "/" in entry:
            if address is not None and _in_range(address, entry):
                return True
            continue
        entry_host, entry_port = _split_host_port(entry) or (entry, "")
        if entry_port and entry_port != str(port):
            continue
        entry_address = _ip(entry_host)
        if entry_address is not None:
            if address == entry_address:
                return True
        elif address is None and _under_domain(name, entry_host):
            return True
    return False


def _split_host_port(entry: str) -> tuple[str, str] | None:
    """`host:port` or `[v6]:port` apart, as Go's net.SplitHostPort; None where the entry is not of that form."""
    if entry.startswith("["):
        end = entry.find("]")
        return (entry[1:end], entry[end + 2 :]) if end > 0 and entry[end + 1 : end + 2] == ":" else None
    head, colon, tail = entry.rpartition(":")
    return (head, tail) if colon and ":" not in head else None


def _under_domain(host: str, entry: str) -> bool:
    entry = entry[1:] if entry.startswith("*.") else entry
    exact = not entry.startswith(".")
    try:
        domain = entry.removeprefix(".").encode("idna").decode("ascii")
    except UnicodeError:
        return False
    return bool(domain) and (host.endswith("." + domain) or (exact and host == domain))


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _in_range(address: ipaddress.IPv4Address | ipaddress.IPv6Address, entry: str) -> bool:
    try:
        return address in ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False


def _is_local(host: str) -> bool:
    address = _ip(host)
    return host.lower().rstrip(".") == "localhost" if address is None else address.is_loopback


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class ProxyRefused(httpx.ProxyError):
    """The proxy would not open a tunnel (a 403, a login it wants or refuses) or did not speak HTTP: not retried,
    and a copy it stops is refused (`refusal_kind`), not failed for the network."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def refusal_kind(error: BaseException) -> Kind | None:
    """The kind of failure a proxy's refusal is (a login: AUTH; else REFUSED); None for any other error."""
    if not isinstance(error, ProxyRefused):
        return None
    return Kind.AUTH if error.status in LOGIN_REFUSALS else Kind.REFUSED


async def open_tunnel(stream: SocketStream, proxy: Proxy, host: str, port: int, within: float | None) -> None:
    """Ask `proxy`, connected on `stream`, for a tunnel to `host:port`, in at most `within` seconds. A refusal is
    ProxyRefused; the proxy failing to reach the origin (a 5xx), or dropping the connection before it answers, is
    a ConnectError, as a direct connection's failure is: nothing of the request has left."""
    authority = f"{_bracketed(host)}:{port}"
    headers = [(b"Host", authority.encode("ascii"))]
    if proxy.authorization:
        headers.append((b"Proxy-Authorization", proxy.authorization.encode("ascii")))
    protocol = h11.Connection(our_role=h11.CLIENT, max_incomplete_event_size=MAX_ANSWER_BYTES)
    request = protocol.send(h11.Request(method=b"CONNECT", target=authority.encode("ascii"), headers=headers))
    try:
        async with asyncio.timeout(within):
            await stream.write(request + (protocol.send(h11.EndOfMessage()) or b""))
            answer = await _answer(protocol, stream, proxy)
    except TimeoutError:
        raise httpx.ConnectTimeout(f"proxy {proxy} did not open a tunnel to {authority} in time") from None
    except (httpx.ReadError, httpx.WriteError) as error:
        raise httpx.ConnectError(f"proxy {proxy}: {error}") from error
    if not 200 <= answer.status_code < 300:
        raise answered(proxy, f"CONNECT {authority}", answer.status_code, answer.reason.decode("latin-1"))
    if protocol.trailing_data[0]:  # the origin speaks only once the client has: nothing may come first
        raise ProxyRefused(f"proxy {proxy} sent bytes of its own into the tunnel to {authority}")


async def _answer(protocol: h11.Connection, stream: SocketStream, proxy: Proxy) -> h11.Response:
    while True:
        try:
            event = protocol.next_event()
        except h11.RemoteProtocolError as error:
            raise ProxyRefused(f"proxy {proxy} answered CONNECT with something else than HTTP: {error}") from None
        if isinstance(event, h11.Response):
            return event
        if event is h11.NEED_DATA:
            data = await stream.read(MAX_ANSWER_BYTES)
            if not data:  # a proxy restarting, or a balancer in front of one: nothing of the request has left
                raise httpx.ConnectError(f"proxy {proxy} closed the connection instead of answering CONNECT")
            protocol.receive_data(data)
        elif not isinstance(event, h11.InformationalResponse):
            raise ProxyRefused(f"proxy {proxy} answered CONNECT with {type(event).__name__}")


def answered(proxy: Proxy, asked: str, status: int, reason: str) -> httpx.TransportError:
    """A proxy's answer other than 2xx, as the error to raise: ConnectError for a 5xx, 408 or 429 (it could not
    reach the origin, or is busy), else ProxyRefused."""
    said = f"proxy {proxy} answered {status} {clip(reason, 100)}".rstrip() + f" to {asked}"
    if status in TRANSIENT_ANSWERS or status >= 500:
        return httpx.ConnectError(said)
    if status in LOGIN_REFUSALS:
        said += ": it refused the login in the proxy URL" if proxy.authorization else ": it wants a login"
    return ProxyRefused(said, status)


class ProxyRouting(httpx.AsyncBaseTransport):
    """Each request to the transport its origin's proxy (or none) calls for, each transport made when first
    needed: for httpx's own transport (HTTP/2 hosts), which takes one proxy for every origin. Its tunnel's
    refusals are told as mirror's own tunnel tells them."""

    def __init__(self, rules: ProxyRules, make: Callable[[Proxy | None], httpx.AsyncBaseTransport]) -> None:
        self._rules = rules
        self._make = make
        self._transports: dict[Proxy | None, httpx.AsyncBaseTransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        proxy = self._rules.for_url(request.url)
        transport = self._transports.get(proxy)
        if transport is None:
            transport = self._transports[proxy] = self._make(proxy)
        authority = f"{_bracketed(request.url.host)}:{request.url.port or 443}"
        try:
            return await transport.handle_async_request(request)
        except httpx.ProxyError as error:
            if proxy is None or isinstance(error, ProxyRefused):
                raise
            raise _told(proxy, error, f"CONNECT {authority}") from error
        except (httpx.HTTPError, asyncio.CancelledError):
            raise
        except Exception as error:  # socksio's own (a reply cut short, another protocol), through httpcore
            if proxy is None or not proxy.socks:
                raise
            said = f"proxy {proxy} (SOCKS5): {type(error).__name__}: {clip(str(error), 200)} (CONNECT {authority})"
            raise httpx.ConnectError(said) from error

    async def aclose(self) -> None:
        for transport in self._transports.values():
            await transport.aclose()


def _told(proxy: Proxy, error: httpx.ProxyError, asked: str) -> httpx.TransportError:
    """httpcore's proxy error as mirror's tunnels tell it. Its words: "<status> <reason>" for an HTTP proxy; for a
    SOCKS5 one, "Proxy Server could not connect: <reply>." when the proxy could not reach the origin, else a
    refused or wanted login."""
    words = str(error)
    if not proxy.socks:
        status, _, reason = words.partition(" ")
        return answered(proxy, asked, int(status) if is_number(status) else 0, reason)
    said = f"proxy {proxy} (SOCKS5): {clip(words, 200)} ({asked})"
    if not words.startswith("Proxy Server could not connect"):
        return ProxyRefused(said, 407)  # a login refused or wanted
    if any(refusal in words for refusal in SOCKS_REFUSALS):
        return ProxyRefused(said)
    return httpx.ConnectError(said)


def environment_proxies() -> ProxyRules:
    """The rules this process's environment sets: read when a run opens its clients, so one that is refused stops
    the run before anything is sent."""
    return ProxyRules.from_environment(os.environ)
