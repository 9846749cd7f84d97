"""Rekor's entry look-up by log index, for cosign's older `.sig` layout (which carries no inclusion proof):
a GET through the retrying client, bounded in time and size."""

from __future__ import annotations

from typing import Any

import httpx

from mirror.fetch import FetchError, read_capped
from mirror.signing.bundles import rekor_lookup_url
from mirror.signing.verify import NotVerified
from mirror.untrusted import load_json


async def fetch_entry(client: httpx.AsyncClient, base_url: str, log_index: int, limit: int) -> dict[str, Any]:
    if not base_url:
        raise NotVerified("the trusted root names no Rekor log to look the entry up in")
    try:
        body = await read_capped(client, rekor_lookup_url(base_url, log_index), limit, f"Rekor entry {log_index}")
        answer = load_json(body)
    except FetchError as exc:
        raise NotVerified(str(exc)) from None
    except ValueError as exc:
        raise NotVerified(f"Rekor entry {log_index}: not JSON: {exc}") from None
    if not isinstance(answer, dict):
        raise NotVerified(f"Rekor entry {log_index}: not an object")
    return answer
