"""Palace membership credentials: the palace CA, member certificates, and invite codes.

Owns: the cryptographic side of membership (proto/PROTOCOL.md §5.4), free of IO and clocks (time
comes in as ``now``):

* A palace is a small certificate authority (like Nebula's). ``new_palace`` makes its Ed25519 CA
  key and self-signed CA certificate; the **palace id** derives from the CA public key, so it is
  public, stable and cannot be claimed by another CA.
* Each daemon's certificate is issued by the CA **for the daemon's own identity key** (the
  private key never leaves its machine): subject CN = the key's fingerprint (unique, which
  OpenSSL needs to tell trust anchors apart), O = palace id, OU = role (member | observer).
  ``verify_member_certificate`` checks the CA signature, the validity window and the fields.
* An **invite** is a one-line code carrying the palace id, the inviter's address, the CA
  fingerprint (so the joiner can authenticate the inviter before saying anything) and a random
  secret. The joiner proves it holds the secret with an HMAC over its public key and name — the
  secret itself never crosses the network, and the proof cannot be replayed for another key.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import hmac
from typing import Final, final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.x509.oid import NameOID

from .authority import PALACE_CA, Rule
from .canonical import canonical_json
from .ids import fingerprint

__all__ = [
    "CertificateError",
    "Invite",
    "InviteError",
    "MemberCertificate",
    "NAMESPACE",
    "REVOKE_EVENT_TYPE",
    "RULES",
    "Revocation",
    "RevocationError",
    "ca_fingerprint",
    "enrolment_proof",
    "issue_certificate",
    "new_palace",
    "palace_id_for",
    "sign_ca_statement",
    "sign_redaction",
    "verify_ca_statement",
    "verify_enrolment_proof",
    "verify_redaction_signature",
    "verify_member_certificate",
]

ROLES: Final = ("member", "observer")
# Why 5 years: certificates are replaced by re-enrolling, and removal is by revocation (a signed
# event that replicates), not by expiry; a short lifetime would only strand offline laptops.
MEMBER_CERT_DAYS: Final = 5 * 365
CA_CERT_DAYS: Final = 20 * 365
INVITE_PREFIX: Final = "palace1-"
#: the event type of a revocation (its metadata is a CA-signed ``Revocation``)
REVOKE_EVENT_TYPE: Final = "palace.revoke"


class CertificateError(Exception):
    """A certificate is not a valid member certificate of this palace."""


class RevocationError(Exception):
    """A revocation is malformed or not signed by this palace's CA."""


class InviteError(Exception):
    """An invite code is malformed, expired, or the proof does not match."""


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def palace_id_for(ca_public_key: bytes) -> str:
    """``pal_`` + 26 base32 characters of the CA key's sha256."""
    digest = hashlib.sha256(b"palace/id/v1\n" + ca_public_key).digest()
    return "pal_" + base64.b32encode(digest).decode("ascii").lower()[:26]


def ca_fingerprint(ca_cert_pem: bytes) -> str:
    """sha256 (hex) of the CA certificate's DER: what an invite pins the inviter's palace to."""
    der = x509.load_pem_x509_certificate(ca_cert_pem).public_bytes(serialization.Encoding.DER)
    return hashlib.sha256(der).hexdigest()


@final
@dataclasses.dataclass(frozen=True, slots=True)
class MemberCertificate:
    """What a verified member certificate says."""

    public_key: bytes
    peer_id: str
    role: str
    name: str
    palace_id: str
    not_after: datetime.datetime


def new_palace(name: str, now: datetime.datetime) -> tuple[Ed25519PrivateKey, bytes, str]:
    """Create a palace: (CA private key, CA certificate PEM, palace id)."""
    key = Ed25519PrivateKey.generate()
    palace_id = palace_id_for(_raw_public(key.public_key()))
    subject = x509.Name([
        x509.NameAttribute(NameOID.COMMON_NAME, f"palace CA {palace_id}"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, palace_id),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, name[:64] or "palace"),
    ])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(key, algorithm=None)
    )
    return key, cert.public_bytes(serialization.Encoding.PEM), palace_id


