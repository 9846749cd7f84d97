"""A token server like Docker Hub's and ACR's, for `docker-registry` with `auth: token`.

It signs RS256 JWTs with a self-signed certificate sent in the `x5c` header (the registry trusts that
certificate as its root), grants anonymous pull on public repositories, pull and push to known users,
and counts every request by the scope set asked for.
"""

from __future__ import annotations

import base64
import datetime
import http.server
import json
import math
import ssl
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from tests.support import http_server

ISSUER = "mirror-test-issuer"
REGISTRY_LEEWAY = 60  # distribution accepts a token this long past its exp


@dataclass(frozen=True)
class TokenRequest:
    user: str | None
    service: str
    scopes: frozenset[str]
    method: str
    granted: tuple[tuple[str, tuple[str, ...]], ...]


@dataclass
class TokenServer:
    root: Path
    users: dict[str, str] = field(default_factory=dict)
    identity_tokens: dict[str, str] = field(default_factory=dict)  # refresh token -> user
    public: tuple[str, ...] = ()  # repository prefixes anyone may pull
    ttl: int = 300  # how long the registry accepts a token
    advertised_ttl: int | None = None  # what `expires_in` says, when it should differ from ttl
    requests: list[TokenRequest] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)
    port: int = 0
    public_url: str | None = None  # the realm as clients reach it (a real host name), else http://127.0.0.1:port

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mirror test token issuer")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.root_bundle.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    @property
    def root_bundle(self) -> Path:
        return self.root / "root.crt"

    @property
    def realm(self) -> str:
        return self.public_url or f"http://127.0.0.1:{self.port}/token"

    def registry_auth(self, service: str) -> dict[str, Any]:
        """The `auth:` section for a docker-registry that trusts this server."""
        return {
            "token": {
                "realm": self.realm,
                "service": service,
                "issuer": ISSUER,
                "rootcertbundle": str(self.root_bundle),
            }
        }

    def grant(self, user: str | None, scope: str) -> tuple[str, tuple[str, ...]] | None:
        kind, _, rest = scope.partition(":")
        name, _, actions = rest.rpartition(":")
        if kind != "repository" or not name:
            return None
        wanted = [a for a in actions.split(",") if a]
        if user is not None:
            return name, tuple(a for a in wanted if a in ("pull", "push"))
        if any(name == p or name.startswith(p + "/") for p in self.public):
            return name, tuple(a for a in wanted if a == "pull")
        return name, ()

    def issue(self, user: str | None, service: str, scopes: list[str], method: str) -> dict[str, Any]:
        granted = tuple(g for g in (self.grant(user, s) for s in scopes) if g is not None)
        self.requests.append(TokenRequest(user, service, frozenset(scopes), method, granted))

        now = math.ceil(time.time())  # JWT times are whole seconds: round up, never cut a token short
        claims = {
            "iss": ISSUER,
            "sub": user or "",
            "aud": service,
            "iat": now,
            "nbf": now - 5,
            "exp": now + self.ttl - REGISTRY_LEEWAY,
            "jti": uuid.uuid4().hex,
            "access": [{"type": "repository", "name": n, "actions": list(a)} for n, a in granted],
        }
        der = self.cert.public_bytes(serialization.Encoding.DER)
        token = jwt.encode(claims, self.key, algorithm="RS256", headers={"x5c": [base64.b64encode(der).decode()]})
        self.issued.append(token)
        return {"token": token, "access_token": token, "expires_in": self.advertised_ttl or self.ttl}

    def check_basic(self, header: str | None) -> str | bool | None:
        """The user, None when anonymous, False when the credentials are wrong."""
        if not header:
            return None
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        user, _, password = base64.b64decode(value).decode().partition(":")
        return user if self.users.get(user) == password else False

    def count(self, scopes: set[str]) -> int:
        return sum(1 for r in self.requests if r.scopes == frozenset(scopes))


@contextmanager
def token_server(
    root: Path, address: tuple[str, int] = ("127.0.0.1", 0), tls: ssl.SSLContext | None = None, **options: Any
) -> Iterator[TokenServer]:
    server_state = TokenServer(root, **options)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def reply(self, status: int, doc: dict[str, Any]) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def denied(self) -> None:
            self.reply(401, {"errors": [{"code": "UNAUTHORIZED", "message": "incorrect username or password"}]})

        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            user = server_state.check_basic(self.headers.get("Authorization"))
            if user is False:
                return self.denied()
            assert user is None or isinstance(user, str)
            service = query.get("service", [""])[0]
            self.reply(200, server_state.issue(user, service, query.get("scope", []), "GET"))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = parse_qs(self.rfile.read(length).decode())
            grant = form.get("grant_type", [""])[0]
            user: str | None = None
            if grant == "refresh_token":
                user = server_state.identity_tokens.get(form.get("refresh_token", [""])[0])
            elif grant == "password":
                name, password = form.get("username", [""])[0], form.get("password", [""])[0]
                user = name if server_state.users.get(name) == password else None
            if user is None:
                return self.denied()
            scopes = form.get("scope", [""])[0].split()
            self.reply(200, server_state.issue(user, form.get("service", [""])[0], scopes, "POST"))

    with http_server(Handler, address, tls) as server:
        server_state.port = server.server_address[1]
        yield server_state
