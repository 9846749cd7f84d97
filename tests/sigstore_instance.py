"""A Sigstore instance of the tests' own, offline: a Fulcio CA, a CT log and a Rekor log, each a key made here,
and a trusted root naming them. It signs an image digest as cosign v3 does by default (a sigstore bundle v0.3
holding a DSSE envelope over an in-toto statement with predicate type `https://sigstore.dev/cosign/sign/v1`),
with everything sigstore-python checks: a short-lived certificate for an identity and an OIDC issuer with an
embedded SCT, a `dsse` Rekor entry with its inclusion promise (SET), a Merkle inclusion proof and a signed
checkpoint. It also signs as cosign's older layout does (`sha256-<hex>.sig`: a simple-signing payload, the
signature, certificate and Rekor SET in layer annotations), and answers Rekor's entry look-up by log index for
those, since that layout carries no inclusion proof."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import rfc8785
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

from mirror.demo.sample import SampleBuilder
from mirror.engine.referrers import fallback_tag
from mirror.oci import OCI_EMPTY, OCI_INDEX, OCI_MANIFEST
from mirror.registry import RegistryClient

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
HAMI_IDENTITY = "https://github.com/Project-HAMi/HAMi/.github/workflows/release.yaml@refs/tags/v2.10.0"
SIGN_PREDICATE = "https://sigstore.dev/cosign/sign/v1"
IN_TOTO = "application/vnd.in-toto+json"
BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"

_ISSUER_V1 = ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
_ISSUER_V2 = ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
_SIGSTORE_OTHERNAME = ObjectIdentifier("1.3.6.1.4.1.57264.1.7")
_SCT_LIST = ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")
_START = "2020-01-01T00:00:00Z"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _spki(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _key_id(key: ec.EllipticCurvePublicKey) -> bytes:
    return hashlib.sha256(_spki(key)).digest()


def _sign(key: ec.EllipticCurvePrivateKey, data: bytes) -> bytes:
    return key.sign(data, ec.ECDSA(hashes.SHA256()))


def _der_utf8(text: str) -> bytes:
    raw = text.encode()
    if len(raw) < 128:
        return bytes([0x0C, len(raw)]) + raw
    size = len(raw).to_bytes((len(raw).bit_length() + 7) // 8, "big")
    return bytes([0x0C, 0x80 | len(size)]) + size + raw


def _subject_alternative_name(identity: str) -> x509.GeneralName:
    """As Fulcio names the signer: a URI (a CI workflow, SPIFFE), an e-mail address, else (a `username` issuer's
    `user!host`) Sigstore's own OtherName, whose value is a DER UTF8String."""
    if "://" in identity:
        return x509.UniformResourceIdentifier(identity)
    if "@" in identity:
        return x509.RFC822Name(identity)
    return x509.OtherName(_SIGSTORE_OTHERNAME, _der_utf8(identity))


def _der_octets(raw: bytes) -> bytes:
    length = len(raw)
    if length < 128:
        return bytes([0x04, length]) + raw
    size = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return bytes([0x04, 0x80 | len(size)]) + size + raw


def _log(key: ec.EllipticCurvePrivateKey, url: str) -> dict[str, Any]:
    public = key.public_key()
    return {
        "baseUrl": url,
        "hashAlgorithm": "SHA2_256",
        "publicKey": {
            "rawBytes": _b64(_spki(public)),
            "keyDetails": "PKIX_ECDSA_P256_SHA_256",
            "validFor": {"start": _START},
        },
        "logId": {"keyId": _b64(_key_id(public))},
    }


def dsse_pae(payload_type: str, payload: bytes) -> bytes:
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


@dataclass
class LogEntry:
    index: int
    body: bytes
    integrated_time: int
    set_signature: bytes


