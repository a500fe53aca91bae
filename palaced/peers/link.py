"""One replication link: the IO shell around one ``palace_proto.link.LinkMachine``.

Owns: the socket, the store and the event bus of one connected peer's link, and nothing of the
protocol — every decision of what to send, pull, confirm, throttle or ask again is the machine's
(sans IO, tested without trio in tests/proto/test_link.py). The stream handed in is already
authenticated (``links.py``); membership is ``members.py``'s. Imports nothing else of this package.

Theory of operation: one reader, one applier, one sender
--------------------------------------------------------
* The **reader** feeds the machine the peer's bytes and acts on what comes out: binds what the
  hello and ``members`` carry, finds the forks a vector shows, verifies a batch of events (on a
  thread when it is large) and hands it to the applier, stores an artifact that arrived whole. It
  never writes to the stream: whatever is owed in return is recorded in the machine, coalesced, so
  recording never blocks. So no chain of waits runs from our reader through the peer and back:
  however much two daemons owe each other, both keep reading and the link moves (the bug this
  replaced: two daemons a few hundred events apart, each serving the other from its reader, both
  sockets full, never converged).
* The **applier** commits verified batches through the group-commit writer (one in hand, one
  queued; a live push with nothing ahead of it is applied by the reader itself, a scheduler pass
  sooner) and tells the machine what the store answered.
* The **sender** asks the machine what to send now and does it: writes bytes (in pieces, each
  given ``SEND_STALL_S`` to be taken), fills a page of owed events from the bus or the store, reads
  an artifact to serve, or starts a WAL sync beside itself (receipts and vectors name only what is
  on disk; a receipt waiting for the disk never holds a push). It sleeps until the bus commits
  something the peer lacks, the reader or applier records something, or the machine's timer is
  due (the peer's hello, its silence, the anti-entropy vector, a throttled page).

Error handling: the peer's protocol errors raise ``RemoteProtocolError`` out of ``run`` (the caller
logs it, says goodbye, closes the stream and backs off); transport errors end ``run`` normally;
anything else (a full disk, a bug) is re-raised alone for the caller to log.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import trio

from palace_proto.bindings import OriginBinding
from palace_proto.broadcast import BroadcastMessage
from palace_proto.envelope import CommittedEvent, SignedEvent
from palace_proto.errors import NotFound, ProtocolError, RemoteProtocolError
from palace_proto.framing import NEED_DATA
from palace_proto.link import (
    ArtifactAbsent,
    ArtifactArrived,
    LinkMachine,
    PeerConfirmed,
    SyncWal,
)
from palace_proto.overlay import OverlayMessage
from palace_proto.peer import (
    CONTROL_MESSAGES,
    Addresses,
    ArtifactWant,
    Events,
    Hello,
    Members,
    Presence,
    Report,
    Seen,
    Vector,
)
from palace_proto.session import ConnectionClosed
from palace_proto.sync import verify_batch
from palace_proto.sync_plan import SERVE_RATE_EVENTS_S, OwedPage
from palace_proto.text import printable

from ..bus import EventBus
from ..clock import utc_now
from ..limits import LimitLog
from ..members import BindingError, MemberDirectory
from ..store import apply_remote, put_verified_artifact, save_bindings
from ..store.aio import HEAVY_ARTIFACT_BYTES, AsyncStore

__all__ = ["LinkHooks", "PeerLink"]

LOGGER: Final = logging.getLogger("palaced.peers.link")
# Why 8: a batch this small (a live push) is verified in trio, a fraction of a millisecond at most
# (eight signatures if every event starts a chain of its own); bigger ones (a catch-up) on a thread,
# so the loop keeps serving while they are checked.
INLINE_VERIFY_EVENTS: Final = 8
RECEIVE_CHUNK: Final = 1 << 16
# Why 10 ms: a live push is committed without its fsync; its receipt waits that long for a durable
# commit to cover it before syncing the WAL itself. Under a stream of pushes that is one sync per
# 10 ms, not one per push, and on one machine (tests, benchmarks) this replica's sync no longer
# lands on the disk just as its peer commits the next event. What waits: `append --replicated`.
RECEIPT_SYNC_S: Final = 0.010
# Why 30 s: a frame goes out in pieces of 64 KiB; a peer that has not taken one in 30 s (a link
# slower than 2 KB/s) has stopped reading — on purpose or not — and would hold this link's
# sender, and everything queued behind it, forever. The link ends and is dialled again.
SEND_STALL_S: Final = 30.0
SEND_PIECE_BYTES: Final = 64 * 1024


def _short(peer_id: str | None) -> str:
    """A peer's short id (the first group of its fingerprint), as log lines name it."""
    return printable((peer_id or "unknown").split("-")[0], 16)