def issue_certificate(ca_key: Ed25519PrivateKey, ca_cert_pem: bytes, member_public_key: bytes, *, role: str,
                      name: str, now: datetime.datetime, days: int = MEMBER_CERT_DAYS) -> bytes:
    """Issue a member certificate (PEM) for ``member_public_key`` (raw Ed25519, 32 bytes)."""
    if role not in ROLES:
        raise CertificateError(f"role must be one of {', '.join(ROLES)}")
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    palace_id = ca_cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value
    member_key = Ed25519PublicKey.from_public_bytes(member_public_key)
    subject = x509.Name([
        x509.NameAttribute(NameOID.COMMON_NAME, fingerprint(member_public_key)),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, str(palace_id)),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
        x509.NameAttribute(NameOID.PSEUDONYM, name[:64] or "palaced"),
    ])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(ca_cert.subject)
        .public_key(member_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, algorithm=None)
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def verify_member_certificate(ca_cert_pem: bytes, cert_pem: bytes, now: datetime.datetime) -> MemberCertificate:
    """Check that ``cert_pem`` is a current member certificate issued by this palace's CA.

    Raises:
        CertificateError: naming what is wrong (not ours, expired, wrong fields, not a leaf).
    """
    try:
        ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise CertificateError(f"not a PEM certificate: {exc}") from None
    ca_key = ca_cert.public_key()
    if not isinstance(ca_key, Ed25519PublicKey) or cert.issuer != ca_cert.subject:
        raise CertificateError("certificate was not issued by this palace")
    try:
        ca_key.verify(cert.signature, cert.tbs_certificate_bytes)
    except InvalidSignature:
        raise CertificateError("certificate signature does not verify with the palace CA") from None
    if not (cert.not_valid_before_utc <= now <= cert.not_valid_after_utc):
        raise CertificateError(f"certificate is not valid now (valid until {cert.not_valid_after_utc:%Y-%m-%d})")
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        raise CertificateError("certificate has no basic constraints") from None
    if constraints.ca:
        raise CertificateError("a CA certificate is not a member certificate")
    key = cert.public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise CertificateError("member keys must be Ed25519")
    raw = _raw_public(key)

    def attr(oid: x509.ObjectIdentifier) -> str:
        values = cert.subject.get_attributes_for_oid(oid)
        if len(values) != 1:
            raise CertificateError(f"certificate subject must have exactly one {oid._name}")
        return str(values[0].value)

    peer_id, palace_id, role = attr(NameOID.COMMON_NAME), attr(NameOID.ORGANIZATION_NAME), attr(NameOID.ORGANIZATIONAL_UNIT_NAME)
    if peer_id != fingerprint(raw):
        raise CertificateError("certificate subject does not name its own key")
    if palace_id != palace_id_for(_raw_public(ca_key)):
        raise CertificateError("certificate names another palace")
    if role not in ROLES:
        raise CertificateError(f"certificate role {role!r} is not one of {', '.join(ROLES)}")
    return MemberCertificate(public_key=raw, peer_id=peer_id, role=role, name=attr(NameOID.PSEUDONYM),
                             palace_id=palace_id, not_after=cert.not_valid_after_utc)


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Invite:
    """A single-use invitation: where to enrol, whom to trust there, and the shared secret."""

    palace_id: str
    address: str
    ca_fingerprint: str
    secret: bytes
    role: str
    expires_at: int  # unix seconds

    def encode(self) -> str:
        body = "|".join([self.palace_id, self.address, self.ca_fingerprint, self.role, str(self.expires_at),
                         base64.urlsafe_b64encode(self.secret).decode("ascii").rstrip("=")])
        # A check value catches a code damaged in copy and paste before anything is dialled.
        body += "|" + hashlib.sha256(body.encode("utf-8")).hexdigest()[:8]
        return INVITE_PREFIX + base64.urlsafe_b64encode(body.encode("utf-8")).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, code: str) -> Invite:
        """Raises InviteError for anything that is not a well-formed palace invite code."""
        code = code.strip()
        if not code.startswith(INVITE_PREFIX):
            raise InviteError(f"not a palace invite code (it should start with {INVITE_PREFIX})")
        try:
            payload = code[len(INVITE_PREFIX):]
            body = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode("utf-8")
            signed_part, _, check = body.rpartition("|")
            if hashlib.sha256(signed_part.encode("utf-8")).hexdigest()[:8] != check:
                raise ValueError("check value")
            palace_id, address, ca_fp, role, expires, secret = signed_part.split("|")
            secret_bytes = base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4))
            expires_at = int(expires)
        except (ValueError, UnicodeDecodeError):
            raise InviteError("the invite code is damaged (copy the whole line)") from None
        if role not in ROLES or len(secret_bytes) < 16 or not palace_id.startswith("pal_"):
            raise InviteError("the invite code is damaged (copy the whole line)")
        return cls(palace_id, address, ca_fp, secret_bytes, role, expires_at)

    def check_not_expired(self, now_unix: float) -> None:
        if now_unix > self.expires_at:
            raise InviteError("the invite has expired; ask for a new one with `palacectl invite`")

    @property
    def invite_id(self) -> str:
        """A public handle of the invite (for single-use bookkeeping) that reveals nothing of the secret."""
        return hashlib.sha256(b"palace/invite-id/v1\n" + self.secret).hexdigest()[:32]


