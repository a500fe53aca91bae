"""Enrolment: turning an invite code into a member certificate, over the peer port.

Owns: both ends of the one-shot exchange (proto/PROTOCOL.md §5.5). The joiner opens TLS to the
inviter without a client certificate, sends one ``enrol`` (invite id, its public key, its name,
and an HMAC proof of the invite secret bound to that key — the secret never crosses the
network), and gets back ``enrolled`` (the palace CA certificate and its new member certificate)
or a ``goodbye`` saying why not (``name_taken`` when another daemon of the palace already bears
the name it asked for: a joiner that asked for none in particular asks again under a name of its
own). The joiner then checks that the CA is the one the invite pins, that the inviter's own TLS
certificate was issued by it, and that the new certificate is for its own key with the invited
role. The inviter marks the invite used in the same durable write that
precedes its answer, so an invite is single-use even across a crash.
"""

from __future__ import annotations

import datetime
import logging
import ssl
from collections.abc import Callable
from typing import Any, Final

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.errors import ApiError, ProtocolError
from palace_proto.framing import NEED_DATA, FrameBuffer, encode_frame
from palace_proto.ids import fingerprint
from palace_proto.peer import Enrol, Enrolled, Goodbye, from_wire, parse_peer_address, to_wire
from palace_proto.pki import (
    CertificateError,
    Invite,
    InviteError,
    MemberCertificate,
    ca_fingerprint,
    enrolment_proof,
    issue_certificate,
    verify_enrolment_proof,
    verify_member_certificate,
)
from palace_proto.stamps import format_stamp_seconds
from palace_proto.text import printable

from .store import WriteContext, invites
from .store.aio import AsyncStore
from .tls import certificate_pem, enrolment_client_context
from .tls_stream import TlsStream

__all__ = ["NAME_TAKEN", "DaemonNameTaken", "EnrolmentError", "enrol", "serve_enrolment"]

LOGGER: Final = logging.getLogger("palaced.enrolment")
ENROL_FRAME_LIMIT: Final = 64 * 1024
ENROL_TIMEOUT_S: Final = 15.0
#: the goodbye code of an enrolment refused only because another daemon holds the name asked for
NAME_TAKEN: Final = "name_taken"


class EnrolmentError(ApiError):
    """Joining failed; the message says why and what to do."""

    code = "enrolment_failed"


class DaemonNameTaken(EnrolmentError):
    """The inviter refused the name asked for: another daemon of the palace bears it (the invite
    stays unused, so the joiner may ask again under another name)."""


async def _read_message(stream: trio.abc.Stream) -> Any:
    buffer = FrameBuffer(ENROL_FRAME_LIMIT)
    while True:
        frame = buffer.next_frame()
        if frame is not NEED_DATA:
            return from_wire(frame)
        data = await stream.receive_some(ENROL_FRAME_LIMIT)
        if not data:
            raise trio.BrokenResourceError("connection closed")
        buffer.feed(data)


