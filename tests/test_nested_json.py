"""JSON from outside nested deeper than Python's parser recurses (a few KB of brackets) is refused by each
reader as malformed, in its own words, never as a RecursionError no caller expects; and a token answer is
refused when its token could not go into a header, before an HTTP library's error could quote it."""

from __future__ import annotations

import json
import math

import pytest

from mirror.oci import OCI_MANIFEST, Manifest, ManifestError
from mirror.registry.errors import parse_error_body
from mirror.registry.tokens import DEFAULT_EXPIRES_IN, parse_token_response
from mirror.signing.bundles import EvidenceError, LegacySignature, statement_names
from mirror.untrusted import load_json

DEEP = "[" * 5000 + "]" * 5000  # 10 KB
DIGEST = "sha256:" + "a" * 64


def test_load_json_refuses_deep_nesting_as_malformed_json() -> None:
    with pytest.raises(RecursionError):
        json.loads(DEEP)  # what every reader below met before
    with pytest.raises(ValueError, match="JSON nested too deeply"):
        load_json(DEEP)
    assert load_json("[" * 100 + "]" * 100) == json.loads("[" * 100 + "]" * 100)


def test_a_deep_manifest_is_a_manifest_error() -> None:
    raw = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "x": "HOLE"}).replace('"HOLE"', DEEP)
    with pytest.raises(ManifestError, match="manifest is not JSON: JSON nested too deeply"):
        Manifest.parse(raw.encode(), OCI_MANIFEST)


def test_a_deep_registry_error_body_reads_as_text() -> None:
    assert parse_error_body(("{" + '"a":' + DEEP + "}").encode()) == ("", '{"a":' + DEEP[:195])


def test_deep_signature_evidence_is_evidence_error() -> None:
    annotations = {
        "dev.sigstore.cosign/bundle": DEEP,
        "dev.cosignproject.cosign/signature": "c2ln",
        "dev.sigstore.cosign/certificate": "-----BEGIN CERTIFICATE-----",
    }
    with pytest.raises(EvidenceError, match="unreadable Rekor bundle: JSON nested too deeply"):
        LegacySignature.from_annotations(annotations)
    with pytest.raises(EvidenceError):
        statement_names(DEEP.encode(), DIGEST)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (DEEP, "JSON nested too deeply"),
        ('["token"]', "not a JSON object"),
        ('"token"', "not a JSON object"),
        ('{"token": "abc\\ndef"}', "not printable ASCII"),
        ('{"token": "abc def"}', "not printable ASCII"),
        ('{"token": "caf\\u00e9"}', "not printable ASCII"),
        ('{"token": ""}', "holds no token"),
    ],
)
def test_a_token_answer_that_cannot_be_used_is_refused(body: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        parse_token_response(body.encode(), 0.0)
    assert "abc" not in str(refused.value)  # the token itself is never quoted


@pytest.mark.parametrize(
    ("expires_in", "lifetime"),
    [
        ("300", 300.0),
        (300, 300.0),
        ("NaN", DEFAULT_EXPIRES_IN),
        ("Infinity", DEFAULT_EXPIRES_IN),
        (-5, DEFAULT_EXPIRES_IN),
        (True, DEFAULT_EXPIRES_IN),
        ("soon", DEFAULT_EXPIRES_IN),
        (None, DEFAULT_EXPIRES_IN),
    ],
)
def test_a_token_lives_for_a_finite_positive_lifetime(expires_in: object, lifetime: float) -> None:
    body = json.dumps({"token": "abc.def", "expires_in": expires_in}).encode()
    token = parse_token_response(body, 10.0)
    assert token.lifetime == lifetime and math.isfinite(token.expires_at) and token.expires_at == 10.0 + lifetime
