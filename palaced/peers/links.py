"""One authenticated connection run as a peer's link, until it ends, however it ends.

Owns: what happens between a finished TLS handshake (dialled or accepted) and the connection's
end: refusing ourselves and revoked peers, building the ``PeerLink`` (link.py), the
one-link rule (the registry decides, this asks), sorting how the link ended (the peer's protocol
error, a lost connection, this daemon unable to store, a failure of our own: logged once with its
traceback and counted in ``failures``) and releasing the link in every case.
``HANDSHAKE_TIMEOUT_S`` bounds the TLS handshake both ways in.

Imports the registry and ``link.PeerLink``; never the dialler or admission (both call it)
nor gossip, presence, reports or receipts (they hear of links through the registry's hook).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Final

import trio

from palace_proto.errors import ApiError, ProtocolError
from palace_proto.peer import Hello, parse_peer_address
from palace_proto.pki import MemberCertificate
from palace_proto.text import printable

from ..bus import EventBus
from ..clock import utc_now_seconds
from ..limits import LimitLog
from ..members import MemberDirectory
from ..store import StoreError
from ..store.aio import AsyncStore
from ..tls_stream import TlsStream
from .link import LinkHooks, PeerLink
from .registry import LinkRegistry

__all__ = ["HANDSHAKE_TIMEOUT_S", "LinkRunner"]

LOGGER: Final = logging.getLogger("palaced.peers.links")
HANDSHAKE_TIMEOUT_S: Final = 10.0


class LinkRunner:
    """Runs authenticated connections as links (``run``); counts the ones that failed unexpectedly."""

    def __init__(self, *, peer_id: str, hello: Hello, store: AsyncStore, bus: EventBus, directory: MemberDirectory,
                 registry: LinkRegistry, hooks: LinkHooks, max_artifact_bytes: int, limits: LimitLog) -> None:
        self.peer_id = peer_id
        self.hello = hello
        self.store = store
        self.bus = bus
        self.directory = directory
        self.registry = registry
        self.hooks = hooks
        self.max_artifact_bytes = max_artifact_bytes
        self.limits = limits
        #: links that ended on an unexpected error (logged with a traceback each), since start; the
        #: admission counts incoming connections that failed so before they became links
        self.failures = 0

    def __repr__(self) -> str:
        return f"<LinkRunner {self.peer_id[:7]} failures={self.failures}>"

    async def run(self, stream: TlsStream, cert: MemberCertificate, *, dialer: str,
                  remote: str) -> str:
        """Run one authenticated connection as the peer's link until it ends, however it ends.

        Returns "linked" (it ran and ended), "failed" (it ended on an error: the dialler backs
        off), "duplicate", "self" or "revoked". Every way out — EOF, a protocol error, a failure of
        our own (disk full, a bug), cancellation — releases the link in ``finally``: a link left
        marked live would make the dialler spin and refuse the peer's own dials as duplicates.
        """
        peer_id = cert.peer_id
        name = printable(cert.name, 64)
        record = self.registry.record(peer_id)
        record.name, record.role = name, cert.role
        if peer_id == self.peer_id:
            await trio.aclose_forcefully(stream)
            return "self"
        if self.directory.is_revoked(peer_id):
            LOGGER.warning("refused revoked peer %s (%s) from %s", peer_id, name, remote)
            record.state, record.last_error, record.last_error_at = "revoked", "revoked", utc_now_seconds()
            await trio.aclose_forcefully(stream)
            return "revoked"
        link = PeerLink(stream, self.hello, self.store, self.bus, directory=self.directory,
                        expected_peer_id=peer_id, hooks=self.hooks, max_artifact_bytes=self.max_artifact_bytes,
                        dialer=dialer, limits=self.limits)
        if not self.registry.register(link, peer_id):
            LOGGER.debug("closing a second connection with %s (the other direction is kept)", peer_id)
            await trio.aclose_forcefully(stream)
            return "duplicate"
        LOGGER.info("connected to %s (%s, %s) %s %s", peer_id, name, cert.role,
                    "at" if dialer == self.peer_id else "from", remote)
        if dialer != self.peer_id:  # it dialled us: tell it where from (its address record may offer that host)
            with contextlib.suppress(ValueError):  # "?": the socket was gone already
                link.machine.tell_seen(parse_peer_address(remote)[0])
        outcome, lost = "linked", False
        try:
            with self.registry.open_scope(link):
                try:
                    await link.run()
                except ProtocolError as exc:
                    outcome = "failed"
                    message = printable(exc.message, 300)
                    record.last_error, record.last_error_at = f"protocol error: {message}", utc_now_seconds()
                    LOGGER.warning("link with %s failed: %s", peer_id, message)
                    with trio.move_on_after(1):
                        await link.close("protocol_error", message[:200])
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    lost = True
                    record.last_error, record.last_error_at = f"connection lost: {exc}", utc_now_seconds()
                except (StoreError, ApiError) as exc:
                    # This daemon cannot take what the peer sends now (a full disk, shutting down):
                    # not a bug, so no traceback; the link ends and is dialled again with back-off.
                    outcome = "failed"
                    record.last_error, record.last_error_at = f"this daemon could not store its events: {exc}", utc_now_seconds()
                    self.limits.hit(f"link_store_error/{peer_id}", "link with %s ended: %s (it reconnects with "
                                    "back-off)", peer_id, exc)
                    with trio.move_on_after(1):
                        await link.close("internal", "the other side cannot store events now; it will reconnect")
                except Exception as exc:
                    # Our own failure while serving this peer (the disk, a bug): this link ends,
                    # logged once with its traceback; the daemon and every other link go on.
                    outcome = "failed"
                    self.failures += 1
                    record.last_error, record.last_error_at = f"internal error: {type(exc).__name__}: {exc}", utc_now_seconds()
                    LOGGER.exception("link with %s ended on an unexpected error", peer_id)
                    with trio.move_on_after(1):
                        await link.close("internal", "the other side failed; it will reconnect")
        finally:
            state = "revoked" if self.directory.is_revoked(peer_id) else "disconnected"
            if self.registry.release(link, peer_id, state, failed=lost or outcome == "failed"):
                LOGGER.info("disconnected from %s (%s)", peer_id, name)
            await trio.aclose_forcefully(stream)
        return outcome
