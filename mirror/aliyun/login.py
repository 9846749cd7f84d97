"""A temporary ACR login from a RAM identity, through the official SDKs: `alibabacloud-credentials` finds the
identity (RRSA's OIDC token exchanged at STS, an AccessKey pair, the CLI's profile, an ECS instance's RAM role;
`default` picks one by what the environment holds, in the library's order, and keeps to it), and ACR's OpenAPI
(`alibabacloud-cr20181201`, GetAuthorizationToken) turns it into a registry username and password that last an
hour, or as long as the STS credentials behind them. The registry's token realm then takes them as it takes a
stored password; `registry/auth.py` asks again before they lapse.

The SDKs are synchronous: each call runs in a worker thread, under the configured timeout (the SDKs' own read and
connect timeouts too, STS's and the ECS metadata service's included). The SDKs do not retry, and the login runs above
mirror's RetryTransport: a passing failure (the network, a timeout, a 5xx, throttling) is tried again here under
the login's retry policy and said as unavailable; a refusal is said at once, as an authentication failure. They are
imported only when a registry is configured this way. Nothing here puts a secret into a message or a repr.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import re
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mirror.acr import instance_of
from mirror.errors import Kind
from mirror.registry.credentials import CredentialError, Credentials
from mirror.registry.retry import RetryPolicy, retry_step

T = TypeVar("T")
MAX_MESSAGE = 300
RRSA_VARIABLES = ("ALIBABA_CLOUD_ROLE_ARN", "ALIBABA_CLOUD_OIDC_PROVIDER_ARN", "ALIBABA_CLOUD_OIDC_TOKEN_FILE")
ACCESS_KEY_VARIABLES = ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET")
SECURITY_TOKEN_VARIABLE = "ALIBABA_CLOUD_SECURITY_TOKEN"  # noqa: S105 - a variable name: exported with STS keys
# four tries, at most 3.5 s of backoff between them, a wait the service asks for honoured within two minutes
LOGIN_RETRY = RetryPolicy(attempts=4, base_delay=0.5, max_delay=8.0, max_elapsed=120.0)
# the status the credentials library quotes in its errors (STS: "http_code: 503", ECS metadata: "HttpCode=503"),
# and the code of an answer it quotes whole
_QUOTED_STATUS = re.compile(r"(?:http_code: |HttpCode=)(\d{3})")
_QUOTED_CODE = re.compile(r'"Code"\s*:\s*"([^"]+)"')
# what an SDK's error text may carry of a request: the STS query (OIDCToken=<a JWT>, SecurityToken, Signature) in the
# URL a connection error quotes, credentials in an answer it quotes, a JWT anywhere
_QUERY = re.compile(r"\?[^\s'\"()<>]*=[^\s'\"()<>]*")
_CREDENTIAL = re.compile(
    r"(?i)\b([\w-]*(?:token|secret|signature|password)[\w-]*)([\"']?\s*[:=]\s*[\"']?)[^\s\"'&,;()<>{}\[\]]+"
)
_JWT = re.compile(r"\beyJ[\w-]*\.[\w-]*\.[\w-]*")
# ACR's codes that need a step of their own, each said with it
ACR_REFUSALS = {
    "USER_NOT_EXIST": "ACR has no user for this RAM identity yet: open the Container Registry console once as it "
    "(a RAM user or role that never has gets this), then run again",
    "INSTANCE_NOT_EXIST": "no such ACR Enterprise instance in {region}: check registries.{host}.aliyun.instance_id "
    "and region",
}


class LoginError(CredentialError):
    """The RAM identity could not be had, or ACR refused it a login; one line, with the service's code. A refusal
    is an authentication failure (the kind's default); a passing failure is `Kind.UNAVAILABLE`."""

    def __init__(
        self, message: str, code: str | None = None, kind: Kind | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.code = code  # the service's error code, exactly as it answered, when it gave one
        if kind is not None:
            self.kind = kind
        self.retry_after = retry_after  # seconds the service asked to wait before the next try

    def tried(self, attempts: int) -> LoginError:
        """The same failure, saying how many tries it took."""
        return LoginError(f"{self} ({attempts} tries)", self.code, self.kind, self.retry_after)


@dataclass(frozen=True, slots=True)
class LoginOptions:
    """Plain values for one ACR host (built from `registries.<host>.aliyun`)."""

    host: str
    region: str
    credentials: str = "default"  # default | oidc_role_arn | access_key | ecs_ram_role
    instance_id: str | None = None
    endpoint: str | None = None  # default: cr.<region>.aliyuncs.com
    timeout: float = 30.0  # seconds, each OpenAPI, STS and ECS metadata call
    retry: RetryPolicy = LOGIN_RETRY  # for passing failures; a run gives its config's `retry:`

    @property
    def timeout_ms(self) -> int:
        return int(self.timeout * 1000)

    @property
    def openapi_endpoint(self) -> str:
        return self.endpoint or f"cr.{self.region}.aliyuncs.com"


def default_identity(environ: dict[str, str] | os._Environ[str]) -> str | None:
    """The identity `credentials: default` stands for, in the official chain's order: the AccessKey variables,
    else RRSA's three; None for the rest of the chain (CLI profile, credentials file, ECS RAM role, credentials
    URI). Chosen by what the environment holds, never by which call answers: the library's chain moves on past
    any failure, so one 503 at STS would log in as the node's ECS role instead."""
    if all(environ.get(name) for name in ACCESS_KEY_VARIABLES):
        return "access_key"
    if all(environ.get(name) for name in RRSA_VARIABLES):
        return "oidc_role_arn"
    return None


def credential_problem(choice: str, environ: dict[str, str] | os._Environ[str]) -> str | None:
    """Why the chosen identity cannot be found in this environment, or None. Checked when the config loads,
    without a network call: the ECS RAM role is the one source only a call can prove."""
    access_key = all(environ.get(name) for name in ACCESS_KEY_VARIABLES)
    rrsa = all(environ.get(name) for name in RRSA_VARIABLES)
    token_file = environ.get("ALIBABA_CLOUD_OIDC_TOKEN_FILE", "")
    if rrsa and not os.path.isfile(token_file):
        return f"ALIBABA_CLOUD_OIDC_TOKEN_FILE names {token_file}, which is not a file (is RRSA's webhook on?)"
    metadata = environ.get("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "").lower() != "true"
    profile = environ.get("ALIBABA_CLOUD_CLI_PROFILE_DISABLED", "").lower() != "true" and os.path.isfile(
        os.path.expanduser("~/.aliyun/config.json")
    )
    found = {
        "access_key": access_key,
        "oidc_role_arn": rrsa,
        "ecs_ram_role": metadata,
        "default": access_key or rrsa or profile or metadata,
    }[choice]
    if found:
        return None
    wanted = {
        "access_key": " and ".join(ACCESS_KEY_VARIABLES),
        "oidc_role_arn": ", ".join(RRSA_VARIABLES) + " (RRSA injects them)",
        "ecs_ram_role": "the ECS metadata service, which ALIBABA_CLOUD_ECS_METADATA_DISABLED turns off",
        "default": "an AccessKey pair, RRSA's variables, an aliyun CLI profile or an ECS RAM role",
    }[choice]
    return f"no {choice} credential found: needs {wanted}"


@dataclass
class AcrLogin:
    """The temporary login of one ACR host; called by the registry's auth flow with the challenge's service,
    which names an Enterprise instance when the config does not."""

    options: LoginOptions
    _client: Any = field(default=None, repr=False)  # the ACR client: it holds the credentials client (STS cache)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    _chain: RestOfChain | None = field(default=None, repr=False)  # `default` past AccessKeys and RRSA
    _default_choice: str | None = field(default=None, repr=False)  # what `default` resolved to, when it has
    instance: str | None = None  # the Enterprise instance, once a login named it
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, repr=False)  # between tries

    async def __call__(self, service: str | None) -> Credentials:
        instance = self.instance_for(service)
        async with self._lock:  # one login at a time for the host: concurrent requests wait for it
            body = await self.call(lambda: self._get_token(instance))
            self.instance = instance
        if not getattr(body, "is_success", True) or not body.temp_username or not body.authorization_token:
            raise self.refused("GetAuthorizationToken", instance, body.code)
        expires = int(body.expire_time or 0) / 1000 or None
        return Credentials(
            str(body.temp_username),
            str(body.authorization_token),
            origin=f"ACR GetAuthorizationToken ({self.identity_used()})",
            expires_at=expires,
            issued_at=time.time(),
        )

    def instance_for(self, service: str | None) -> str:
        """The Enterprise instance to log in to: the configured one, the one the registry's challenge names, and
        never the first when the second contradicts it (a pasted id of the account's other instance)."""
        configured, challenged = self.options.instance_id, instance_of(service)
        setting = f"registries.{self.options.host}.aliyun.instance_id"
        if configured and challenged and configured != challenged:
            raise LoginError(
                f"ACR login for {self.options.host}: the registry's token challenge names instance {challenged}, "
                f"but {setting} is {configured}: correct it (or remove it: the challenge names the instance)"
            )
        instance = configured or challenged
        if instance is None:
            raise LoginError(
                f"ACR login for {self.options.host}: no Enterprise instance id (the registry's challenge names "
                f"none, service {service!r}); set {setting}"
            )
        return instance

    def identity_used(self) -> str:
        """The identity the login stands on, for messages: `default` says which one it resolved to."""
        choice = self.options.credentials
        if choice != "default":
            return f"{choice} identity"
        return f"default identity: {self._resolved or 'not resolved yet'}"

    def refused(self, action: str, instance: str, code: object) -> LoginError:
        """ACR's refusal of `action` (an answer whose IsSuccess is false, or an error) as one line naming its code."""
        text = str(code) if code else "no code"
        hint = ACR_REFUSALS.get(text, "").format(region=self.options.region, host=self.options.host)
        said = f"{action} on {instance} answered {text}" + (f": {hint}" if hint else "")
        return LoginError(f"ACR {self.options.host}: {said}", code=str(code) if code else None)

    def client(self) -> Any:
        """The ACR OpenAPI client (created once, in a worker thread: the SDK reads files and the environment)."""
        if self._client is None:
            from alibabacloud_cr20181201.client import Client
            from alibabacloud_tea_openapi.utils_models import Config

            config = Config(
                credential=self._identity(),
                endpoint=self.options.openapi_endpoint,
                region_id=self.options.region,
                protocol="https",
                read_timeout=self.options.timeout_ms,
                connect_timeout=self.options.timeout_ms,
                ca=ca_bundle(),
            )
            self._client = Client(config)
            quiet_sdk_logs()
        return self._client

    @property
    def _resolved(self) -> str | None:
        return self._chain.used if self._chain is not None else self._default_choice

    def _identity(self) -> Any:
        """The credentials client of the configured identity; `default` resolved first (`default_identity`), each
        identity then built as when it is configured by name."""
        from alibabacloud_credentials.client import Client

        choice, milliseconds = self.options.credentials, self.options.timeout_ms
        if choice == "default":
            resolved = default_identity(os.environ)
            if resolved is None:
                self._chain = RestOfChain(rest_of_chain(milliseconds))
                return Client(provider=self._chain)
            choice = self._default_choice = resolved
        if choice == "oidc_role_arn":
            return Client(oidc_role_arn_config(milliseconds))
        if choice == "access_key":
            return Client(access_key_config())
        return Client(provider=ecs_ram_role_provider(milliseconds))

    def _get_token(self, instance: str) -> Any:
        from alibabacloud_cr20181201 import models

        return self.client().get_authorization_token(models.GetAuthorizationTokenRequest(instance_id=instance)).body

    async def call(self, call: Callable[[], T]) -> T:
        """One SDK call in a worker thread, bounded; tried again after a passing failure under the login's retry
        policy (a wait the service asked for honoured, or the call given up when it is past the policy's time);
        its exceptions as one line."""
        tries = 0

        async def attempt(number: int) -> T:
            nonlocal tries
            tries = number
            return await self._attempt(call)

        def passing(exc: Exception) -> bool:
            return isinstance(exc, LoginError) and exc.transient

        try:
            return await retry_step(
                self.options.retry, attempt, passing, f"ACR login for {self.options.host}", self.sleep
            )
        except LoginError as exc:
            raise (exc if tries == 1 else exc.tried(tries)) from None

    async def _attempt(self, call: Callable[[], T]) -> T:
        try:
            return await asyncio.wait_for(asyncio.to_thread(call), self.options.timeout * 2)
        except TimeoutError:
            raise LoginError(
                f"ACR OpenAPI {self.options.openapi_endpoint}: no answer in time", kind=Kind.UNAVAILABLE
            ) from None
        except LoginError:
            raise
        except Exception as exc:  # the SDKs raise their own families (Tea, Dara, credentials)
            raise self.sdk_failure(exc) from None

    def sdk_failure(self, exc: Exception) -> LoginError:
        """An SDK's exception as a LoginError: unavailable when it is passing, else a refusal."""
        code = getattr(exc, "code", None)
        said = f"ACR login for {self.options.host}: {describe(exc)}"
        if untrusted_certificate(exc):
            return LoginError(f"ACR login for {self.options.host}: {UNTRUSTED_CERTIFICATE}")
        if _words_in_chain(exc, _SOCKS_UNSPOKEN):
            return LoginError(f"ACR login for {self.options.host}: {SOCKS_UNSPOKEN}")
        if not passing_failure(exc):
            return LoginError(said, str(code) if code else None)
        retry_after = throttled_for(exc)
        if retry_after is not None:
            said += f" (asked to wait {retry_after:g} s)"
        return LoginError(said, str(code) if code else None, kind=Kind.UNAVAILABLE, retry_after=retry_after)


def ca_bundle() -> str | None:
    """The CA file the environment names (`REQUESTS_CA_BUNDLE`, else `SSL_CERT_FILE`), for the OpenAPI client: the
    SDK's core sends through a proxy with requests' own bundle (certifi) unless told, so a TLS-intercepting proxy's
    CA in those variables went unread exactly where it is needed."""
    return os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("SSL_CERT_FILE") or None


def access_key_config() -> Any:
    """An AccessKey pair from the environment: a RAM user's, or temporary STS keys with their security token (a CI
    job's), which every call must carry."""
    from alibabacloud_credentials.models import Config

    key_id, secret = (os.environ.get(name) for name in ACCESS_KEY_VARIABLES)
    token = os.environ.get(SECURITY_TOKEN_VARIABLE)
    if token:
        return Config(type="sts", access_key_id=key_id, access_key_secret=secret, security_token=token)
    return Config(type="access_key", access_key_id=key_id, access_key_secret=secret)


UNTRUSTED_CERTIFICATE = (
    "TLS certificate verify failed: the SDK does not trust the certificate its host presented (behind a "
    "TLS-intercepting proxy, its CA goes in SSL_CERT_FILE and REQUESTS_CA_BUNDLE)"
)
_CERTIFICATE_FAILED = re.compile(r"CERTIFICATE_VERIFY_FAILED|certificate verify failed", re.IGNORECASE)


SOCKS_UNSPOKEN = (
    "the Alibaba Cloud SDKs cannot speak to the SOCKS proxy in HTTPS_PROXY: install PySocks (the aliyun extra "
    "brings it) or give an http:// proxy"
)
_SOCKS_UNSPOKEN = re.compile(r"Missing dependencies for SOCKS support")  # requests' words without PySocks


def untrusted_certificate(exc: BaseException) -> bool:
    """Whether the failure is a host's TLS certificate the SDK could not verify: the same a moment later, so not
    a passing failure, though the SDKs raise it as their network error (RetryError) with the words only in its
    text or in the exceptions it was raised from."""
    verification = _chained(exc, ssl.SSLCertVerificationError)
    return verification is not None or _words_in_chain(exc, _CERTIFICATE_FAILED)


def _words_in_chain(exc: BaseException, words: re.Pattern[str]) -> bool:
    """Whether `words` are in the text of `exc` or of the exceptions it wraps or was raised from: the SDKs raise
    their network error (RetryError) with the cause's words only in its text."""
    return any(words.search(str(seen)) for seen in _chain(exc))


def _chained(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    return next((seen for seen in _chain(exc) if isinstance(seen, kind)), None)


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and what it wraps or was raised from, at most ten deep: the SDK's wrapper, its network error,
    requests', urllib3's, ssl's."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        inner = getattr(seen, "inner_exception", None)
        seen = inner if isinstance(inner, BaseException) else seen.__cause__ or seen.__context__
    return chain


def passing_failure(exc: BaseException) -> bool:
    """Would the same call likely work a moment later: the network or a timeout (the SDKs' RetryError), a 5xx, a
    429, throttling, an answer that is not the service's JSON (a gateway's error page)? A refusal would not."""
    from alibabacloud_tea_openapi.exceptions import ServerException, ThrottlingException
    from darabonba.exceptions import RetryError as DaraRetryError
    from Tea.exceptions import RetryError as TeaRetryError

    inner = getattr(exc, "inner_exception", None)  # what the SDK's UnretryableException wraps
    if isinstance(inner, BaseException):
        return passing_failure(inner)
    sdk = (ServerException, ThrottlingException, DaraRetryError, TeaRetryError)  # RetryError: the network, a timeout
    if isinstance(exc, (*sdk, ConnectionError, TimeoutError, json.JSONDecodeError)):
        return True
    if isinstance(exc, RuntimeError) and isinstance(exc.__context__, ValueError):  # the SDK's "not JSON" error
        return True
    code, status = _code_and_status(exc)
    return code.startswith("Throttling") or status == 429 or (status is not None and status >= 500)


def _code_and_status(exc: BaseException) -> tuple[str, int | None]:
    """The service's code and HTTP status: the SDK's attributes, or what the credentials library quotes."""
    code = str(getattr(exc, "code", None) or "")
    status = getattr(exc, "status_code", None)
    text = str(getattr(exc, "message", None) or exc)
    if not code and (quoted_code := _QUOTED_CODE.search(text)):
        code = quoted_code[1]
    if status is None and (quoted_status := _QUOTED_STATUS.search(text)):
        status = int(quoted_status[1])
    return code, status if isinstance(status, int) else None


def throttled_for(exc: BaseException) -> float | None:
    """Seconds the service asked to wait (`x-acs-retry-after`, in milliseconds, read by the SDK), or None."""
    milliseconds = getattr(exc, "retry_after", None)
    return milliseconds / 1000 if isinstance(milliseconds, int | float) and milliseconds > 0 else None


def quiet_sdk_logs() -> None:
    """Silence the SDKs' own stderr handlers. The credentials library logs each failed refresh, traceback and all
    (the failure reaches the caller as an exception, said once, in one line); the Tea and Dara cores print every
    request's headers, the STS security token among them, when the environment holds `DEBUG=sdk`. Their modules
    add those handlers when first imported, so they are imported here first."""
    for module in ("Tea.core", "darabonba.core"):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    for name in ("credentials", "alibabacloud-tea", "darabonba-core"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.setLevel(logging.CRITICAL)


def oidc_role_arn_config(milliseconds: int) -> Any:
    """RRSA's identity: the variables ACK's webhook injects, exchanged at ALIBABA_CLOUD_STS_ENDPOINT when that is
    set (the webhook sets the VPC one; the library never reads it), with the login's timeout."""
    from alibabacloud_credentials.models import Config

    return Config(
        type="oidc_role_arn",
        role_arn=os.environ.get("ALIBABA_CLOUD_ROLE_ARN"),
        oidc_provider_arn=os.environ.get("ALIBABA_CLOUD_OIDC_PROVIDER_ARN"),
        oidc_token_file_path=os.environ.get("ALIBABA_CLOUD_OIDC_TOKEN_FILE"),
        role_session_name="mirror",
        sts_endpoint=os.environ.get("ALIBABA_CLOUD_STS_ENDPOINT") or None,
        timeout=milliseconds,
        connect_timeout=milliseconds,
    )


def ecs_ram_role_provider(milliseconds: int) -> Any:
    """The ECS instance's RAM role from the metadata service, with the login's timeouts and no refresh thread: by
    default the library's provider starts a scheduler thread that never stops, and `mirror serve` makes a login
    per job. Without it, credentials past their time are fetched again when next asked for."""
    from alibabacloud_credentials.http import HttpOptions
    from alibabacloud_credentials.provider import EcsRamRoleCredentialsProvider

    timeouts = HttpOptions(connect_timeout=milliseconds, read_timeout=milliseconds)
    return EcsRamRoleCredentialsProvider(http_options=timeouts, async_update_enabled=False)


def rest_of_chain(milliseconds: int) -> list[tuple[str, Any]]:
    """The official default chain past AccessKeys and RRSA, in its order, each step named: the CLI's profile, the
    credentials file, the ECS RAM role (unless ALIBABA_CLOUD_ECS_METADATA_DISABLED), a credentials URI (when
    ALIBABA_CLOUD_CREDENTIALS_URI is set), the last two with the login's timeouts."""
    from alibabacloud_credentials.http import HttpOptions
    from alibabacloud_credentials.provider import (
        CLIProfileCredentialsProvider,
        ProfileCredentialsProvider,
        URLCredentialsProvider,
    )
    from alibabacloud_credentials.utils import auth_util  # the switches as the library read them, at its import

    steps: list[tuple[str, Any]] = [
        ("cli_profile", CLIProfileCredentialsProvider()),
        ("credentials_file", ProfileCredentialsProvider()),
    ]
    if auth_util.environment_ecs_metadata_disabled.lower() != "true":
        steps.append(("ecs_ram_role", ecs_ram_role_provider(milliseconds)))
    if auth_util.environment_credentials_uri:
        timeouts = HttpOptions(connect_timeout=milliseconds, read_timeout=milliseconds)
        steps.append(("credentials_uri", URLCredentialsProvider(http_options=timeouts)))
    return steps


class RestOfChain:
    """The rest of the default chain as a credentials provider: the first step that gives credentials is kept (as
    the library keeps it) and named (`used`), for the login's messages."""

    def __init__(self, steps: list[tuple[str, Any]]) -> None:
        self.steps = steps
        self.used: str | None = None
        self._chosen: Any = None

    def get_credentials(self) -> Any:
        if self._chosen is not None:
            return self._chosen.get_credentials()
        failures = []
        for name, step in self.steps:
            try:
                credentials = step.get_credentials()
            except Exception as exc:  # this step has no identity here: the next one is asked, as the library does
                failures.append(f"{name}: {exc}")
                continue
            self._chosen, self.used = step, name
            return credentials
        from alibabacloud_credentials.exceptions import CredentialException

        raise CredentialException(
            "no identity for credentials: default (no AccessKey variables, no RRSA variables; "
            + "; ".join(failures)
            + ")"
        )

    async def get_credentials_async(self) -> Any:
        return await asyncio.to_thread(self.get_credentials)

    def get_provider_name(self) -> str:
        return "default"


def scrubbed(text: str) -> str:
    """Someone's error text with what a request carries taken out, whatever its length: a URL's query string, any
    `token=`/`secret=`/`signature=`-like value, a JWT."""
    text = _QUERY.sub("?<query removed>", text)
    text = _CREDENTIAL.sub(lambda found: f"{found[1]}{found[2]}<removed>", text)
    return _JWT.sub("<token removed>", text)


def describe(exc: BaseException) -> str:
    """An SDK exception as one line: its code and message, never its request (which carries signatures), cut only
    after anything secret is taken out. The SDK's UnretryableException is said as the failure it wraps."""
    inner = getattr(exc, "inner_exception", None)
    if isinstance(inner, BaseException):
        return describe(inner)
    code = getattr(exc, "code", None)
    message = getattr(exc, "message", None) or str(exc)
    text = scrubbed(" ".join(str(message).split()))[:MAX_MESSAGE]
    denied = getattr(exc, "access_denied_detail", None) or getattr(exc, "accessDeniedDetail", None)
    action = denied.get("AuthAction") if isinstance(denied, dict) else None
    text += f" (the RAM policy lacks {action})" if action else ""
    return f"{code}: {text}" if code else f"{type(exc).__name__}: {text}"