@dataclass
class SigstoreInstance:
    """Fulcio, CT and Rekor keys, and the log's entries (one Merkle tree, grown as it signs)."""

    rekor_url: str = "http://127.0.0.1:9"  # where the older layout's inclusion proofs are looked up
    fulcio_key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    ct_key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    rekor_key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    entries: list[LogEntry] = field(default_factory=list)
    lookups: list[str] = field(default_factory=list)  # what the RekorServer was asked

    def __post_init__(self) -> None:
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "mirror-tests"),
                x509.NameAttribute(NameOID.COMMON_NAME, "fulcio-test-root"),
            ]
        )
        now = datetime.now(UTC)
        public = self.fulcio_key.public_key()
        self.fulcio_root = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self.fulcio_key, hashes.SHA256())
        )

    # -- the trusted root a verifier is given ------------------------------------------------------------

    def trusted_root(self) -> dict[str, Any]:
        return {
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [_log(self.rekor_key, self.rekor_url)],
            "certificateAuthorities": [
                {
                    "subject": {"organization": "mirror-tests", "commonName": "fulcio-test-root"},
                    "uri": "https://fulcio.invalid",
                    "certChain": {
                        "certificates": [{"rawBytes": _b64(self.fulcio_root.public_bytes(serialization.Encoding.DER))}]
                    },
                    "validFor": {"start": _START},
                }
            ],
            "ctlogs": [_log(self.ct_key, "https://ctfe.invalid/test")],
            "timestampAuthorities": [],
        }

    # -- Fulcio: a short-lived certificate with an embedded SCT ------------------------------------------

    def certificate(self, key: ec.EllipticCurvePrivateKey, identity: str, issuer: str) -> x509.Certificate:
        now = datetime.now(UTC).replace(microsecond=0)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.fulcio_root.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=1))
            .not_valid_after(now + timedelta(minutes=10))
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.fulcio_key.public_key()), critical=False
            )
            .add_extension(x509.SubjectAlternativeName([_subject_alternative_name(identity)]), critical=True)
            .add_extension(x509.UnrecognizedExtension(_ISSUER_V1, issuer.encode()), critical=False)
            .add_extension(x509.UnrecognizedExtension(_ISSUER_V2, _der_utf8(issuer)), critical=False)
        )
        precert = builder.sign(self.fulcio_key, hashes.SHA256())
        sct = self._sct(precert.tbs_certificate_bytes, now)
        final = builder.add_extension(x509.UnrecognizedExtension(_SCT_LIST, _der_octets(sct)), critical=False)
        cert = final.sign(self.fulcio_key, hashes.SHA256())
        assert cert.tbs_precertificate_bytes == precert.tbs_certificate_bytes
        return cert

    def _sct(self, tbs: bytes, when: datetime) -> bytes:
        """RFC 6962's SignedCertificateTimestampList with one precertificate SCT from the CT log."""
        millis = int(when.timestamp() * 1000)
        issuer_key_hash = _key_id(self.fulcio_key.public_key())
        signed = struct.pack("!BBQH", 0, 0, millis, 1) + issuer_key_hash + len(tbs).to_bytes(3, "big") + tbs
        signed += struct.pack("!H", 0)  # no extensions
        signature = _sign(self.ct_key, signed)
        sct = (
            struct.pack("!B", 0)
            + _key_id(self.ct_key.public_key())
            + struct.pack("!QH", millis, 0)
            + struct.pack("!BBH", 4, 3, len(signature))  # sha256, ecdsa
            + signature
        )
        one = struct.pack("!H", len(sct)) + sct
        return struct.pack("!H", len(one)) + one

    # -- Rekor: entries, SETs, inclusion proofs, checkpoints ---------------------------------------------

    def _append(self, body: bytes) -> LogEntry:
        index, integrated = len(self.entries), int(datetime.now(UTC).timestamp())
        canonical = rfc8785.dumps(
            {
                "body": _b64(body),
                "integratedTime": integrated,
                "logID": _key_id(self.rekor_key.public_key()).hex(),
                "logIndex": index,
            }
        )
        entry = LogEntry(index, body, integrated, _sign(self.rekor_key, canonical))
        self.entries.append(entry)
        return entry

    def _leaf(self, body: bytes) -> bytes:
        return hashlib.sha256(b"\x00" + body).digest()

    def _root(self, leaves: list[bytes]) -> bytes:
        if len(leaves) == 1:
            return leaves[0]
        split = 1 << ((len(leaves) - 1).bit_length() - 1)
        return hashlib.sha256(b"\x01" + self._root(leaves[:split]) + self._root(leaves[split:])).digest()

    def _path(self, index: int, leaves: list[bytes]) -> list[bytes]:
        """RFC 6962 audit path, from the leaf up."""
        if len(leaves) == 1:
            return []
        split = 1 << ((len(leaves) - 1).bit_length() - 1)
        if index < split:
            return [*self._path(index, leaves[:split]), self._root(leaves[split:])]
        return [*self._path(index - split, leaves[split:]), self._root(leaves[:split])]

    def inclusion_proof(self, entry: LogEntry) -> dict[str, Any]:
        leaves = [self._leaf(e.body) for e in self.entries]
        root = self._root(leaves)
        origin = "rekor.mirror-tests - 1"
        note = f"{origin}\n{len(leaves)}\n{_b64(root)}\n"
        signature = _key_id(self.rekor_key.public_key())[:4] + _sign(self.rekor_key, note.encode())
        return {
            "logIndex": str(entry.index),
            "rootHash": _b64(root),
            "treeSize": str(len(leaves)),
            "hashes": [_b64(h) for h in self._path(entry.index, leaves)],
            "checkpoint": {"envelope": f"{note}\n\u2014 {origin.split()[0]} {_b64(signature)}\n"},
        }

    def _tlog_entry(self, entry: LogEntry, kind: str) -> dict[str, Any]:
        return {
            "logIndex": str(entry.index),
            "logId": {"keyId": _b64(_key_id(self.rekor_key.public_key()))},
            "kindVersion": {"kind": kind, "version": "0.0.1"},
            "integratedTime": str(entry.integrated_time),
            "inclusionPromise": {"signedEntryTimestamp": _b64(entry.set_signature)},
            "inclusionProof": self.inclusion_proof(entry),
            "canonicalizedBody": _b64(entry.body),
        }

    # -- cosign v3: a bundle for the image digest ------------------------------------------------------

    def sign_image(
        self,
        digest: str,
        identity: str = HAMI_IDENTITY,
        issuer: str = GITHUB_ISSUER,
        name: str = "index.docker.io/projecthami/hami",
        predicate: str = SIGN_PREDICATE,
    ) -> bytes:
        """The sigstore bundle (v0.3) `cosign sign` writes as an OCI 1.1 referrer of `digest` (with another
        predicate: what `cosign attest` writes)."""
        algorithm, _, hexpart = digest.partition(":")
        statement = {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": name, "digest": {algorithm: hexpart}}],
            "predicateType": predicate,
            "predicate": {},
        }
        payload = json.dumps(statement, separators=(",", ":")).encode()
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self.certificate(key, identity, issuer)
        signature = _sign(key, dsse_pae(IN_TOTO, payload))
        envelope = {
            "payload": _b64(payload),
            "payloadType": IN_TOTO,
            "signatures": [{"sig": _b64(signature), "keyid": ""}],
        }
        pem = cert.public_bytes(serialization.Encoding.PEM)
        body: dict[str, Any] = {
            "apiVersion": "0.0.1",
            "kind": "dsse",
            "spec": {
                "envelopeHash": {
                    "algorithm": "sha256",
                    "value": hashlib.sha256(json.dumps(envelope).encode()).hexdigest(),
                },
                "payloadHash": {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()},
                "signatures": [{"signature": _b64(signature), "verifier": _b64(pem)}],
            },
        }
        entry = self._append(rfc8785.dumps(body))
        bundle = {
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {
                "certificate": {"rawBytes": _b64(cert.public_bytes(serialization.Encoding.DER))},
                "tlogEntries": [self._tlog_entry(entry, "dsse")],
            },
            "dsseEnvelope": envelope,
        }
        return json.dumps(bundle).encode()

    # -- cosign's older layout: `sha256-<hex>.sig` --------------------------------------------------------

    def sign_image_legacy(
        self,
        digest: str,
        identity: str = HAMI_IDENTITY,
        issuer: str = GITHUB_ISSUER,
        name: str = "index.docker.io/projecthami/hami",
    ) -> tuple[bytes, dict[str, str]]:
        """The simple-signing payload and the layer annotations cosign writes for it."""
        payload = json.dumps(
            {
                "critical": {
                    "identity": {"docker-reference": name},
                    "image": {"docker-manifest-digest": digest},
                    "type": "cosign container image signature",
                },
                "optional": None,
            }
        ).encode()
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self.certificate(key, identity, issuer)
        signature = _sign(key, payload)
        pem = cert.public_bytes(serialization.Encoding.PEM)
        body: dict[str, Any] = {
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()}},
                "signature": {"content": _b64(signature), "publicKey": {"content": _b64(pem)}},
            },
        }
        entry = self._append(rfc8785.dumps(body))
        rekor_bundle = {
            "SignedEntryTimestamp": _b64(entry.set_signature),
            "Payload": {
                "body": _b64(entry.body),
                "integratedTime": entry.integrated_time,
                "logIndex": entry.index,
                "logID": _key_id(self.rekor_key.public_key()).hex(),
            },
        }
        annotations = {
            "dev.cosignproject.cosign/signature": _b64(signature),
            "dev.sigstore.cosign/certificate": pem.decode(),
            "dev.sigstore.cosign/chain": self.fulcio_root.public_bytes(serialization.Encoding.PEM).decode(),
            "dev.sigstore.cosign/bundle": json.dumps(rekor_bundle),
        }
        return payload, annotations

    def rekor_response(self, index: int) -> dict[str, Any] | None:
        """`GET /api/v1/log/entries?logIndex=N`, as Rekor answers it."""
        if not 0 <= index < len(self.entries):
            return None
        entry = self.entries[index]
        uuid = hashlib.sha256(entry.body).hexdigest()
        proof = self.inclusion_proof(entry)
        return {
            uuid: {
                "body": _b64(entry.body),
                "integratedTime": entry.integrated_time,
                "logID": _key_id(self.rekor_key.public_key()).hex(),
                "logIndex": entry.index,
                "verification": {
                    "inclusionProof": {
                        "checkpoint": proof["checkpoint"]["envelope"],
                        "hashes": [base64.b64decode(h).hex() for h in proof["hashes"]],
                        "logIndex": entry.index,
                        "rootHash": base64.b64decode(proof["rootHash"]).hex(),
                        "treeSize": int(proof["treeSize"]),
                    },
                    "signedEntryTimestamp": _b64(entry.set_signature),
                },
            }
        }


