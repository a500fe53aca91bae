"""Which origins belong to whom: origin id → member certificate, verified against the palace CA.

Owns: the bindings a replica uses to verify events of any origin, including origins it only
hears of through a relay. A binding comes from a peer's hello (its own origin, its own
certificate) or from a ``Members`` message (bindings the peer knows); every certificate is checked
against the palace CA before it is believed, and an origin never changes keys. ``key_for`` is what
the store's verified apply calls: it answers only for members in good standing, so events of
observers and strangers are rejected on arrival and never relayed.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Final

from palace_proto.pki import CertificateError, MemberCertificate, verify_member_certificate

__all__ = ["BindingError", "MemberDirectory"]

WRITER_ROLES: Final = frozenset({"member"})


class BindingError(Exception):
    """A binding is not acceptable (bad certificate, or an origin claimed by another key)."""


class MemberDirectory:
    def __init__(self, ca_cert_pem: bytes, now: Callable[[], datetime.datetime]) -> None:
        self._ca = ca_cert_pem
        self._now = now
        self._by_origin: dict[str, tuple[MemberCertificate, bytes]] = {}

    def __repr__(self) -> str:
        return f"<MemberDirectory origins={len(self._by_origin)}>"

    def bind(self, origin: str, certificate_pem: bytes) -> MemberCertificate:
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
        self._by_origin[origin] = (cert, certificate_pem)
        return cert

    def key_for(self, origin: str) -> bytes | None:
        """The key of an origin whose events we accept: bound, and written by a member."""
        known = self._by_origin.get(origin)
        if known is None or known[0].role not in WRITER_ROLES:
            return None
        return known[0].public_key

    def entries(self) -> tuple[tuple[str, bytes], ...]:
        return tuple((origin, pem) for origin, (_, pem) in sorted(self._by_origin.items()))