def _proof_message(public_key: bytes, name: str, palace_id: str) -> bytes:
    return b"palace/enrol/v1\n" + palace_id.encode() + b"\n" + public_key + b"\n" + name.encode("utf-8")


def enrolment_proof(secret: bytes, public_key: bytes, name: str, palace_id: str) -> bytes:
    """HMAC proving knowledge of the invite secret, bound to the joining key, name and palace."""
    return hmac.new(secret, _proof_message(public_key, name, palace_id), hashlib.sha256).digest()


def verify_enrolment_proof(secret: bytes, public_key: bytes, name: str, palace_id: str, proof: bytes) -> None:
    """Raises InviteError unless ``proof`` was made with ``secret`` for exactly this key and name."""
    if not hmac.compare_digest(enrolment_proof(secret, public_key, name, palace_id), proof):
        raise InviteError("enrolment proof does not match the invite")


_REVOCATION_TEXT_FIELDS: Final = ("palace_id", "peer_id", "public_key", "revoked_at", "ca_signature")


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Revocation:
    """The palace CA's word that ``peer_id`` (key ``public_key``) is no longer a member.

    ``cutoffs`` maps each origin the revoker knew for that key to the last origin_seq it held: events
    up to there stay valid (they were accepted before the revocation), anything later — and any
    origin of that key not listed — is refused by every receiver. The CA signature makes the
    revocation authoritative wherever it travels: a relay cannot forge or alter one.
    """

    palace_id: str
    peer_id: str
    public_key: bytes
    cutoffs: tuple[tuple[str, int], ...]
    revoked_at: str
    ca_signature: bytes = b""

    def signing_bytes(self) -> bytes:
        return b"palace/revoke/v1\n" + canonical_json({
            "palace_id": self.palace_id, "peer_id": self.peer_id, "public_key": self.public_key.hex(),
            "cutoffs": dict(self.cutoffs), "revoked_at": self.revoked_at,
        }).encode("utf-8")

    def signed(self, ca_key: Ed25519PrivateKey) -> Revocation:
        return dataclasses.replace(self, ca_signature=ca_key.sign(self.signing_bytes()))

    def cutoff_for(self, origin: str) -> int:
        return dict(self.cutoffs).get(origin, 0)

    def to_metadata(self) -> dict[str, object]:
        return {"palace_id": self.palace_id, "peer_id": self.peer_id, "public_key": self.public_key.hex(),
                "cutoffs": dict(self.cutoffs), "revoked_at": self.revoked_at,
                "ca_signature": self.ca_signature.hex()}

    @classmethod
    def from_metadata(cls, metadata: object, ca_cert_pem: bytes) -> Revocation:
        """Parse and verify a revocation event's metadata against the palace CA.

        Raises:
            RevocationError: malformed, for another palace, or not signed by the CA.
        """
        # Explicit checks, never ``assert``: asserts vanish under ``python -O``, and this is a
        # peer's input (tests/proto/test_pki_revocation_metadata.py runs it under -O).
        if not isinstance(metadata, dict):
            raise RevocationError("revocation metadata is malformed (not an object)")
        fields: dict[str, str] = {}
        for name in _REVOCATION_TEXT_FIELDS:
            value = metadata.get(name)
            if not isinstance(value, str):
                raise RevocationError("revocation metadata is malformed (a field is missing or not a string)")
            fields[name] = value
        cutoffs = metadata.get("cutoffs")
        if not isinstance(cutoffs, dict) or not all(
                isinstance(o, str) and type(n) is int and 0 <= n < 2**63 for o, n in cutoffs.items()):
            raise RevocationError("revocation metadata is malformed (cutoffs must map origins to sequence numbers)")
        try:
            public_key, ca_signature = bytes.fromhex(fields["public_key"]), bytes.fromhex(fields["ca_signature"])
        except ValueError:
            raise RevocationError("revocation metadata is malformed (a key or signature is not hex)") from None
        revocation = cls(palace_id=fields["palace_id"], peer_id=fields["peer_id"], public_key=public_key,
                         cutoffs=tuple(sorted(cutoffs.items())), revoked_at=fields["revoked_at"],
                         ca_signature=ca_signature)
        ca_key = x509.load_pem_x509_certificate(ca_cert_pem).public_key()
        if not isinstance(ca_key, Ed25519PublicKey) or revocation.palace_id != palace_id_for(_raw_public(ca_key)):
            raise RevocationError("revocation names another palace")
        if len(revocation.public_key) != 32 or fingerprint(revocation.public_key) != revocation.peer_id:
            raise RevocationError("revocation peer id does not match its key")
        try:
            ca_key.verify(revocation.ca_signature, revocation.signing_bytes())
        except InvalidSignature:
            raise RevocationError("revocation is not signed by the palace CA") from None
        return revocation


