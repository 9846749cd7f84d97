"""RAM logins to an ACR Enterprise instance at Alibaba Cloud's real host names, on this machine.

`python -m tests.aliyunworld DIR [--login-seconds N] [--sts-seconds N] [--slow-blobs SECONDS] [--sts-faults F]
[--openapi-faults F] [--metadata-faults F] [--manual-namespace NAME] [--registry up|down]`, started under
`unshare --net --mount` (the `aliyun_world` fixture in tests/test_aliyun_world.py does), builds a private network
namespace in which the official SDKs (`alibabacloud-credentials`, `alibabacloud-cr20181201`) run their own request
code against stand-ins that answer as the real services do:

- **STS** (2015-04-01) at `sts.aliyuncs.com`, `sts.cn-hangzhou.aliyuncs.com` and `sts-vpc.cn-hangzhou.aliyuncs.com`:
  `AssumeRoleWithOIDC` as the credentials library sends it (every parameter in the query string, no signature).
  The world is its own ACK cluster's OIDC issuer (`https://oidc-ack-cn-hangzhou.oss-cn-hangzhou.aliyuncs.com/<cluster>`,
  discovery document and JWKS served there too): it signs (RS256) a service-account token for
  `system:serviceaccount:mirror:mirror`, audience `sts.aliyuncs.com`, into `DIR/rrsa/token` as ACK's webhook mounts
  it (re-signed every 10 minutes, one hour of life, as the kubelet rotates it), plus `DIR/rrsa/expired-token` and
  `DIR/rrsa/other-subject-token` (another service account). STS checks the signature (key by `kid`), expiry,
  audience, issuer, the OIDC provider ARN and the role's trust policy: role `mirror-acr` trusts that provider and
  subject, role `untrusted` trusts only its own account. Answers and errors in Alibaba's JSON forms, the codes from
  STS's published error code table. Credentials live min(DurationSeconds, --sts-seconds). A CI job's temporary
  keys of `mirror-acr` (as AssumeRole hands them out, with their security token) are issued at start.
- **The ACR OpenAPI** (2018-12-01, RPC style) at `cr.cn-hangzhou.aliyuncs.com` and `cr-vpc.cn-hangzhou.aliyuncs.com`:
  the SDK's `ACS3-HMAC-SHA256` signature verified for real (canonical request, signed headers,
  `x-acs-content-sha256` against the body, date skew, nonce reuse), V2 `HMAC-SHA1` RPC signatures too, with the
  secret of the calling AccessKeyId: RAM user `mirror-ci` (every `cr:` action), RAM user `no-acr` (no `cr:` action),
  RAM user `never-in-acr` (every `cr:` action, but it never opened the ACR console: each action answers
  `USER_NOT_EXIST`, in the form of ACR's other refusals, HTTP 200 with IsSuccess false; the form is this world's
  guess), and STS keys from `mirror-acr`, which need their matching `x-acs-security-token` and lapse. A small RAM
  policy per principal decides each action (`cr:<Action>`); a refusal is the gateway's `Forbidden.RAM` with an
  `AccessDeniedDetail` naming it. Actions: GetAuthorizationToken, GetInstance, ListInstance, GetInstanceEndpoint,
  GetNamespace, ListNamespace, CreateNamespace, GetRepository, ListRepository, CreateRepository. Temporary
  logins (`TempUsername`/`AuthorizationToken`, `ExpireTime` in ms) last --login-seconds, never past the caller's STS
  credentials. A second instance of the account, `cri-mirrorother0002`, is there too (its namespaces and repositories
  its own; no registry of it here): a login GetAuthorizationToken issues for it is refused by this instance's realm
  (401, as a wrong password is; the world's guess).
- **The Enterprise instance's registry** `mirror-test-registry.cn-hangzhou.cr.aliyuncs.com` (instance
  `cri-mirrortest0001`, namespace `hami-system` at start; `-registry-vpc` too): a real `docker-registry` behind a
  TLS front, token auth with service `registry.aliyuncs.com:cn-hangzhou:china:cri-mirrortest0001` and realm
  `https://dockerauth-ee.cn-hangzhou.aliyuncs.com/auth` (`dockerauth-ee-vpc` from the VPC name; `dockerauth.` answers
  too, the form older instances advertise). The realm takes ONLY temporary logins GetAuthorizationToken issued and
  not yet lapsed (a lapsed one is refused 401 exactly as a wrong password is) and grants pull/push by the login's
  RAM principal and by namespace: writes into a namespace that does not exist are refused 403 `DENIED`; namespaces
  made by CreateNamespace become pushable (repositories auto-created on push when the namespace says so).
- **ECS's metadata service** at `100.100.100.200` (on the namespace's loopback): an IMDSv2 token, the instance's RAM
  role `mirror-ecs`, its STS keys.
- **Faults** (`--sts-faults`, `--openapi-faults`, `--metadata-faults`: a comma list, each kind met by one request in
  order before the service answers normally): `503` (ServiceUnavailable), `500` (InternalError), `throttling`
  (Throttling.User, HTTP 400; `throttling:<ms>` adds the gateway's `x-acs-retry-after`), `502-html` (the load
  balancer's own page), `drop` (the connection closed unanswered), `stall` (no answer until the client gives up).
  Each is recorded with its service's calls, outcome `fault:<kind>`. At the OpenAPI only, `lost`: the action is done
  (a namespace created, a login issued), then the connection closed with its answer unsent, as when a reply is lost
  on the way back. `--manual-namespace NAME`: a namespace whose automatic repository creation is off (pushes into
  repositories it lacks refused 403 `DENIED`). `--registry down`: nothing listens at the registry's names (the
  connection refused), the OpenAPI and STS answering as ever.
- **A source registry** at `127.0.0.20:5000` (plain HTTP): `docker-registry` behind a front, seeded with a
  multi-arch `projecthami/hami:v2.10.0` (2 platforms, 3 layers of 1 MiB each, attestations); with --slow-blobs S,
  each blob GET's body is spread over S seconds.

`DIR/ready.json` (written whole) says where everything is and holds the env a client needs; SIGUSR1 writes
`DIR/summary.json` and keeps running, SIGTERM writes it and stops: STS calls, OpenAPI calls (signature verified or
not), realm logins (valid/expired/unknown), registry and source requests, and every secret seen where it should
not be (an AccessKey secret anywhere, an STS token outside `x-acs-security-token`, a registry password outside the
realm's Basic header, a registry token outside the registry, an OIDC token outside STS's `OIDCToken`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import email.message
import fnmatch
import hashlib
import hmac
import http.client
import http.server
import json
import math
import os
import re
import secrets
import signal
import ssl
import string
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.sample import MiB, push_multiarch
from mirror.registry import RegistryClient
from mirror.registry.options import ClientOptions
from tests.realnames import forward, isolate_names, make_certificates, request_body
from tests.support import http_server
from tests.tokenserver import TokenServer

REGION = "cn-hangzhou"
ACCOUNT_ID = "1718023456789012"
CLUSTER_ID = "c8a3f0e5d2b7c4a1e6f9d0b3a5c7e2f41"
INSTANCE_ID = "cri-mirrortest0001"
INSTANCE_NAME = "mirror-test"
# another instance of the account, in the OpenAPI only (its registry is not here): the one a pasted id may name
OTHER_INSTANCE_ID = "cri-mirrorother0002"
REGISTRY = f"{INSTANCE_NAME}-registry.{REGION}.cr.aliyuncs.com"
REGISTRY_VPC = f"{INSTANCE_NAME}-registry-vpc.{REGION}.cr.aliyuncs.com"
SERVICE = f"registry.aliyuncs.com:{REGION}:china:{INSTANCE_ID}"
REALM_HOST = f"dockerauth-ee.{REGION}.aliyuncs.com"
REALM_VPC_HOST = f"dockerauth-ee-vpc.{REGION}.aliyuncs.com"
REALM_CLASSIC_HOST = f"dockerauth.{REGION}.aliyuncs.com"
REALM = f"https://{REALM_HOST}/auth"
REALM_VPC = f"https://{REALM_VPC_HOST}/auth"
STS_HOSTS = ("sts.aliyuncs.com", f"sts.{REGION}.aliyuncs.com", f"sts-vpc.{REGION}.aliyuncs.com")
CR_HOSTS = (f"cr.{REGION}.aliyuncs.com", f"cr-vpc.{REGION}.aliyuncs.com")
OIDC_HOST = f"oidc-ack-{REGION}.oss-{REGION}.aliyuncs.com"
ISSUER = f"https://{OIDC_HOST}/{CLUSTER_ID}"
PROVIDER_ARN = f"acs:ram::{ACCOUNT_ID}:oidc-provider/ack-rrsa-{CLUSTER_ID}"
ROLE_ARN = f"acs:ram::{ACCOUNT_ID}:role/mirror-acr"
UNTRUSTED_ROLE_ARN = f"acs:ram::{ACCOUNT_ID}:role/untrusted"
AUDIENCE = "sts.aliyuncs.com"
SUBJECT = "system:serviceaccount:mirror:mirror"
OTHER_SUBJECT = "system:serviceaccount:default:default"
NAMESPACE = "hami-system"
NEVER_IN_ACR = "never-in-acr"  # a RAM user ACR has never seen (Harbor's users meet USER_NOT_EXIST so)
ECS_ROLE = "mirror-ecs"  # the RAM role attached to the ECS instance the metadata service describes
ECS_INSTANCE = "i-bp1mirrortest00001"
METADATA_ADDRESS = ("100.100.100.200", 80)  # ECS's metadata service, here only inside the world's network namespace
# `throttling:<ms>` asks for a wait; `pass` answers the request as ever (a fault further down the list is for a later
# request)
FAULT_KINDS = ("503", "500", "502-html", "throttling", "drop", "stall", "pass", "lost")
ACTING_FAULTS = frozenset({"lost"})  # the OpenAPI's only: the action is done, then its answer lost
STALL_SECONDS = 300.0
TEMP_USERNAME = "temp_user_cr"  # the form GetAuthorizationToken's documented example answers
SOURCE_ADDRESS = ("127.0.0.20", 5000)
SOURCE_IMAGE = ("projecthami/hami", "v2.10.0")
TOKEN_LIFE = 3600  # a projected service-account token's life
TOKEN_ROTATION = 600.0
MAX_SKEW = 15 * 60  # how far x-acs-date may be from now
HOSTS: dict[str, str] = {
    **dict.fromkeys(STS_HOSTS, "127.0.0.21"),
    **dict.fromkeys(CR_HOSTS, "127.0.0.22"),
    REGISTRY: "127.0.0.23",
    REGISTRY_VPC: "127.0.0.23",
    REALM_HOST: "127.0.0.24",
    REALM_VPC_HOST: "127.0.0.24",
    REALM_CLASSIC_HOST: "127.0.0.24",
    OIDC_HOST: "127.0.0.25",
}
ISO = "%Y-%m-%dT%H:%M:%SZ"


# --- RAM: principals and their policies --------------------------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    effect: str  # Allow | Deny
    actions: tuple[str, ...]  # patterns, `cr:*`, `cr:Get*`


def allowed(policy: Sequence[Statement], action: str) -> bool:
    """RAM's rule: an explicit Deny wins, else any Allow, else an implicit deny."""

    def matches(statement: Statement) -> bool:
        return any(fnmatch.fnmatchcase(action.lower(), pattern.lower()) for pattern in statement.actions)

    if any(s.effect == "Deny" and matches(s) for s in policy):
        return False
    return any(s.effect == "Allow" and matches(s) for s in policy)


