"""Who belongs to the palace: origin → member certificate bindings, and revocations.

Owns: the bindings a replica uses to verify events of any origin, including origins it only
hears of through a relay, and the revocations that override them. A binding comes from a peer's
hello (its own origin, its own certificate) or from a ``Members`` message (bindings the peer
knows); every certificate is checked against the palace CA before it is believed, and an origin
never changes keys. ``key_for`` is what the store's verified apply calls: it answers only for
members in good standing, so events of observers, strangers and revoked peers (past their cutoff)
are rejected on arrival and never relayed.

A revocation is a ``palace.revoke`` event whose metadata the palace CA signed; it is observed
here the moment it is applied or appended, so the rest of the same batch is already judged by it.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Callable
from typing import Final

from palace_proto.envelope import SignedEvent
from palace_proto.pki import (
    REVOKE_EVENT_TYPE,
    CertificateError,
    MemberCertificate,
    Revocation,
    RevocationError,
    verify_member_certificate,
)

__all__ = ["BindingError", "MemberDirectory"]

LOGGER: Final = logging.getLogger("palaced.members")
WRITER_ROLES: Final = frozenset({"member"})


class BindingError(Exception):
    """A binding is not acceptable (bad certificate, or an origin claimed by another key)."""


class MemberDirectory:
    def __init__(self, ca_cert_pem: bytes, now: Callable[[], datetime.datetime]) -> None:
        self._ca = ca_cert_pem
        self._now = now
        self._by_origin: dict[str, tuple[MemberCertificate, bytes]] = {}
        self._by_peer: dict[str, tuple[MemberCertificate, bytes]] = {}
        self._revoked: dict[bytes, Revocation] = {}
        #: bindings learned since the last ``take_unsaved`` (the network layer persists them)
        self._unsaved: list[tuple[str, bytes]] = []
        #: called with each new revocation (the network layer drops that peer's links)
        self.on_revoke: Callable[[Revocation], None] | None = None

    def __repr__(self) -> str:
        return f"<MemberDirectory origins={len(self._by_origin)} revoked={len(self._revoked)}>"

    @property
    def ca_cert_pem(self) -> bytes:
        return self._ca

    def bind(self, origin: str, certificate_pem: bytes, *, persisted: bool = False) -> MemberCertificate:
        """Verify ``certificate_pem`` and bind ``origin`` to its key.

        Raises:
            BindingError: the certificate is not a current member certificate of this palace, or
                the origin is already bound to a different key.
        """
        try:
            cert = verify_member_certificate(self._ca, certificate_pem, self._now())
        except CertificateError as exc:
            raise BindingError(f"origin {origin}: {exc}") from None
        known = self._by_origin.get(origin)
        if known is not None and known[0].public_key != cert.public_key:
            raise BindingError(f"origin {origin} is already bound to another key")
        if known is None and not persisted:
            self._unsaved.append((origin, certificate_pem))
        self._by_origin[origin] = (cert, certificate_pem)
        self._by_peer[cert.peer_id] = (cert, certificate_pem)
        return cert

    def take_unsaved(self) -> list[tuple[str, bytes]]:
        unsaved, self._unsaved = self._unsaved, []
        return unsaved

    def key_for(self, origin: str, origin_seq: int) -> bytes | None:
        """The key to verify event ``origin_seq`` of ``origin`` with, or None to refuse it."""
        known = self._by_origin.get(origin)
        if known is None or known[0].role not in WRITER_ROLES:
            return None
        revocation = self._revoked.get(known[0].public_key)
        if revocation is not None and origin_seq > revocation.cutoff_for(origin):
            return None
        return known[0].public_key

    def entries(self) -> tuple[tuple[str, bytes], ...]:
        return tuple((origin, pem) for origin, (_, pem) in sorted(self._by_origin.items()))

    def certificates(self) -> list[MemberCertificate]:
        """Every daemon we know a certificate of (one per peer id)."""
        return [cert for cert, _ in self._by_peer.values()]

    def certificate_of_peer(self, peer_id: str) -> MemberCertificate | None:
        known = self._by_peer.get(peer_id)
        return known[0] if known else None

    def origins_of_peer(self, peer_id: str) -> list[str]:
        return sorted(o for o, (cert, _) in self._by_origin.items() if cert.peer_id == peer_id)

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

    def observe_metadata(self, metadata: object) -> None:
        try:
            revocation = Revocation.from_metadata(metadata, self._ca)
        except RevocationError as exc:
            LOGGER.warning("ignored a revocation event: %s", exc)
            return
        self.revoke(revocation)
