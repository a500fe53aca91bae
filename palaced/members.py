"""Who belongs to the palace: origin → member certificate bindings, and revocations.

Owns: the bindings a replica uses to verify events of any origin, including origins it only
hears of through a relay, and the revocations that override them. A binding comes from a peer's
hello (its own origin, its own certificate) or from a ``Members`` message (bindings the peer
knows); every certificate is checked against the palace CA and every binding's proof against the
certificate's key (palace_proto.bindings: a member cannot claim another daemon's origin), an
origin never changes keys, and a key binds at most ``MAX_ORIGINS_PER_KEY`` origins. ``key_for`` is what the
store's verified apply calls: it answers only for
members in good standing, so events of observers, strangers and revoked peers (past their cutoff)
are rejected on arrival and never relayed.

A revocation is a ``palace.revoke`` event whose metadata the palace CA signed; it is observed
here the moment it is applied or appended, so the rest of the same batch is already judged by it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from collections.abc import Callable
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from palace_proto.authority import PALACE_CA, TARGET_ORIGIN, judge, rule_named
from palace_proto.bindings import BindingProofError, OriginBinding, check_binding_proof
from palace_proto.envelope import SignedEvent
from palace_proto.pki import (
    REVOKE_EVENT_TYPE,
    CertificateError,
    MemberCertificate,
    Revocation,
    RevocationError,
    palace_id_for,
    verify_member_certificate,
    verify_redaction_signature,
)

__all__ = ["BindingError", "MAX_ORIGINS_PER_KEY", "MemberDirectory"]

LOGGER: Final = logging.getLogger("palaced.members")
WRITER_ROLES: Final = frozenset({"member"})
# Why 32: a daemon mints a new origin only when its database is new, restored, upgraded from a
# legacy origin or its key changes — a handful in a lifetime. A member claiming more is flooding
# every replica's bindings table and every link's members messages: refused beyond this.
MAX_ORIGINS_PER_KEY: Final = 32


class BindingError(Exception):
    """A binding is not acceptable (bad certificate or proof, an origin claimed by another key, or
    more origins for one key than ``MAX_ORIGINS_PER_KEY``)."""


@dataclasses.dataclass(slots=True)
class _Bound:
    cert: MemberCertificate
    pem: bytes
    #: the proof that the origin belongs to the key (None: stored before proofs existed)
    proof: bytes | None


class MemberDirectory:
    def __init__(self, ca_cert_pem: bytes, now: Callable[[], datetime.datetime]) -> None:
        self._ca = ca_cert_pem
        ca_key = x509.load_pem_x509_certificate(ca_cert_pem).public_key()
        self.palace_id = palace_id_for(ca_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))
        self._now = now
        self._by_origin: dict[str, _Bound] = {}
        self._by_peer: dict[str, tuple[MemberCertificate, bytes]] = {}
        self._origins_of_key: dict[bytes, set[str]] = {}
        self._revoked: dict[bytes, Revocation] = {}
        #: bindings learned (or given a proof) since the last ``take_unsaved``; the network layer persists them
        self._unsaved: dict[str, OriginBinding] = {}
        #: called with each new revocation (the network layer drops that peer's links)
        self.on_revoke: Callable[[Revocation], None] | None = None

    def __repr__(self) -> str:
        return f"<MemberDirectory origins={len(self._by_origin)} revoked={len(self._revoked)}>"

    @property
    def ca_cert_pem(self) -> bytes:
        return self._ca

    def verify_certificate(self, certificate_pem: bytes) -> MemberCertificate:
        """A member certificate of this palace, valid now.

        Raises:
            BindingError: naming what is wrong with it.
        """
        try:
            return verify_member_certificate(self._ca, certificate_pem, self._now())
        except CertificateError as exc:
            raise BindingError(str(exc)) from None

    def bind(self, binding: OriginBinding, *, stored: bool = False) -> MemberCertificate:
        """Verify a binding and bind its origin to its certificate's key.

        The certificate must be a current member certificate of this palace and the proof must fit
        its key (palace_proto.bindings); an origin never changes keys; a key binds at most
        ``MAX_ORIGINS_PER_KEY`` origins. ``stored``: a binding read back from our own database,
        accepted before proofs existed (``proof`` None) — trusted here, never relayed.

        Raises:
            BindingError: the binding is refused (nothing changes).
        """
        cert = self.verify_certificate(binding.certificate)
        origin = binding.origin
        known = self._by_origin.get(origin)
        if known is not None and known.cert.public_key != cert.public_key:
            raise BindingError(f"origin {origin} is already bound to another key")
        proof: bytes | None = binding.proof or None
        if proof is not None or not stored:
            try:
                check_binding_proof(origin, cert.public_key, binding.proof, self.palace_id)
            except BindingProofError as exc:
                raise BindingError(str(exc)) from None
        if known is None:
            held = self._origins_of_key.setdefault(cert.public_key, set())
            if len(held) >= MAX_ORIGINS_PER_KEY:
                raise BindingError(f"key {cert.peer_id} already binds {MAX_ORIGINS_PER_KEY} origins (the limit)")
            held.add(origin)
            self._by_origin[origin] = _Bound(cert, binding.certificate, proof)
            if not stored:
                self._unsaved[origin] = binding
        elif known.proof is None and proof is not None:
            known.proof = proof  # a stored binding gets the proof it lacked: from now on it is relayed
            if not stored:
                self._unsaved[origin] = binding
        self._by_peer[cert.peer_id] = (cert, binding.certificate)
        return cert

    def take_unsaved(self) -> list[tuple[str, bytes, bytes | None]]:
        """(origin, certificate, proof) rows to persist, once each."""
        unsaved, self._unsaved = self._unsaved, {}
        return [(b.origin, b.certificate, b.proof or None) for b in unsaved.values()]

    def key_for(self, origin: str, origin_seq: int) -> bytes | None:
        """The key to verify event ``origin_seq`` of ``origin`` with, or None to refuse it."""
        known = self._by_origin.get(origin)
        if known is None or known.cert.role not in WRITER_ROLES:
            return None
        revocation = self._revoked.get(known.cert.public_key)
        if revocation is not None and origin_seq > revocation.cutoff_for(origin):
            return None
        return known.cert.public_key

    def is_bound(self, origin: str) -> bool:
        return origin in self._by_origin

    def binding(self, origin: str) -> OriginBinding | None:
        """The proven binding of ``origin`` (None: unknown, or stored without a proof)."""
        known = self._by_origin.get(origin)
        if known is None or known.proof is None:
            return None
        return OriginBinding(origin, known.pem, known.proof)

    def entries(self) -> tuple[OriginBinding, ...]:
        """Every proven binding, in origin order (what a link's ``members`` messages carry)."""
        return tuple(OriginBinding(origin, bound.pem, bound.proof) for origin, bound in sorted(self._by_origin.items())
                     if bound.proof is not None)

    def certificates(self) -> list[MemberCertificate]:
        """Every daemon we know a certificate of (one per peer id)."""
        return [cert for cert, _ in self._by_peer.values()]

    def certificate_of_peer(self, peer_id: str) -> MemberCertificate | None:
        known = self._by_peer.get(peer_id)
        return known[0] if known else None

    def peer_of_origin(self, origin: str) -> str | None:
        """The daemon (peer id) whose key binds ``origin`` (None: unbound)."""
        known = self._by_origin.get(origin)
        return known.cert.peer_id if known is not None else None

    def origins_of_peer(self, peer_id: str) -> list[str]:
        return sorted(o for o, bound in self._by_origin.items() if bound.cert.peer_id == peer_id)

    # -- revocation ----------------------------------------------------------------------------

    def is_revoked(self, peer_id: str) -> bool:
        return any(r.peer_id == peer_id for r in self._revoked.values())

    def revocations(self) -> list[Revocation]:
        return sorted(self._revoked.values(), key=lambda r: r.revoked_at)

    def revoke(self, revocation: Revocation) -> bool:
        """Record a verified revocation; True if it is new."""
        if revocation.public_key in self._revoked:
            return False
        self._revoked[revocation.public_key] = revocation
        LOGGER.warning("peer %s is revoked (since %s)", revocation.peer_id, revocation.revoked_at)
        if self.on_revoke is not None:
            self.on_revoke(revocation)
        return True

    def observe(self, event: SignedEvent) -> None:
        """Take note of a stored event: a valid revocation takes effect at once."""
        if event.type != REVOKE_EVENT_TYPE:
            return
        self.observe_metadata(json.loads(event.metadata_json))

    def redaction_authorized(self, redaction: SignedEvent, target_origin: str) -> bool:
        """May this ``event.redact`` purge an event of ``target_origin``? Yes when it was written by
        that origin itself, or when the palace CA signed it (only the daemon holding the CA key can:
        the palace owner's redaction of anyone's event). ``target_origin`` "" asks about the CA
        signature alone (the target has not arrived yet). The authority table's ``event.redact``
        row decides, from the roles the redaction's writer holds."""
        roles = set()
        if target_origin and redaction.origin == target_origin:
            roles.add(TARGET_ORIGIN)
        try:
            metadata = json.loads(redaction.metadata_json)
        except ValueError:
            metadata = None
        if isinstance(metadata, dict):
            target, signature = metadata.get("redacts"), metadata.get("ca_signature")
            if isinstance(target, str) and isinstance(signature, str) and verify_redaction_signature(
                    self._ca, self.palace_id, target, signature):
                roles.add(PALACE_CA)
        return judge(rule_named("event.redact"), roles, agent=redaction.from_agent).ok

    def observe_metadata(self, metadata: object) -> None:
        try:
            revocation = Revocation.from_metadata(metadata, self._ca)
        except RevocationError as exc:
            LOGGER.warning("ignored a revocation event: %s", exc)
            return
        self.revoke(revocation)