def _bind_announced(directory: MemberDirectory, message: Hello | Members) -> list[str]:
    """Bind the origins a hello or ``members`` announces: the hello binds the peer's own origin,
    only with the certificate it authenticated with over TLS (checked first); a relayed binding
    that does not hold is refused alone. Returns why each refused one was refused.

    Raises:
        RemoteProtocolError: the hello's certificate, or the peer's own binding, is not acceptable.
    """
    if isinstance(message, Members):
        refused = []
        for binding in message.entries:
            try:
                directory.bind(binding)
            except BindingError as exc:
                refused.append(str(exc))
        return refused
    try:
        cert = directory.verify_certificate(message.certificate)
    except BindingError as exc:
        raise RemoteProtocolError(f"its hello certificate is not acceptable: {exc}") from None
    if cert.peer_id != message.peer_id:
        raise RemoteProtocolError(f"its hello carries the certificate of {cert.peer_id}, not its own")
    if cert.role != message.role:
        raise RemoteProtocolError(f"it claims role {printable(message.role)} but is certified {cert.role}")
    try:
        directory.bind(OriginBinding(message.origin, message.certificate, message.origin_proof))
    except BindingError as exc:
        raise RemoteProtocolError(f"its own origin binding is refused: {exc}") from None
    return []


def _first_leaf(group: BaseException) -> BaseException:
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group


def _raise_link_outcome(group: BaseExceptionGroup) -> None:
    """Unwrap what the link's tasks raised: transport errors end the link quietly, a protocol
    error is re-raised alone (the caller reports it), anything else is re-raised as its first
    exception (a full disk, a bug: the caller ends the link, logs it and dials again later)."""
    protocol, rest = group.split(ProtocolError)
    if rest is not None:
        _, other = rest.split((trio.BrokenResourceError, trio.ClosedResourceError))
        if other is not None:
            cancelled, failures = other.split(trio.Cancelled)
            if failures is not None:
                raise _first_leaf(failures)
            if cancelled is not None:
                raise other
    if protocol is not None:
        raise _first_leaf(protocol)


class LinkHooks(Protocol):
    """What a link tells the rest of the daemon (implemented by ``peers.Network``)."""

    def link_progress(self, link: PeerLink) -> None:
        """The peer confirmed holding more events (``have`` or ``vector``)."""

    def link_presence(self, link: PeerLink, presence: Presence) -> None:
        """The peer sent a presence record (its own, or relayed)."""

    def link_report(self, link: PeerLink, report: Report) -> None:
        """The peer sent a daemon report (its own, or relayed)."""

    def link_addresses(self, link: PeerLink, addresses: Addresses | Seen) -> None:
        """The peer sent where a daemon can be reached (its own record, or relayed), or where it
        saw our connection come from."""

    def link_ready(self, link: PeerLink) -> None:
        """Hellos and bindings are in: the link may be sent presence records and reports."""

    def link_control(self, link: PeerLink, message: OverlayMessage | BroadcastMessage) -> None:
        """The peer sent a message of the partial views or the broadcast tree."""

    def link_applied(self, link: PeerLink, applied: Sequence[SignedEvent], duplicates: Sequence[SignedEvent]) -> None:
        """The peer's batch was stored: ``applied`` are new here, ``duplicates`` were held already."""

    def pull_elsewhere(self, link: PeerLink, origin: str, max_seq: int) -> bool:
        """Should ``origin`` up to ``max_seq`` be pulled on another link rather than this one (the
        link to the daemon that writes it, whose vector shows at least as much)?"""


class _PeerLog(logging.LoggerAdapter[logging.Logger]):
    """Every line prefixed with the peer's short id (the first group of its fingerprint), so one
    peer's story can be grepped out of the log."""

    def __init__(self, logger: logging.Logger, link: PeerLink) -> None:
        super().__init__(logger, {"link": link})
        self.link = link

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"peer {_short(self.link.peer_id)}: {msg}", kwargs