class RekorServer:
    """The instance's Rekor, on loopback: answers entry look-ups by log index and counts them."""

    def __init__(self, instance: SigstoreInstance) -> None:
        self.instance = instance
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                # only Rekor's API is counted: under load another xdist worker's service can be handed this
                # port before it binds, and its readiness poll (`/readyz`) lands here
                if self.path.startswith("/api/"):
                    owner.instance.lookups.append(self.path)
                url = urlsplit(self.path)
                index = parse_qs(url.query).get("logIndex", ["-1"])[0]
                found = owner.instance.rekor_response(int(index)) if url.path == "/api/v1/log/entries" else None
                data = json.dumps(found or {"code": 404, "message": "entry not found"}).encode()
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        instance.rekor_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def push_signature(client: RegistryClient, repository: str, subject: dict[str, Any], bundle: bytes) -> str:
    """As cosign v3 pushes a signature where the registry has no referrers API: the referrer, then the
    fallback index listing it."""
    builder = SampleBuilder(client, repository, seed=7)
    referrer = await builder.manifest(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": BUNDLE,
            "config": await builder.blob(b"{}", OCI_EMPTY),
            "layers": [await builder.blob(bundle, BUNDLE)],
            "subject": subject,
            "annotations": {"dev.sigstore.bundle.predicateType": "https://sigstore.dev/cosign/sign/v1"},
        }
    )
    listed = {**referrer, "artifactType": BUNDLE}
    await builder.manifest(
        {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [listed]}, fallback_tag(subject["digest"])
    )
    return str(referrer["digest"])
