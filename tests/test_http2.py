"""HTTP/2 to a registry over TLS (`registries.<host>.http2`), against real registries serving HTTPS: every request
goes over h2, the copy is byte for byte, and a registry spoken to without the option gets HTTP/1.1."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry, start_registry
from tests.realnames import make_certificates
from tests.support import write_config
from tests.test_sync import VERSION, assert_byte_exact, seed_release

_PROTOCOL = re.compile(r'"[A-Z]+ \S+ (HTTP/[\d.]+)"')


def protocols(registry: LocalRegistry) -> set[str]:
    text = registry.log_path.read_text(encoding="utf-8", errors="replace")
    return {m[1] for line in text.splitlines() if " - - [" in line and (m := _PROTOCOL.search(line))}


@pytest.fixture
def tls_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LocalRegistry, LocalRegistry]]:
    (tmp_path / "ca").mkdir()
    ca, cert, key = make_certificates(tmp_path / "ca", {"localhost": "127.0.0.1"})
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    source = start_registry(tmp_path / "source", tls=(cert, key))
    target = start_registry(tmp_path / "target", tls=(cert, key))
    yield source, target
    source.stop()
    target.stop()


def test_http2_carries_every_request_and_the_copy_is_byte_for_byte(
    tmp_path: Path, tls_pair: tuple[LocalRegistry, LocalRegistry]
) -> None:
    source, target = tls_pair
    hami, certgen = seed_release(source)  # over HTTP/1.1, by the test's own client
    seeded = len(source.access_log())
    registries = {source.host: {"http2": True}, target.host: {"http2": False}}
    config = write_config(tmp_path / "mirror.yaml", source, [target], registries=registries)

    assert main(["sync", VERSION, "--config", str(config)]) == 0

    assert_byte_exact(source, target, hami, "mirrored/hami")
    assert_byte_exact(source, target, certgen, "mirrored/kube-webhook-certgen")
    lines = source.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    synced = [m[1] for line in lines if " - - [" in line and (m := _PROTOCOL.search(line))][seeded:]
    assert synced and set(synced) == {"HTTP/2.0"}
    assert "HTTP/2.0" not in protocols(target)  # the option is per host
