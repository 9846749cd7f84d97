"""Docker Hub and ACR at their real host names, on this machine.

`python -m tests.realnames DIR`, started under `unshare --net --mount` by the `world` fixture, builds a
private network namespace in which:

- `registry-1.docker.io` is a `docker-registry` with token auth whose realm is `https://auth.docker.io/token`
  (service `registry.docker.io`, anonymous pull of public repositories) and whose blob GETs answer 307 to
  `https://production.cloudflare.docker.com`, a static server of the registry's storage;
- `docker.io` and `index.docker.io` are Docker's web site: every path answers 301 to www.docker.com;
- `registry.cn-hangzhou.aliyuncs.com` is a `docker-registry` with ACR's manifest-class policy and token auth
  at `https://dockerauth.cn-hangzhou.aliyuncs.com/auth` (service with colons, no anonymous pull);
- `https://project-hami.github.io/HAMi` is HAMi's chart repository, serving a HAMi-shaped chart whose images
  are at `docker.io`, as the real one's are;

all over HTTPS with certificates from a throwaway CA (`DIR/ca.pem`, trusted through SSL_CERT_FILE), names
resolved by a bind-mounted /etc/hosts. It seeds HAMi-shaped releases at the source, writes `DIR/ready.json`,
and on SIGTERM writes `DIR/summary.json` (token requests, CDN and web site hits) and stops. Commands run in
the same namespace with `nsenter --target <pid> --net --mount`.
"""

from __future__ import annotations

import asyncio
import datetime
import http.server
import ipaddress
import json
import os
import random
import signal
import ssl
import subprocess
import sys
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from mirror.demo.localregistry import start_registry
from mirror.demo.sample import MiB, push_multiarch, push_single
from mirror.demo.samplechart import chart_repository, hami_chart
from mirror.engine.clients import open_client
from mirror.oci import Manifest
from mirror.settings import MirrorSettings
from tests.sigstore_instance import SigstoreInstance, push_signature
from tests.support import cdn_server, http_server
from tests.tokenserver import token_server

HOSTS = {
    "registry-1.docker.io": "127.0.0.2",
    "auth.docker.io": "127.0.0.3",
    "production.cloudflare.docker.com": "127.0.0.4",
    "docker.io": "127.0.0.5",
    "index.docker.io": "127.0.0.5",
    "registry.cn-hangzhou.aliyuncs.com": "127.0.0.6",
    "dockerauth.cn-hangzhou.aliyuncs.com": "127.0.0.7",
    "project-hami.github.io": "127.0.0.8",
}
HUB_SERVICE = "registry.docker.io"
ACR_SERVICE = "registry.aliyuncs.com:cn-hangzhou:26842"
PUBLISHER = ("hami-publisher", "publisher-password-0123")
ACR_USER = ("acr-user", "acr-registry-password-0123")
RELEASES = ("v2.5.0", "v2.9.0", "v2.10.0", "v2.11.0-rc.1", "latest")  # what the source publishes for hami
SHARED = random.Random(7).randbytes(MiB)
CHART_ONLY_IMAGES = (("jettech/kube-webhook-certgen", "v1.5.2"), ("projecthami/mock-device-plugin", "1.0.1"))
CHART_VERSIONS = ("2.5.0", "2.9.0", "2.10.0")  # what the chart repository publishes


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and one server certificate for every name in HOSTS: (ca.pem, server.pem, server.key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mirror test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in HOSTS]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in sorted(set(HOSTS.values()))]
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "registry-1.docker.io")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


def isolate_names(directory: Path) -> None:
    """Loopback up in this (new) network namespace; the real names point at it through /etc/hosts."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    hosts = directory / "hosts"
    hosts.write_text("127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in HOSTS.items()))
    subprocess.run(["mount", "--bind", str(hosts), "/etc/hosts"], check=True)


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


def main(directory: Path) -> None:
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
                public=("projecthami", "liangjw", "jettech"),
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
        charts = stack.enter_context(
            chart_repository((HOSTS["project-hami.github.io"], 443), context, "https://project-hami.github.io/HAMi")
        )
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
        publisher = MirrorSettings(
            targets=[{"name": "unused", "registry": "registry.cn-hangzhou.aliyuncs.com", "namespace": "x"}],  # type: ignore[list-item]
            images=[{"name": "unused", "source": "unused/unused"}],  # type: ignore[list-item]
            registries={"registry-1.docker.io": {"username": PUBLISHER[0], "password": PUBLISHER[1]}},  # type: ignore[dict-item]
        )
        sigstore = SigstoreInstance()
        trusted_root = directory / "trusted_root.json"
        trusted_root.write_text(json.dumps(sigstore.trusted_root()), encoding="utf-8")
        digests = asyncio.run(seed(publisher, sigstore))
        hub_tokens.requests.clear()  # count only what mirror asks for from here on
        cdn.requests, cdn.seen_authorization[:] = 0, []
        ready = {"pid": os.getpid(), "ca": str(ca), "digests": digests, "trusted_root": str(trusted_root)}
        stop = threading.Event()
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, lambda *_: stop.set())
        (directory / "ready.json").write_text(json.dumps(ready), encoding="utf-8")
        stop.wait()
        summary = {
            "website_hits": hits,
            "chart_requests": charts.requests,
            "cdn_requests": cdn.requests,
            "cdn_authorization": cdn.seen_authorization,
            "hub_tokens": [_token_json(r) for r in hub_tokens.requests],
            "acr_tokens": [_token_json(r) for r in acr_tokens.requests],
        }
        (directory / "summary.json").write_text(json.dumps(summary), encoding="utf-8")


def _token_json(request: Any) -> dict[str, Any]:
    return {"user": request.user, "service": request.service, "scopes": sorted(request.scopes)}


if __name__ == "__main__":
    main(Path(sys.argv[1]))
