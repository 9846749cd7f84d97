"""`mirror serve` and what reaches it or leaves it: the job API, the CI webhooks, and the on-call channel's
messages."""

# No `from __future__ import annotations` in a module of models: pydantic would compile each field's annotation
# from its string at import, a tenth of the config's import time.
import re
from pathlib import Path
from typing import Literal, Self
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from mirror.settings.fields import EnvName, PlainName, Section
from mirror.settings.inputs import (
    MIN_SECRET_BYTES,
    inline_or_file,
    secret_bytes,
    secret_from,
    strong_secrets,
    usable_secret,
)

NotifyEvent = Literal["mirrored", "failed", "drift"]
NOTIFY_EVENTS: tuple[NotifyEvent, ...] = ("mirrored", "failed", "drift")


class NotifyChannelSettings(Section):
    """One place the people on call hear from. The webhook URL holds the robot's token, so it is a secret too:
    it comes from an environment variable or a file, as does the signing secret (DingTalk, Feishu/Lark, and the
    generic webhook's HMAC-SHA256 key)."""

    name: PlainName
    kind: Literal["dingtalk", "feishu", "wecom", "slack", "webhook"]
    url_env: EnvName | None = None
    url_file: Path | None = None
    secret_env: EnvName | None = None
    secret_file: Path | None = None
    events: tuple[NotifyEvent, ...] = NOTIFY_EVENTS

    @model_validator(mode="after")
    def _readable(self) -> Self:
        if problem := url_problem(self.url()):
            raise ValueError(f"url: {problem}")
        signed = self.kind in ("dingtalk", "feishu", "webhook")
        if signed:
            secret = self.secret()
            if self.kind == "webhook" and len(secret.encode()) < MIN_SECRET_BYTES:
                raise ValueError(f"secret: must be at least {MIN_SECRET_BYTES} bytes")
        elif self.secret_env or self.secret_file:
            raise ValueError(f"secret: {self.kind} robots are not signed; give none")
        return self

    def url(self) -> str:
        return secret_from("url", self.url_env, self.url_file)

    def secret(self) -> str:
        return secret_from("secret", self.secret_env, self.secret_file)


def url_problem(url: str) -> str | None:
    """Why `url` cannot be posted to, in words that do not repeat it (it holds the robot's token), or None."""
    if not re.match(r"^https?://[^\s/]+", url):
        return "expected an http(s) URL"
    if re.search(r"[\s\x00-\x1f\x7f]", url):
        return "holds a space, a line break or a control character (one URL alone in the variable or file)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- read for its check: a port past 65535 raises
        (parts.hostname or "").encode("idna")
    except (ValueError, UnicodeError) as exc:
        return f"expected an http(s) URL ({type(exc).__name__}: its host or port is not one)"
    return None


class NotifySettings(Section):
    """Messages to the on-call channel: a release newly mirrored to a target, a failure, drift. Never for a run
    that changed nothing; never failing or holding up the run they report."""

    channels: list[NotifyChannelSettings] = []
    timeout: float = Field(default=10.0, gt=0, le=120)  # one post
    attempts: int = Field(default=3, ge=1, le=10)  # a post that fails to connect or gets a 5xx/429 is sent again
    deadline: float = Field(default=30.0, gt=0, le=600)  # every post of a run together
    public_url: str | None = None  # where people reach `mirror serve`: messages link to the job on the status page

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+", value):
            raise ValueError("expected an http(s) URL")
        return value.rstrip("/") if value else value

    @field_validator("channels")
    @classmethod
    def _unique(cls, value: list[NotifyChannelSettings]) -> list[NotifyChannelSettings]:
        names = [c.name for c in value]
        if len(set(names)) != len(names):
            raise ValueError("two channels with one name")
        return value


