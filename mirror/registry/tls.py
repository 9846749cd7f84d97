"""One TLS context per process for each trust and ALPN setting, shared by every connection pool.

Loading the CA bundle takes about 20 ms each time, and a run opens a pool per registry host (Docker Hub, each ACR
region, an anonymous client per target for the pull check) and one for chart downloads. The trust is httpx's:
`SSL_CERT_FILE`, else `SSL_CERT_DIR`, else certifi's bundle; a change to either variable makes a new context.
The ALPN protocols are set on the context (by mirror's pool once, by httpcore at each connect), so pools that speak
HTTP/2 and pools that do not never share one."""

from __future__ import annotations

import functools
import os
import ssl

import httpx

from mirror.errors import Kind, MirrorError


class TrustError(MirrorError):
    """The CA bundle the environment names cannot be loaded: no TLS connection can be checked."""

    kind = Kind.USAGE


def tls_context(verify: bool = True, http2: bool = False) -> ssl.SSLContext:
    cert_file, cert_dir = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    try:
        return _made(verify, http2, cert_file, cert_dir)
    except (OSError, ssl.SSLError) as error:
        named = f"SSL_CERT_FILE={cert_file}" if cert_file else f"SSL_CERT_DIR={cert_dir}" if cert_dir else "certifi's"
        raise TrustError(f"the CA bundle ({named}) cannot be loaded: {error}") from None


@functools.lru_cache(maxsize=16)
def _made(verify: bool, http2: bool, cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    return httpx.create_ssl_context(verify=verify)
