"""One error family: every failure mirror expects is a MirrorError whose kind picks the exit code and whether
a step may be tried again."""

from __future__ import annotations

import pytest

from mirror.chart.archive import ChartError
from mirror.engine.discover import DiscoveryError
from mirror.engine.lock import LockTimeout
from mirror.engine.shutdown import Interrupted
from mirror.errors import Kind, MirrorError
from mirror.naming import NameClash
from mirror.oci import ManifestError
from mirror.output import OutputError
from mirror.reference import ReferenceError
from mirror.registry.budget import BudgetExhausted
from mirror.registry.credentials import CredentialError
from mirror.registry.errors import IntegrityError, RegistryError, RegistryUnreachable
from mirror.release import VersionError
from mirror.settings import ConfigError
from mirror.untrusted import UntrustedInput


@pytest.mark.parametrize(
    ("error", "kind", "exit_code"),
    [
        (ConfigError("x"), Kind.USAGE, 2),
        (VersionError("x"), Kind.USAGE, 2),
        (ReferenceError("x"), Kind.USAGE, 2),
        (NameClash("x"), Kind.USAGE, 2),
        (ChartError("x"), Kind.SOURCE, 1),
        (UntrustedInput("x"), Kind.SOURCE, 1),
        (ManifestError("x"), Kind.SOURCE, 1),
        (CredentialError("x"), Kind.AUTH, 1),
        (RegistryUnreachable("resolve", "h/r:t", OSError("refused")), Kind.UNAVAILABLE, 1),
        (LockTimeout("x"), Kind.UNAVAILABLE, 1),
        (DiscoveryError("x"), Kind.UNAVAILABLE, 1),
        (OutputError("x"), Kind.UNAVAILABLE, 1),
        (BudgetExhausted("x"), Kind.UNAVAILABLE, 1),
        (IntegrityError("x"), Kind.INTEGRITY, 1),
        (Interrupted("x"), Kind.INTERRUPTED, 143),
    ],
)
def test_each_failure_has_its_kind_and_exit_code(error: MirrorError, kind: Kind, exit_code: int) -> None:
    assert isinstance(error, MirrorError)
    assert (error.kind, error.exit_code) == (kind, exit_code)


@pytest.mark.parametrize(
    ("status", "kind", "transient"),
    [
        (401, Kind.AUTH, False),
        (403, Kind.AUTH, False),
        (400, Kind.REFUSED, False),  # ACR's MANIFEST_INVALID for a class it does not take
        (404, Kind.REFUSED, False),
        (408, Kind.UNAVAILABLE, True),
        (429, Kind.UNAVAILABLE, True),
        (500, Kind.UNAVAILABLE, True),
        (503, Kind.UNAVAILABLE, True),
    ],
)
def test_a_registry_answer_is_classified_by_its_status(status: int, kind: Kind, transient: bool) -> None:
    error = RegistryError("push manifest", "h/r:t", status, "CODE", "message")
    assert (error.kind, error.transient) == (kind, transient)
    assert error.exit_code == 1