class WebhookSettings(Section):
    secret: SecretStr | None = None  # HMAC-SHA256 key for X-Hub-Signature-256
    secret_file: Path | None = None
    dockerhub_token: SecretStr | None = None  # the <token> in POST /hooks/dockerhub/<token>
    dockerhub_token_file: Path | None = None  # or in a file: a mounted Secret, kept out of the ConfigMap
    max_body: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)

    _strong = strong_secrets("secret", "dockerhub_token")
    _one_secret = inline_or_file("webhook secret", "secret")
    _one_dockerhub_token = inline_or_file("dockerhub token", "dockerhub_token")

    def secret_value(self) -> bytes | None:
        """Read again for each delivery (a mounted Secret's file changes in place): a placeholder or a short key
        put there since load is refused as no key at all."""
        return usable_secret(_label("webhook.secret", self.secret_file), secret_bytes(self.secret, self.secret_file))

    def dockerhub_token_value(self) -> bytes | None:
        value = secret_bytes(self.dockerhub_token, self.dockerhub_token_file)
        return usable_secret(_label("webhook.dockerhub_token", self.dockerhub_token_file), value)


class ServiceSettings(Section):
    """`mirror serve`: who may read the job API, how jobs are leased among replicas, how many may wait."""

    api_token: SecretStr | None = None  # bearer token for /jobs; without one the job API answers 401
    api_token_file: Path | None = None
    lease_seconds: float = Field(default=60.0, ge=1.0, le=3600.0)  # a running job's lease, renewed at 1/3
    poll_seconds: float = Field(default=1.0, gt=0, le=60.0)  # how often an idle replica looks for work
    # a job whose lease ran out this many times (its replica died running it: out of memory on a huge layer,
    # say) is not run again: it ends failed, naming the replica that last held it and when
    max_attempts: int = Field(default=3, ge=1, le=100)
    # the HTTP server's doors: a request's headers and its body must arrive within these, an idle keep-alive
    # connection is closed after keepalive_seconds, and connections past max_connections are answered 503
    header_seconds: float = Field(default=10.0, gt=0, le=300.0)
    body_seconds: float = Field(default=30.0, gt=0, le=600.0)
    keepalive_seconds: float = Field(default=5.0, gt=0, le=300.0)
    max_connections: int = Field(default=100, ge=1, le=10000)
    # the most jobs the webhooks leave queued: past it a webhook is answered 503 and queues nothing, so whoever
    # holds the Docker Hub token cannot queue every version the filter allows (each failing, each notified)
    max_queued_jobs: int = Field(default=20, ge=1, le=10000)
    # finished jobs (succeeded or failed) are deleted, with their deliveries, once finished this many days ago or
    # once this many newer jobs are kept; never a job waiting, queued or running, nor each release's newest success
    keep_jobs_days: float = Field(default=30.0, gt=0, le=36500.0)
    keep_jobs: int = Field(default=1000, ge=10, le=10_000_000)
    # the status page's session cookie is Secure: when the request came over https (auto: uvicorn believes a
    # proxy's X-Forwarded-Proto only from loopback), always (behind an ingress that terminates TLS), or never
    secure_cookie: Literal["auto", "always", "never"] = "auto"
    # touched every few seconds while the service runs: a liveness probe reads its age (deploy/base)
    heartbeat_file: Path | None = None
    # /metrics, /healthz and /readyz on this port only, and nothing else there: for Prometheus and the kubelet,
    # off the public port an Ingress sends webhooks and people to (metrics name targets, images, the pull budget)
    internal_port: int | None = Field(default=None, ge=1, le=65535)

    _strong = strong_secrets("api_token")
    _one_token = inline_or_file("service api token", "api_token")

    def api_token_value(self) -> bytes | None:
        value = secret_bytes(self.api_token, self.api_token_file)
        return usable_secret(_label("service.api_token", self.api_token_file), value)


def _label(key: str, path: Path | None) -> str:
    """The setting a secret came from, for a message: its file's key and path, or the inline key."""
    return f"{key}_file: {path}" if path is not None else key
