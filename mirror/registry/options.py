"""How to talk to one registry host, as plain values: the wire knows nothing of the application's settings.
`mirror.engine.clients` builds these from the config."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from mirror.registry.credentials import Credentials
from mirror.registry.proxy import DIRECT, ProxyRules
from mirror.registry.retry import RetryPolicy, StatusObserver

# A temporary login, asked for when the registry first challenges and again before it lapses; it is given the
# challenge's `service` (ACR Enterprise names its instance there).
TemporaryLogin = Callable[[str | None], Awaitable[Credentials]]


@dataclass(frozen=True, slots=True)
class PullBudgetOptions:
    """Docker Hub's pull budget: manifest GETs pause when `ratelimit-remaining` reaches `floor`."""

    floor: int = 0
    max_wait: float = 0.0
    poll_interval: float = 60.0


@dataclass(frozen=True, slots=True)
class ClientOptions:
    plain_http: bool = False
    http2: bool = False  # offered in TLS's ALPN; HTTP/1.1 where the host does not take it
    max_connections: int = 32
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    deadline: float = 300.0  # a whole request, retries and bodies included (deadline.py)
    min_rate: int = 64 * 1024  # bytes per second a body is given on top of the deadline
    chunk_size: int = 1024 * 1024  # read buffer for blob bodies
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    pull_budget: PullBudgetOptions = field(default_factory=PullBudgetOptions)
    username: str | None = None
    password: Callable[[], str | None] | None = field(default=None, repr=False)  # read when first needed
    login_origin: str = "config"  # where the username and password are set, for a refusal's message
    docker_config: Path | None = None  # a docker config.json; default: $DOCKER_CONFIG, ~/.docker
    anonymous: bool = False  # ignore every credential source: see what a node without credentials sees
    login: TemporaryLogin | None = field(default=None, repr=False)  # instead of a stored password
    on_retry_status: StatusObserver | None = field(default=None, repr=False)  # told each retryable status
    proxies: ProxyRules = DIRECT  # HTTPS_PROXY and the like: which origins are reached through which proxy