def _redaction_message(palace_id: str, target_event_id: str) -> bytes:
    return b"palace/redact/v1\n" + palace_id.encode("utf-8") + b"\n" + target_event_id.encode("utf-8")


def sign_redaction(ca_key: Ed25519PrivateKey, palace_id: str, target_event_id: str) -> str:
    """The palace CA's word that ``target_event_id`` is redacted (hex), carried in the metadata of
    an ``event.redact`` (``ca_signature``) when the palace owner redacts an event written by
    another daemon: every replica then honours it (proto/PROTOCOL.md §4, "Who may redact")."""
    return ca_key.sign(_redaction_message(palace_id, target_event_id)).hex()


def verify_redaction_signature(ca_cert_pem: bytes, palace_id: str, target_event_id: str, signature_hex: str) -> bool:
    """True when ``signature_hex`` is the palace CA's redaction signature for that event."""
    try:
        signature = bytes.fromhex(signature_hex)
        ca_key = x509.load_pem_x509_certificate(ca_cert_pem).public_key()
        if not isinstance(ca_key, Ed25519PublicKey) or len(signature) != 64:
            return False
        ca_key.verify(signature, _redaction_message(palace_id, target_event_id))
    except (ValueError, InvalidSignature):
        return False
    return True


def sign_ca_statement(ca_key: Ed25519PrivateKey, statement: bytes) -> str:
    """The palace CA's signature (hex) over a statement that carries its own domain, such as
    ``palace_proto.identity.ca_statement`` (an agent moved or retired by the palace owner)."""
    return ca_key.sign(statement).hex()


def verify_ca_statement(ca_cert_pem: bytes, statement: bytes, signature_hex: str) -> bool:
    """True when ``signature_hex`` is the palace CA's signature over ``statement``."""
    try:
        signature = bytes.fromhex(signature_hex)
        ca_key = x509.load_pem_x509_certificate(ca_cert_pem).public_key()
        if not isinstance(ca_key, Ed25519PublicKey) or len(signature) != 64:
            return False
        ca_key.verify(signature, statement)
    except (ValueError, InvalidSignature):
        return False
    return True


# -- the membership's row of the authority table: the core's (palace_proto.features puts it right
# after the identity's), as a revoked member's events are refused by every receiver --------------

#: the membership's namespace: no client may write a type in it
NAMESPACE: Final = "palace."
RULES: Final[tuple[Rule, ...]] = (
    Rule(REVOKE_EVENT_TYPE, (REVOKE_EVENT_TYPE,), (), "agent", frozenset({PALACE_CA}),
         "a member's key and its origins' cutoffs", "every receiver refuses the peer from then on",
         written_by="revoke (palacectl revoke)", as_daemon=True,
         test="tests/e2e/test_fleet_security.py::test_a_revoked_peer_is_cut_off_everywhere"),
)
