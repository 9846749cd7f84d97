"""Releases owed an announcement to the on-call channel.

A release's copies and its values can land in different runs: a run stopped (SIGTERM, an evicted pod, a lost lock)
after the copies and before the values, or one whose values failed and a later run that wrote them. That later
run copies nothing, and a release announced only by the run that copies its images was never announced at all: the
channel heard FAILED and then nothing. So a run that copied a release's images to a target and wrote no values
there leaves the release owed at that target (`owe`); the run that writes them takes what is owed (`settle`, which
one caller alone gets) and announces it. Where no channel heard the announcement, it stays owed.

Where the ledger lives: the job store wherever there is a database (the service; a CronJob beside it, which shares
its `database_url`), so a release copied by one pod and delivered by another is announced once; else
`<state_dir>/owed.json`. A CronJob on its own keeps its state in an emptyDir: what it owes is forgotten with the
pod, and such a release is announced only by a run that copies its images, as before the ledger."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from mirror.engine.outcomes import Copied
from mirror.engine.statecache import read_json, write_atomically
from mirror.report import ReleaseResult

LEDGER_FILE = "owed.json"
MAX_KEPT = 2000  # releases × targets owed at once: the newest kept


class Ledger(Protocol):
    async def owe(self, keys: set[str]) -> None:
        """Remember `keys` as owed an announcement."""
        ...

    async def settle(self, keys: set[str]) -> set[str]:
        """Of `keys`, those that were owed, owed no longer: each key to one caller alone."""
        ...


def key(release: str, target: str) -> str:
    return f"{release} {target}"


def delivered(results: Iterable[ReleaseResult]) -> set[str]:
    """Each release and target the run wrote values for."""
    return {key(r.version, values.target) for r in results if not r.dry_run for values in r.values}


def owed_by(results: Iterable[ReleaseResult]) -> set[str]:
    """Each release and target the run copied images to and wrote no values for."""
    owed = set()
    for release in results:
        if release.dry_run:
            continue
        written = {values.target for values in release.values}
        copied = {t.target for image in release.images for t in image.targets if isinstance(t.outcome, Copied)}
        owed |= {key(release.version, target) for target in copied - written}
    return owed


class FileLedger:
    """The ledger as a JSON object under `state_dir`: key -> when it became owed. A file that cannot be read or
    written costs only the announcements it would have made (as `statecache` treats its own files)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = state_dir / LEDGER_FILE

    def _read(self) -> dict[str, float]:
        return {k: v for k, v in read_json(self.path).items() if isinstance(v, (int, float))}

    def _write(self, owed: dict[str, float]) -> None:
        kept = dict(sorted(owed.items(), key=lambda item: item[1])[-MAX_KEPT:])
        write_atomically(self.path, json.dumps(kept, indent=0, sort_keys=True).encode(), self.state_dir)

    async def owe(self, keys: set[str]) -> None:
        if keys:
            self._write(self._read() | dict.fromkeys(keys, time.time()))

    async def settle(self, keys: set[str]) -> set[str]:
        owed = self._read()
        settled = keys & set(owed)
        if settled:
            self._write({k: v for k, v in owed.items() if k not in settled})
        return settled
