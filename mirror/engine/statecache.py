"""What earlier runs learned, kept under `state_dir` so a re-run asks across the border only what may have changed.

- `ManifestCache`: manifests by digest (`<state_dir>/manifests/sha256/<hex>`). A digest names its bytes forever,
  so a cached manifest is as good as one fetched: every read is checked against its digest, and a file that does
  not hash to its name is ignored. Presence at a target is still asked every run (a HEAD); only the bytes are
  not fetched again.
- `RegistryNotes`: whether a registry answers the OCI referrers API (`<state_dir>/registries.json`), so a source
  known to lack it is not asked again within a day (that GET is the last one a no-op would send it).
- `LastDigests`: the digest each source tag had when a run last resolved it (`<state_dir>/tags.json`). Only a
  guess, never trusted: the tag's own HEAD still decides. With the guess, a re-run asks the targets about the
  whole tree in the same wave as the tag itself instead of one round trip later.

None is needed: a missing, unreadable or read-only `state_dir` only costs the requests they save. A write that
fails is one warning naming `state_dir` (not one per file), and the run goes on.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path

from mirror.leftovers import LEFTOVER_SECONDS, sweep
from mirror.oci import Manifest, ManifestError

log = logging.getLogger("mirror")

NOTES_TTL = 24 * 3600  # a registry's missing referrers API is asked again after this long
MAX_NOTES_BYTES = 1024 * 1024
MAX_TAGS_KEPT = 4000  # about 0.6 MB of tags.json
# state_dirs a warning said could not be written: once per run (a process), and again after a write there works
_UNWRITABLE: set[Path] = set()
# folders cleared of what killed writes left, and when: again once what was too young then may have aged (the
# service is one process for months, and its first write after a restart comes within the hour)
_SWEPT: dict[Path, float] = {}


class ManifestCache:
    def __init__(self, state_dir: Path | None) -> None:
        self.state_dir = state_dir  # manifests are kept under manifests/sha256/ there
        self._held: dict[str, Manifest] = {}

    def get(self, digest: str) -> Manifest | None:
        known = self._held.get(digest)
        if known is not None or self.state_dir is None:
            return known
        algorithm, _, hexpart = digest.partition(":")
        if algorithm != "sha256" or not hexpart.isalnum():
            return None
        known = _read_kept(self.state_dir / "manifests" / "sha256" / hexpart, digest)
        if known is not None:
            self._held[digest] = known
        return known

    def put(self, manifest: Manifest) -> None:
        """Keep the manifest; a file already there is replaced unless it holds these bytes (one left empty or
        cut short by a crash would otherwise cost a GET on every later run)."""
        if manifest.digest in self._held:
            return
        self._held[manifest.digest] = manifest
        if self.state_dir is None or not manifest.digest.startswith("sha256:"):
            return
        path = self.state_dir / "manifests" / "sha256" / manifest.digest.removeprefix("sha256:")
        if _read_kept(path, manifest.digest) is None:
            write_atomically(path, manifest.media_type.encode("ascii") + b"\n" + manifest.raw, self.state_dir)


def _read_kept(path: Path, digest: str) -> Manifest | None:
    """The manifest kept at `path`, or None where it is missing, unreadable or does not hash to `digest`."""
    try:
        media_type, _, raw = path.read_bytes().partition(b"\n")
        return Manifest.parse(raw, media_type.decode("ascii"), digest)
    except (OSError, UnicodeDecodeError, ManifestError):
        return None


class RegistryNotes:
    def __init__(self, directory: Path | None, clock: float | None = None) -> None:
        self.path = directory / "registries.json" if directory is not None else None
        self.now = clock if clock is not None else time.time()
        self._notes = self._read()
        self._changed = False

    def lacks_referrers_api(self, host: str) -> bool:
        """Did this registry answer without the referrers API within the last day?"""
        note = self._notes.get(host, {})
        checked = note.get("no_referrers_api_at")
        return isinstance(checked, (int, float)) and 0 <= self.now - checked < NOTES_TTL

    def note_referrers_api(self, host: str, answered: bool) -> None:
        note = self._notes.setdefault(host, {})
        if answered and "no_referrers_api_at" in note:
            del note["no_referrers_api_at"]
            self._changed = True
        elif not answered and not self.lacks_referrers_api(host):
            note["no_referrers_api_at"] = self.now
            self._changed = True

    def save(self) -> None:
        if self._changed and self.path is not None:
            write_atomically(self.path, json.dumps(self._notes, indent=1, sort_keys=True).encode(), self.path.parent)
            self._changed = False

    def _read(self) -> dict[str, dict[str, float]]:
        doc = read_json(self.path)
        return {str(host): dict(note) for host, note in doc.items() if isinstance(note, dict)}


class LastDigests:
    def __init__(self, directory: Path | None) -> None:
        self.path = directory / "tags.json" if directory is not None else None
        self._digests = {str(k): v for k, v in read_json(self.path).items() if isinstance(v, str)}
        self._changed = False

    def get(self, registry: str, repository: str, tag: str) -> str | None:
        return self._digests.get(f"{registry}/{repository}:{tag}")

    def put(self, registry: str, repository: str, tag: str, digest: str) -> None:
        key = f"{registry}/{repository}:{tag}"
        if self._digests.get(key) == digest:
            return  # a no-op writes nothing
        self._digests.pop(key, None)  # newest last: past the cap, the longest unchanged go first
        self._digests[key] = digest
        self._changed = True

    def save(self) -> None:
        if self._changed and self.path is not None:
            kept = dict(list(self._digests.items())[-MAX_TAGS_KEPT:])
            write_atomically(self.path, json.dumps(kept, indent=0).encode(), self.path.parent)
            self._changed = False


def read_json(path: Path | None) -> dict[str, object]:
    """A JSON object kept under `state_dir`; empty where it is missing, too large, unreadable or not an object."""
    if path is None:
        return {}
    try:
        with path.open("rb") as file:
            doc = json.loads(file.read(MAX_NOTES_BYTES))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def write_atomically(path: Path, data: bytes, state_dir: Path) -> None:
    """Write whole or not at all (a temporary file renamed into place); a failure is never raised, and the first
    under `state_dir` is a warning: the run goes on, but the next one pays the requests the state would save."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())  # on disk before the rename: a crash never leaves the name on no bytes
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        now = time.monotonic()
        if now - _SWEPT.get(path.parent, -LEFTOVER_SECONDS) >= LEFTOVER_SECONDS:  # thousands of files: not each write
            _SWEPT[path.parent] = now
            sweep(path.parent, (".tmp-" + "?" * 8,))
    except OSError as exc:
        log.debug("state not kept at %s: %s", path, exc)
        if state_dir not in _UNWRITABLE:
            _UNWRITABLE.add(state_dir)
            log.warning(
                "state_dir %s: cannot write in it (%s): what this run learned is not kept, so a re-run asks the"
                " registries again for what was known (manifests, tag digests, which registries lack the referrers"
                " API); this run is not affected",
                state_dir,
                exc.strerror or exc,
            )
        return
    _UNWRITABLE.discard(state_dir)
