"""Rekor's entry look-up by log index, for cosign's older `.sig` layout (which carries no inclusion proof).
A GET: safe to retry; bounded in time and size."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from mirror.signing.bundles import rekor_lookup_url
from mirror.signing.verify import NotVerified

ATTEMPTS = 3


async def fetch_entry(client: httpx.AsyncClient, base_url: str, log_index: int, limit: int) -> dict[str, Any]:
    if not base_url:
        raise NotVerified("the trusted root names no Rekor log to look the entry up in")
    url = rekor_lookup_url(base_url, log_index)
    for attempt in range(ATTEMPTS):
        try:
            return await _get_json(client, url, limit)
        except (httpx.TransportError, _Retryable) as exc:
            if attempt == ATTEMPTS - 1:
                raise NotVerified(f"Rekor entry {log_index}: {exc or type(exc).__name__}") from None
            await asyncio.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


class _Retryable(Exception):
    pass


async def _get_json(client: httpx.AsyncClient, url: str, limit: int) -> dict[str, Any]:
    async with client.stream("GET", url, headers={"Accept": "application/json"}) as response:
        if response.status_code >= 500 or response.status_code == 429:
            raise _Retryable(f"HTTP {response.status_code}")
        if response.status_code != 200:
            raise NotVerified(f"Rekor answered {response.status_code} for {url}")
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > limit:
                raise NotVerified(f"Rekor's answer is over {limit} bytes")
    try:
        answer = json.loads(body)
    except ValueError as exc:
        raise NotVerified(f"Rekor's answer is not JSON: {exc}") from None
    if not isinstance(answer, dict):
        raise NotVerified("Rekor's answer is not an object")
    return answer
