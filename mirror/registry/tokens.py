"""Bearer tokens: the realm request, the realm's answer, and a cache keyed by (realm, service, scopes)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import httpx

from mirror.registry.credentials import Credentials
from mirror.untrusted import load_json

DEFAULT_EXPIRES_IN = 60  # seconds, when the realm does not say
MAX_TOKEN_RESPONSE = 1024 * 1024


@dataclass(frozen=True, slots=True)
class TokenKey:
    realm: str
    service: str
    scopes: frozenset[str]


@dataclass(frozen=True, slots=True)
class Token:
    value: str = field(repr=False)
    expires_at: float  # time.monotonic()
    lifetime: float

    @property
    def header(self) -> str:
        """The Authorization header that carries it."""
        return f"Bearer {self.value}"

    def fresh(self, now: float | None = None) -> bool:
        """Usable for a while yet: refreshed a quarter of its life (at most 30 s) before it expires."""
        margin = min(30.0, self.lifetime / 4)
        return (now if now is not None else time.monotonic()) < self.expires_at - margin


class TokenCache:
    def __init__(self) -> None:
        self._tokens: dict[TokenKey, Token] = {}

    def fresh(self, key: TokenKey) -> Token | None:
        token = self._tokens.get(key)
        return token if token is not None and token.fresh() else None

    def put(self, key: TokenKey, token: Token) -> None:
        self._tokens[key] = token

    def drop(self, key: TokenKey) -> None:
        self._tokens.pop(key, None)


def token_request(key: TokenKey, credentials: Credentials | None) -> httpx.Request:
    """GET the realm with Basic credentials (or anonymously); with an identity token, the OAuth2 POST."""
    scopes = sorted(key.scopes)
    # identity: the answer is bounded as it arrives on the wire (auth.py), so what arrives is what is kept
    headers = {"Accept-Encoding": "identity"}
    if credentials is not None and credentials.identity_token:
        form = {
            "grant_type": "refresh_token",
            "refresh_token": credentials.identity_token,
            "service": key.service,
            "scope": " ".join(scopes),
            "client_id": "mirror",
        }
        return httpx.Request("POST", key.realm, data=form, headers=headers)
    params = [("service", key.service)] if key.service else []
    params += [("scope", scope) for scope in scopes]
    if credentials is not None:
        headers["Authorization"] = credentials.basic_header()
    realm = httpx.URL(key.realm).copy_merge_params(httpx.QueryParams(tuple(params)))  # the realm's query kept
    return httpx.Request("GET", realm, headers=headers)


def parse_token_response(body: bytes, received_at: float) -> Token:
    """`{"token" | "access_token", "expires_in"}`; raises ValueError for anything else. The token goes into a
    header: one that is not printable ASCII without spaces is refused here, before an HTTP library's error
    could quote it; a lifetime that is not a positive finite number of seconds is the default one."""
    doc = load_json(body[:MAX_TOKEN_RESPONSE])
    if not isinstance(doc, dict):
        raise ValueError("the token server's answer is not a JSON object")
    value = doc.get("token") or doc.get("access_token")
    if not isinstance(value, str) or not value:
        raise ValueError("the token server's answer holds no token")
    if not all("!" <= char <= "~" for char in value):
        raise ValueError("the token server's answer holds a token that is not printable ASCII")
    lifetime = _seconds(doc.get("expires_in"))
    if lifetime is None or lifetime <= 0:
        lifetime = DEFAULT_EXPIRES_IN
    return Token(value, received_at + lifetime, lifetime)


def _seconds(value: object) -> float | None:
    """A number of seconds as JSON gives it (a number, or a number in a string), if it is a finite one."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) else None
