"""A SOCKS5 proxy's tunnel (RFC 1928), with its username/password login (RFC 1929): `HTTPS_PROXY=socks5://...`,
as Docker and skopeo (Go's HTTP client) read it. The origin's name goes to the proxy as it is written, never
resolved here (`socks5h://` means the same), so a proxy that alone can resolve the registry's name still works.
Unlike an HTTP proxy's, the tunnel carries plain-HTTP origins too: their requests go through it as they would
go direct."""

from __future__ import annotations

import asyncio
import ipaddress

import httpx

from mirror.registry.proxy import Proxy, ProxyRefused
from mirror.registry.sockets import SocketStream
from mirror.untrusted import clip

VERSION = 5
NO_LOGIN, USERNAME_PASSWORD, NONE_ACCEPTABLE = 0x00, 0x02, 0xFF
LOGIN_VERSION = 1
CONNECT = 0x01
IPV4, DOMAIN, IPV6 = 0x01, 0x03, 0x04
# What each reply code of RFC 1928 says. The proxy could not reach the origin (3-6) or failed for now (1): a
# failed connection, tried again; a refusal by its rules (2) or a request it does not take (7, 8): not retried.
REPLIES = {
    0x01: "general SOCKS server failure",
    0x02: "connection not allowed by ruleset",
    0x03: "network unreachable",
    0x04: "host unreachable",
    0x05: "connection refused",
    0x06: "TTL expired",
    0x07: "command not supported",
    0x08: "address type not supported",
}
REFUSING_REPLIES = frozenset({0x02, 0x07, 0x08})
LOGIN_REFUSED = 407  # a refused or wanted login is told as an HTTP proxy's 407 is: a login failure
MAX_NAME = 255  # bytes of a name in a request (one length byte)


async def open_socks_tunnel(stream: SocketStream, proxy: Proxy, host: str, port: int, within: float | None) -> None:
    """Ask `proxy`, connected on `stream`, for a tunnel to `host:port`, in at most `within` seconds. Raises as
    `proxy.open_tunnel` does: ProxyRefused for a refusal (not retried), ConnectError when the proxy could not
    reach the origin or dropped the connection (nothing of the request has left)."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    request = _connect_request(host, port, proxy)
    try:
        async with asyncio.timeout(within):
            await _greet(stream, proxy)
            await stream.write(request)
            await _reply(stream, proxy, authority)
    except TimeoutError:
        raise httpx.ConnectTimeout(f"proxy {proxy} did not open a tunnel to {authority} in time") from None
    except (httpx.ReadError, httpx.WriteError) as error:
        raise httpx.ConnectError(f"proxy {proxy}: {error}") from error


async def _greet(stream: SocketStream, proxy: Proxy) -> None:
    """Offer the one way in the proxy URL calls for (its login, or none) and log in if the proxy takes it."""
    method = USERNAME_PASSWORD if proxy.login is not None else NO_LOGIN
    await stream.write(bytes([VERSION, 1, method]))
    version, chosen = await _exactly(stream, 2, proxy)
    if version != VERSION:
        raise ProxyRefused(f"proxy {proxy} answered with something else than SOCKS5 (version {version})")
    if chosen != method:
        wants = "it refused the login in the proxy URL" if proxy.login is not None else "it wants a login"
        raise ProxyRefused(f"proxy {proxy} (SOCKS5) would not take the connection: {wants}", LOGIN_REFUSED)
    if proxy.login is None:
        return
    user, password = (part.encode("utf-8") for part in proxy.login)
    await stream.write(bytes([LOGIN_VERSION, len(user)]) + user + bytes([len(password)]) + password)
    _, status = await _exactly(stream, 2, proxy)
    if status != 0:
        raise ProxyRefused(f"proxy {proxy} (SOCKS5): it refused the login in the proxy URL", LOGIN_REFUSED)


def _connect_request(host: str, port: int, proxy: Proxy) -> bytes:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        name = host.encode("ascii")  # the pool's origins are in their IDNA form
        if len(name) > MAX_NAME:  # a redirect may name any host
            said = f"proxy {proxy}: {clip(host, 80)} is a name longer than a SOCKS5 request can carry"
            raise ProxyRefused(said) from None
        where = bytes([DOMAIN, len(name)]) + name
    else:
        where = bytes([IPV4 if address.version == 4 else IPV6]) + address.packed
    return bytes([VERSION, CONNECT, 0]) + where + port.to_bytes(2, "big")


async def _reply(stream: SocketStream, proxy: Proxy, authority: str) -> None:
    """The proxy's answer to CONNECT, read to its last byte: what follows is the origin's."""
    version, code, _, kind = await _exactly(stream, 4, proxy)
    if version != VERSION:
        raise ProxyRefused(f"proxy {proxy} answered CONNECT with something else than SOCKS5 (version {version})")
    if code != 0:
        said = f"proxy {proxy} answered {REPLIES.get(code, f'reply {code}')} to CONNECT {authority}"
        if code in REFUSING_REPLIES:
            raise ProxyRefused(said)
        raise httpx.ConnectError(said)
    if kind == DOMAIN:
        (length,) = await _exactly(stream, 1, proxy)
        await _exactly(stream, length + 2, proxy)
    elif kind in (IPV4, IPV6):
        await _exactly(stream, (4 if kind == IPV4 else 16) + 2, proxy)
    else:
        raise ProxyRefused(f"proxy {proxy} answered CONNECT with an address of unknown type {kind}")


async def _exactly(stream: SocketStream, size: int, proxy: Proxy) -> bytes:
    """`size` bytes, never more: a byte past the proxy's answer would be the origin's."""
    data = b""
    while len(data) < size:
        more = await stream.read(size - len(data))
        if not more:
            raise httpx.ConnectError(f"proxy {proxy} closed the connection before its SOCKS5 answer was complete")
        data += more
    return data
