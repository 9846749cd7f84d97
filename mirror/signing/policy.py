"""Who must have signed: a certificate identity and OIDC issuer, exact or by pattern, as cosign takes them
(`--certificate-identity[-regexp]`, `--certificate-oidc-issuer[-regexp]`). A pattern matches anywhere in the
value, as cosign's does: anchor it (`^...$`) to pin it down."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography.x509 import (
    Certificate,
    ExtensionNotFound,
    ObjectIdentifier,
    OtherName,
    RFC822Name,
    SubjectAlternativeName,
    UniformResourceIdentifier,
)
from sigstore.errors import VerificationError

# Fulcio's OIDC issuer extensions: the raw string (v1) and the DER UTF8String (v2).
_ISSUER_V1 = ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
_ISSUER_V2 = ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
_SIGSTORE_OTHERNAME = ObjectIdentifier("1.3.6.1.4.1.57264.1.7")


@dataclass(frozen=True, slots=True)
class Expected:
    """One value to match: exactly, or by a regular expression searched in it."""

    value: str
    pattern: bool = False

    def matches(self, actual: str) -> bool:
        return re.search(self.value, actual) is not None if self.pattern else actual == self.value

    def __str__(self) -> str:
        return f"matching {self.value!r}" if self.pattern else repr(self.value)


@dataclass(frozen=True, slots=True)
class SignerPolicy:
    """A sigstore `VerificationPolicy`: the signing certificate names this identity, issued by this issuer."""

    identity: Expected
    issuer: Expected

    def verify(self, cert: Certificate) -> None:
        issuer = certificate_issuer(cert)
        if issuer is None or not self.issuer.matches(issuer):
            raise VerificationError(f"signed through issuer {issuer!r}, not {self.issuer}")
        identities = certificate_identities(cert)
        if not any(self.identity.matches(i) for i in identities):
            raise VerificationError(f"signed by {', '.join(sorted(identities)) or 'nobody named'}, not {self.identity}")

    def describe(self) -> str:
        return f"identity {self.identity}, issuer {self.issuer}"


def certificate_identities(cert: Certificate) -> set[str]:
    """The names a Fulcio certificate was issued to: e-mail, URI and Sigstore's own other-name SANs."""
    try:
        names = cert.extensions.get_extension_for_class(SubjectAlternativeName).value
    except ExtensionNotFound:
        return set()
    found = set(names.get_values_for_type(RFC822Name)) | set(names.get_values_for_type(UniformResourceIdentifier))
    for other in names.get_values_for_type(OtherName):
        if other.type_id == _SIGSTORE_OTHERNAME:
            try:
                found.add(_der_utf8(other.value))  # the value as DER: a UTF8String, its tag and length in front
            except ValueError:  # not one (a UnicodeDecodeError is one too): it names nobody
                continue
    return found


def certificate_issuer(cert: Certificate) -> str | None:
    for oid, decode in ((_ISSUER_V2, _der_utf8), (_ISSUER_V1, bytes.decode)):
        try:
            raw: bytes = cert.extensions.get_extension_for_oid(oid).value.value  # type: ignore[attr-defined]
        except ExtensionNotFound:
            continue
        try:
            return decode(raw)
        except (UnicodeDecodeError, ValueError):
            return None
    return None


def _der_utf8(raw: bytes) -> str:
    """A DER UTF8String (tag 0x0C), short or long length form."""
    if len(raw) < 2 or raw[0] != 0x0C:
        raise ValueError("not a UTF8String")
    length, offset = raw[1], 2
    if length & 0x80:
        size = length & 0x7F
        if not 1 <= size <= 4:  # 0x80 is BER's indefinite length, which DER does not have
            raise ValueError("bad length")
        length, offset = int.from_bytes(raw[2 : 2 + size], "big"), 2 + size
    if offset + length != len(raw):
        raise ValueError("bad length")
    return raw[offset:].decode()
