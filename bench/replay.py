"""A floor for a no-op: the requests mirror sent, replayed by httpx alone (its own pool and network backend, no
auth, no config, no ordering between them), as a process of its own like the tools it is set beside.

    python replay.py REQUESTS.json CONCURRENCY

REQUESTS.json is a list of [method, url, status]; every request is sent, at most CONCURRENCY at a time per host,
and each must be answered with the status the registry gave mirror (a referrer tag that is not there: 404)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import defaultdict
from pathlib import Path

import httpx

ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)


async def replay(requests: list[tuple[str, str, int]], concurrency: int) -> int:
    limits = httpx.Limits(max_connections=concurrency)
    gates: dict[str, asyncio.Semaphore] = defaultdict(lambda: asyncio.Semaphore(concurrency))
    async with httpx.AsyncClient(limits=limits, headers={"Accept": ACCEPT}) as client:

        async def send(method: str, url: str, expected: int) -> bool:
            async with gates[httpx.URL(url).netloc.decode()]:
                return (await client.request(method, url)).status_code == expected

        answered = await asyncio.gather(*(send(*request) for request in requests))
    return answered.count(False)


def main() -> int:
    requests = [(method, url, int(status)) for method, url, status in json.loads(Path(sys.argv[1]).read_text())]
    failed = asyncio.run(replay(requests, int(sys.argv[2])))
    if failed:
        print(f"{failed} of {len(requests)} replayed requests were answered otherwise than mirror's", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