FULL_ACR = (Statement("Allow", ("cr:*",)),)
MIRROR_ROLE_POLICY = (
    Statement(
        "Allow",
        (
            "cr:GetAuthorizationToken",
            "cr:Get*",
            "cr:List*",
            "cr:CreateNamespace",
            "cr:CreateRepository",
            "cr:PullRepository",
            "cr:PushRepository",
        ),
    ),
)
NO_ACR = (Statement("Allow", ("ecs:Describe*", "oss:Get*")),)


def _policy_from_document(document: str) -> tuple[Statement, ...]:
    """A session policy (AssumeRole's `Policy`): `{"Version": "1", "Statement": [{"Effect", "Action"}]}`."""
    parsed = json.loads(document)
    statements = []
    for item in parsed["Statement"]:
        actions = item["Action"]
        statements.append(Statement(str(item["Effect"]), tuple([actions] if isinstance(actions, str) else actions)))
    return tuple(statements)


@dataclass
class Role:
    name: str
    role_id: str
    trust: list[dict[str, Any]]  # the trust policy's statements, as RAM stores them
    policy: tuple[Statement, ...]
    max_session: int = 3600

    @property
    def arn(self) -> str:
        return f"acs:ram::{ACCOUNT_ID}:role/{self.name}"

    def trusts(self, provider: str, claims: Mapping[str, Any]) -> bool:
        """Does a statement allow sts:AssumeRole to this federated provider, every StringEquals condition holding?"""
        for statement in self.trust:
            federated = statement.get("Principal", {}).get("Federated", [])
            if statement.get("Effect") != "Allow" or provider not in federated:
                continue
            conditions = statement.get("Condition", {}).get("StringEquals", {})
            claim_of = {"oidc:iss": claims.get("iss"), "oidc:aud": claims.get("aud"), "oidc:sub": claims.get("sub")}
            if all(_claim_equals(claim_of.get(key), wanted) for key, wanted in conditions.items()):
                return True
        return False


def _claim_equals(claim: Any, wanted: Any) -> bool:
    have = claim if isinstance(claim, list) else [claim]
    wants = wanted if isinstance(wanted, list) else [wanted]
    return any(value in wants for value in have)