class PeerLink:
    """Replicates with one connected peer until the stream closes. ``machine`` is its protocol
    (and holds what ``status`` and ``peers`` read: ``stats``, ``confirmed``, ``forks``...)."""

    def __init__(self, stream: trio.abc.Stream, hello: Hello, store: AsyncStore, bus: EventBus,
                 key_for: Callable[[str], bytes | None] | None = None, directory: MemberDirectory | None = None, *,
                 expected_peer_id: str | None = None, hooks: LinkHooks | None = None,
                 max_artifact_bytes: int = 64 * 1024 * 1024, dialer: str | None = None,
                 limits: LimitLog | None = None) -> None:
        one_key = (lambda origin, origin_seq: key_for(origin)) if key_for is not None else None
        self.machine = LinkMachine(hello, directory=directory, key_for=one_key, expected_peer_id=expected_peer_id,
                                   max_artifact_bytes=max_artifact_bytes, limits=store.limits)
        self.stream = stream
        self.store = store
        self.bus = bus
        self.directory = directory
        self.hooks = hooks
        #: refusals of what the peer sends are logged sparingly (a flood must not flood the log)
        self.limits = limits if limits is not None else LimitLog(LOGGER)
        #: peer id of the side that dialled (tie-break between two connections of one pair)
        self.dialer = dialer
        self.last_contact = utc_now()
        self.log = _PeerLog(LOGGER, self)
        self.closed = trio.Event()
        #: set when the sender may have something to do (replaced each time it waits)
        self._wake = trio.Event()
        # Verified batches waiting for the writer (one in hand, one queued: bounded memory).
        self._to_apply_send, self._to_apply_recv = trio.open_memory_channel[
            tuple[list[SignedEvent], list[bytes | None]]](1)
        #: a batch is being applied (a live push may be applied by the reader only when not)
        self._applying = False

    def __repr__(self) -> str:
        stats = self.machine.stats
        return f"<PeerLink {self.machine.session!r} sent={stats.sent_events} received={stats.received_events}>"

    @property
    def peer_id(self) -> str | None:
        return self.machine.peer_id

    def stall(self, now: float | None = None) -> str | None:
        """Why this link makes no progress now, in plain words (None: it does, or has nothing to do)."""
        return self.machine.stall(trio.current_time() if now is None else now)

    def tell_neighbours(self, peer_ids: tuple[str, ...]) -> None:
        """Our neighbour set: the peer is told if it changed (coalesced with anything still unsent)."""
        if self.machine.tell_neighbours(peer_ids):
            self._wake.set()

    def wake(self) -> None:
        """The machine was told something that may owe the peer (gossip, a view's or the tree's
        message, a graft to serve: ``link.machine.gossip(...)`` then ``wake``): the sender looks."""
        self._wake.set()

    async def run(self) -> None:
        """Handshake, then replicate both ways until the peer closes the stream.

        Raises:
            ProtocolError: the peer broke the protocol (the first such error, unwrapped).
        """
        self.machine.start(trio.current_time())
        stop_waking = self.bus.call_on_publish(self._on_commit)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._apply_loop, nursery.cancel_scope)
                # Reading starts first: our opening messages (hundreds of KiB of bindings in a large
                # palace) must never wait on a peer that waits on us to read its own.
                nursery.start_soon(self._read)
                nursery.start_soon(self._send_loop, nursery)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the transport ended: a normal way for a link to end
        except BaseExceptionGroup as group:
            _raise_link_outcome(group)
        finally:
            stop_waking()
            self.closed.set()

    async def close(self, code: str = "shutting_down", reason: str = "palaced is stopping") -> None:
        """Say goodbye (if a frame of ours is not half sent) and close the stream."""
        data = self.machine.goodbye(code, reason)
        # The link is going anyway: whatever the last goodbye meets does not matter.
        with trio.move_on_after(1), contextlib.suppress(Exception):
            if data is not None:
                await self._transmit(data)
        await trio.aclose_forcefully(self.stream)

    def _on_commit(self, records: list[CommittedEvent]) -> bool:
        """Every commit on the bus (called in ``publish``): wake the sender if the peer is owed any of it.
        Not for events the peer holds (it sent them to us): that would only cost a turn, ahead of
        the watchers they are for (issue 27)."""
        if not self.machine.committed(records):
            return False
        self._wake.set()
        return True

    # -- the reader ----------------------------------------------------------------------------

    async def _read(self) -> None:
        """Decode and act, never write; then let the applier finish (it ends the link)."""
        machine = self.machine
        try:
            while True:
                machine.reading(trio.current_time())
                try:
                    data = await self.stream.receive_some(RECEIVE_CHUNK)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                machine.receive_data(data, trio.current_time())
                self.last_contact = utc_now()
                while (event := machine.next_event(trio.current_time())) is not NEED_DATA:
                    if isinstance(event, ConnectionClosed):
                        if event.goodbye is not None and event.goodbye.code != "shutting_down":
                            self.log.info("said goodbye: %s (%s)", printable(event.goodbye.reason, 200),
                                          printable(event.goodbye.code, 40))
                        return
                    await self._handle(event)
                    self._wake.set()
                self._wake.set()  # what the machine took in alone (wants, receipts) may owe the peer
        finally:
            # Apply what already arrived before ending the link (a peer may say goodbye right after
            # its last batch).
            self._to_apply_send.close()

    async def _handle(self, event: Any) -> None:
        hooks = self.hooks
        if isinstance(event, (Hello, Members)):
            await self._bind(event)
        elif isinstance(event, Vector):
            heads = self.store.heads()  # kept in memory at each commit: no read, no thread hop
            forks = await self.store.vector_forks(heads, event)
            elsewhere = (lambda origin, max_seq: hooks.pull_elsewhere(self, origin, max_seq)) if hooks else None
            for origin in self.machine.vector_checked(event, heads, forks, now=trio.current_time(), elsewhere=elsewhere,
                                                      refused_next=self.store.refusals.next):
                self.log.error("holds a different history of origin %s (fork)", origin)
        elif isinstance(event, Events):
            await self._on_events(event)
        elif isinstance(event, ArtifactArrived):
            content = event.received.content
            await self.store.write(lambda ctx: put_verified_artifact(ctx, content=content, **event.record),
                                    heavy=len(content) > HEAVY_ARTIFACT_BYTES)
            self.log.info("sent artifact %s (%d bytes)", event.received.artifact_id, len(content))
            self.machine.artifact_stored(event.received, self.store.heads())
        elif isinstance(event, ArtifactAbsent):
            self.log.warning("does not have artifact %s", printable(event.artifact_id))
        elif hooks is not None and isinstance(event, PeerConfirmed):
            hooks.link_progress(self)
        elif hooks is not None and isinstance(event, Presence):
            hooks.link_presence(self, event)
        elif hooks is not None and isinstance(event, Report):
            hooks.link_report(self, event)
        elif hooks is not None and isinstance(event, (Addresses, Seen)):
            hooks.link_addresses(self, event)
        elif hooks is not None and isinstance(event, CONTROL_MESSAGES):
            hooks.link_control(self, event)

    async def _bind(self, message: Hello | Members) -> None:
        """Bind and save the origin bindings a hello or ``members`` carries (``_bind_announced``)."""
        if self.directory is not None:
            refused = _bind_announced(self.directory, message)
            if refused:
                self.machine.stats.refused_bindings += len(refused)
                self.limits.hit(f"bindings_refused/{self.peer_id}", "peer %s: refused %d binding(s) it relayed (%s)",
                                _short(self.peer_id), len(refused), printable(refused[0], 200))
            unsaved = self.directory.take_unsaved()
            if unsaved:
                await self.store.write(lambda ctx: save_bindings(ctx, unsaved))
        if isinstance(message, Hello) and self.hooks is not None:
            self.hooks.link_ready(self)

    async def _on_events(self, message: Events) -> None:
        """Verify a batch (while the writer commits the one before), then apply it or queue it for
        the applier (order kept: one applier, FIFO). Signatures are checked here, one per chained
        run (``verify_batch``); the writer recomputes the hashes of exactly these objects."""
        events, key_for = list(message.events), self.machine.key_for
        if len(events) <= INLINE_VERIFY_EVENTS:  # a live push: checked right here, not a thread hop away
            keys = verify_batch(events, key_for)
        else:
            keys = await trio.to_thread.run_sync(verify_batch, events, key_for)
        if self.machine.events_verified(events, keys) and self.hooks is not None:
            self.hooks.link_progress(self)
        if (len(events) <= INLINE_VERIFY_EVENTS and not self._applying
                and self._to_apply_send.statistics().current_buffer_used == 0):
            # A live push with nothing ahead of it: applied right here, a scheduler pass sooner
            # than through the applier (issue 27); the order holds, as nothing else is applying.
            await self._apply(events, keys)
        else:
            await self._to_apply_send.send((events, keys))

    # -- the applier ---------------------------------------------------------------------------

    async def _apply_loop(self, link_scope: trio.CancelScope) -> None:
        async for events, keys in self._to_apply_recv:
            await self._apply(events, keys)
        link_scope.cancel(reason="peer closed the link")  # the reader ended, and all it read is applied

    async def _apply(self, events: list[SignedEvent], keys: list[bytes | None]) -> None:
        """Commit a batch and tell the machine what the store answered. A catch-up batch commits on
        a thread; a live push in the loop, without waiting for its fsync (the events are on disk at
        their origin already: our watchers see them a fsync sooner, issue 27; the receipt waits
        for our own sync)."""
        store, directory, live = self.store, self.directory, len(events) <= INLINE_VERIFY_EVENTS
        observe = directory.observe if directory is not None else None
        may_redact = directory.redaction_authorized if directory is not None else None
        self._applying = True
        report = await self.store.write(
            lambda ctx: apply_remote(ctx, events, self.machine.key_for, source=self.peer_id, on_applied=observe,
                                         verified_keys=keys, may_redact=may_redact),
            heavy=not live, durable=not live)
        # What we hold as of the batches the writer counted, all of which the next sync covers
        # (a batch still being committed may already show in ``heads``; issue 43).
        heads, committed = store.heads(), self.store.committed_heads()
        if report.rejected:
            self.limits.hit(f"events_rejected/{self.peer_id}", "peer %s: rejected %d event(s) it sent (not from "
                            "a member in good standing, or a bad hash or signature)", _short(self.peer_id),
                            len(report.rejected))
        if report.refused:
            self.limits.hit(f"events_refused/{self.peer_id}", "peer %s: refused %d authentic event(s) it sent "
                            "for breaking a rule (%s)", _short(self.peer_id), len(report.refused),
                            printable(report.refused[0][1], 200))
        if report.forks:
            self.log.error("refused %d forked event(s) it sent", len(report.forks))
        missing = await store.absent_artifacts(report.missing_artifacts) if report.missing_artifacts else []
        self.machine.batch_applied(events, report, missing, heads=heads, committed=committed,
                                   refused_next=store.refusals.next)
        if self.hooks is not None:
            self.hooks.link_applied(self, [record.signed for record in report.applied], report.duplicates)
        self._applying = False  # (a failure ends the link: nothing to reset then)
        self._wake.set()

    # -- the sender ----------------------------------------------------------------------------

    async def _send_loop(self, nursery: trio.Nursery) -> None:
        machine = self.machine
        while True:
            now = trio.current_time()
            timer = machine.get_timer()
            if timer is not None and now >= timer:
                machine.handle_timer(now)
            step = machine.next_send(now)
            if step is None:
                self._wake = trio.Event()
                timer = machine.get_timer()
                with trio.move_on_at(math.inf if timer is None else timer):
                    await self._wake.wait()
            elif isinstance(step, bytes):
                await self._transmit(step)
            elif isinstance(step, SyncWal):
                nursery.start_soon(self._sync)
            elif isinstance(step, OwedPage):
                if machine.page_filled(step, await self._fill(step), trio.current_time()):
                    self.limits.hit(f"serve_rate/{self.peer_id}", "peer %s: pulls more than %d events/s; serving it "
                                    "at that rate", _short(self.peer_id), int(SERVE_RATE_EVENTS_S))
            elif isinstance(step, ArtifactWant):
                try:
                    record = await self.store.get_artifact(step.artifact_id)
                except NotFound:
                    record = None
                machine.artifact_read(step, record)

    async def _transmit(self, data: bytes) -> None:
        """Write frames in pieces, each with its own limit: what is judged is whether the peer takes
        anything at all (a slow link moving a 1 MiB batch for a minute is fine; one that takes no
        64 KiB in 30 s has stopped reading).

        Raises:
            RemoteProtocolError: the peer took nothing for ``SEND_STALL_S``.
        """
        view = memoryview(data)
        for start in range(0, len(view), SEND_PIECE_BYTES):
            piece = view[start:start + SEND_PIECE_BYTES]
            self.machine.sending(trio.current_time())
            with trio.move_on_after(SEND_STALL_S) as stalled:
                await self.stream.send_all(piece)
            self.machine.data_sent(0 if stalled.cancelled_caught else len(piece))
            if stalled.cancelled_caught:
                raise RemoteProtocolError(f"it took nothing we sent for {SEND_STALL_S:.0f} s (it stopped reading)")

    async def _sync(self) -> None:
        """Sync the WAL for receipts and our vector (beside the sender: a push does not wait for it).
        The vector names ``durable_heads``: read after the sync, the store's heads would name events
        committed while it ran (issue 43)."""
        await self.store.sync(RECEIPT_SYNC_S)
        self.machine.synced(self.store.durable_heads())
        self._wake.set()

    async def _fill(self, page: OwedPage) -> list[SignedEvent]:
        """The events of a page owed to the peer, up to what we hold contiguously of a replicated
        origin (never imported history): usually still on the bus as signed, just committed (no
        read, no thread hop), else from the store."""
        events = self.bus.signed_after(page.origin, page.after_seq, page.limit) or []
        if len(events) == page.limit:
            return events
        head = self.store.heads().get(page.origin)
        limit = self.machine.bound_by_head(page, head.max_seq if head is not None else None)
        if limit <= 0:
            return []
        if len(events) < limit:
            events = await self.store.signed_events_of_origin(page.origin, page.after_seq, limit)
        return events