async def serve_enrolment(stream: TlsStream, store: AsyncStore, *, ca_key: Callable[[], Ed25519PrivateKey],
                          ca_pem: bytes, palace_id: str, palace_name: str, remote: str,
                          now: Callable[[], datetime.datetime],
                          name_holder: Callable[[str], str | None]) -> MemberCertificate | None:
    """Inviter side: answer one ``enrol`` on a connection that presented no certificate.

    ``name_holder(name)`` is the peer id of the member daemon that bears ``name`` already (None:
    nobody): two daemons of one palace never share a name (cloned machines share a hostname).
    Returns the certificate issued, or None when none was."""

    async def refuse(reason: str, code: str = "enrolment_refused") -> None:
        # A taken name is a cloned machine's ordinary path: it asks again under a name of its own.
        log = LOGGER.info if code == NAME_TAKEN else LOGGER.warning
        log("refused enrolment from %s: %s", remote, reason)
        await stream.send_all(encode_frame(to_wire(Goodbye(code, reason))))

    with trio.move_on_after(ENROL_TIMEOUT_S):
        try:
            message = await _read_message(stream)
        except (ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            LOGGER.warning("connection from %s without a certificate sent no enrolment: %s", remote,
                           printable(str(exc), 200))
            return None
        if not isinstance(message, Enrol):
            # Anything but enrolment from a peer without a member certificate: learn nothing.
            LOGGER.warning("refused %s: no member certificate (it is not a member of this palace)", remote)
            return None
        if not message.name.strip() or printable(message.name, len(message.name)) != message.name:
            await refuse("the daemon name must be visible text (no control or invisible characters); "
                         "join again with --daemon-name NAME")
            return None
        invite = await store.invite(message.invite_id)
        current = now()
        if invite is None:
            await refuse("this invite was not issued here (check the code, or ask for a new one)")
            return None
        secret, role, expires_at, used_by = invite
        if used_by is not None:
            await refuse("this invite was already used; each invite admits one daemon — ask for a new one")
            return None
        if current.timestamp() > expires_at:
            await refuse("this invite has expired; ask for a new one with `palacectl invite`")
            return None
        try:
            verify_enrolment_proof(secret, message.public_key, message.name, palace_id, message.proof)
        except InviteError as exc:
            await refuse(str(exc))
            return None
        holder = name_holder(message.name)
        if holder is not None and holder != fingerprint(message.public_key):
            # Checked after the proof: only a holder of the invite learns which names are taken.
            await refuse(f"the daemon name {message.name!r} is taken: another daemon of this palace ({holder[:7]}) "
                         "bears it (names ignore case); join again with --daemon-name NAME", NAME_TAKEN)
            return None
        certificate = issue_certificate(ca_key(), ca_pem, message.public_key, role=role, name=message.name,
                                        now=current)
        joined = verify_member_certificate(ca_pem, certificate, current)

        def mark_used(ctx: WriteContext) -> bool:
            return invites.spend(ctx, message.invite_id, joined.peer_id, format_stamp_seconds(current.timestamp()))

        if not await store.write(mark_used):
            await refuse("this invite was already used; each invite admits one daemon — ask for a new one")
            return None
        await stream.send_all(encode_frame(to_wire(Enrolled(palace_name, ca_pem, certificate))))
        LOGGER.info("enrolled %s (%s, %s) from %s", joined.peer_id, printable(message.name, 64), role, remote)
        return joined
    return None


async def enrol(invite: Invite, public_key: bytes, name: str,
                address: str | None, now: datetime.datetime) -> tuple[str, bytes, bytes, str]:
    """Joiner side: enrol with the inviter; returns (palace name, CA PEM, our certificate PEM, address).

    Raises:
        EnrolmentError: unreachable inviter, refused invite, or an inviter that is not the palace
            the invite names (the message says which, and what to do).
    """
    target = address or invite.address
    try:
        host, port = parse_peer_address(target)
    except ValueError as exc:
        raise EnrolmentError(f"cannot use the inviter address {target!r}: {exc}", code="invalid_argument") from None
    try:
        with trio.fail_after(ENROL_TIMEOUT_S):
            tcp = await trio.open_tcp_stream(host, port)
            stream = TlsStream(tcp, enrolment_client_context(), server_side=False)
            try:
                await stream.do_handshake()
                server_pem = certificate_pem(stream)
                proof = enrolment_proof(invite.secret, public_key, name, invite.palace_id)
                await stream.send_all(encode_frame(to_wire(Enrol(invite.invite_id, public_key, name, proof))))
                reply = await _read_message(stream)
            finally:
                await trio.aclose_forcefully(stream)
    except trio.TooSlowError:
        raise EnrolmentError(f"the inviter at {target} did not answer within {ENROL_TIMEOUT_S:.0f} s; "
                             "is its palaced running and reachable? (try --address HOST:PORT)") from None
    except (trio.BrokenResourceError, ssl.SSLError) as exc:
        # The inviter's listener only lets certificate-less joiners in while it has an unused,
        # unexpired invite: a refused handshake means it has none (any more).
        raise EnrolmentError(f"the daemon at {target} refused to enrol us: this invite was already used or has "
                             "expired there (each invite admits one daemon) — ask for a new one with "
                             "`palacectl invite`") from exc
    except (OSError, trio.ClosedResourceError, ProtocolError) as exc:
        raise EnrolmentError(f"cannot enrol with the inviter at {target}: {exc}; is its palaced running and "
                             "reachable from here? (give another address with --address HOST:PORT)") from None
    if isinstance(reply, Goodbye):
        refused = DaemonNameTaken if reply.code == NAME_TAKEN else EnrolmentError
        raise refused(f"the inviter refused: {printable(reply.reason, 300)}")
    if not isinstance(reply, Enrolled):
        raise EnrolmentError(f"the daemon at {target} did not answer the enrolment; it may not be a palace inviter")
    # Authenticate the inviter now that we have its CA: the CA must be the one the invite pins,
    # and the certificate the inviter presented in TLS must be a member certificate of it.
    if ca_fingerprint(reply.ca_certificate) != invite.ca_fingerprint:
        raise EnrolmentError(f"the daemon at {target} is not the palace this invite is for (CA mismatch); "
                             "nothing was saved")
    try:
        inviter = verify_member_certificate(reply.ca_certificate, server_pem or b"", now)
        ours = verify_member_certificate(reply.ca_certificate, reply.certificate, now)
    except CertificateError as exc:
        raise EnrolmentError(f"the inviter's certificates do not check out ({exc}); nothing was saved") from None
    if inviter.palace_id != invite.palace_id or ours.public_key != public_key or ours.role != invite.role:
        raise EnrolmentError("the inviter issued a certificate that does not match the invite; nothing was saved")
    return reply.palace_name, reply.ca_certificate, reply.certificate, target
