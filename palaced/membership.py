"""This daemon's membership of a palace: the files under ``$HOME/palace/`` and ``init``.

Owns: creating a palace (``palacectl init``: a new CA and this daemon's own member certificate),
keeping what an enrolment brought (``palacectl join``), and loading what this daemon knows about its palace at
start-up. Before ``init`` or ``join`` a
daemon belongs to no palace and opens no network port. Files (directory 0700):

    palace.json  {"palace_id", "palace_name", "name" (this daemon's), "role", "peer_id", "since"}
    ca.crt       the palace CA certificate (every member has it: the TLS trust anchor)
    ca.key       the CA private key (0600; only on the daemon that can issue invites)
    member.crt   this daemon's certificate, issued for its own identity key
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.errors import ApiError
from palace_proto.ids import fingerprint
from palace_proto.pki import MemberCertificate, issue_certificate, new_palace, verify_member_certificate
from palace_proto.stamps import format_stamp_seconds

from .files import write_atomically

__all__ = ["Membership", "MembershipError", "create_palace", "load_membership", "save_joined"]

PALACE_DIR: Final = "palace"


class MembershipError(ApiError):
    """The membership files are missing, damaged or do not match this daemon's identity."""

    code = "invalid_argument"


@dataclasses.dataclass(frozen=True, slots=True)
class Membership:
    palace_id: str
    palace_name: str
    #: this daemon's name (in its certificate; shown to peers)
    name: str
    role: str
    peer_id: str
    since: str
    ca_cert_pem: bytes
    member_pem: bytes
    member: MemberCertificate
    can_invite: bool

    def to_wire(self) -> dict[str, Any]:
        return {"palace_id": self.palace_id, "palace_name": self.palace_name, "name": self.name, "role": self.role,
                "peer_id": self.peer_id, "since": self.since, "can_invite": self.can_invite,
                "certificate_expires": format_stamp_seconds(self.member.not_after.timestamp())}


def load_membership(home: Path, identity: Ed25519PrivateKey, now: datetime.datetime) -> Membership | None:
    """What this daemon knows of its palace, or None if it has not joined one.

    Raises:
        MembershipError: the files exist but are damaged or belong to another identity.
    """
    folder = home / PALACE_DIR
    try:
        info = json.loads((folder / "palace.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise MembershipError(f"{folder / 'palace.json'} is unreadable or damaged: {exc}") from None
    try:
        ca_pem = (folder / "ca.crt").read_bytes()
        member_pem = (folder / "member.crt").read_bytes()
        cert = verify_member_certificate(ca_pem, member_pem, now)
    except Exception as exc:  # OSError or CertificateError: either way the membership is unusable
        raise MembershipError(f"the palace membership in {folder} is unusable: {exc}") from None
    own_key = identity.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    if cert.public_key != own_key:
        raise MembershipError(f"{folder / 'member.crt'} was issued for another identity key")
    return Membership(palace_id=cert.palace_id, palace_name=str(info.get("palace_name", "")), name=cert.name,
                      role=cert.role, peer_id=cert.peer_id, since=str(info.get("since", "")), ca_cert_pem=ca_pem,
                      member_pem=member_pem, member=cert, can_invite=(folder / "ca.key").exists())


def _refuse_if_member(home: Path, identity: Ed25519PrivateKey, now: datetime.datetime) -> None:
    existing = load_membership(home, identity, now)
    if existing is not None:
        raise MembershipError(
            f"this daemon already belongs to palace {existing.palace_id} ({existing.palace_name}); "
            "a daemon is a member of one palace"
        )


def _own_key(identity: Ed25519PrivateKey) -> bytes:
    return identity.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _save(home: Path, identity: Ed25519PrivateKey, *, palace_id: str, palace_name: str, name: str, role: str,
          ca_pem: bytes, member_pem: bytes, now: datetime.datetime) -> Membership:
    folder = home / PALACE_DIR
    write_atomically(folder / "ca.crt", ca_pem, 0o644)
    write_atomically(folder / "member.crt", member_pem, 0o644)
    # palace.json last: its presence is what marks the membership complete.
    info = {"palace_id": palace_id, "palace_name": palace_name, "name": name, "role": role,
            "peer_id": fingerprint(_own_key(identity)), "since": format_stamp_seconds(now.timestamp())}
    write_atomically(folder / "palace.json", (json.dumps(info, indent=2) + "\n").encode(), 0o600)
    membership = load_membership(home, identity, now)
    assert membership is not None
    return membership


def create_palace(home: Path, identity: Ed25519PrivateKey, palace_name: str, name: str,
                  now: datetime.datetime) -> Membership:
    """``palacectl init``: make this daemon (called ``name``) the first member of a new palace.

    Raises:
        MembershipError: this daemon already belongs to a palace.
    """
    _refuse_if_member(home, identity, now)
    folder = home / PALACE_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    ca_key, ca_pem, palace_id = new_palace(palace_name, now)
    member_pem = issue_certificate(ca_key, ca_pem, _own_key(identity), role="member", name=name, now=now)
    write_atomically(folder / "ca.key", ca_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()), 0o600)
    return _save(home, identity, palace_id=palace_id, palace_name=palace_name, name=name, role="member",
                 ca_pem=ca_pem, member_pem=member_pem, now=now)


def save_joined(home: Path, identity: Ed25519PrivateKey, *, palace_name: str, ca_pem: bytes, member_pem: bytes,
                now: datetime.datetime) -> Membership:
    """``palacectl join``: keep the certificates the inviter issued for us.

    Raises:
        MembershipError: this daemon already belongs to a palace, or the certificate is unusable.
    """
    _refuse_if_member(home, identity, now)
    try:
        cert = verify_member_certificate(ca_pem, member_pem, now)
    except Exception as exc:
        raise MembershipError(f"the certificate the inviter issued is unusable: {exc}") from None
    if cert.public_key != _own_key(identity):
        raise MembershipError("the inviter issued a certificate for another key")
    folder = home / PALACE_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    return _save(home, identity, palace_id=cert.palace_id, palace_name=palace_name, name=cert.name, role=cert.role,
                 ca_pem=ca_pem, member_pem=member_pem, now=now)


def load_ca_key(home: Path) -> Ed25519PrivateKey:
    """The palace CA's private key (only on the daemon that ran ``init``).

    Raises:
        MembershipError: the file is missing, unreadable or not an Ed25519 key (one line saying so).
    """
    path = home / "palace" / "ca.key"
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except OSError as exc:
        raise MembershipError(f"cannot read the palace key {path}: {exc.strerror or exc}") from None
    except (ValueError, TypeError):
        raise MembershipError(f"the palace key {path} is damaged (not a PEM private key); restore it from a "
                              "backup of this home") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise MembershipError(f"the palace key {path} is not an Ed25519 key; restore it from a backup of this home")
    return key
