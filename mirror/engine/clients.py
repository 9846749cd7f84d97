"""One registry client per host for a whole run: discovery, the charts and every copy share its connections
and its token cache, so a scope's token is fetched once per run, not once per step. A host that is both a
source and one of the targets has a second client, with a connection pool of its own, for the blobs read from
it (`reader`). A run may be given an observer of the registries' retryable answers (the service counts 429s
with it); the CLI gives none."""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import TYPE_CHECKING

from mirror.engine.tasks import asked_again_if_failed
from mirror.oci import Descriptor
from mirror.reference import api_host
from mirror.registry import RegistryClient
from mirror.registry.options import ClientOptions, PullBudgetOptions, TemporaryLogin
from mirror.registry.proxy import ProxyRules, environment_proxies
from mirror.registry.retry import RetryPolicy, StatusObserver
from mirror.settings import MirrorSettings, RetrySettings

if TYPE_CHECKING:
    from mirror.chart.source import IndexMemo

log = logging.getLogger("mirror")


def retry_policy(retry: RetrySettings) -> RetryPolicy:
    return RetryPolicy(retry.attempts, retry.base_delay, retry.max_delay, retry.max_elapsed)


def acr_login(settings: MirrorSettings, host: str) -> TemporaryLogin | None:
    """The temporary login of an ACR host configured with `aliyun:` (the SDKs imported only then)."""
    login = settings.registry(host).aliyun
    if login is None:
        return None
    from mirror.acr import region_of
    from mirror.aliyun.login import AcrLogin, LoginOptions

    region = login.region or region_of(host) or ""
    retry = retry_policy(settings.retry)  # the run's, as for the registry's own requests
    return AcrLogin(
        LoginOptions(host, region, login.credentials, login.instance_id, login.endpoint, login.timeout, retry)
    )


def client_options(
    settings: MirrorSettings,
    host: str,
    anonymous: bool = False,
    login: TemporaryLogin | None = None,
    on_retry_status: StatusObserver | None = None,
    proxies: ProxyRules | None = None,
) -> ClientOptions:
    """The config's word on one registry host, as the wire's plain options (`login`: the run's own, shared;
    `on_retry_status`: told each retryable status the host answers; `proxies`: the run's, else the
    environment's)."""
    registry, transfer, budget = settings.registry(host), settings.transfer, settings.pull_budget
    return ClientOptions(
        plain_http=registry.plain_http,
        http2=registry.http2,
        max_connections=registry.max_connections,
        connect_timeout=transfer.connect_timeout,
        read_timeout=transfer.read_timeout,
        deadline=transfer.deadline,
        min_rate=transfer.min_rate,
        chunk_size=transfer.chunk_size,
        retry=retry_policy(settings.retry),
        pull_budget=PullBudgetOptions(budget.floor, budget.max_wait, budget.poll_interval),
        username=registry.username,
        password=registry.password_value,
        login_origin=registry.login_origin(host),
        docker_config=settings.docker_config,
        anonymous=anonymous,
        login=None if anonymous else (login or acr_login(settings, host)),
        on_retry_status=on_retry_status,
        proxies=proxies if proxies is not None else environment_proxies(),
    )


def open_client(
    settings: MirrorSettings, host: str, anonymous: bool = False, on_retry_status: StatusObserver | None = None
) -> RegistryClient:
    return RegistryClient.open(host, client_options(settings, host, anonymous, on_retry_status=on_retry_status))


class Clients:
    def __init__(self, settings: MirrorSettings, on_retry_status: StatusObserver | None = None) -> None:
        self.settings = settings
        self.on_retry_status = on_retry_status  # for every client of the run, anonymous ones included
        self._open: dict[str, RegistryClient] = {}
        self._readers: dict[str, RegistryClient] = {}  # blob reads from a host that is also a target
        self._written = frozenset(api_host(target.registry) for target in settings.targets)
        self._logins: dict[str, TemporaryLogin | None] = {}
        self._tags: dict[tuple[str, str, str], asyncio.Future[Descriptor | None]] = {}
        self._repositories: dict[tuple[str, str], asyncio.Future[bool]] = {}
        self.proxies = environment_proxies()  # a variable mirror cannot use stops the run here, before any request
        self.chart_indexes: IndexMemo = {}  # each classic chart repository's index, read once a run

    def __getitem__(self, host: str) -> RegistryClient:
        host = api_host(host)
        client = self._open.get(host)
        if client is None:
            client = self._open[host] = self._opened(host)
        return client

    def reader(self, host: str) -> RegistryClient:
        """The client that streams blobs out of `host` as a source. A transfer holds its source GET open while its
        PUT or PATCH waits for a connection: in one pool, the GETs could take every place and no upload would ever
        get one. So a host that is also a target reads blobs through a client of its own (its own pool of
        `max_connections`, the same login): a transfer then always takes its read's place before its write's,
        never the other way round, and no set of transfers can wait on each other in a ring."""
        host = api_host(host)
        if host not in self._written:
            return self[host]
        client = self._readers.get(host)
        if client is None:
            connections = self.settings.registry(host).max_connections
            log.info(
                "%s is a source and a target: blobs read from it get a connection pool of their own "
                "(max_connections %d for reads, %d for everything else)",
                host,
                connections,
                connections,
            )
            client = self._readers[host] = self._opened(host)
        return client

    def _opened(self, host: str) -> RegistryClient:
        login, observer = self.login(host), self.on_retry_status
        options = client_options(self.settings, host, login=login, on_retry_status=observer, proxies=self.proxies)
        return RegistryClient.open(host, options)

    async def head_tag(self, host: str, repository: str, identifier: str) -> Descriptor | None:
        """A manifest `HEAD` at the source, asked once per run: where the chart's tag check asked it, the copy
        takes its answer (a registry is never asked the same thing twice in a run). One that failed for a passing
        reason (`tasks.memoised`), or was cancelled, is asked again by the next caller."""
        key = (api_host(host), repository, identifier)
        return await asked_again_if_failed(self._tags, key, lambda: self[host].head_manifest(repository, identifier))

    async def has_repository(self, host: str, repository: str) -> bool:
        """Whether the source knows a repository, asked once per run as `head_tag` is: releases sharing a missing
        tag each need to know whether its repository is misspelt."""
        key = (api_host(host), repository)
        return await asked_again_if_failed(self._repositories, key, lambda: self[host].has_repository(repository))

    def forget_tags(self) -> None:
        """Drop what `head_tag` and `has_repository` learnt: after a wait in which another run may have moved a
        tag."""
        self._tags.clear()
        self._repositories.clear()

    def login(self, host: str) -> TemporaryLogin | None:
        """The host's temporary login (an ACR host configured with `aliyun:`), one for the whole run."""
        host = api_host(host)
        if host not in self._logins:
            self._logins[host] = acr_login(self.settings, host)
        return self._logins[host]

    async def aclose(self) -> None:
        clients = [*self._open.values(), *self._readers.values()]
        self._open, self._readers = {}, {}
        await asyncio.gather(*(client.aclose() for client in clients))

    async def __aenter__(self) -> Clients:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()
