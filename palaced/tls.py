"""TLS for peer links: contexts built from the membership files, and the peer's certificate.

Owns: how a daemon proves who it is and checks who it talks to. Every link is TLS 1.3, mutual:
each side presents its member certificate (issued by the palace CA for its identity key), and
the trust anchor is the palace CA certificate only — a daemon of another palace, or one that
never joined, fails the handshake and learns nothing. Host names play no part: a peer is its
certificate's fingerprint.

The one exception is enrolment: while this daemon has an unused, unexpired invite, its listener
accepts handshakes without a client certificate, and such a connection may only send one
``enrol`` message (``enrolment.py``); without pending invites the listener demands a certificate.
"""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from palace_proto.pki import MemberCertificate, verify_member_certificate

if TYPE_CHECKING:
    from .tls_stream import TlsStream

__all__ = ["certificate_pem", "client_context", "enrolment_client_context", "peer_certificate", "server_context"]


def _base(purpose: int) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if purpose == ssl.PROTOCOL_TLS_SERVER else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    return ctx


def server_context(cert_path: Path, key_path: Path, ca_pem: bytes, *, allow_enrolment: bool) -> ssl.SSLContext:
    ctx = _base(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_path, key_path)
    ctx.load_verify_locations(cadata=ca_pem.decode("ascii"))
    # CERT_OPTIONAL still refuses a certificate that does not chain to the palace CA; it only
    # lets a joiner without any certificate through to the enrolment exchange.
    ctx.verify_mode = ssl.CERT_OPTIONAL if allow_enrolment else ssl.CERT_REQUIRED
    return ctx


def client_context(cert_path: Path, key_path: Path, ca_pem: bytes) -> ssl.SSLContext:
    ctx = _base(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_cert_chain(cert_path, key_path)
    ctx.load_verify_locations(cadata=ca_pem.decode("ascii"))
    ctx.check_hostname = False  # identity is the certificate's fingerprint, not a host name
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def enrolment_client_context() -> ssl.SSLContext:
    """For ``join``: the joiner has no CA yet; it checks the inviter against the invite's CA
    fingerprint after the handshake (enrolment.py), so OpenSSL verification is off here."""
    ctx = _base(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def certificate_pem(stream: TlsStream) -> bytes | None:
    der = stream.getpeercert(binary_form=True)
    if not der:
        return None
    return x509.load_der_x509_certificate(der).public_bytes(serialization.Encoding.PEM)


def peer_certificate(stream: TlsStream, ca_pem: bytes, now: datetime.datetime) -> MemberCertificate | None:
    """The verified member certificate the peer presented, or None if it presented none.

    Raises:
        CertificateError: it presented one that is not a current member certificate of ours
            (OpenSSL checked the chain; this checks the palace's own rules on its fields).
    """
    pem = certificate_pem(stream)
    if pem is None:
        return None
    return verify_member_certificate(ca_pem, pem, now)

