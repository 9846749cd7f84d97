"""One error family. Every failure mirror expects is a `MirrorError` whose `kind` says what went wrong in
terms a caller acts on: the CLI picks its exit code from it, the service decides whether a job failed for
its input or its surroundings, the copy decides whether a step may be tried again. Anything that is not a
MirrorError is a bug, left to the two outermost edges: the CLI lets Python print its traceback (exit 1), and
the service's runner records the job as an internal error and logs the traceback once."""

from __future__ import annotations

import enum


class Kind(enum.Enum):
    USAGE = "bad input"  # the config, the arguments, a webhook's payload: nothing was sent
    SOURCE = "unusable source"  # what a registry or chart repository serves cannot be used as it is
    AUTH = "authentication"  # credentials missing, refused or not obtainable
    REFUSED = "refused"  # a registry or a policy said no, and would say it again
    UNAVAILABLE = "unavailable"  # the network, a lock, a budget, the disk: may succeed later
    INTEGRITY = "integrity"  # bytes that do not match their digest or size
    INTERRUPTED = "interrupted"  # stopped by SIGTERM or Ctrl-C before it finished


EXIT_CODES = {Kind.USAGE: 2, Kind.INTERRUPTED: 143}
EXIT_FAILED = 1


class MirrorError(Exception):
    """A failure mirror expects, in one line. Subclasses set `kind`; an instance may refine it."""

    kind: Kind = Kind.UNAVAILABLE

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.kind, EXIT_FAILED)

    @property
    def transient(self) -> bool:
        return self.kind in (Kind.UNAVAILABLE, Kind.INTEGRITY)
