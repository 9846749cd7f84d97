"""Who must have signed, matched on certificates made by the tests' Fulcio: exact values, patterns searched as
cosign searches them, the issuer read from Fulcio's v2 extension (a DER UTF8String) or the older raw one, the
identity from a URI, an e-mail or Sigstore's OtherName SAN (a DER UTF8String too)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import Certificate
from sigstore.errors import VerificationError

from mirror.signing.policy import Expected, SignerPolicy, _der_utf8, certificate_identities, certificate_issuer
from mirror.signing.verify import Trust, verify_bundle
from tests.sigstore_instance import GITHUB_ISSUER, HAMI_IDENTITY, SigstoreInstance

# Fulcio's `username` issuer type names the signer `<user>!<issuer host>` in an OtherName SAN
USERNAME_ISSUER = "https://oidc.example.test"
USERNAME_IDENTITY = "hami-release!oidc.example.test"


@pytest.fixture(scope="module")
def cert() -> Certificate:
    return SigstoreInstance().certificate(ec.generate_private_key(ec.SECP256R1()), HAMI_IDENTITY, GITHUB_ISSUER)


def test_a_certificate_names_its_identity_and_issuer(cert: Certificate) -> None:
    assert certificate_identities(cert) == {HAMI_IDENTITY}
    assert certificate_issuer(cert) == GITHUB_ISSUER


@pytest.mark.parametrize(
    ("identity", "issuer", "holds"),
    [
        (Expected(HAMI_IDENTITY), Expected(GITHUB_ISSUER), True),
        (Expected(r"^https://github\.com/Project-HAMi/HAMi/", pattern=True), Expected(GITHUB_ISSUER), True),
        (Expected("Project-HAMi/HAMi", pattern=True), Expected("actions", pattern=True), True),  # anywhere, as cosign
        (Expected(r"^https://github\.com/Project-HAMi/HAMi/$", pattern=True), Expected(GITHUB_ISSUER), False),
        (Expected(HAMI_IDENTITY.removesuffix("v2.10.0")), Expected(GITHUB_ISSUER), False),  # exact is exact
        (Expected(HAMI_IDENTITY), Expected("https://accounts.google.com"), False),
        (Expected(r"^https://github\.com/someone-else/", pattern=True), Expected(GITHUB_ISSUER), False),
    ],
)
def test_the_policy_holds_only_for_the_named_signer(
    cert: Certificate, identity: Expected, issuer: Expected, holds: bool
) -> None:
    policy = SignerPolicy(identity, issuer)
    if holds:
        policy.verify(cert)
    else:
        with pytest.raises(VerificationError):
            policy.verify(cert)


def test_der_utf8_strings_short_and_long() -> None:
    assert _der_utf8(b"\x0c\x03abc") == "abc"
    long = "x" * 200
    assert _der_utf8(b"\x0c\x81\xc8" + long.encode()) == long
    for bad in (b"\x04\x03abc", b"\x0c\x05abc", b"\x0c", b"\x0c\x80", b"\x0c\x02\xff\xfe"):
        with pytest.raises(ValueError):
            _der_utf8(bad)


@pytest.mark.parametrize("identity", [USERNAME_IDENTITY, "x" * 200 + "!oidc.example.test"])  # short, long length
def test_an_othername_identity_is_the_text_it_holds_and_matches_exactly(identity: str) -> None:
    cert = SigstoreInstance().certificate(ec.generate_private_key(ec.SECP256R1()), identity, USERNAME_ISSUER)
    assert certificate_identities(cert) == {identity}
    SignerPolicy(Expected(identity), Expected(USERNAME_ISSUER)).verify(cert)
    SignerPolicy(Expected(f"^{re.escape(identity)}$", pattern=True), Expected(USERNAME_ISSUER)).verify(cert)


def test_a_bundle_signed_for_an_othername_identity_verifies_under_an_exact_rule(tmp_path: Path) -> None:
    """Through sigstore-python's Verifier, as the gate runs it: the whole bundle, then the policy."""
    instance = SigstoreInstance()
    (tmp_path / "trusted_root.json").write_text(json.dumps(instance.trusted_root()))
    digest = "sha256:" + "a" * 64
    bundle = instance.sign_image(digest, identity=USERNAME_IDENTITY, issuer=USERNAME_ISSUER)
    policy = SignerPolicy(Expected(USERNAME_IDENTITY), Expected(USERNAME_ISSUER))
    assert verify_bundle(Trust.load(tmp_path / "trusted_root.json"), bundle, digest, policy) == USERNAME_IDENTITY
