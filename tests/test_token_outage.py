"""A token server that fails is not one that refused: only its 401 or 403 says which credentials to mend (or
that there were none). A 5xx is an outage, reported without a word on credentials, and still `unavailable`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mirror.demo.localregistry import start_registry
from mirror.errors import Kind
from mirror.registry.auth import AuthError
from mirror.registry.client import RegistryClient
from mirror.registry.options import ClientOptions
from mirror.registry.retry import RetryPolicy
from tests.faultproxy import Fault, fault_proxy
from tests.tokenserver import token_server

NO_CREDENTIALS = "(no credentials for this registry: it refused anonymous access)"
FROM_CONFIG = "(credentials from config)"
QUICK_RETRIES = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.01)


def refusal_from_realm(tmp_path: Path, status: int, code: str, options: ClientOptions) -> AuthError:
    """What reading a manifest says when every answer of the registry's token realm is `status`: the realm is
    the suite's token server behind a fault proxy."""
    with token_server(tmp_path / "tokens", users={"puller": "pw"}) as tokens, fault_proxy(tokens.port) as realm:
        tokens.public_url = f"http://{realm.host}/token"
        registry = start_registry(tmp_path / "registry", auth=tokens.registry_auth("outage-test"))
        realm.add(Fault("status", path=r"^/token", status=status, code=code, count=1000))

        async def read() -> None:
            client = RegistryClient.open(registry.host, options)
            try:
                await client.head_manifest("ns/r", "v1")
            finally:
                await client.aclose()

        try:
            with pytest.raises(AuthError) as error:
                asyncio.run(read())
        finally:
            registry.stop()
    return error.value


CASES = [(503, "UNAVAILABLE", False), (500, "", False), (401, "UNAUTHORIZED", True), (403, "DENIED", True)]


@pytest.mark.parametrize(("status", "code", "refused"), CASES)
def test_only_a_refusal_by_the_token_server_blames_missing_credentials(
    tmp_path: Path, status: int, code: str, refused: bool
) -> None:
    options = ClientOptions(plain_http=True, anonymous=True, retry=QUICK_RETRIES)
    error = refusal_from_realm(tmp_path, status, code, options)
    said = str(error)
    assert f": {status} {code}".rstrip() in said, said
    if refused:
        assert said.startswith("access denied to ") and "token server 127.0.0.1 refused" in said, said
    else:
        assert said.startswith("no token for ") and "token server 127.0.0.1 failed: " in said, said
    assert (NO_CREDENTIALS in said) is refused, said
    assert error.kind is (Kind.AUTH if refused else Kind.UNAVAILABLE)


@pytest.mark.parametrize(("status", "code", "refused"), CASES)
def test_only_a_refusal_by_the_token_server_names_where_the_credentials_came_from(
    tmp_path: Path, status: int, code: str, refused: bool
) -> None:
    options = ClientOptions(plain_http=True, username="puller", password=lambda: "pw", retry=QUICK_RETRIES)
    said = str(refusal_from_realm(tmp_path, status, code, options))
    assert (FROM_CONFIG in said) is refused, said
    assert NO_CREDENTIALS not in said, said
