"""Who must have signed, matched on certificates made by the tests' Fulcio: exact values, patterns searched as
cosign searches them, the issuer read from Fulcio's v2 extension (a DER UTF8String) or the older raw one."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import Certificate
from sigstore.errors import VerificationError

from mirror.signing.policy import Expected, SignerPolicy, _der_utf8, certificate_identities, certificate_issuer
from tests.sigstore_instance import GITHUB_ISSUER, HAMI_IDENTITY, SigstoreInstance


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
    for bad in (b"\x04\x03abc", b"\x0c\x05abc", b"\x0c"):
        with pytest.raises(ValueError):
            _der_utf8(bad)