ROLES = {
    role.arn: role
    for role in (
        Role(
            "mirror-acr",
            "300912345678901234",
            [
                {
                    "Action": "sts:AssumeRole",
                    "Effect": "Allow",
                    "Principal": {"Federated": [PROVIDER_ARN]},
                    "Condition": {"StringEquals": {"oidc:iss": ISSUER, "oidc:aud": AUDIENCE, "oidc:sub": SUBJECT}},
                }
            ],
            MIRROR_ROLE_POLICY,
        ),
        Role(
            "untrusted",
            "300998765432109876",
            [{"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"RAM": [f"acs:ram::{ACCOUNT_ID}:root"]}}],
            FULL_ACR,
        ),
        Role(
            ECS_ROLE,
            "300955555555555555",
            [{"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": ["ecs.aliyuncs.com"]}}],
            MIRROR_ROLE_POLICY,
        ),
    )
}


@dataclass
class AccessKey:
    """An AccessKey pair: a RAM user's (static), or STS's (with a security token and an expiry)."""

    key_id: str
    secret: str
    principal: str  # `user/<name>` or `assumed-role/<role>/<session>`
    policy: tuple[Statement, ...]
    security_token: str | None = None
    expires: float | None = None  # epoch seconds, STS only
    session_policy: tuple[Statement, ...] | None = None

    def may(self, action: str) -> bool:
        return allowed(self.policy, action) and (self.session_policy is None or allowed(self.session_policy, action))


def _random(alphabet: str, length: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(length))


ALNUM = string.ascii_letters + string.digits


def user_key(name: str, policy: tuple[Statement, ...]) -> AccessKey:
    return AccessKey("LTAI5t" + _random(ALNUM, 18), _random(ALNUM, 30), f"user/{name}", policy)


def request_id() -> str:
    return str(uuid.uuid4()).upper()


def iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime(ISO)


# --- the instance's namespaces and repositories ------------------------------------------------------------------


@dataclass
class Namespace:
    name: str
    namespace_id: str
    auto_create_repo: bool = True
    default_repo_type: str = "PRIVATE"
    created_by: str = "console"


@dataclass
class Repository:
    namespace: str
    name: str
    repo_id: str
    repo_type: str = "PRIVATE"
    summary: str = ""
    created_by: str = "console"
    created: float = field(default_factory=time.time)


@dataclass
class Login:
    """A temporary registry login GetAuthorizationToken issued."""

    username: str
    password: str
    principal: str
    access_key_id: str
    policy: AccessKey
    expires: float
    instance: str = INSTANCE_ID  # the instance it was issued for: another's realm refuses it


NAME_COMPONENT = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")


# --- the world: every service's state and what it saw ------------------------------------------------------------


class AliyunWorld:
    def __init__(
        self,
        directory: Path,
        login_seconds: int,
        sts_seconds: int,
        slow_blobs: float,
        faults: Mapping[str, Sequence[str]] | None = None,
        manual_namespace: str | None = None,
    ) -> None:
        self.directory = directory
        self.login_seconds = login_seconds
        self.sts_seconds = sts_seconds
        self.slow_blobs = slow_blobs
        self.lock = threading.RLock()
        self.oidc_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        der = self.oidc_key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.kid = base64.urlsafe_b64encode(hashlib.sha256(der).digest()).decode().rstrip("=")[:43]
        self.keys: dict[str, AccessKey] = {}
        for key in (user_key("mirror-ci", FULL_ACR), user_key("no-acr", NO_ACR), user_key(NEVER_IN_ACR, FULL_ACR)):
            self.keys[key.key_id] = key
        self.with_permission, self.without_permission, self.never_in_acr = list(self.keys.values())
        self.namespaces: dict[str, Namespace] = {NAMESPACE: Namespace(NAMESPACE, "crn-" + _random(ALNUM, 16).lower())}
        if manual_namespace:  # automatic repository creation off: repositories only by hand or CreateRepository
            self.namespaces[manual_namespace] = Namespace(
                manual_namespace, "crn-" + _random(ALNUM, 16).lower(), auto_create_repo=False
            )
        # what each service answers its next requests with instead of its answer, in order: "sts", "openapi",
        # "metadata" (FAULT_KINDS)
        self.faults: dict[str, list[str]] = {service: list(kinds) for service, kinds in (faults or {}).items()}
        self.stopping = threading.Event()  # set when the world stops: ends stalled answers
        self.metadata_requests: list[dict[str, Any]] = []
        self.repositories: dict[str, Repository] = {}
        # each instance's namespaces and repositories: this world's instance's are the ones above
        self.instance_namespaces: dict[str, dict[str, Namespace]] = {
            INSTANCE_ID: self.namespaces,
            OTHER_INSTANCE_ID: {},
        }
        self.instance_repositories: dict[str, dict[str, Repository]] = {
            INSTANCE_ID: self.repositories,
            OTHER_INSTANCE_ID: {},
        }
        self.logins: dict[str, Login] = {}  # password -> login
        self.nonces: set[str] = set()
        self.secrets: dict[str, tuple[str, frozenset[tuple[str, str]]]] = {}  # value -> (kind, allowed places)
        self.sts_calls: list[dict[str, Any]] = []
        self.openapi_calls: list[dict[str, Any]] = []
        self.realm_logins: list[dict[str, Any]] = []
        self.registry_requests: list[dict[str, Any]] = []
        self.source_requests: list[dict[str, Any]] = []
        self.leaks: list[dict[str, Any]] = []
        for key in self.keys.values():
            self.remember_secret(key.secret, "access_key_secret")
        self.realm_tokens: RealmTokens | None = None
        self.granting: Login | None = None  # the login the realm is issuing a token for (under the lock)
        # a CI job's temporary keys (STS AssumeRole of mirror-acr), exported with their security token
        self.ci_sts_key = self.issue_sts_key(ROLES[ROLE_ARN], "ci-job", sts_seconds)

    def next_fault(self, service: str) -> str | None:
        """The fault the service's next request meets, if one is left."""
        with self.lock:
            queue = self.faults.get(service)
            fault = queue.pop(0) if queue else None
        return None if fault == "pass" else fault

    # -- secrets and where they may travel

    ALLOWED: Mapping[str, frozenset[tuple[str, str]]] = {
        "access_key_secret": frozenset(),
        "security_token": frozenset({("openapi", "header:x-acs-security-token"), ("openapi", "query:SecurityToken")}),
        "oidc_token": frozenset({("sts", "query:OIDCToken"), ("sts", "body:OIDCToken")}),
        "registry_password": frozenset({("realm", "header:authorization(basic)")}),
        "registry_token": frozenset({("registry", "header:authorization")}),
    }

    def remember_secret(self, value: str, kind: str) -> None:
        with self.lock:
            self.secrets[value] = (kind, self.ALLOWED[kind])

    def inspect(
        self, service: str, host: str, method: str, target: str, headers: email.message.Message, body: bytes = b""
    ) -> None:
        """Record every known secret this request carries somewhere it should not."""
        url = urlsplit(target)
        places: list[tuple[str, str]] = [("url:path", unquote(url.path))]
        places += [(f"query:{k}", v) for k, v in parse_qsl(url.query, keep_blank_values=True)]
        for key, value in headers.items():
            places.append((f"header:{key.lower()}", value))
            if key.lower() == "authorization" and value[:6].lower() == "basic ":
                with suppress(ValueError):
                    places.append(("header:authorization(basic)", base64.b64decode(value[6:]).decode(errors="replace")))
        if body:
            text = body.decode(errors="replace")
            if "x-www-form-urlencoded" in headers.get("Content-Type", ""):
                places += [(f"body:{k}", v) for k, v in parse_qsl(text, keep_blank_values=True)]
            else:
                places.append(("body", text))
        with self.lock:
            known = list(self.secrets.items())
        for value, (kind, allowed_places) in known:
            for where, text in places:
                if value in text and (service, where) not in allowed_places:
                    leak = {"kind": kind, "service": service, "host": host, "method": method, "where": where}
                    with self.lock:
                        self.leaks.append({**leak, "path": url.path})

    # -- the OIDC issuer

    def sign_service_account_token(self, subject: str = SUBJECT, lifetime: int = TOKEN_LIFE, age: int = 0) -> str:
        now = int(time.time()) - age
        namespace, _, account = subject.removeprefix("system:serviceaccount:").partition(":")
        claims = {
            "aud": [AUDIENCE],
            "exp": now + lifetime,
            "iat": now,
            "nbf": now,
            "iss": ISSUER,
            "sub": subject,
            "kubernetes.io": {
                "namespace": namespace,
                "pod": {"name": f"{account}-6d9f7c8b5-x2k4q", "uid": str(uuid.uuid4())},
                "serviceaccount": {"name": account, "uid": str(uuid.uuid4())},
            },
        }
        token = jwt.encode(claims, self.oidc_key, algorithm="RS256", headers={"kid": self.kid})
        self.remember_secret(token, "oidc_token")
        return token

    def write_tokens(self) -> None:
        """The service-account tokens under DIR/rrsa, each file replaced whole."""
        folder = self.directory / "rrsa"
        folder.mkdir(parents=True, exist_ok=True)
        for name, token in (
            ("token", self.sign_service_account_token()),
            ("expired-token", self.sign_service_account_token(lifetime=TOKEN_LIFE, age=TOKEN_LIFE + 120)),
            ("other-subject-token", self.sign_service_account_token(OTHER_SUBJECT)),
        ):
            part = folder / f".{name}.part"
            part.write_text(token, encoding="utf-8")
            os.replace(part, folder / name)

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.oidc_key.public_key()))
        return {"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}]}

    # -- STS

    def issue_sts_key(
        self, role: Role, session: str, lifetime: int, session_policy: tuple[Statement, ...] | None = None
    ) -> AccessKey:
        """Temporary keys of a role session, with their security token, as STS hands them out."""
        key = AccessKey(
            "STS." + _random(ALNUM, 25),
            _random(ALNUM, 44),
            f"assumed-role/{role.name}/{session}",
            role.policy,
            security_token="CAIS" + _random(ALNUM + "+/", 400),
            expires=math.floor(time.time()) + lifetime,  # Expiration has whole seconds: never later than promised
            session_policy=session_policy,
        )
        assert key.security_token is not None
        with self.lock:
            self.keys[key.key_id] = key
        self.remember_secret(key.secret, "access_key_secret")
        self.remember_secret(key.security_token, "security_token")
        return key

    def assume_role_with_oidc(self, host: str, params: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        rid = request_id()
        record: dict[str, Any] = {
            "host": host,
            "role": params.get("RoleArn"),
            "provider": params.get("OIDCProviderArn"),
        }
        record["session"] = params.get("RoleSessionName")

        def fail(status: int, code: str, message: str) -> tuple[int, dict[str, Any]]:
            with self.lock:
                self.sts_calls.append({**record, "outcome": code, "status": status})
            recommend = f"https://api.aliyun.com/troubleshoot?q={code}&product=Sts&requestId={rid}"
            return status, {"RequestId": rid, "HostId": host, "Code": code, "Message": message, "Recommend": recommend}

        if params.get("Action") != "AssumeRoleWithOIDC":
            return fail(404, "InvalidAction.NotFound", "Specified api is not found, please check your url and method.")
        if params.get("Version") != "2015-04-01":
            return fail(400, "InvalidVersion", "Specified parameter Version is not valid.")
        session = params.get("RoleSessionName", "")
        if not re.fullmatch(r"[A-Za-z0-9.@_-]{2,64}", session):
            return fail(400, "InvalidParameter.RoleSessionName", "The parameter RoleSessionName is wrongly formed.")
        try:
            duration = int(params.get("DurationSeconds", "3600"))
        except ValueError:
            duration = 0
        token = params.get("OIDCToken", "")
        provider = params.get("OIDCProviderArn", "")
        role_arn = params.get("RoleArn", "")
        if not token:
            return fail(401, "AuthenticationFail.OIDCToken.Invalid", "The OIDCToken can not empty.")
        if provider != PROVIDER_ARN:
            return fail(401, "AuthenticationFail.NoPermission", "No such OIDC Provider registered.")
        if token.count(".") != 2:
            return fail(
                401,
                "AuthenticationFail.OIDCToken.Invalid",
                "The number of Jwt field should be divided into 3 parts with '.' .",
            )
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            return fail(
                401, "AuthenticationFail.OIDCToken.Invalid", "Cannot decode base64 encoded response(format invalided)."
            )
        if header.get("alg") != "RS256":
            return fail(
                401,
                "AuthenticationFail.OIDCToken.Invalid",
                f"The algorithm {header.get('alg')} that be specified in Jwt header is unknown.",
            )
        if header.get("kid") != self.kid:
            return fail(
                401, "AuthenticationFail.OIDCToken.InvalidSignature", "OIDC token validate failed: invalid signature."
            )
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                self.oidc_key.public_key(),
                algorithms=["RS256"],
                options={"verify_exp": False, "verify_nbf": False, "verify_iat": False, "verify_aud": False},
            )
        except jwt.InvalidSignatureError:
            return fail(
                401, "AuthenticationFail.OIDCToken.InvalidSignature", "OIDC token validate failed: invalid signature."
            )
        except jwt.InvalidTokenError:
            return fail(
                401, "AuthenticationFail.OIDCToken.Invalid", "The Jwt content is invalid that cannot be recognized."
            )
        record["subject"] = claims.get("sub")
        now = time.time()
        if not isinstance(claims.get("exp"), int | float) or claims["exp"] <= now:
            return fail(401, "AuthenticationFail.OIDCToken.Expired", "This JsonWebToken is expired.")
        if claims.get("iss") != ISSUER:
            # not in STS's published table: the issuer check is documented, its code is this world's choice
            return fail(
                401,
                "AuthenticationFail.OIDCToken.Invalid",
                "The issuer of the OIDCToken does not match the OIDC provider.",
            )
        if not _claim_equals(claims.get("aud"), [AUDIENCE]):
            return fail(401, "AuthenticationFail.OIDCToken.AudienceNotMatch", "Invalid audience.")
        role = ROLES.get(role_arn)
        if not re.fullmatch(r"acs:ram::\d+:role/[\w.@-]+", role_arn):
            return fail(400, "InvalidParameter.RoleArn", "The parameter RoleArn is wrongly formed.")
        if role is None:
            return fail(404, "EntityNotExist.Role", "The role does not exist.")
        if not role.trusts(provider, claims):
            return fail(401, "AuthenticationFail.NoPermission", "There is no permission")
        if duration < 900 or duration > role.max_session:
            return fail(
                400,
                "InvalidParameter.DurationSeconds",
                f"The Min/Max value of DurationSeconds is 15min/{role.max_session}s.",
            )
        session_policy = None
        if params.get("Policy"):
            try:
                session_policy = _policy_from_document(params["Policy"])
            except (ValueError, KeyError, TypeError):
                return fail(400, "InvalidParameter.PolicyGrammar", "The parameter Policy has not passed grammar check.")
        lifetime = min(duration, self.sts_seconds)
        key = self.issue_sts_key(role, session, lifetime, session_policy)
        assert key.security_token is not None and key.expires is not None
        expires = key.expires
        with self.lock:
            self.sts_calls.append({**record, "outcome": "ok", "status": 200, "lifetime": lifetime})
        audience = claims.get("aud")
        return 200, {
            "RequestId": rid,
            "OIDCTokenInfo": {
                "Subject": claims.get("sub"),
                "Issuer": claims.get("iss"),
                "ClientIds": ",".join(audience) if isinstance(audience, list) else audience,
                "ExpirationTime": iso(float(claims["exp"])),
                "IssuanceTime": iso(float(claims.get("iat", now))),
                "VerificationInfo": "Success",
            },
            "AssumedRoleUser": {
                "AssumedRoleId": f"{role.role_id}:{session}",
                "Arn": f"acs:ram::{ACCOUNT_ID}:role/{role.name}/{session}",
            },
            "Credentials": {
                "SecurityToken": key.security_token,
                "Expiration": iso(expires),
                "AccessKeySecret": key.secret,
                "AccessKeyId": key.key_id,
            },
        }

    # -- the ACR OpenAPI

    def openapi(
        self, host: str, method: str, target: str, headers: email.message.Message, body: bytes
    ) -> tuple[int, dict[str, Any]]:
        rid = request_id()
        url = urlsplit(target)
        query = parse_qsl(url.query, keep_blank_values=True)
        params = dict(query)
        if "x-www-form-urlencoded" in headers.get("Content-Type", ""):
            params.update(parse_qsl(body.decode(errors="replace"), keep_blank_values=True))
        action = headers.get("x-acs-action") or params.get("Action", "")
        version = headers.get("x-acs-version") or params.get("Version", "")
        record: dict[str, Any] = {
            "host": host,
            "action": action,
            "version": version,
            "instance": params.get("InstanceId"),
            "principal": None,
            "access_key_id": None,
            "credential": None,
            "signature": None,
            "signature_verified": False,
            "credentials_provider": headers.get("x-acs-credentials-provider"),
        }

        def answer(status: int, code: str, message: str, **extra: Any) -> tuple[int, dict[str, Any]]:
            with self.lock:
                self.openapi_calls.append({**record, "outcome": code, "status": status})
            recommend = f"https://api.aliyun.com/troubleshoot?q={code}&product=cr&requestId={rid}"
            doc = {"RequestId": rid, "HostId": host, "Code": code, "Message": message, "Recommend": recommend}
            return status, {**doc, **extra}

        if url.path != "/":
            return answer(
                404, "InvalidAction.NotFound", "Specified api is not found, please check your url and method."
            )
        authorization = headers.get("Authorization", "")
        if authorization.startswith("ACS3-"):
            record["signature"], _, credential_text = authorization.partition(" ")
            fields: dict[str, str] = {}
            for part in credential_text.split(","):
                name, _, value = part.strip().partition("=")
                fields[name] = value
            key_id = fields.get("Credential", "")
        elif "Signature" in params and "AccessKeyId" in params:
            record["signature"] = params.get("SignatureMethod", "HMAC-SHA1")
            key_id = params["AccessKeyId"]
            fields = {}
        else:
            return answer(400, "IncompleteSignature", "The request signature does not conform to Aliyun standards.")
        record["access_key_id"] = key_id
        with self.lock:
            key = self.keys.get(key_id)
        if key is None:
            return answer(404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
        record["principal"] = key.principal
        record["credential"] = "sts" if key.security_token else "static"
        token = headers.get("x-acs-security-token") or params.get("SecurityToken")
        if key.security_token is None and token:
            return answer(
                400,
                "InvalidSecurityToken.MismatchWithAccessKey",
                "Specified SecurityToken mismatch with the AccessKey.",
            )
        if key.security_token is not None:
            if not token:
                return answer(400, "MissingSecurityToken", "SecurityToken is mandatory for this action.")
            if not hmac.compare_digest(token, key.security_token):
                return answer(
                    400,
                    "InvalidSecurityToken.MismatchWithAccessKey",
                    "Specified SecurityToken mismatch with the AccessKey.",
                )
            if key.expires is not None and time.time() >= key.expires:
                return answer(400, "InvalidSecurityToken.Expired", "Specified SecurityToken is expired.")
        if fields:
            problem, string_to_sign = self._check_v3(method, url.path, query, headers, body, fields, key.secret)
            nonce = headers.get("x-acs-signature-nonce", "")
            stamp = headers.get("x-acs-date", "")
        else:
            problem, string_to_sign = self._check_v2(method, params, key.secret)
            nonce, stamp = params.get("SignatureNonce", ""), params.get("Timestamp", "")
        if problem == "format":
            return answer(400, "IncompleteSignature", "The request signature does not conform to Aliyun standards.")
        if problem:
            return answer(
                400,
                "SignatureDoesNotMatch",
                f"Specified signature is not matched with our calculation. server string to sign is:{string_to_sign}",
            )
        record["signature_verified"] = True
        try:
            when = datetime.datetime.strptime(stamp, ISO).replace(tzinfo=datetime.UTC).timestamp()
        except ValueError:
            return answer(400, "InvalidTimeStamp.Format", "Specified time stamp or date value is not well formatted.")
        if abs(time.time() - when) > MAX_SKEW:
            return answer(400, "InvalidTimeStamp.Expired", "Specified time stamp or date value is expired.")
        with self.lock:
            if not nonce or nonce in self.nonces:
                used = True
            else:
                used = False
                self.nonces.add(nonce)
        if used:
            return answer(400, "SignatureNonceUsed", "Specified signature nonce was used already.")
        if version != "2018-12-01":
            return answer(400, "InvalidVersion", "Specified parameter Version is not valid.")
        handler = self.ACTIONS.get(action)
        if handler is None:
            return answer(
                404, "InvalidAction.NotFound", "Specified api is not found, please check your url and method."
            )
        if not key.may(f"cr:{action}"):
            detail = {
                "PolicyType": "AccountLevelIdentityBasedPolicy",
                "AuthPrincipalOwnerId": ACCOUNT_ID,
                "EncodedDiagnosticMessage": base64.b64encode(f"cr:{action} {key.principal}".encode()).decode(),
                "AuthPrincipalType": "SubUser" if key.principal.startswith("user/") else "AssumedRoleUser",
                "AuthPrincipalDisplayName": key.principal.split("/")[1],
                "NoPermissionType": "ImplicitDeny",
                "AuthAction": f"cr:{action}",
            }
            return answer(
                403,
                "Forbidden.RAM",
                "User not authorized to operate on the specified resource, or this API doesn't support RAM.",
                AccessDeniedDetail=detail,
            )
        status, doc = self._failure("USER_NOT_EXIST") if key is self.never_in_acr else handler(self, key, params)
        doc = {"RequestId": rid, **doc}
        with self.lock:
            self.openapi_calls.append({**record, "outcome": doc.get("Code", "success"), "status": status})
        return status, doc

    @staticmethod
    def _check_v3(
        method: str,
        path: str,
        query: list[tuple[str, str]],
        headers: email.message.Message,
        body: bytes,
        fields: Mapping[str, str],
        secret: str,
    ) -> tuple[str | None, str]:
        """ACS3-HMAC-SHA256 as Alibaba documents it: (None, string to sign) when it verifies, else the problem."""
        algorithm = headers.get("Authorization", "").partition(" ")[0]
        signed = [h for h in fields.get("SignedHeaders", "").split(";") if h]
        signature = fields.get("Signature", "")
        if algorithm != "ACS3-HMAC-SHA256" or not signed or not signature:
            return "format", ""
        payload_hash = headers.get("x-acs-content-sha256", "")
        present = {k.lower() for k in headers}
        must_sign = {"host", *(h for h in present if h.startswith("x-acs-")), *({"content-type"} & present)}
        canonical_query = "&".join(
            f"{quote(k, safe='~')}={quote(v, safe='~')}" for k, v in sorted(query, key=lambda item: item[0])
        )
        canonical_headers = "".join(
            f"{name}:{','.join(sorted(v.strip() for v in headers.get_all(name, [])))}\n" for name in signed
        )
        canonical = (
            f"{method}\n{path or '/'}\n{canonical_query}\n{canonical_headers}\n{';'.join(signed)}\n{payload_hash}"
        )
        string_to_sign = f"{algorithm}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        expected = hmac.new(secret.encode(), string_to_sign.encode(), hashlib.sha256).hexdigest()
        if not must_sign <= set(signed) or signed != sorted(signed):
            return "unsigned headers", string_to_sign
        if payload_hash != hashlib.sha256(body).hexdigest():
            return "payload hash", string_to_sign
        if not hmac.compare_digest(expected, signature):
            return "signature", string_to_sign
        return None, string_to_sign

    @staticmethod
    def _check_v2(method: str, params: Mapping[str, str], secret: str) -> tuple[str | None, str]:
        """The RPC HMAC-SHA1 signature (SignatureVersion 1.0) over every parameter but Signature."""
        if params.get("SignatureMethod", "HMAC-SHA1") != "HMAC-SHA1":
            return "format", ""
        canonical = "&".join(
            f"{quote(k, safe='~')}={quote(v, safe='~')}" for k, v in sorted(params.items()) if k != "Signature"
        )
        string_to_sign = f"{method}&%2F&{quote_plus(canonical, safe='~')}"
        expected = base64.b64encode(hmac.new(f"{secret}&".encode(), string_to_sign.encode(), hashlib.sha1).digest())
        if not hmac.compare_digest(expected.decode(), params.get("Signature", "")):
            return "signature", string_to_sign
        return None, string_to_sign

    # the actions, each (world, caller's key, parameters) -> (HTTP status, body without RequestId)

    @staticmethod
    def _failure(code: str) -> tuple[int, dict[str, Any]]:
        """ACR's own refusals come back as HTTP 200 with IsSuccess false (terraform-provider-alicloud's CR
        service reads `Code` from a successful answer: INSTANCE_NOT_EXIST, NAMESPACE_NOT_EXIST, REPO_NOT_EXIST)."""
        return 200, {"Code": code, "IsSuccess": False}

    def _instance(self, params: Mapping[str, str]) -> tuple[int, dict[str, Any]] | None:
        """None when the InstanceId names this world's instance, else the answer to give."""
        instance = params.get("InstanceId")
        if not instance:
            return 400, {"Code": "MissingInstanceId", "Message": "InstanceId is mandatory for this action."}
        if instance not in self.instance_namespaces:
            return self._failure("INSTANCE_NOT_EXIST")
        return None

    def get_authorization_token(self, key: AccessKey, params: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        if (refused := self._instance(params)) is not None:
            return refused
        now = time.time()
        lifetime = float(self.login_seconds)
        if params.get("ExpiresInHours", "").isdigit():
            lifetime = min(lifetime, int(params["ExpiresInHours"]) * 3600.0)
        expires = now + lifetime if key.expires is None else min(now + lifetime, key.expires)
        expire_ms = math.floor(expires * 1000)
        password = f"{_random(ALNUM, 24)}:{_random(ALNUM, 40)}"  # the documented form has a colon in it
        login = Login(TEMP_USERNAME, password, key.principal, key.key_id, key, expire_ms / 1000, params["InstanceId"])
        with self.lock:
            self.logins[password] = login
        self.remember_secret(password, "registry_password")
        return 200, {
            "Code": "success",
            "IsSuccess": True,
            "TempUsername": TEMP_USERNAME,
            "AuthorizationToken": password,
            "ExpireTime": expire_ms,
        }

    def get_instance(self, key: AccessKey, params: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        if (refused := self._instance(params)) is not None:
            return refused
        return 200, {"Code": "success", "IsSuccess": True, **self._instance_doc(params["InstanceId"])}

    def _instance_doc(self, instance: str = INSTANCE_ID) -> dict[str, Any]:
        return {
            "InstanceId": instance,
            "InstanceName": INSTANCE_NAME if instance == INSTANCE_ID else "mirror-other",
            "InstanceSpecification": "Enterprise_Basic",
            "InstanceStatus": "RUNNING",
            "InstanceIssue": "",
            "ResourceGroupId": "rg-acfmirrortest01",
            "CreateTime": 1700000000000,
            "ModifiedTime": 1700000000000,
        }

    def list_instance(self, key: AccessKey, params: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        instances = [{**self._instance_doc(instance), "RegionId": REGION} for instance in self.instance_namespaces]
        for instance in instances:
            instance["CreateTime"] = instance["ModifiedTime"] = str(instance["CreateTime"])
        return 200, {"Code": "success", "IsSuccess": True, "Instances": instances, "PageNo": 1, "PageSize": 30}

    def get_instance_endpoint(self, key: AccessKey, params: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        if (refused := self._instance(params)) is not None:
            return refused
        if params.get("ModuleName", "Registry") != "Registry" or params.get("EndpointType") != "internet":
            return 200, {"Code": "PARAM_INVALID", "IsSuccess": False}
        domains = [{"Domain": REGISTRY, "Type": "SYSTEM"}]
        return 200, {
            "Code": "success",
            "IsSuccess": True,
            "Enable": True,
            "Status": "RUNNING",
            "AclEnable": False,
            "AclEntries": [],
            "Domains": domains,
        }

    def _namespace_doc(self, namespace: Namespace, instance: str = INSTANCE_ID) -> dict[str, Any]:
        return {
            "InstanceId": instance,
            "NamespaceId": namespace.namespace_id,
            "NamespaceName": namespace.name,
            "NamespaceStatus": "NORMAL",
            "AutoCreateRepo": namespace.auto_create_repo,
            "DefaultRepoType": namespace.default_repo_type,
            "ResourceGroupId": "rg-acfmirrortest01",
        }

    def get_namespace(self, key: AccessKey, params: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        if (refused := self._instance(params)) is not None:
            return refused
        instance = params["InstanceId"]
        spaces = self.instance_namespaces[instance]
        with self.lock:
            found = spaces.get(params.get("NamespaceName", "")) or next(
                (n for n in spaces.values() if n.namespace_id == params.get("NamespaceId")), None
            )
        if found is None:
            return self._failure("NAMESPACE_NOT_EXIST")
        return 200, {"Code": "success", "IsSuccess": True, **self._namespace_doc(found, instance)}

    def list_namespace(self, key: AccessKey, params: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        if (refused := self._instance(params)) is not None:
            return refused
        instance = params["InstanceId"]
        with self.lock:
            names = [self._namespace_doc(n, instance) for n in self.instance_namespaces[instance].values()]
        if params.get("NamespaceName"):
            names = [n for n in names if n["NamespaceName"] == params["NamespaceName"]]
        page, size = int(params.get("PageNo", "1") or 1), int(params.get("PageSize", "30") or 30)
        return 200, {
            "Code": "success",
            "IsSuccess": True,
            "Namespaces": names[(page - 1) * size : page * size],
            "PageNo": page,
            "PageSize": size,
            "TotalCount": str(len(names)),
        }

    def create_namespace(self, key: AccessKey, params: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        if (refused := self._instance(params)) is not None:
            return refused
        name = params.get("NamespaceName", "")
        if not (2 <= len(name) <= 120 and NAME_COMPONENT.match(name)):
            return self._failure("PARAM_INVALID")
        repo_type = params.get("DefaultRepoType", "PRIVATE").upper()
        if repo_type not in ("PUBLIC", "PRIVATE"):
            return self._failure("PARAM_INVALID")
        spaces = self.instance_namespaces[params["InstanceId"]]
        with self.lock:
            if name in spaces:
                return self._failure("NAMESPACE_ALREADY_EXIST")
            auto = params.get("AutoCreateRepo", "true").lower() == "true"
            spaces[name] = Namespace(
                name, "crn-" + _random(ALNUM, 16).lower(), auto, repo_type, created_by=key.principal
            )
        return 200, {"Code": "success", "IsSuccess": True}

    def _repository_doc(self, repo: Repository, instance: str = INSTANCE_ID) -> dict[str, Any]:
        return {
            "InstanceId": instance,
            "RepoId": repo.repo_id,
            "RepoName": repo.name,
            "RepoNamespaceName": repo.namespace,
            "RepoType": repo.repo_type,
            "RepoStatus": "NORMAL",
            "RepoBuildType": "MANUAL",
            "Summary": repo.summary,
            "TagImmutability": False,
            "ResourceGroupId": "rg-acfmirrortest01",
            "CreateTime": int(repo.created * 1000),
            "ModifiedTime": int(repo.created * 1000),
        }

    def get_repository(self, key: AccessKey, params: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        if (refused := self._instance(params)) is not None:
            return refused
        instance = params["InstanceId"]
        repositories = self.instance_repositories[instance]
        with self.lock:
            repo = repositories.get(f"{params.get('RepoNamespaceName')}/{params.get('RepoName')}") or next(
                (r for r in repositories.values() if r.repo_id == params.get("RepoId")), None
            )
        if repo is None:
            return self._failure("REPO_NOT_EXIST")
        return 200, {"Code": "success", "IsSuccess": True, **self._repository_doc(repo, instance)}

    def list_repository(self, key: AccessKey, params: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        if (refused := self._instance(params)) is not None:
            return refused
        instance = params["InstanceId"]
        with self.lock:
            repos = [
                self._repository_doc(r, instance)
                for r in self.instance_repositories[instance].values()
                if params.get("RepoNamespaceName") in (None, "", r.namespace)
            ]
        page, size = int(params.get("PageNo", "1") or 1), int(params.get("PageSize", "30") or 30)
        return 200, {
            "Code": "success",
            "IsSuccess": True,
            "Repositories": repos[(page - 1) * size : page * size],
            "PageNo": page,
            "PageSize": size,
            "TotalCount": str(len(repos)),
        }

    def create_repository(self, key: AccessKey, params: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        if (refused := self._instance(params)) is not None:
            return refused
        namespace, name = params.get("RepoNamespaceName", ""), params.get("RepoName", "")
        repo_type = params.get("RepoType", "").upper()
        summary_ok = 0 < len(params.get("Summary", "")) <= 80  # required, as the API and its terraform resource have it
        if not NAME_COMPONENT.match(name) or repo_type not in ("PUBLIC", "PRIVATE") or not summary_ok:
            return self._failure("PARAM_INVALID")
        instance = params["InstanceId"]
        repositories = self.instance_repositories[instance]
        with self.lock:
            if namespace not in self.instance_namespaces[instance]:
                return self._failure("NAMESPACE_NOT_EXIST")
            if f"{namespace}/{name}" in repositories:
                return self._failure("REPO_ALREADY_EXIST")
            repo = Repository(
                namespace, name, "crr-" + _random(ALNUM, 16).lower(), repo_type, params.get("Summary", "")
            )
            repo.created_by = key.principal
            repositories[f"{namespace}/{name}"] = repo
        return 200, {"Code": "success", "IsSuccess": True, "RepoId": repo.repo_id}

    ACTIONS: Mapping[str, Callable[[AliyunWorld, AccessKey, Mapping[str, str]], tuple[int, dict[str, Any]]]] = {
        "GetAuthorizationToken": get_authorization_token,
        "GetInstance": get_instance,
        "ListInstance": list_instance,
        "GetInstanceEndpoint": get_instance_endpoint,
        "GetNamespace": get_namespace,
        "ListNamespace": list_namespace,
        "CreateNamespace": create_namespace,
        "GetRepository": get_repository,
        "ListRepository": list_repository,
        "CreateRepository": create_repository,
    }

    # -- the instance's token realm and registry

    def realm_login(self, host: str, headers: email.message.Message, query: list[tuple[str, str]]) -> tuple[int, Any]:
        """The realm's answer to one GET: a registry token for what the login's principal may do, or 401."""
        params = dict(query)
        scopes = sorted(s for k, v in query if k == "scope" for s in v.split())
        service = params.get("service", "")
        record: dict[str, Any] = {"host": host, "service": service, "scopes": scopes, "user": None, "principal": None}
        scheme, _, value = headers.get("Authorization", "").partition(" ")
        login: Login | None = None
        if not scheme:
            record["credential"] = "anonymous"
        elif scheme.lower() != "basic":
            record["credential"] = "unknown"
        else:
            try:
                user, _, password = base64.b64decode(value).decode().partition(":")
            except ValueError:
                user, password = "", ""
            record["user"] = user
            with self.lock:
                found = self.logins.get(password)
            if found is None or found.username != user or found.instance != INSTANCE_ID:
                record["credential"] = "unknown"  # another instance's login is refused as a wrong password
            elif time.time() >= found.expires:
                record["credential"] = "expired"
                record["principal"] = found.principal
            else:
                record["credential"] = "valid"
                record["principal"] = found.principal
                login = found
        refused = {"errors": [{"code": "UNAUTHORIZED", "message": "authentication required", "detail": None}]}
        if record["credential"] in ("unknown", "expired"):
            with self.lock:
                self.realm_logins.append({**record, "granted": [], "status": 401})
            return 401, refused
        if service != SERVICE:
            with self.lock:
                self.realm_logins.append({**record, "granted": [], "status": 400})
            return 400, {"errors": [{"code": "UNSUPPORTED", "message": f"unknown service {service}", "detail": None}]}
        assert self.realm_tokens is not None
        with self.lock:  # one issue at a time: `granting` is the login the grants are for
            self.granting = login
            try:
                answer = self.realm_tokens.issue(login.principal if login else None, service, scopes, "GET")
            finally:
                self.granting = None
            granted = self.realm_tokens.requests[-1].granted
        self.remember_secret(answer["token"], "registry_token")
        with self.lock:
            self.realm_logins.append({**record, "granted": [f"{n}:{','.join(a)}" for n, a in granted], "status": 200})
        return 200, answer

    def grant(self, principal: str | None, scope: str) -> tuple[str, tuple[str, ...]] | None:
        """What a registry token may do for one scope: nothing anonymously (every namespace is private), pull and
        push as the login's RAM principal may, and only in repositories `<namespace>/<name>` whose namespace
        exists."""
        kind, _, rest = scope.partition(":")
        name, _, actions = rest.rpartition(":")
        if kind != "repository" or not name:
            return None
        wanted = [a for a in actions.split(",") if a]
        namespace, _, repo = name.partition("/")
        with self.lock:
            login = self.granting
            exists = namespace in self.namespaces and bool(repo) and "/" not in repo
        if principal is None or login is None or not exists:
            return name, ()
        may = {"pull": "cr:PullRepository", "push": "cr:PushRepository"}
        return name, tuple(a for a in wanted if a in may and login.policy.may(may[a]))

    def write_refusal(self, method: str, path: str, authorization: str) -> tuple[str, str] | None:
        """(repository, why) an authenticated write into the instance is refused (403 DENIED), or None to let it
        through."""
        if method not in ("POST", "PUT", "PATCH", "DELETE") or not authorization.lower().startswith("bearer "):
            return None
        match = re.match(r"^/v2/(?P<name>.+?)/(?:blobs|manifests|tags)/", path)
        if match is None:
            return None
        namespace, _, repo = match["name"].partition("/")
        with self.lock:
            space = self.namespaces.get(namespace)
            known = match["name"] in self.repositories
        if not repo or "/" in repo:
            return match["name"], f"repository names here are <namespace>/<repository>, not {match['name']}"
        if space is None:
            return match["name"], f"namespace {namespace} does not exist in instance {INSTANCE_ID}"
        if not known and not space.auto_create_repo:
            why = f"repository {match['name']} does not exist and namespace {namespace} does not create repositories"
            return match["name"], why
        return None

    def note_push(self, method: str, path: str, status: int) -> None:
        """A manifest that landed in a repository that did not exist yet: the namespace created it."""
        match = re.match(r"^/v2/(?P<ns>[^/]+)/(?P<repo>[^/]+)/manifests/", path)
        if method != "PUT" or status != 201 or match is None:
            return
        with self.lock:
            space = self.namespaces.get(match["ns"])
            if space is not None and f"{match['ns']}/{match['repo']}" not in self.repositories:
                repo = Repository(match["ns"], match["repo"], "crr-" + _random(ALNUM, 16).lower())
                repo.repo_type, repo.created_by = space.default_repo_type, "push"
                self.repositories[f"{match['ns']}/{match['repo']}"] = repo

    # -- the record

    def summary(self) -> dict[str, Any]:
        with self.lock:
            return {
                "sts_calls": list(self.sts_calls),
                "openapi_calls": list(self.openapi_calls),
                "realm_logins": list(self.realm_logins),
                "registry_requests": list(self.registry_requests),
                "source_requests": list(self.source_requests),
                "metadata_requests": list(self.metadata_requests),
                "logins_issued": [
                    {"principal": login.principal, "access_key_id": login.access_key_id, "expires": login.expires}
                    for login in self.logins.values()
                ],
                "namespaces": {name: asdict(space) for name, space in self.namespaces.items()},
                "other_instance_namespaces": {
                    name: asdict(space) for name, space in self.instance_namespaces[OTHER_INSTANCE_ID].items()
                },
                "repositories": {name: asdict(repo) for name, repo in self.repositories.items()},
                "leaks": list(self.leaks),
                "secrets_issued": sorted(self.secrets),
            }


@dataclass
class RealmTokens(TokenServer):
    """The instance's realm keys and JWTs (tests/tokenserver.py), with grants decided by the world."""

    decide: Callable[[str | None, str], tuple[str, tuple[str, ...]] | None] | None = None

    def grant(self, user: str | None, scope: str) -> tuple[str, tuple[str, ...]] | None:
        return self.decide(user, scope) if self.decide is not None else super().grant(user, scope)


# --- HTTP handlers ------------------------------------------------------------------------------------------------


class JsonHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def host(self) -> str:
        return self.headers.get("Host", "").partition(":")[0].lower()

    def read_body(self) -> bytes:
        return b"".join(request_body(self))

    def reply(self, status: int, doc: Any, extra: Sequence[tuple[str, str]] = ()) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json;charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for key, value in extra:
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def fault(self, kind: str, stopping: threading.Event) -> None:
        """Answer as a service in trouble does instead of answering (FAULT_KINDS)."""
        kind, _, wait = kind.partition(":")
        rid = request_id()
        problems = {
            "503": ("ServiceUnavailable", "The request has failed due to a temporary failure of the server."),
            "500": ("InternalError", "The request processing has failed due to some unknown error."),
            "throttling": ("Throttling.User", "Request was denied due to user flow control."),
        }
        if kind in problems:
            code, message = problems[kind]
            status = 400 if kind == "throttling" else int(kind)
            doc = {"RequestId": rid, "HostId": self.host(), "Code": code, "Message": message}
            # the gateway's wait, in milliseconds, which the SDK reads as its Retry-After
            self.reply(status, doc, [("x-acs-request-id", rid)] + ([("x-acs-retry-after", wait)] if wait else []))
            return
        if kind == "502-html":  # the load balancer in front, not the service: its own page
            page = b"<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center>"
            page += b"<hr><center>Tengine</center></body></html>"
            self.send_response(502)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return
        if kind == "stall":  # an answer that never comes: the client's timeout ends it
            stopping.wait(STALL_SECONDS)
        self.close_connection = True  # "drop": the connection closed with the request unanswered


def fault_status(kind: str) -> int | None:
    """The HTTP status a fault answers with; None where no answer comes."""
    name = kind.partition(":")[0]
    return {"503": 503, "500": 500, "throttling": 400, "502-html": 502}.get(name)


def sts_handler(world: AliyunWorld) -> type[http.server.BaseHTTPRequestHandler]:
    class Sts(JsonHandler):
        def _answer(self) -> None:
            body = self.read_body()
            world.inspect("sts", self.host(), self.command, self.path, self.headers, body)
            if (fault := world.next_fault("sts")) is not None:
                with world.lock:  # recorded first: a stalled answer ends only when the world stops
                    world.sts_calls.append(
                        {"host": self.host(), "outcome": f"fault:{fault}", "status": fault_status(fault)}
                    )
                self.fault(fault, world.stopping)
                return
            params = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
            if "x-www-form-urlencoded" in self.headers.get("Content-Type", ""):
                params.update(parse_qsl(body.decode(errors="replace"), keep_blank_values=True))
            status, doc = world.assume_role_with_oidc(self.host(), params)
            self.reply(status, doc, [("x-acs-request-id", doc["RequestId"])])

        do_GET = do_POST = _answer

    return Sts


def openapi_handler(world: AliyunWorld) -> type[http.server.BaseHTTPRequestHandler]:
    class OpenApi(JsonHandler):
        def _answer(self) -> None:
            body = self.read_body()
            world.inspect("openapi", self.host(), self.command, self.path, self.headers, body)
            fault = world.next_fault("openapi")
            if fault in ACTING_FAULTS:  # done at ACR, the answer lost on its way back
                with world.lock:  # held throughout: the last call recorded is this one
                    world.openapi(self.host(), self.command, self.path, self.headers, body)
                    world.openapi_calls[-1]["outcome"] = f"fault:{fault}"
                self.close_connection = True
                return
            if fault is not None:
                record = {
                    "host": self.host(),
                    "action": self.headers.get("x-acs-action"),
                    "status": fault_status(fault),
                }
                with world.lock:  # recorded first: a stalled answer ends only when the world stops
                    world.openapi_calls.append({**record, "outcome": f"fault:{fault}"})
                self.fault(fault, world.stopping)
                return
            status, doc = world.openapi(self.host(), self.command, self.path, self.headers, body)
            self.reply(status, doc, [("x-acs-request-id", doc["RequestId"])])

        do_GET = do_POST = _answer

    return OpenApi


def realm_handler(world: AliyunWorld) -> type[http.server.BaseHTTPRequestHandler]:
    class Realm(JsonHandler):
        def do_GET(self) -> None:
            world.inspect("realm", self.host(), self.command, self.path, self.headers)
            url = urlsplit(self.path)
            if url.path != "/auth":
                self.reply(404, {"errors": [{"code": "NOT_FOUND", "message": "not found", "detail": None}]})
                return
            status, doc = world.realm_login(self.host(), self.headers, parse_qsl(url.query, keep_blank_values=True))
            self.reply(status, doc)

        def do_POST(self) -> None:
            body = self.read_body()
            world.inspect("realm", self.host(), self.command, self.path, self.headers, body)
            self.reply(405, {"errors": [{"code": "UNSUPPORTED", "message": "use GET", "detail": None}]})

    return Realm


def oidc_handler(world: AliyunWorld) -> type[http.server.BaseHTTPRequestHandler]:
    """The cluster's OIDC issuer as ACK publishes it on OSS: discovery document and JWKS."""

    class Issuer(JsonHandler):
        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == f"/{CLUSTER_ID}/.well-known/openid-configuration":
                self.reply(
                    200,
                    {
                        "issuer": ISSUER,
                        "jwks_uri": f"{ISSUER}/keys.json",
                        "response_types_supported": ["id_token"],
                        "subject_types_supported": ["public"],
                        "id_token_signing_alg_values_supported": ["RS256"],
                    },
                )
            elif path == f"/{CLUSTER_ID}/keys.json":
                self.reply(200, world.jwks())
            else:
                self.reply(404, {"Code": "NoSuchKey", "Message": "The specified key does not exist."})

    return Issuer


def metadata_handler(world: AliyunWorld) -> type[http.server.BaseHTTPRequestHandler]:
    """ECS's metadata service at 100.100.100.200 (plain HTTP), as the credentials library's `ecs_ram_role` asks it:
    an IMDSv2 token (`PUT /latest/api/token`), the instance's RAM role name, then that role's STS keys."""
    credentials_path = "/latest/meta-data/ram/security-credentials/"

    class Metadata(JsonHandler):
        def _answer(self) -> None:
            self.read_body()
            path = urlsplit(self.path).path
            record: dict[str, Any] = {"method": self.command, "path": path}
            record["token"] = bool(self.headers.get("X-aliyun-ecs-metadata-token"))
            if (fault := world.next_fault("metadata")) is not None:
                with world.lock:  # recorded first: a stalled answer ends only when the world stops
                    world.metadata_requests.append(
                        {**record, "outcome": f"fault:{fault}", "status": fault_status(fault)}
                    )
                self.fault(fault, world.stopping)
                return
            status, text = self._metadata(path)
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if text.startswith("{") else "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            with world.lock:
                world.metadata_requests.append(
                    {**record, "outcome": "ok" if status == 200 else "error", "status": status}
                )

        def _metadata(self, path: str) -> tuple[int, str]:
            if self.command == "PUT" and path == "/latest/api/token":
                if not self.headers.get("X-aliyun-ecs-metadata-token-ttl-seconds", "").isdigit():
                    return 400, "missing X-aliyun-ecs-metadata-token-ttl-seconds"
                return 200, "AQAEA" + _random(ALNUM, 52)
            if self.command != "GET":
                return 405, "method not allowed"
            if path == credentials_path:
                return 200, ECS_ROLE
            if path != credentials_path + ECS_ROLE:
                return 404, "not found"
            role = ROLES[f"acs:ram::{ACCOUNT_ID}:role/{ECS_ROLE}"]
            key = world.issue_sts_key(role, ECS_INSTANCE, min(6 * 3600, world.sts_seconds))
            assert key.expires is not None
            document = {
                "AccessKeyId": key.key_id,
                "AccessKeySecret": key.secret,
                "Expiration": iso(key.expires),
                "SecurityToken": key.security_token,
                "LastUpdated": iso(time.time()),
                "Code": "Success",
            }
            return 200, json.dumps(document)

        do_GET = do_PUT = _answer

    return Metadata


def registry_handler(world: AliyunWorld, registry: LocalRegistry) -> type[http.server.BaseHTTPRequestHandler]:
    """The instance's registry names: writes into missing namespaces refused, everything else relayed to the
    `docker-registry` with the name the client used (its challenges name the VPC realm on the VPC name)."""

    class Front(JsonHandler):
        def _relay(self) -> None:
            host = self.host() if self.host() in (REGISTRY, REGISTRY_VPC) else REGISTRY
            path = urlsplit(self.path).path
            authorization = self.headers.get("Authorization", "")
            world.inspect("registry", host, self.command, self.path, self.headers)
            entry: dict[str, Any] = {"host": host, "method": self.command, "path": path}
            entry["authorization"] = authorization.partition(" ")[0] or None
            refusal = world.write_refusal(self.command, path, authorization)
            if refusal is not None:
                for _ in request_body(self):
                    pass
                name, why = refusal
                detail = [{"Type": "repository", "Name": name, "Action": "push", "Reason": why}]
                error = {"code": "DENIED", "message": "requested access to the resource is denied", "detail": detail}
                self.reply(403, {"errors": [error]}, [("Docker-Distribution-Api-Version", "registry/2.0")])
                with world.lock:
                    world.registry_requests.append({**entry, "status": 403, "denied": why})
                return

            def rewrite(key: str, value: str) -> str:
                if key.lower() == "www-authenticate" and host == REGISTRY_VPC:
                    return value.replace(REALM, REALM_VPC)
                return value

            upstream = http.client.HTTPConnection(registry.address, registry.port, timeout=300)
            try:
                status = forward(self, upstream, self.path, host, rewrite_header=rewrite)
            except Exception:
                self.close_connection = True
                raise
            finally:
                upstream.close()
            world.note_push(self.command, path, status)
            with world.lock:
                world.registry_requests.append({**entry, "status": status, "denied": None})

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _relay

    return Front


def source_handler(world: AliyunWorld, registry: LocalRegistry) -> type[http.server.BaseHTTPRequestHandler]:
    """The source registry's front on 127.0.0.20:5000: blob GETs spread over --slow-blobs seconds."""
    name = f"{SOURCE_ADDRESS[0]}:{SOURCE_ADDRESS[1]}"

    class Source(JsonHandler):
        def _relay(self) -> None:
            path = urlsplit(self.path).path
            world.inspect("source", name, self.command, self.path, self.headers)
            slow = self.command == "GET" and re.search(r"/blobs/sha256:[0-9a-f]{64}$", path) is not None
            started = time.monotonic()
            upstream = http.client.HTTPConnection(registry.address, registry.port, timeout=300)
            try:
                status = forward(self, upstream, self.path, name, proto="http", pace=world.slow_blobs if slow else 0)
            except Exception:
                self.close_connection = True
                raise
            finally:
                upstream.close()
            seconds = round(time.monotonic() - started, 3)
            with world.lock:
                world.source_requests.append(
                    {"method": self.command, "path": path, "status": status, "seconds": seconds}
                )

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _relay

    return Source


# --- start-up -----------------------------------------------------------------------------------------------------


async def seed_source(registry: LocalRegistry) -> dict[str, Any]:
    """The sample image at the source, pushed straight to its `docker-registry` (the front's log starts empty)."""
    client = RegistryClient.open(registry.host, ClientOptions(plain_http=True))
    try:
        image = await push_multiarch(client, *SOURCE_IMAGE, layer_sizes=(MiB, MiB, MiB), seed=21)
    finally:
        await client.aclose()
    return {
        "repository": image.repository,
        "tag": image.tag,
        "digest": image.digest,
        "media_type": image.media_type,
        "manifests": len(image.manifests),
        "blobs": len(image.blobs),
        "blob_bytes": image.blob_bytes,
    }


def rotate_tokens(world: AliyunWorld, stop: threading.Event) -> None:
    while not stop.wait(TOKEN_ROTATION):
        world.write_tokens()


def _fault_list(text: str, service: str) -> list[str]:
    """`503,throttling:1500,drop` as a list, each kind checked (`lost` at the OpenAPI only)."""
    kinds = [kind.strip() for kind in text.split(",") if kind.strip()]
    for kind in kinds:
        name, _, wait = kind.partition(":")
        if name not in FAULT_KINDS or (wait and not (name == "throttling" and wait.isdigit())):
            raise SystemExit(f"unknown fault {kind!r}: one of {', '.join(FAULT_KINDS)}, or throttling:<ms>")
        if name in ACTING_FAULTS and service != "openapi":
            raise SystemExit(f"fault {kind!r} is the OpenAPI's only")
    return kinds


def write_json(path: Path, doc: Any) -> None:
    part = path.with_name(f".{path.name}.part")
    part.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    os.replace(part, path)


def main(arguments: argparse.Namespace) -> None:
    directory: Path = arguments.directory
    login_seconds: int = arguments.login_seconds
    directory.mkdir(parents=True, exist_ok=True)
    isolate_names(directory, HOSTS)
    # the metadata service's address, on this namespace's loopback: the SDKs' ECS step never leaves the machine
    subprocess.run(["ip", "addr", "add", f"{METADATA_ADDRESS[0]}/32", "dev", "lo"], check=True)
    ca, cert, key = make_certificates(directory, HOSTS)
    os.environ["SSL_CERT_FILE"] = str(ca)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    faults = {
        service: _fault_list(getattr(arguments, f"{service}_faults"), service)
        for service in ("sts", "openapi", "metadata")
    }
    world = AliyunWorld(
        directory, login_seconds, arguments.sts_seconds, arguments.slow_blobs, faults, arguments.manual_namespace
    )
    world.write_tokens()
    stop = world.stopping
    with ExitStack() as stack:
        # the registry's bearer tokens last no longer than a short login (so a long copy asks the realm again)
        tokens = RealmTokens(directory / "realm", public_url=REALM, decide=world.grant, ttl=min(300, login_seconds))
        world.realm_tokens = tokens
        instance = start_registry(directory / "instance", auth=tokens.registry_auth(SERVICE))
        stack.callback(instance.stop)
        source = start_registry(directory / "source")
        stack.callback(source.stop)
        servers = [
            (sts_handler(world), STS_HOSTS[0]),
            (openapi_handler(world), CR_HOSTS[0]),
            (realm_handler(world), REALM_HOST),
            (oidc_handler(world), OIDC_HOST),
        ]
        if arguments.registry == "up":
            servers.append((registry_handler(world, instance), REGISTRY))
        for handler, address in servers:
            stack.enter_context(http_server(handler, (HOSTS[address], 443), context))
        stack.enter_context(http_server(source_handler(world, source), SOURCE_ADDRESS))
        stack.enter_context(http_server(metadata_handler(world), METADATA_ADDRESS))
        image = asyncio.run(seed_source(source))
        rotation = threading.Thread(target=rotate_tokens, args=(world, stop), daemon=True)
        rotation.start()
        env = {
            "ALIBABA_CLOUD_ROLE_ARN": ROLE_ARN,
            "ALIBABA_CLOUD_OIDC_PROVIDER_ARN": PROVIDER_ARN,
            "ALIBABA_CLOUD_OIDC_TOKEN_FILE": str(directory / "rrsa" / "token"),
            "ALIBABA_CLOUD_STS_ENDPOINT": STS_HOSTS[2],  # ACK's webhook sets it; the credentials library ignores it
            "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true",
            "ALIBABA_CLOUD_CLI_PROFILE_DISABLED": "true",
            "SSL_CERT_FILE": str(ca),
            "REQUESTS_CA_BUNDLE": str(ca),
        }
        access_keys = {
            label: {"access_key_id": k.key_id, "access_key_secret": k.secret, "user": k.principal.split("/")[1]}
            for label, k in (
                ("with_permission", world.with_permission),
                ("without_permission", world.without_permission),
                ("never_in_acr", world.never_in_acr),
                ("sts", world.ci_sts_key),
            )
        }
        access_keys["sts"]["security_token"] = str(world.ci_sts_key.security_token)
        ready = {
            "pid": os.getpid(),
            "ca": str(ca),
            "region": REGION,
            "account_id": ACCOUNT_ID,
            "cluster_id": CLUSTER_ID,
            "role_arn": ROLE_ARN,
            "untrusted_role_arn": UNTRUSTED_ROLE_ARN,
            "oidc_provider_arn": PROVIDER_ARN,
            "oidc_issuer": ISSUER,
            "oidc_subject": SUBJECT,
            "token_file": str(directory / "rrsa" / "token"),
            "expired_token_file": str(directory / "rrsa" / "expired-token"),
            "other_subject_token_file": str(directory / "rrsa" / "other-subject-token"),
            "access_keys": access_keys,
            "instance_id": INSTANCE_ID,
            "other_instance_id": OTHER_INSTANCE_ID,
            "registry": REGISTRY,
            "registry_vpc": REGISTRY_VPC,
            "realm": REALM,
            "service": SERVICE,
            "namespace": NAMESPACE,
            "manual_namespace": arguments.manual_namespace,
            "ecs_role": ECS_ROLE,
            "temp_username": TEMP_USERNAME,
            "sts_endpoints": list(STS_HOSTS),
            "cr_endpoints": list(CR_HOSTS),
            "source": {"host": f"{SOURCE_ADDRESS[0]}:{SOURCE_ADDRESS[1]}", "plain_http": True, **image},
            "login_seconds": login_seconds,
            "sts_seconds": arguments.sts_seconds,
            "slow_blobs": arguments.slow_blobs,
            "env": env,
        }
        signal.signal(signal.SIGUSR1, lambda *_: write_json(directory / "summary.json", world.summary()))
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, lambda *_: stop.set())
        write_json(directory / "ready.json", ready)
        stop.wait()
        write_json(directory / "summary.json", world.summary())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="STS, the ACR OpenAPI and an Enterprise instance at their names.")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--login-seconds", type=int, default=3600, help="life of a GetAuthorizationToken login")
    parser.add_argument("--sts-seconds", type=int, default=3600, help="upper bound of STS credentials' life")
    parser.add_argument("--slow-blobs", type=float, default=0.0, help="seconds each source blob GET takes")
    for service in ("sts", "openapi", "metadata"):
        parser.add_argument(f"--{service}-faults", default="", help=f"what {service}'s first requests meet, in order")
    parser.add_argument("--manual-namespace", help="a namespace whose automatic repository creation is off")
    parser.add_argument(
        "--registry", choices=("up", "down"), default="up", help="down: nothing answers at the registry's names"
    )
    main(parser.parse_args())
