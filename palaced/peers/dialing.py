"""Dialling: the addresses this daemon dials, why, and how often.

Owns: the dial targets — static peers (``palacectl peers add``, stored), addresses remembered from
earlier connections (so a restart reconnects without waiting for mDNS), peers that mDNS reports,
the addresses other daemons gossip about themselves (``gossiped``: addresses.py keeps their
records) and the inviter's address a joiner was given — each with its own loop that dials, runs the TLS
handshake as a client, hands the authenticated stream to the link runner and, once the link ends
or the dial fails, dials again with back-off; while a link with that peer lives (either
direction) the loop waits on it. Also the mDNS side of discovery: announcing this daemon and
turning sightings into targets (``mdns_state`` says how that goes), bounded so that the LAN
cannot make us dial without end.

Changes peers' records only through the registry (which tells its subscribers); imports the
registry, the link runner and the store's ``peer_rows``, never admission, gossip or reports.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import ssl
from collections.abc import Callable
from functools import partial
from typing import Final

import trio

from palace_proto.errors import ApiError
from palace_proto.ids import fingerprint_is_valid
from palace_proto.peer import PEER_PROTOCOL_VERSION, format_peer_address, parse_peer_address
from palace_proto.pki import CertificateError
from palace_proto.text import printable

from ..clock import utc_datetime, utc_now_seconds
from ..limits import LimitLog
from ..members import MemberDirectory
from ..membership import Membership
from ..store import StoreError, WriteContext, peer_rows
from ..store.aio import AsyncStore
from ..tls import peer_certificate
from ..tls_stream import TlsStream
from .links import HANDSHAKE_TIMEOUT_S, LinkRunner
from .registry import LinkRegistry

__all__ = ["MAX_TARGETS", "Dialer", "Target"]

LOGGER: Final = logging.getLogger("palaced.peers.dialing")
CONNECT_TIMEOUT_S: Final = 5.0
# Back-off between dial attempts: quick first retries (a peer restarting), then at most 30 s.
BACKOFF_FIRST_S: Final = 0.5
BACKOFF_MAX_S: Final = 30.0
# A link that lived this long resets the back-off (it was a real connection, not a flap).
STABLE_LINK_S: Final = 10.0
# When mDNS or gossip shows a peer to both sides at once, the larger peer id waits this long
# before dialling, so the preferred connection (dialled by the smaller id) usually comes first.
MDNS_DEFER_S: Final = 2.0
# Remember at most this many addresses per peer (the most recently working ones).
REMEMBERED_PER_PEER: Final = 3
# Why 256: addresses we dial (static, remembered, mDNS). mDNS is open to anyone on the LAN, and the
# palace id in its records is public: beyond this, new mDNS sightings are ignored.
MAX_TARGETS: Final = 256


@dataclasses.dataclass(slots=True)
class Target:
    """An address we dial, and why."""

    address: str
    sources: set[str]
    peer_id: str | None = None
    state: str = "idle"
    last_error: str | None = None
    last_error_at: str | None = None
    scope: trio.CancelScope | None = None
    defer_s: float = 0.0


class Dialer:
    """The dial targets and their loops (started in ``nursery`` once the network runs)."""

    def __init__(self, *, peer_id: str, membership: Membership, store: AsyncStore, directory: MemberDirectory,
                 registry: LinkRegistry, runner: LinkRunner, client_ctx: ssl.SSLContext, limits: LimitLog,
                 mdns: bool) -> None:
        self.peer_id = peer_id
        self.membership = membership
        self.store = store
        self.directory = directory
        self.registry = registry
        self.runner = runner
        self.limits = limits
        self._client_ctx = client_ctx
        self.mdns_state = "off" if not mdns else "starting"
        self.targets: dict[str, Target] = {}
        #: where dial loops run, set by the network as it starts (a target added before is kept, not dialled)
        self.nursery: trio.Nursery | None = None
        #: may a known peer be dialled now? (overlay.py's ``may_dial``: past nine members, only the
        #: peers its partial view keeps, asked or owes a message, and daemons no binding tells of
        #: yet); every target of a peer it refuses waits for ``gate_changed``
        self.gate: Callable[[str], bool] = lambda peer_id: True
        self._gate_changed = trio.Event()

    def __repr__(self) -> str:
        return f"<Dialer {self.peer_id[:7]} targets={len(self.targets)} mdns={self.mdns_state}>"

    async def dial_known(self) -> None:
        """Dial the static peers and the addresses remembered from earlier connections."""
        for address in await self.store.static_peers():
            self.add_target(address, "static")
        for peer_id, address, _source, _ok in await self.store.peer_addresses():
            self.add_target(address, "remembered", peer_id=peer_id)

    # -- mDNS ----------------------------------------------------------------------------------

    async def serve_mdns(self, port: int) -> None:
        """Announce this daemon (peer port ``port``) and dial the peers mDNS shows, until cancelled."""
        from ..discovery import Sighting, run_discovery  # zeroconf is imported only when mDNS is on

        def seen(sighting: Sighting) -> None:
            # Anyone on the LAN may announce anything with our (public) palace id: a peer id must at
            # least be a well-formed fingerprint before it becomes a record or a dial target.
            if not fingerprint_is_valid(sighting.peer_id):
                self.limits.hit("mdns_malformed", "mDNS: ignoring a record whose peer id is not a fingerprint (%s)",
                                printable(sighting.peer_id, 80))
                return
            if sighting.version != PEER_PROTOCOL_VERSION:
                self.limits.hit(f"mdns_version_{sighting.version}", "mDNS: peer %s speaks protocol %s, we speak %s; "
                                "upgrade both", sighting.peer_id, sighting.version, PEER_PROTOCOL_VERSION)
                return
            defer = self._defer_for(sighting.peer_id)
            for address in sighting.addresses:
                self.add_target(address, "mdns", peer_id=sighting.peer_id, defer_s=defer)

        def gone(peer_id: str) -> None:
            # mDNS no longer names it: an address only mDNS gave goes, one also known otherwise (static,
            # remembered, gossiped) stays, no longer counted as seen by mDNS (doctor's mdns check).
            for target in list(self.targets.values()):
                if target.peer_id == peer_id and "mdns" in target.sources:
                    target.sources.discard("mdns")
                    if not target.sources:
                        self._drop_target(target.address)

        try:
            async with trio.open_nursery() as nursery:
                working = await nursery.start(partial(
                    run_discovery, palace_id=self.membership.palace_id, peer_id=self.peer_id,
                    name=self.membership.name, port=port, version=PEER_PROTOCOL_VERSION,
                    on_seen=seen, on_gone=gone))
                self.mdns_state = "on" if working else "failed (see the daemon log)"
        finally:
            self.mdns_state = "off"

    # -- targets -------------------------------------------------------------------------------

    def add_target(self, address: str, source: str, *, peer_id: str | None = None, defer_s: float = 0.0) -> None:
        """Dial ``address`` (until it works, with back-off) and keep redialling it while it is wanted."""
        target = self.targets.get(address)
        if target is not None:
            target.sources.add(source)
            if peer_id and not target.peer_id:
                target.peer_id = peer_id
            return
        if len(self.targets) >= MAX_TARGETS and source in ("mdns", "gossip"):
            self.limits.hit("dial_targets", "ignoring %s: %d addresses are dialled already (the limit)",
                            "mDNS sightings" if source == "mdns" else "gossiped addresses", MAX_TARGETS)
            return
        target = self.targets[address] = Target(address, {source}, peer_id=peer_id, defer_s=defer_s)
        if peer_id:
            self.registry.record(peer_id)
        if self.nursery is not None:
            self.nursery.start_soon(self._dial_loop, target)

    def gossiped(self, peer_id: str, addresses: list[str]) -> None:
        """Dial ``peer_id`` at ``addresses`` (what its own newest record offers, already checked:
        ``palace_proto.addresses.dialable``; empty once the record aged out or the daemon was
        revoked), and no longer at what an earlier record of it offered."""
        for address, target in list(self.targets.items()):
            if "gossip" in target.sources and target.peer_id == peer_id and address not in addresses:
                target.sources.discard("gossip")
                if not target.sources:
                    self._drop_target(address)
        defer_s = self._defer_for(peer_id)
        for address in addresses:
            self.add_target(address, "gossip", peer_id=peer_id, defer_s=defer_s)

    def _defer_for(self, peer_id: str) -> float:
        """How long to wait before dialling ``peer_id`` when both sides learn of each other at once
        (mDNS, gossip): the larger peer id waits, so the preferred connection (dialled by the smaller
        id) usually comes first."""
        return MDNS_DEFER_S if self.peer_id > peer_id else 0.0

    def _drop_target(self, address: str) -> None:
        target = self.targets.pop(address, None)
        if target is None:
            return
        if target.scope is not None:
            target.scope.cancel()
        # A record made only because mDNS named a peer id goes with its last address (mDNS is open
        # to anyone on the LAN: its peer ids must not pile up).
        peer_id = target.peer_id
        record = self.registry.records.get(peer_id) if peer_id else None
        if (peer_id and record is not None and record.link is None
                and self.directory.certificate_of_peer(peer_id) is None
                and not any(t.peer_id == peer_id for t in self.targets.values())):
            self.registry.forget(peer_id)

    async def add_static(self, address: str) -> str:
        host, port = parse_peer_address(address)
        normal = format_peer_address(host, port)

        def job(ctx: WriteContext) -> None:
            peer_rows.add_static_peer(ctx, normal, utc_now_seconds())

        await self.store.write(job)
        self.add_target(normal, "static")
        return normal

    async def remove_static(self, address: str) -> bool:
        host, port = parse_peer_address(address)
        normal = format_peer_address(host, port)

        def job(ctx: WriteContext) -> bool:
            return peer_rows.remove_static_peer(ctx, normal)

        removed = await self.store.write(job)
        target = self.targets.get(normal)
        if target is not None:
            target.sources.discard("static")
            if not target.sources:
                self._drop_target(normal)
        return removed

    # -- dialling ------------------------------------------------------------------------------

    def gate_changed(self) -> None:
        """Which peers ``gate`` admits may have changed: the targets waiting on it look again."""
        self._gate_changed.set()
        self._gate_changed = trio.Event()

    async def _dial_loop(self, target: Target) -> None:
        backoff = BACKOFF_FIRST_S
        with trio.CancelScope() as scope:
            target.scope = scope
            if target.defer_s:
                await trio.sleep(target.defer_s)
            while True:
                if target.peer_id and not self.gate(target.peer_id):
                    target.state = "known (not in this daemon's active view)"
                    backoff = BACKOFF_FIRST_S
                    await self._gate_changed.wait()
                    continue
                record = self.registry.records.get(target.peer_id) if target.peer_id else None
                if record is not None and record.link is not None:
                    target.state = "connected (other direction)" if record.direction == "in" else "connected"
                    await record.link.closed.wait()
                    await trio.sleep(random.uniform(0.05, 0.3))
                    continue
                started = trio.current_time()
                try:
                    outcome = await self._dial_once(target)
                except Exception as exc:
                    LOGGER.exception("unexpected error on the link via %s", target.address)
                    self._note_target_error(target, f"internal error: {type(exc).__name__}: {exc}")
                    outcome = "error"
                if outcome == "self":
                    target.state = "self"
                    LOGGER.info("%s is this daemon itself; not dialling it", target.address)
                    return
                if outcome == "revoked":
                    target.state = "revoked"  # it stays refused: stop dialling it
                    return
                if trio.current_time() - started >= STABLE_LINK_S:
                    backoff = BACKOFF_FIRST_S
                    if outcome in ("linked", "duplicate"):
                        continue  # a link that lived: redial at once
                elif outcome == "duplicate" and target.peer_id and getattr(
                        self.registry.records.get(target.peer_id), "link", None) is not None:
                    continue  # the other direction is up: wait on it (top of the loop)
                target.state = f"retrying in {backoff:.0f} s" if backoff >= 1 else "retrying"
                await trio.sleep(backoff * random.uniform(0.8, 1.2))
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    async def _dial_once(self, target: Target) -> str:
        target.state = "connecting"
        if target.peer_id:
            self.registry.record(target.peer_id).state = "connecting"
            self.registry.changed(target.peer_id)
        try:
            host, port = parse_peer_address(target.address)
            with trio.fail_after(CONNECT_TIMEOUT_S):
                tcp = await trio.open_tcp_stream(host, port)
            stream = TlsStream(tcp, self._client_ctx, server_side=False)
            with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                await stream.do_handshake()
            cert = peer_certificate(stream, self.membership.ca_cert_pem, utc_datetime())
            if cert is None:  # pragma: no cover - CERT_REQUIRED on the client side
                raise CertificateError("the peer presented no certificate")
        except (OSError, trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError, CertificateError,
                ValueError) as exc:
            reason = _describe_dial_error(exc)
            self._note_target_error(target, reason)
            return "error"
        if cert.peer_id == self.peer_id:
            await trio.aclose_forcefully(stream)
            return "self"
        if target.peer_id and target.peer_id != cert.peer_id:
            LOGGER.info("%s is now %s (was %s)", target.address, cert.peer_id, target.peer_id)
        target.peer_id = cert.peer_id
        target.last_error = None
        self.registry.record(cert.peer_id).dialled_via = frozenset(target.sources)
        await self._remember_address(cert.peer_id, target.address, "/".join(sorted(target.sources)))
        target.state = "connected"
        return await self.runner.run(stream, cert, dialer=self.peer_id, remote=target.address)

    def _note_target_error(self, target: Target, reason: str) -> None:
        target.last_error, target.last_error_at = reason, utc_now_seconds()
        target.state = "error"
        if target.peer_id:
            record = self.registry.record(target.peer_id)
            record.last_error, record.last_error_at = f"{target.address}: {reason}", target.last_error_at
            if record.link is None:
                record.state = "error"
                self.registry.changed(target.peer_id)
        LOGGER.debug("dial %s failed: %s", target.address, reason)

    async def _remember_address(self, peer_id: str, address: str, source: str) -> None:
        def job(ctx: WriteContext) -> None:
            peer_rows.remember_address(ctx, peer_id, address, source, utc_now_seconds(), REMEMBERED_PER_PEER)

        try:
            await self.store.write(job)
        except (StoreError, ApiError) as exc:  # remembering is a convenience: a full disk must not stop the link
            self.limits.hit("remember_address", "could not remember the address of %s: %s", peer_id, exc)


def _describe_dial_error(exc: BaseException) -> str:
    cause = exc.__cause__
    if isinstance(exc, OSError) and isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        exc = cause.exceptions[0]  # trio: "all attempts to connect failed", from the attempts' errors
    if isinstance(exc, trio.TooSlowError):
        return "timed out (no answer; is the address right and the port open?)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (nothing listens there: is palaced running, on that port?)"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed ({exc.reason or exc}): not a daemon of this palace, or revoked"
    if isinstance(exc, trio.BrokenResourceError):
        return "the peer closed the connection during the handshake (it does not accept our certificate)"
    if isinstance(exc, CertificateError):
        return f"the peer's certificate is not acceptable: {exc}"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)
