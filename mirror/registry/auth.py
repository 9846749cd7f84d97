"""Registry authentication as an httpx.Auth flow: send, read the 401 challenge, fetch a token, resend.

Tokens are cached per (realm, service, scope set) and fetched once however many requests want the same
one at the same moment. Once a registry has challenged, later requests carry a token up front, so a
streamed upload (which cannot be replayed) never meets a challenge. A request that is refused again right
after a fresh token fails at once with "access denied": no loops.

Credentials go only to the registry's own origin, its scheme included: an https registry's never go over plain
HTTP, neither to a Location on its own host name nor to a token realm.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import httpx

from mirror.errors import Kind
from mirror.registry.body import BodyTooLarge, read_limited
from mirror.registry.challenge import Challenge, merge_scopes, parse_challenge, repository_of, scopes_for
from mirror.registry.credentials import Credentials
from mirror.registry.errors import MAX_ERROR_BODY, RegistryError, kind_of_status, parse_error_body
from mirror.registry.retry import replayable
from mirror.registry.tokens import MAX_TOKEN_RESPONSE, Token, TokenCache, TokenKey, parse_token_response, token_request
from mirror.untrusted import clip

CredentialSource = Callable[[str | None], Awaitable[Credentials | None]]  # given the challenge's service
MAX_ROUNDS = 3
# A token refused this soon after it was issued was refused for what it grants: denied at once. One refused later
# had waited (for a pooled connection, behind streaming blobs) and may simply have lapsed: another is fetched.
FRESH_TOKEN_SECONDS = 2.0
RENEWAL_RETRY_SECONDS = 60.0  # after an early renewal failed, the login in hand is used this long before asking again
log = logging.getLogger("mirror")


class AuthError(RegistryError):
    """The registry or its token server refused us."""

    def __init__(self, host: str, repository: str, status: int, code: str, message: str) -> None:
        action = "access denied to" if _refusal(status) else "no token for"
        super().__init__(action, f"{repository or '/v2/'} at {host}", status, code, message)


class _LeaderGone(Exception):
    """The request that was loading the credentials, or fetching a shared token, was cancelled: a waiter does it
    itself."""


async def _follow(waiter: asyncio.Future[Token]) -> Token | None:
    """The token another request is fetching for the same scopes, or None when that request gave up."""
    try:
        return await asyncio.shield(waiter)
    except _LeaderGone:
        return None


class RegistryAuth(httpx.Auth):
    """Authentication for one registry host. Requests to other hosts (a CDN, an upload host) pass untouched."""

    def __init__(self, host: str, credentials: CredentialSource, scheme: str = "https") -> None:
        self.host = host
        self._scheme = scheme  # the registry's: credentials go to its host over this scheme only
        # as httpx writes a request's origin (the host in lower case, no default port): `Registry.Example.com:443`
        # would never match it, and its 401s would go unanswered
        self._netloc = httpx.URL(f"{scheme}://{host}").netloc.decode("ascii")
        self._load_credentials = credentials
        self._credentials: Credentials | None = None
        self._credentials_loaded = False
        self._renew_after = 0.0  # a failed early renewal is not tried again before this (epoch s)
        self._loading: asyncio.Future[Credentials | None] | None = None  # the load under way, its answer shared
        self._bearer: tuple[str, str] | None = None  # (realm, service) once the registry challenged
        self._basic = False
        self._tokens = TokenCache()
        self._pending: dict[TokenKey, asyncio.Future[Token]] = {}

    def __repr__(self) -> str:
        return f"RegistryAuth(host={self.host!r})"

    @property
    def challenged(self) -> bool:
        """Has the registry asked for authentication yet? Until it has, every request went without credentials,
        so whatever it answered, it answers anyone."""
        return self._bearer is not None or self._basic

    @classmethod
    def anonymous(cls, host: str, scheme: str) -> RegistryAuth:
        """For a host we were redirected to: its own token flow, never our credentials."""

        async def no_credentials(service: str | None) -> None:
            return None

        return cls(host, no_credentials, scheme)

    async def credentials(self, refused: Credentials | None = None) -> Credentials | None:
        """Loaded once, when first needed; a temporary login again before it lapses, or once the realm refused
        it (`refused`), whichever comes first. Concurrent callers share one load, and its failure: a credential
        helper that timed out is asked once for every request waiting on it, and again only by a later one."""
        while (loading := self._loading) is not None or not self._current(refused):
            if loading is None:
                return await self._load(refused)
            with contextlib.suppress(_LeaderGone):  # its caller was cancelled: look again
                await asyncio.shield(loading)
        return self._credentials

    def _current(self, refused: Credentials | None) -> bool:
        """Are the loaded credentials (or their absence) still the ones to use? A temporary login due for renewal
        stays so while a failed renewal waits its turn to be tried again, and the login has not lapsed."""
        current, now = self._credentials, time.time()
        if not self._credentials_loaded or current is None:
            return self._credentials_loaded
        if current is refused:
            return False
        return not current.due_for_renewal(now) or (now < self._renew_after and not current.lapsed(now))

    async def _load(self, refused: Credentials | None = None) -> Credentials | None:
        """Ask the credential source, for this caller and for every caller that comes while it answers. An early
        renewal that fails keeps the login in hand while it lasts (asked again RENEWAL_RETRY_SECONDS later): the
        failure fails requests only once nothing valid is left."""
        loading = self._loading = asyncio.get_running_loop().create_future()
        loading.add_done_callback(_retrieve)
        try:
            credentials = await self._load_credentials(self._bearer[1] if self._bearer else None)
        except Exception as exc:
            kept = self._credentials
            if kept is not None and kept is not refused and not kept.lapsed(time.time()):
                self._renew_after = time.time() + RENEWAL_RETRY_SECONDS
                log.warning("%s: renewing the login failed (%s); kept the one in hand", self.host, exc)
                loading.set_result(kept)
                return kept
            loading.set_exception(exc)
            raise
        except BaseException:
            loading.set_exception(_LeaderGone())
            raise
        finally:
            self._loading = None
        self._credentials, self._credentials_loaded = credentials, True
        loading.set_result(credentials)
        return credentials

    def _ours(self, url: httpx.URL) -> bool:
        """Is `url` at the registry's origin, its scheme included? A Location on its host name that drops https
        gets no credentials."""
        return url.netloc.decode("ascii") == self._netloc and url.scheme == self._scheme

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        if not self._ours(request.url):
            yield request
            return
        scopes = scopes_for(request)
        refused: str | None = None  # the Authorization the registry refused last round: not to be sent again
        for _ in range(MAX_ROUNDS):
            fresh_scopes: frozenset[str] | None = None  # set when this round's token was just issued
            issued = 0.0
            if self._bearer is not None:
                key = TokenKey(*self._bearer, merge_scopes(scopes))
                token = self._cached(key, refused)
                while token is None:
                    fresh_scopes, issued = key.scopes, time.monotonic()
                    waiter = self._pending.get(key)
                    if waiter is not None:
                        token = await _follow(waiter)  # None: its leader gave up; ask again
                        continue
                    future = self._lead(key)
                    try:
                        credentials = await self.credentials()
                        token_response = yield self._token_request(key, credentials, request)
                        if token_response.status_code == 401 and credentials and _asked_anew(credentials):
                            credentials = await self._renewed(token_response, credentials)  # once more
                            token_response = yield self._token_request(key, credentials, request)
                        token = await self._accept_token(token_response, key, request)
                        future.set_result(token)
                    except Exception as exc:  # a refusal, or credentials that could not be had: the same for all
                        future.set_exception(exc)
                        raise
                    except BaseException:
                        future.set_exception(_LeaderGone())
                        raise
                    finally:
                        del self._pending[key]
                request.headers["Authorization"] = token.header
            elif self._basic:
                await self._sign_basic(request)
            response = yield request
            if response.status_code != 401:
                return
            fresh = fresh_scopes if time.monotonic() - issued <= FRESH_TOKEN_SECONDS else None
            again = await self._after_refusal(request, response, scopes, fresh)
            if again is None:
                return
            if again[1]:  # a bearer challenge: a token for these scopes other than the one refused (if any)
                scopes, refused = again[0], request.headers.get("Authorization")
        await self._deny(request, None)

    async def _renewed(self, refusal: httpx.Response, credentials: Credentials) -> Credentials | None:
        """The credentials asked anew of their source once the realm refused them (a temporary login that lapsed
        early or was revoked, a credential helper's short-lived password). The refusal is read, not closed:
        httpx reads each answer of the flow again as the flow moves on."""
        await read_limited(refusal, MAX_ERROR_BODY, truncate=True, keep=True)
        return await self.credentials(refused=credentials)

    def _lead(self, key: TokenKey) -> asyncio.Future[Token]:
        """This request fetches the token for `key`; others that want it meanwhile wait for the returned future."""
        future = self._pending[key] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)
        return future

    def _token_request(self, key: TokenKey, credentials: Credentials | None, request: httpx.Request) -> httpx.Request:
        """The realm's request, refused before it is sent when it would carry an https registry's credentials in
        clear (a realm on plain HTTP). Anonymous, it goes wherever the realm is."""
        if credentials is not None and self._scheme == "https" and httpx.URL(key.realm).scheme != "https":
            message = f"the token realm {clip(key.realm)} is not https: credentials are not sent there in clear"
            raise AuthError(self.host, repository_of(request) or "", 401, "", message)
        realm = token_request(key, credentials)
        # the registry request's timeouts (connect, read, pool): without them a realm that goes silent holds its
        # connection slot until the whole deadline, and then, past the cancel shield, for the rest of the run
        realm.extensions["timeout"] = request.extensions.get("timeout", {})
        return realm

    def _cached(self, key: TokenKey, refused: str | None) -> Token | None:
        """The cached token for `key`, unless it is the one the registry just refused, however fresh it looks. A
        request that went without a token, or with an older one, takes whatever token another request got since."""
        token = self._tokens.fresh(key)
        return None if token is not None and token.header == refused else token

    async def _sign_basic(self, request: httpx.Request) -> None:
        credentials = await self.credentials()
        if credentials is not None:
            request.headers["Authorization"] = credentials.basic_header()

    async def _after_refusal(
        self, request: httpx.Request, response: httpx.Response, scopes: frozenset[str], fresh: frozenset[str] | None
    ) -> tuple[frozenset[str], bool] | None:
        """A 401: what to try again with (the scopes, and whether a fresh token is needed: a bearer challenge),
        or None to let the 401 through. Refuses outright when a token just issued for those scopes was refused."""
        # Let go of the refusal (its connection, its place in the pool) before waiting for anything: the request
        # may then wait for a token another request is fetching, and when as many refusals as the pool has
        # places were held open, that fetch found no place and every request waited forever.
        await read_limited(response, MAX_ERROR_BODY, truncate=True, keep=True)
        if not replayable(request):
            # A streamed body cannot be sent again: forget the refused token, so the caller's retry (a new
            # upload session) gets a fresh one, and let the 401 through.
            if self._bearer is not None:
                self._tokens.drop(TokenKey(*self._bearer, merge_scopes(scopes)))
            return None
        challenge = parse_challenge(response.headers.get("WWW-Authenticate", ""))
        if challenge is None or not await self._learn(challenge, request, response):
            return None
        if challenge.scheme != "bearer":
            return scopes, False
        wanted = merge_scopes(scopes | challenge.scopes)
        if fresh is not None and wanted == fresh:
            await self._deny(request, response)
        return wanted, True

    async def _learn(self, challenge: Challenge, request: httpx.Request, response: httpx.Response) -> bool:
        """Take a challenge in; False when there is nothing we can answer it with."""
        if challenge.scheme == "bearer" and challenge.realm:
            self._bearer = (challenge.realm, challenge.service)
            return True
        if challenge.scheme == "basic":
            if await self.credentials() is None or "Authorization" in request.headers:
                await self._deny(request, response)
            self._basic = True
            return True
        return False

    async def _accept_token(self, response: httpx.Response, key: TokenKey, request: httpx.Request) -> Token:
        token_host, repository = response.request.url.host, repository_of(request) or ""
        try:  # kept in the response: httpx reads it again once the flow moves on
            body = await read_limited(response, MAX_TOKEN_RESPONSE, keep=True)
        except (BodyTooLarge, httpx.DecodingError) as exc:  # too long, or labelled with a coding it is not in
            status = response.status_code
            raise AuthError(self.host, repository, status, "", f"token server {token_host}: {exc}") from None
        if (status := response.status_code) != 200:
            code, message = parse_error_body(body)
            said = "refused" if _refusal(status) else "failed"  # a 5xx is an outage, not a no
            refusal = f"token server {token_host} {said}{self._whose(status)}: {message or response.reason_phrase}"
            raise AuthError(self.host, repository, status, code, refusal)
        try:
            token = parse_token_response(body, time.monotonic())
        except ValueError as exc:
            raise AuthError(self.host, repository, 200, "", f"bad token answer: {exc}") from None
        self._tokens.put(key, token)
        return token

    async def _deny(self, request: httpx.Request, response: httpx.Response | None) -> None:
        code, message = ("", "still unauthorized after authenticating")
        if response is not None:
            code, message = parse_error_body(await read_limited(response, MAX_ERROR_BODY, truncate=True))
        message = _refused(request, message or "unauthorized", self._credentials is not None) + self._whose(401)
        raise AuthError(self.host, repository_of(request) or "", 401, code, message)

    def _whose(self, status: int) -> str:
        """Where the credentials that were refused came from (the config, a docker config and its entry, a
        credential helper), so a refusal says which to mend; never what they hold. Only for an authorization
        refusal: a token server's 5xx is an outage, whatever credentials were sent or not."""
        if not _refusal(status):
            return ""
        credentials = self._credentials
        if credentials is None and self._credentials_loaded:
            return " (no credentials for this registry: it refused anonymous access)"
        if credentials is None:
            return ""
        return f" (credentials from {credentials.origin})" if credentials.origin else ""


def _refused(request: httpx.Request, message: str, logged_in: bool) -> str:
    """A refusal's words; for a pull, what else it may mean: Docker Hub refuses a missing repository so, as a
    private one (its token server grants nothing, the registry answers 401, not 404)."""
    if request.method not in ("GET", "HEAD"):
        return message
    if logged_in:
        return f"{message}; the repository may not exist (check its name), or these credentials may not pull it"
    return f"{message}; the repository may not exist (check its name), or pulling it needs a login"


def _refusal(status: int) -> bool:
    """An authorization refusal (401, 403), as the error kinds have it: not an outage."""
    return kind_of_status(status) is Kind.AUTH


def _asked_anew(credentials: Credentials) -> bool:
    """May the credentials' source answer anew once the realm refused them?"""
    return credentials.expires_at is not None or credentials.renewable


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
