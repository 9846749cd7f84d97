"""Docker Hub and ACR at their real host names, on this machine.

`python -m tests.realnames DIR [--whole-install]`, started under `unshare --net --mount` by the `world` fixture,
builds a private network namespace in which:

- `registry-1.docker.io` is a `docker-registry` with token auth whose realm is `https://auth.docker.io/token`
  (service `registry.docker.io`, anonymous pull of public repositories) and whose blob GETs answer 307 to
  `https://production.cloudflare.docker.com`, a static server of the registry's storage;
- `docker.io` and `index.docker.io` are Docker's web site: every path answers 301 to www.docker.com;
- `registry.cn-hangzhou.aliyuncs.com` is a `docker-registry` with ACR's manifest-class policy and token auth
  at `https://dockerauth.cn-hangzhou.aliyuncs.com/auth` (service with colons, no anonymous pull);
- `https://project-hami.github.io/HAMi` is HAMi's chart repository, serving a HAMi-shaped chart whose images
  are at `docker.io`, as the real one's are;

and with `--whole-install` (the whole HAMi install: HAMi-WebUI and its subcharts' registries), also:

- `nvcr.io`: a `docker-registry` behind a TLS front on the same name that sends `/proxy_auth` to its token
  server and `/v2/...` to the registry (bodies streamed both ways); its challenges name no `service`, as
  nvcr.io's do (the front drops it, and fills in the audience `registry` for the token server); anonymous pull
  of `nvidia/...`, username `$oauthtoken` with an API key (`NGC_API_KEY`) for the private
  `hami-ngc-org/...`;
- `quay.io` (realm `https://quay.io/v2/auth`, service `quay.io`) and `ghcr.io` (realm `https://ghcr.io/token`,
  service `ghcr.io`): the same kind of front, anonymous pull;
- `registry.k8s.io`: `/v2/` answers 200 and every `/v2/<name>/...` a 307 to
  `https://us-west1-docker.pkg.dev/v2/k8s-artifacts-prod/images/<name>/...`, as archeio does; that host is a
  `docker-registry` with its own anonymous bearer flow (realm `https://us-west1-docker.pkg.dev/v2/token`)
  holding the images under that prefix; both record the Authorization headers they see;
- `https://project-hami.github.io/HAMi-WebUI` beside `/HAMi`: hami-webui 1.3.0 (frontend and backend pinned by
  the seeded digests) and 1.2.0 (by tag), built by mirror/demo/samplewebui.py with the real registry names;
- every image those charts can run seeded at its registry (`ready.json`: `webui_digests` by `repository:tag`
  and `image_digests` by full reference, with `ghcr.io/project-hami/hami-webui-tools:v1` and the private
  `nvcr.io/hami-ngc-org/dcgm-exporter:3.3.7-3.5.0-ubuntu22.04`); `summary.json` adds the token requests per
  realm (user, service as sent, scopes), each front's requests and the Authorization seen at the redirect
  hosts;

all over HTTPS with certificates from a throwaway CA (`DIR/ca.pem`, trusted through SSL_CERT_FILE), names
resolved by a bind-mounted /etc/hosts. It seeds HAMi-shaped releases at the source, writes `DIR/ready.json`,
and on SIGTERM writes `DIR/summary.json` (token requests, CDN and web site hits) and stops. Commands run in
the same namespace with `nsenter --target <pid> --net --mount`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import faulthandler
import http.client
import http.server
import json
import os
import random
import re
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from mirror.demo import certs
from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.sample import MiB, push_multiarch, push_single
from mirror.demo.samplechart import ChartRepository, ChartServer, chart_server, hami_chart
from mirror.demo.samplewebui import DCGM_TAG, seed_webui_images, webui_chart, webui_images
from mirror.engine.clients import open_client
from mirror.oci import Manifest
from mirror.settings import MirrorSettings
from tests.sigstore_instance import SigstoreInstance, push_signature
from tests.support import cdn_server, http_server
from tests.tokenserver import TokenServer, token_server

HOSTS = {
    "registry-1.docker.io": "127.0.0.2",
    "auth.docker.io": "127.0.0.3",
    "production.cloudflare.docker.com": "127.0.0.4",
    "docker.io": "127.0.0.5",
    "index.docker.io": "127.0.0.5",
    "registry.cn-hangzhou.aliyuncs.com": "127.0.0.6",
    "dockerauth.cn-hangzhou.aliyuncs.com": "127.0.0.7",
    "project-hami.github.io": "127.0.0.8",
    "nvcr.io": "127.0.0.9",
    "quay.io": "127.0.0.10",
    "ghcr.io": "127.0.0.11",
    "registry.k8s.io": "127.0.0.12",
    "us-west1-docker.pkg.dev": "127.0.0.13",
}
HUB_SERVICE = "registry.docker.io"
ACR_SERVICE = "registry.aliyuncs.com:cn-hangzhou:26842"
PUBLISHER = ("hami-publisher", "publisher-password-0123")
ACR_USER = ("acr-user", "acr-registry-password-0123")
RELEASES = ("v2.5.0", "v2.9.0", "v2.10.0", "v2.11.0-rc.1", "latest")  # what the source publishes for hami
SHARED = random.Random(7).randbytes(MiB)
CHART_ONLY_IMAGES = (("jettech/kube-webhook-certgen", "v1.5.2"), ("projecthami/mock-device-plugin", "1.0.1"))
CHART_VERSIONS = ("2.5.0", "2.9.0", "2.10.0")  # what the chart repository publishes

# --whole-install
SEEDER = ("mirror-test-seeder", "seeder-password-0123")  # pushes the world's images to the new registries
NVCR_REALM, NVCR_SERVICE = "https://nvcr.io/proxy_auth", "registry"  # the audience nvcr.io's tokens carry
NGC_USER, NGC_API_KEY = "$oauthtoken", "nvapi-mirror-test-key-0123456789"
QUAY_REALM, QUAY_SERVICE = "https://quay.io/v2/auth", "quay.io"
GHCR_REALM, GHCR_SERVICE = "https://ghcr.io/token", "ghcr.io"
AR_HOST = "us-west1-docker.pkg.dev"  # where registry.k8s.io sends this machine's requests
AR_REALM, AR_SERVICE = f"https://{AR_HOST}/v2/token", AR_HOST
AR_PREFIX = "k8s-artifacts-prod/images/"
K8S_UPSTREAM = f"https://{AR_HOST}/v2/{AR_PREFIX.rstrip('/')}"
GHCR_IMAGE = ("project-hami/hami-webui-tools", "v1")
NVCR_PRIVATE = ("hami-ngc-org/dcgm-exporter", DCGM_TAG)  # an NGC org's private copy
WEBUI_CHART_VERSIONS = ("1.2.0", "1.3.0")  # 1.3.0 pinned by the seeded digests, 1.2.0 by tag
WEBUI_SOURCES = {"hub": "registry-1.docker.io", "nvcr": "nvcr.io", "quay": "quay.io", "k8s": AR_HOST}
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding"}
    | {"upgrade", "host", "expect"}
)
RELAY_CHUNK = 64 * 1024


def make_certificates(directory: Path, hosts: Mapping[str, str] = HOSTS) -> tuple[Path, Path, Path]:
    """The throwaway CA and server certificate for every name in `hosts` (HOSTS unless given)."""
    return certs.make_certificates(directory, hosts)


def isolate_names(directory: Path, hosts: Mapping[str, str] = HOSTS) -> None:
    """Loopback up in this (new) network namespace; the real names in `hosts` (HOSTS unless given) point at it
    through /etc/hosts."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    table = directory / "hosts"
    table.write_text("127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in hosts.items()))
    subprocess.run(["mount", "--bind", str(table), "/etc/hosts"], check=True)


def website(hits: list[str]) -> type[http.server.BaseHTTPRequestHandler]:
    class DockerWebSite(http.server.BaseHTTPRequestHandler):
        """What `https://docker.io/v2/...` really answers: a redirect to the web site."""

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _redirect(self) -> None:
            hits.append(f"{self.command} {self.headers.get('Host')}{self.path}")
            self.send_response(301)
            self.send_header("Location", "https://www.docker.com/")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD = do_POST = do_PUT = _redirect

    return DockerWebSite


def request_body(handler: http.server.BaseHTTPRequestHandler) -> Iterator[bytes]:
    """The request's body in pieces as it arrives (Content-Length or chunked), never all of it at once."""
    if "chunked" in handler.headers.get("Transfer-Encoding", "").lower():
        while True:
            size = int(handler.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return
            yield from _exactly(handler, size)
            handler.rfile.readline(1024)  # the CRLF after the chunk
    yield from _exactly(handler, int(handler.headers.get("Content-Length") or 0))


def _exactly(handler: http.server.BaseHTTPRequestHandler, size: int) -> Iterator[bytes]:
    while size > 0:
        data = handler.rfile.read(min(RELAY_CHUNK, size))
        if not data:
            raise ConnectionError("the client hung up mid-body")
        size -= len(data)
        yield data


def forward(
    handler: http.server.BaseHTTPRequestHandler,
    upstream: http.client.HTTPConnection,
    target: str,
    host: str,
    hidden_service: str | None = None,
    *,
    proto: str = "https",
    rewrite_header: Callable[[str, str], str] | None = None,
    pace: float = 0.0,
) -> int:
    """Relay the request `handler` is answering to `upstream` (as `target`, with Host `host` and
    X-Forwarded-Proto `proto`, bodies streamed both ways) and its answer back; the answer's status.
    `hidden_service` drops `service` from challenges, `rewrite_header(name, value)` rewrites any answer header,
    and `pace` spreads the answer's body over that many seconds (a slow link)."""
    upstream.putrequest(handler.command, target, skip_host=True, skip_accept_encoding=True)
    upstream.putheader("Host", host)
    upstream.putheader("X-Forwarded-Proto", proto)  # distribution writes <proto>://<host>/... Locations
    for key, value in handler.headers.items():
        if key.lower() not in HOP_BY_HOP:
            upstream.putheader(key, value)
    chunked = "chunked" in handler.headers.get("Transfer-Encoding", "").lower()
    if chunked:
        upstream.putheader("Transfer-Encoding", "chunked")
    upstream.endheaders()
    for piece in request_body(handler):
        upstream.send(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
    if chunked:
        upstream.send(b"0\r\n\r\n")
    response = upstream.getresponse()
    handler.send_response_only(response.status, response.reason)
    length = response.getheader("Content-Length")
    bodyless = handler.command == "HEAD" or response.status in (204, 304)
    for key, value in response.getheaders():
        if key.lower() in HOP_BY_HOP:
            continue
        if key.lower() == "www-authenticate" and hidden_service:
            value = re.sub(r',?\s*service="[^"]*"', "", value)
        if rewrite_header is not None:
            value = rewrite_header(key, value)
        handler.send_header(key, value)
    rechunk = not bodyless and length is None
    if rechunk:
        handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    pieces = max(1, -(-int(length or 0) // RELAY_CHUNK))
    while not bodyless and (data := response.read(RELAY_CHUNK)):
        if pace:
            time.sleep(pace / pieces)
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if rechunk else data)
    if rechunk:
        handler.wfile.write(b"0\r\n\r\n")
    return response.status


@dataclass
class FrontLog:
    """What the front on one registry name saw: realm requests (user, service as sent, scopes, status) and
    registry requests (method, path, status, the Authorization scheme and whether its token came from this
    name's own realm)."""

    name: str
    realm: str
    tokens: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def clear(self) -> None:
        self.tokens.clear()
        self.requests.clear()


def registry_front(
    log: FrontLog, registry: LocalRegistry, tokens: TokenServer, hidden_service: str | None = None
) -> type[http.server.BaseHTTPRequestHandler]:
    """A TLS front on a registry's name, as the big registries have: the realm's path (on the same host) goes to
    the token server, everything else to the registry, bodies streamed both ways. With `hidden_service`, the
    challenges name no `service` (as nvcr.io's do) and a realm request without one gets it on its way to the
    token server (the tokens' audience)."""
    token_path = urlsplit(log.realm).path

    class Front(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _relay(self) -> None:
            url = urlsplit(self.path)
            to_realm = url.path == token_path
            target, backend = self.path, (registry.address, registry.port)
            query = parse_qsl(url.query, keep_blank_values=True)
            if to_realm:
                backend = ("127.0.0.1", tokens.port)
                if hidden_service and not dict(query).get("service"):
                    kept = [(k, v) for k, v in query if k != "service"]
                    target = f"{url.path}?{urlencode([*kept, ('service', hidden_service)])}"
            upstream = http.client.HTTPConnection(*backend, timeout=120)
            try:
                status = self._forward(upstream, target)
            except Exception:
                self.close_connection = True
                raise
            finally:
                upstream.close()
            authorization = self.headers.get("Authorization")
            if to_realm:
                log.tokens.append(
                    {
                        "user": _basic_user(authorization),
                        "service": dict(query).get("service"),
                        "scopes": sorted(s for k, v in query if k == "scope" for s in v.split()),
                        "status": status,
                    }
                )
            else:
                scheme, _, credential = (authorization or "").partition(" ")
                log.requests.append(
                    {
                        "method": self.command,
                        "path": url.path,
                        "status": status,
                        "authorization": scheme or None,
                        "own_token": scheme.lower() == "bearer" and credential in tokens.issued,
                    }
                )

        def _forward(self, upstream: http.client.HTTPConnection, target: str) -> int:
            return forward(self, upstream, target, log.name, hidden_service)

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _relay

    return Front


def _basic_user(header: str | None) -> str | None:
    scheme, _, value = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return None
    return base64.b64decode(value).decode(errors="replace").partition(":")[0]


def redirect_front(upstream: str, seen: list[dict[str, Any]]) -> type[http.server.BaseHTTPRequestHandler]:
    """registry.k8s.io as archeio answers it: `/v2/` is 200 (no challenge, so no client ever has a token for it)
    and every other `/v2/...` request a 307 to the same path under `upstream`; anything else 404."""

    class Redirect(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            for _ in request_body(self):
                pass
            path, _, query = self.path.partition("?")
            headers: list[tuple[str, str]] = []
            if path in ("/v2", "/v2/"):
                status = 200
                headers.append(("Docker-Distribution-Api-Version", "registry/2.0"))
            elif path.startswith("/v2/"):
                status = 307
                headers.append(("Location", upstream + path.removeprefix("/v2") + (f"?{query}" if query else "")))
            else:
                status = 404
            authorization = self.headers.get("Authorization")
            seen.append(
                {
                    "method": self.command,
                    "path": path,
                    "status": status,
                    "authorization": authorization.partition(" ")[0] if authorization else None,
                }
            )
            self.send_response_only(status)
            for key, value in [*headers, ("Content-Type", "text/html; charset=utf-8"), ("Content-Length", "0")]:
                self.send_header(key, value)
            self.end_headers()

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    return Redirect


@dataclass
class WholeInstall:
    """The registries HAMi-WebUI and its subcharts pull from, and what their fronts saw."""

    fronts: dict[str, FrontLog]  # name -> log
    token_servers: dict[str, TokenServer]  # name -> its realm's server
    k8s_requests: list[dict[str, Any]]
    webui_charts: ChartRepository

    def clear(self) -> None:
        for front in self.fronts.values():
            front.clear()
        self.k8s_requests.clear()

    def summary(self) -> dict[str, Any]:
        ar = self.fronts[AR_HOST].requests
        return {
            "realm_tokens": {front.realm: front.tokens for front in self.fronts.values()},
            "front_requests": {name: front.requests for name, front in self.fronts.items()},
            "k8s_requests": self.k8s_requests,
            "redirect_authorization": {
                "registry.k8s.io": [r["path"] for r in self.k8s_requests if r["authorization"]],
                AR_HOST: [r["path"] for r in ar if r["authorization"] and not r["own_token"]],
            },
            "webui_chart_requests": self.webui_charts.requests,
        }


def start_whole_install(
    stack: ExitStack, directory: Path, context: ssl.SSLContext, charts: ChartServer
) -> WholeInstall:
    """nvcr.io, quay.io, ghcr.io, registry.k8s.io and its Artifact Registry host, each behind its own TLS front,
    and the HAMi-WebUI chart repository (empty until the images are seeded)."""
    users = dict([SEEDER])
    plan: tuple[tuple[str, str, str, tuple[str, ...], dict[str, str], bool], ...] = (
        # name, realm, service, public prefixes, extra users, service hidden from challenges
        ("nvcr.io", NVCR_REALM, NVCR_SERVICE, ("nvidia",), {NGC_USER: NGC_API_KEY}, True),
        ("quay.io", QUAY_REALM, QUAY_SERVICE, ("prometheus", "prometheus-operator"), {}, False),
        ("ghcr.io", GHCR_REALM, GHCR_SERVICE, ("project-hami",), {}, False),
        (AR_HOST, AR_REALM, AR_SERVICE, (AR_PREFIX.split("/")[0],), {}, False),
    )
    fronts: dict[str, FrontLog] = {}
    servers: dict[str, TokenServer] = {}
    for name, realm, service, public, extra, hidden in plan:
        tokens = stack.enter_context(
            token_server(directory / f"{name}-tokens", users={**users, **extra}, public=public, public_url=realm)
        )
        registry = start_registry(directory / name, auth=tokens.registry_auth(service))
        stack.callback(registry.stop)
        fronts[name], servers[name] = FrontLog(name, realm), tokens
        handler = registry_front(fronts[name], registry, tokens, service if hidden else None)
        stack.enter_context(http_server(handler, (HOSTS[name], 443), context))
    k8s_requests: list[dict[str, Any]] = []
    stack.enter_context(
        http_server(redirect_front(K8S_UPSTREAM, k8s_requests), (HOSTS["registry.k8s.io"], 443), context)
    )
    return WholeInstall(fronts, servers, k8s_requests, charts.repository("/HAMi-WebUI"))


async def seed_whole_install(settings: MirrorSettings) -> tuple[dict[str, str], dict[str, str]]:
    """Every image the HAMi-WebUI charts can run, at its registry (registry.k8s.io's at the host it redirects to,
    under its prefix), plus one image at ghcr.io and a private one at nvcr.io: (`repository:tag` -> digest for
    the webui chart, full reference -> digest for everything)."""
    clients = {key: open_client(settings, host) for key, host in WEBUI_SOURCES.items()}
    ghcr = open_client(settings, "ghcr.io")
    try:
        webui = await seed_webui_images(clients, WEBUI_CHART_VERSIONS, {"k8s": AR_PREFIX})
        everything = {
            image.reference: webui[image.name] for version in WEBUI_CHART_VERSIONS for image in webui_images(version)
        }
        small = (16 * 1024,)
        tools = await push_single(ghcr, *GHCR_IMAGE, layer_sizes=small, seed=200)
        private = await push_single(clients["nvcr"], *NVCR_PRIVATE, layer_sizes=small, seed=201)
        everything[f"ghcr.io/{GHCR_IMAGE[0]}:{GHCR_IMAGE[1]}"] = tools.digest
        everything[f"nvcr.io/{NVCR_PRIVATE[0]}:{NVCR_PRIVATE[1]}"] = private.digest
        return webui, everything
    finally:
        await asyncio.gather(ghcr.aclose(), *(client.aclose() for client in clients.values()))


async def seed(settings: MirrorSettings, sigstore: SigstoreInstance) -> dict[str, str]:
    """HAMi-shaped releases at the source, pushed with the publisher's credentials, the hami index signed as
    HAMi's release workflow signs it (cosign v3, keyless); returns tag -> digest."""
    client = open_client(settings, "registry-1.docker.io")
    try:
        hami = await push_multiarch(
            client, "projecthami/hami", "v2.10.0", shared_layers=(SHARED,), layer_sizes=(MiB,), seed=1
        )
        index = Manifest.parse(hami.manifests[hami.digest])
        for tag in RELEASES:
            await client.put_manifest("projecthami/hami", tag, index)
        subject = {"mediaType": index.media_type, "digest": hami.digest, "size": len(index.raw)}
        await push_signature(client, "projecthami/hami", subject, sigstore.sign_image(hami.digest))
        certgen = await push_multiarch(
            client, "liangjw/kube-webhook-certgen", "v1.1.1", shared_layers=(SHARED,), docker=True, seed=2
        )
        digests = {"projecthami/hami": hami.digest, "liangjw/kube-webhook-certgen": certgen.digest}
        for seed, (repository, tag) in enumerate(CHART_ONLY_IMAGES, start=3):
            digests[repository] = (
                await push_single(client, repository, tag, layer_sizes=(MiB // 4,), seed=seed)
            ).digest
        return digests
    finally:
        await client.aclose()


def main(directory: Path, whole_install: bool = False) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    isolate_names(directory)
    ca, cert, key = make_certificates(directory)
    os.environ["SSL_CERT_FILE"] = str(ca)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    hits: list[str] = []
    with ExitStack() as stack:
        hub_tokens = stack.enter_context(
            token_server(
                directory / "hub-tokens",
                (HOSTS["auth.docker.io"], 443),
                context,
                users=dict([PUBLISHER]),
                public=("projecthami", "liangjw", "jettech", "grafana"),
                public_url="https://auth.docker.io/token",
            )
        )
        acr_tokens = stack.enter_context(
            token_server(
                directory / "acr-tokens",
                (HOSTS["dockerauth.cn-hangzhou.aliyuncs.com"], 443),
                context,
                users=dict([ACR_USER]),
                public_url="https://dockerauth.cn-hangzhou.aliyuncs.com/auth",
            )
        )
        cdn = stack.enter_context(
            cdn_server(
                directory / "hub" / "data", address=(HOSTS["production.cloudflare.docker.com"], 443), tls=context
            )
        )
        stack.enter_context(http_server(website(hits), (HOSTS["docker.io"], 443), context))
        pages = stack.enter_context(
            chart_server((HOSTS["project-hami.github.io"], 443), context, "https://project-hami.github.io")
        )
        charts = pages.repository("/HAMi")
        for version in CHART_VERSIONS:
            charts.add("hami", version, hami_chart("docker.io", version))
        hub = start_registry(
            directory / "hub",
            address=HOSTS["registry-1.docker.io"],
            port=443,
            tls=(cert, key),
            redirect_to="https://production.cloudflare.docker.com",
            auth=hub_tokens.registry_auth(HUB_SERVICE),
        )
        stack.callback(hub.stop)
        acr = start_registry(
            directory / "acr",
            address=HOSTS["registry.cn-hangzhou.aliyuncs.com"],
            port=443,
            tls=(cert, key),
            image_manifests_only=True,
            auth=acr_tokens.registry_auth(ACR_SERVICE),
        )
        stack.callback(acr.stop)
        whole = start_whole_install(stack, directory, context, pages) if whole_install else None
        registries = {"registry-1.docker.io": {"username": PUBLISHER[0], "password": PUBLISHER[1]}}
        if whole is not None:
            registries |= {name: {"username": SEEDER[0], "password": SEEDER[1]} for name in whole.fronts}
        publisher = MirrorSettings(
            targets=[{"name": "unused", "registry": "registry.cn-hangzhou.aliyuncs.com", "namespace": "xx"}],  # type: ignore[list-item]
            images=[{"name": "unused", "source": "unused/unused"}],  # type: ignore[list-item]
            registries=registries,  # type: ignore[arg-type]
        )
        sigstore = SigstoreInstance()
        trusted_root = directory / "trusted_root.json"
        trusted_root.write_text(json.dumps(sigstore.trusted_root()), encoding="utf-8")
        digests, extra = asyncio.run(seed_all(publisher, sigstore, whole is not None))
        hub_tokens.requests.clear()  # count only what mirror asks for from here on
        cdn.requests, cdn.seen_authorization[:] = 0, []
        ready = {"pid": os.getpid(), "ca": str(ca), "digests": digests, "trusted_root": str(trusted_root), **extra}
        if whole is not None:
            for version in WEBUI_CHART_VERSIONS:  # 1.3.0 pinned by the seeded digests, as the real one is
                pins = extra["webui_digests"] if version == "1.3.0" else {}
                whole.webui_charts.add("hami-webui", version, webui_chart(pins, version))
            whole.clear()
        stop = threading.Event()
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, lambda *_: stop.set())
        (directory / "ready.json.part").write_text(json.dumps(ready), encoding="utf-8")
        os.replace(directory / "ready.json.part", directory / "ready.json")  # whole when it appears
        stop.wait()
        summary = {
            "website_hits": hits,
            "chart_requests": charts.requests,
            "cdn_requests": cdn.requests,
            "cdn_authorization": cdn.seen_authorization,
            "hub_tokens": [_token_json(r) for r in hub_tokens.requests],
            "acr_tokens": [_token_json(r) for r in acr_tokens.requests],
            **(whole.summary() if whole is not None else {}),
        }
        (directory / "summary.json").write_text(json.dumps(summary), encoding="utf-8")


async def seed_all(
    settings: MirrorSettings, sigstore: SigstoreInstance, whole_install: bool
) -> tuple[dict[str, str], dict[str, Any]]:
    """HAMi's releases and, with the whole install, HAMi-WebUI's images, at the same time."""
    if not whole_install:
        return await seed(settings, sigstore), {}
    digests, (webui, everything) = await asyncio.gather(seed(settings, sigstore), seed_whole_install(settings))
    return digests, {"webui_digests": webui, "image_digests": everything}


def _token_json(request: Any) -> dict[str, Any]:
    return {"user": request.user, "service": request.service, "scopes": sorted(request.scopes)}


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1)  # the test asks where a world that does not stop is stuck
    parser = argparse.ArgumentParser(description="Docker Hub and ACR (and more) at their real names.")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--whole-install", action="store_true", help="also HAMi-WebUI's registries and charts")
    arguments = parser.parse_args()
    main(arguments.directory, arguments.whole_install)
