"""What the on-call channel has been told landed: each release's values for each target and chart, once.

A release's copies and its values can land in different runs: a run stopped (SIGTERM, an evicted pod, a lost lock)
after the copies and before the values, or one whose values failed and a later run that wrote them. That later
run copies nothing, and a release announced only when its images were copied in the run would never be announced
at all: the channel heard FAILED and then nothing. So a run remembers what it delivered (`note`), and a release
whose values it writes and that was never told (`told`) is announced as mirrored too.

Where the memory lives: the job store wherever there is a database (the service; a CronJob beside it, which
shares its `database_url`), so replicas tell each release once between them; else `<state_dir>/announced.json`.
A memory that was never written (a first run, a CronJob's emptyDir every run) tells nothing: `told` is None, and
a release is announced only when its images were copied in the run, as without it (every release of the
discovery window would otherwise be announced on every run of such a CronJob)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from mirror.engine.statecache import read_json, write_atomically
from mirror.report import ReleaseResult

LEDGER_FILE = "announced.json"
MAX_KEPT = 2000  # releases × targets × charts: the newest noted kept


class Ledger(Protocol):
    async def told(self) -> set[str] | None:
        """The keys noted so far; None where nothing was ever noted."""
        ...

    async def note(self, keys: set[str]) -> None:
        """Remember `keys` as told (now)."""
        ...


def key(release: str, target: str, chart: str) -> str:
    return f"{release} {target} {chart}"


def delivered(results: Iterable[ReleaseResult]) -> set[str]:
    """Each values file the run wrote, as a ledger key."""
    return {
        key(release.version, values.target, values.chart_name)
        for release in results
        if not release.dry_run
        for values in release.values
    }


class FileLedger:
    """The ledger as a JSON object under `state_dir`: key -> when it was last noted. A file that cannot be read
    or written costs only the announcements it would have made (as `statecache` treats its own files)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = state_dir / LEDGER_FILE

    async def told(self) -> set[str] | None:
        return set(read_json(self.path)) if self.path.exists() else None

    async def note(self, keys: set[str]) -> None:
        noted = {k: v for k, v in read_json(self.path).items() if isinstance(v, (int, float)) and k not in keys}
        now = time.time()
        noted |= dict.fromkeys(sorted(keys), now)
        kept = dict(sorted(noted.items(), key=lambda item: item[1])[-MAX_KEPT:])
        write_atomically(self.path, json.dumps(kept, indent=0, sort_keys=True).encode(), self.state_dir)
