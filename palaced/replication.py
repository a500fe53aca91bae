"""One replication link: a peer session driven over a trio stream.

Owns: the IO around ``palace_proto.session.PeerSession`` for one connected peer — send our hello,
the origin bindings we know and our vector; pull what the peer has and we lack (``want``); serve
the peer's wants in bounded batches; apply arriving events through the group-commit writer and
confirm them (``have``) once they are durable; fetch the artifacts an arriving event needs, in
chunks, verifying the sha256 before anything is visible; push every new event (local or relayed)
the peer lacks and cannot hear first-hand as soon as it is committed; and resend our vector on
the anti-entropy timer so a silently stalled push is repaired. Transport security and discovery
live in ``palaced/peers`` (the stream handed in is already authenticated); membership in
``members.py``.

Theory of operation: reading never waits on writing
---------------------------------------------------
A link is a handful of tasks in one nursery, and only some of them write to the stream:

* the **reader** decodes what arrives and acts on it; it never writes. What it owes the peer in
  return is recorded — our pulls and receipts in the ``LinkOutbox`` (palace_proto.outbox), the
  peer's own pulls and artifact requests in the ``ServePlan`` (palace_proto.sync_plan) — all
  coalesced per origin or artifact, so recording never blocks and is bounded by our bindings, not
  by what the peer sends. The reader waits only on local work: verifying a batch, and handing it to the
  applier.
* the **applier** commits verified batches (one in hand, one queued) and records receipts and
  gap pulls in the outbox; it never writes to the stream either.
* the **senders** write: the control sender (the outbox, and our vector when due), the event
  sender (what the ``ServePlan`` owes: the peer's pulls and what we commit that it lacks, one
  entry per origin, so an origin's events leave in order from one place, never twice at once; a
  page at a time, round-robin over origins; woken by the bus on every commit), the artifact server, and the
  network's gossip sender. They share one lock, taken per frame, so a receipt waits behind at
  most one batch; each waits on the socket as long as the peer is slow to read, which
  back-pressures exactly what we send, never what we read.

So no chain of waits can run from our reader through the peer and back to our reader: however
much both sides owe each other, both keep reading, the kernel buffers drain, and the link moves
(the bug this replaced: each side served the other's wants from its reader, and once both
sockets were full neither read again — two daemons a few hundred events apart never converged).
A link that still makes no progress (the peer sends nothing, takes nothing, or never answers
our pulls) says so through ``stall`` (``status`` health), and one that takes nothing for
``SEND_STALL_S`` or sends nothing for ``SILENCE_S`` is ended and dialled again.

Every decision of what to send, pull or ask again is the planners' (``ServePlan`` and
``PullPlan``, palace_proto.sync_plan, sans IO and tested there): this class owns the socket, the
tasks, the bus and the store, tells them what happened and fills, sends or records what they
answer.

Error handling: the peer's protocol errors raise ``RemoteProtocolError`` out of ``run`` (the
caller logs it, closes the stream and backs off); transport errors end ``run`` normally.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol

import trio

from palace_proto.envelope import CommittedEvent, SignedEvent
from palace_proto.errors import NotFound, ProtocolError, RemoteProtocolError, ValidationError
from palace_proto.framing import NEED_DATA
from palace_proto.bindings import OriginBinding
from palace_proto.outbox import LinkOutbox
from palace_proto.peer import (
    ARTIFACT_CHUNK_BYTES,
    MAX_BINDINGS_PER_MESSAGE,
    ArtifactChunk,
    ArtifactWant,
    Events,
    Goodbye,
    Have,
    Hello,
    Members,
    Neighbours,
    Presence,
    Report,
    Vector,
    VectorEntry,
    Want,
)
from palace_proto.session import ANTI_ENTROPY_S, ConnectionClosed, PeerSession
from palace_proto.stamps import format_stamp
from palace_proto.sync import OriginHead, batch_events, vector_forks, verify_batch
from palace_proto.sync_plan import (
    SERVE_RATE_EVENTS_S,
    ArtifactReceived,
    Chunk,
    Fetch,
    OwedPage,
    PullPlan,
    ServePlan,
    receipts,
)
from palace_proto.text import printable
from palace_proto.validation import Limits, check_replicated_artifact

from .bus import EventBus
from .limits import LimitLog
from .members import BindingError, MemberDirectory
from .store import WriteContext
from .store.aio import HEAVY_ARTIFACT_BYTES, AsyncStore

__all__ = ["LinkHooks", "PeerLink"]

LOGGER: Final = logging.getLogger("palaced.replication")
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
# Why 10 s: an authenticated peer that does not say hello within the TLS handshake's own limit is
# stuck or stalling on purpose; its link would block the real one (one link per peer).
HELLO_TIMEOUT_S: Final = 10.0
# Why 30 s: a frame goes out in pieces of 64 KiB; a peer that has not taken one in 30 s (a link
# slower than 2 KB/s) has stopped reading — on purpose or not — and would hold this link's
# senders, and everything queued behind them, forever. The link ends and is dialled again.
SEND_STALL_S: Final = 30.0
SEND_PIECE_BYTES: Final = 64 * 1024
# Why 3 anti-entropy periods: every live peer sends its vector every ANTI_ENTROPY_S whatever else it
# does, so a link we have read nothing from for this long has a peer that is gone (a laptop shut,
# a cable pulled: no FIN ever comes) or stuck; it ends and is dialled again.
SILENCE_S: Final = 3 * ANTI_ENTROPY_S
# Why 15 s: a live peer sends its vector every ANTI_ENTROPY_S and takes a 1 MiB frame in well under a
# second on any LAN; neither for half again that long is worth a person's attention (`status`
# health) well before the link is ended for it (SILENCE_S, SEND_STALL_S).
STALL_REPORT_S: Final = 1.5 * ANTI_ENTROPY_S
# Why 30 s: we asked the peer for events its vector shows and nothing came for three anti-entropy
# periods (each re-asks a stalled pull): the link is alive but makes no progress — `status` says so.
PULL_STALL_S: Final = 3 * ANTI_ENTROPY_S
# Why 1 s: how often a link looks at its own progress (the stall judgements above are tens of s).
WATCHDOG_S: Final = 1.0


# Why 512: the fixed fields (hashes, signature, ids, names) of an event on the wire stay below it.
EVENT_OVERHEAD_BYTES: Final = 512


def _wire_size(event: SignedEvent) -> int:
    """Roughly what an event costs on the wire (exact for ASCII; at most 4x under for other
    text, which batches of ~1 MiB under a 16 MiB frame limit absorb) — without encoding it."""
    return EVENT_OVERHEAD_BYTES + len(event.body or "") + len(event.metadata_json)


def _utc_now() -> str:
    return format_stamp(time.time())


def artifact_record_from_peer(chunk: ArtifactChunk, limits: Limits) -> dict[str, str] | None:
    """The descriptive fields of a received artifact, if they obey the local rules (else None)."""
    try:
        check_replicated_artifact(kind=chunk.kind, created_by=chunk.created_by, created_at=chunk.created_at,
                                  metadata_json=chunk.metadata_json, limits=limits)
    except ValidationError:
        return None
    return {"sha256": chunk.sha256, "kind": chunk.kind, "created_by": chunk.created_by,
            "created_at": chunk.created_at, "metadata_json": chunk.metadata_json}


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

    def link_ready(self, link: PeerLink) -> None:
        """Hellos and bindings are in: the link may be sent presence records and reports."""

    def pull_elsewhere(self, link: PeerLink, origin: str, max_seq: int) -> bool:
        """Should ``origin`` up to ``max_seq`` be pulled on another link rather than this one (the
        link to the daemon that writes it, whose vector shows at least as much)?"""


class _PeerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"peer {self.extra['peer']}: {msg}", kwargs  # type: ignore[index]


class PeerLink:
    """Replicates with one connected peer until the stream closes."""

    def __init__(self, stream: trio.abc.Stream, hello: Hello, astore: AsyncStore, bus: EventBus,
                 key_for: Callable[[str], bytes | None] | None = None, directory: MemberDirectory | None = None, *,
                 expected_peer_id: str | None = None, hooks: LinkHooks | None = None,
                 max_artifact_bytes: int = 64 * 1024 * 1024, dialer: str | None = None,
                 limits: LimitLog | None = None) -> None:
        self.stream = stream
        self.session = PeerSession(hello)
        self.astore = astore
        self.store = astore.store
        self.bus = bus
        #: with a directory, origin bindings travel with the link (hello and Members messages)
        self.directory = directory
        if directory is not None:
            self.key_for: Callable[[str, int], bytes | None] = directory.key_for
        elif key_for is not None:
            self.key_for = lambda origin, origin_seq: key_for(origin)
        else:
            raise TypeError("a PeerLink needs a member directory or a key_for function")
        self.expected_peer_id = expected_peer_id
        self.hooks = hooks
        #: refusals of what the peer sends are logged sparingly (a flood must not flood the log)
        self.limits = limits if limits is not None else LimitLog(LOGGER)
        self.max_artifact_bytes = max_artifact_bytes
        #: peer id of the side that dialled (tie-break between two connections of one pair)
        self.dialer = dialer
        #: the daemons the peer hears first-hand (its Neighbours): their events are not relayed to it
        self.peer_neighbours: frozenset[str] = frozenset()
        self._bindings_sent: set[str] = set()
        #: the peer's side (palace_proto.sync_plan): what it holds, the events it is owed — its
        #: pulls and our new commits, per origin, served a page at a time round-robin — the serve
        #: budget, its artifact requests; only origins we can verify are kept, so a peer cannot
        #: grow it with invented ids
        self.serving = ServePlan(verifiable=self._verifiable if directory is not None else None,
                                 relayed=self._relayed if directory is not None else None)
        #: our side: what we pull from the peer and whether it comes, forks, the origins it sent us
        #: events of that we rejected, the artifacts we receive from it
        self.pulls = PullPlan(self.key_for, max_artifact_bytes=max_artifact_bytes)
        #: what we owe the peer besides events (receipts, pulls, neighbours, a vector), coalesced
        self.outbox = LinkOutbox()
        self._outbox_kick = trio.Event()
        #: set when the peer is owed events (its wants, and every commit on the bus)
        self._owed_kick = trio.Event()
        #: set when the peer asks for an artifact
        self._artifact_kick = trio.Event()
        self.sent_events = 0
        self.received_events = 0
        self.rejected_events = 0
        self.refused_events = 0
        self.refused_bindings = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.connected_at = _utc_now()
        self.last_contact = self.connected_at
        #: trio time since which a frame waits for the peer to take it / the reader waits for bytes
        self._sending_since: float | None = None
        self._reading_since: float | None = None
        self._send_lock = trio.Lock()
        #: our hello, members and vector are out: every other message may follow
        self._opened = trio.Event()
        self._vector_known = trio.Event()
        self._hello_known = trio.Event()
        # Verified batches waiting for the writer (one in hand, one queued: bounded memory).
        self._to_apply_send, self._to_apply_recv = trio.open_memory_channel[
            tuple[list[SignedEvent], list[bytes | None]]](1)
        self._applier_done = trio.Event()
        #: the applier is applying a batch (a live push may be applied by the reader only when not)
        self._applying = False
        self.closed = trio.Event()

    def __repr__(self) -> str:
        return f"<PeerLink {self.session!r} sent={self.sent_events} received={self.received_events}>"

    @property
    def peer_id(self) -> str | None:
        return self.session.their_hello.peer_id if self.session.their_hello else self.expected_peer_id

    @property
    def log(self) -> logging.LoggerAdapter[logging.Logger]:
        """The replication log, every line prefixed with the peer's short id (Syncthing-style: the
        first group of the fingerprint), so one peer's story can be grepped out of the log."""
        return _PeerLog(LOGGER, {"peer": self._short})

    @property
    def _short(self) -> str:
        return printable((self.peer_id or "unknown").split("-")[0], 16)

    @property
    def fetching(self) -> bool:
        """Artifacts are on their way (events wait for them)."""
        return self.pulls.fetching

    @property
    def confirmed(self) -> dict[str, int]:
        """What the peer confirmed holding durably, per origin (its vectors and receipts)."""
        return self.serving.confirmed

    @property
    def their_heads(self) -> dict[str, int]:
        """The peer's newest vector, origin -> max_seq (at most MAX_VECTOR_ENTRIES: one message's)."""
        return self.pulls.their_heads

    @property
    def forks(self) -> list[str]:
        """Origins whose history the peer holds differently (seen in its vectors)."""
        return self.pulls.forks

    @property
    def their_hello(self) -> Hello | None:
        return self.session.their_hello

    def stall(self, now: float | None = None) -> str | None:
        """Why this link makes no progress now, in plain words (None: it does, or has nothing to do)."""
        now = trio.current_time() if now is None else now
        if self._sending_since is not None and now - self._sending_since > STALL_REPORT_S:
            return f"it has taken nothing we sent for {now - self._sending_since:.0f} s"
        if self._reading_since is not None and now - self._reading_since > STALL_REPORT_S:
            return f"it has sent nothing for {now - self._reading_since:.0f} s"
        progress_at = self.pulls.progress_at
        if progress_at is not None and now - progress_at > PULL_STALL_S:
            return (f"we asked for events of {self.pulls.pulling} origin(s) it holds and none came for "
                    f"{now - progress_at:.0f} s")
        return None

    # -- sending -------------------------------------------------------------------------------

    async def send(self, message: Any) -> None:
        """Send one message: after our opening messages (``_open`` alone sends before), once the
        peer has taken it.

        Raises:
            RemoteProtocolError: the peer took nothing for ``SEND_STALL_S``.
        """
        if not self._opened.is_set():
            await self._opened.wait()
        await self._send_now(message)

    async def _send_now(self, message: Any) -> None:
        lock = self._send_lock
        try:
            # Free (the usual case): taken without the scheduler pass of ``async with``, so a push
            # leaves in its task's first turn after the commit (issue 27).
            lock.acquire_nowait()
        except trio.WouldBlock:
            await lock.acquire()
        try:
            await self._send_frame(message)
        finally:
            lock.release()

    async def _send_frame(self, message: Any) -> None:
        """Encode and send one message (the send lock held)."""
        data = memoryview(self.session.send(message, now=trio.current_time()))
        # In pieces, each with its own limit: what is judged is whether the peer takes anything
        # at all (a slow link moving a 1 MiB batch for a minute is fine; one that takes no
        # 64 KiB in 30 s has stopped reading).
        for start in range(0, len(data), SEND_PIECE_BYTES):
            piece = data[start:start + SEND_PIECE_BYTES]
            self._sending_since = trio.current_time()
            with trio.move_on_after(SEND_STALL_S) as stalled:
                await self.stream.send_all(piece)
            self._sending_since = None
            if stalled.cancelled_caught:
                raise RemoteProtocolError(f"it took nothing we sent for {SEND_STALL_S:.0f} s (it stopped reading)")
            self.bytes_sent += len(piece)

    async def send_bindings_of(self, peer_id: str) -> None:
        """Send the bindings of daemon ``peer_id``'s origins that this peer was not sent yet.

        Gossip about a daemon (its presence, its report) is verified with that daemon's
        certificate, which travels in its bindings; a daemon that writes no event (an observer, a
        new member) would otherwise stay unverifiable beyond its own links. So bindings travel
        ahead of gossip as they travel ahead of events."""
        if self.directory is None:
            return
        await self._send_bindings(self.directory.origins_of_peer(peer_id))

    async def _send_bindings(self, origins: Any, send: Any = None) -> None:
        """Send the bindings of ``origins`` this peer was not sent yet, marked sent once on the wire
        (a message that needs them and is sent after this returns follows them); by ``send``
        (``_send_now`` while opening), else ``self.send``."""
        assert self.directory is not None
        missing = sorted(set(origins) - self._bindings_sent)
        if not missing:
            return
        bindings = tuple(b for b in (self.directory.binding(o) for o in missing) if b is not None)
        for start in range(0, len(bindings), MAX_BINDINGS_PER_MESSAGE):
            await (send or self.send)(Members(bindings[start:start + MAX_BINDINGS_PER_MESSAGE]))
        # Only what went: an origin not bound here yet is sent once it is (never marked unsent-able).
        self._bindings_sent.update(b.origin for b in bindings)

    def relays_to_peer(self, peer_id: str) -> bool:
        """Should events and gossip *about* daemon ``peer_id`` be relayed to this peer? Not when the
        peer hears that daemon first-hand (its Neighbours), nor when it is the peer itself; our own
        always go out."""
        if peer_id == self.peer_id:
            return False
        return peer_id == self.session.our_hello.peer_id or peer_id not in self.peer_neighbours

    def tell_neighbours(self, peer_ids: tuple[str, ...]) -> None:
        """Our neighbour set changed: the peer is told (coalesced with anything still unsent)."""
        self._owe(lambda outbox: outbox.neighbours(tuple(p for p in peer_ids if p != self.peer_id)))

    def _owe(self, record: Callable[[LinkOutbox], None]) -> None:
        record(self.outbox)
        self._outbox_kick.set()

    def _owe_wants(self, wants: Iterable[Want]) -> None:
        """Record the pulls a planner asked for (the control sender sends them)."""
        for want in wants:
            self.outbox.want(want.origin, want.after_seq)
            self._outbox_kick.set()

    async def _send_outbox(self) -> None:
        """The control sender: whatever the reader and the applier recorded, in one go each time."""
        await self._opened.wait()
        while True:
            if not self.outbox:
                self._outbox_kick = trio.Event()
                await self._outbox_kick.wait()
                continue
            vector_due, messages = self.outbox.take()
            receipts = [m for m in messages if isinstance(m, Have)]
            for message in messages:
                if not isinstance(message, Have):
                    await self.send(message)
            if receipts:
                # A receipt says "on disk here": a live push was committed without its fsync.
                await self.astore.sync(RECEIPT_SYNC_S)
                for message in receipts:
                    await self.send(message)
            if vector_due:
                await self._send_vector(self.send)

    async def _heads(self) -> dict[str, OriginHead]:
        return self.store.heads()  # kept in memory at each commit: no read, no thread hop

    async def _send_vector(self, send: Any) -> None:
        # A vector confirms what it names, as a receipt does: only what is on disk here. Read after
        # the sync, the heads would name events committed while it ran (issue 43).
        await self.astore.sync(RECEIPT_SYNC_S)
        heads = self.astore.durable_heads()
        vector = Vector(tuple(VectorEntry(o, h.max_seq, h.head_hash) for o, h in sorted(heads.items())))
        if self.directory is not None:
            # The bindings of the origins it names go first: a peer that cannot verify an origin
            # never asks for its events, and a binding otherwise travels only ahead of events (an
            # origin bound here after our opening bindings were taken left a link apart for good).
            await self._send_bindings((e.origin for e in vector.entries), send)
        await send(vector)

    def _verifiable(self, origin: str) -> bool:
        """Is ``origin`` one we could verify events of (bound here)? Bookkeeping fed by the peer's
        vectors and receipts keeps only such origins: its size is bounded by our bindings."""
        return self.directory is None or self.directory.is_bound(origin)

    async def run(self) -> None:
        """Handshake, then replicate both ways until the peer closes the stream.

        Raises:
            ProtocolError: the peer broke the protocol (the first such error, unwrapped).
        """
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._hello_deadline)
                nursery.start_soon(self._watchdog)
                nursery.start_soon(self._apply_loop)
                # Reading starts first: our opening messages (hundreds of KiB of bindings in a large
                # palace) must never wait on a peer that waits on us to read its own.
                nursery.start_soon(self._read_all, nursery.cancel_scope)
                await self._open()
                nursery.start_soon(self._send_outbox)
                nursery.start_soon(self._send_owed)
                nursery.start_soon(self._serve_artifacts)
                nursery.start_soon(self._anti_entropy)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the transport ended: a normal way for a link to end
        except BaseExceptionGroup as group:
            _raise_link_outcome(group)
        finally:
            self.closed.set()

    async def _open(self) -> None:
        """Our hello, every binding we can prove (in chunks: however many origins a palace has
        seen, no message outgrows a frame) and our vector: what the peer needs before anything else."""
        await self._send_now(self.session.our_hello)
        if self.directory is not None:
            entries = self.directory.entries()
            for start in range(0, len(entries), MAX_BINDINGS_PER_MESSAGE):
                await self._send_now(Members(entries[start:start + MAX_BINDINGS_PER_MESSAGE]))
            if not entries:
                await self._send_now(Members(()))
            self._bindings_sent.update(b.origin for b in entries)
        await self._send_vector(self._send_now)
        self._opened.set()

    async def _read_all(self, link_scope: trio.CancelScope) -> None:
        await self._read()
        # Apply what already arrived before ending the link (a peer may say goodbye right after
        # its last batch).
        self._to_apply_send.close()
        await self._applier_done.wait()
        link_scope.cancel(reason="peer closed the link")

    async def _hello_deadline(self) -> None:
        with trio.move_on_after(HELLO_TIMEOUT_S):
            await self._hello_known.wait()
            return
        raise RemoteProtocolError(f"no hello within {HELLO_TIMEOUT_S:.0f} s")

    async def _watchdog(self) -> None:
        """End the link when the peer has sent nothing for ``SILENCE_S`` (it is gone or stuck)."""
        while True:
            await trio.sleep(WATCHDOG_S)
            if self._reading_since is not None and trio.current_time() - self._reading_since > SILENCE_S:
                raise RemoteProtocolError(f"it sent nothing for {SILENCE_S:.0f} s (gone without closing the "
                                          "connection, or stuck)")

    async def close(self, code: str = "shutting_down", reason: str = "palaced is stopping") -> None:
        try:
            with trio.move_on_after(1):
                await self._send_now(Goodbye(code, reason))
        except Exception:  # the link is going anyway: whatever the last goodbye meets does not matter
            pass
        await trio.aclose_forcefully(self.stream)

    # -- receiving -----------------------------------------------------------------------------

    async def _read(self) -> None:
        """The reader: decode and act, never write (see the module's theory of operation)."""
        while True:
            self._reading_since = trio.current_time()
            try:
                data = await self.stream.receive_some(RECEIVE_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            self._reading_since = None
            self.bytes_received += len(data)
            self.session.receive_data(data)
            while True:
                message = self.session.next_event()
                if message is NEED_DATA:
                    break
                self.last_contact = _utc_now()
                if isinstance(message, ConnectionClosed):
                    if message.goodbye is not None and message.goodbye.code != "shutting_down":
                        self.log.info("said goodbye: %s (%s)", printable(message.goodbye.reason, 200),
                                      printable(message.goodbye.code, 40))
                    return
                await self._handle(message)

    async def _handle(self, message: Any) -> None:
        if isinstance(message, Hello):
            await self._on_hello(message)
        elif isinstance(message, Members):
            await self._on_members(message)
        elif isinstance(message, Vector):
            await self._on_vector(message)
        elif isinstance(message, Want):
            self._on_want(message)
        elif isinstance(message, Events):
            await self._on_events(message)
        elif isinstance(message, Have):
            self._confirm(message.entries)
        elif isinstance(message, ArtifactWant):
            self._on_artifact_want(message)
        elif isinstance(message, ArtifactChunk):
            await self._on_artifact_chunk(message)
        elif isinstance(message, Neighbours):
            self._on_neighbours(message)
        elif isinstance(message, Presence) and self.hooks is not None:
            self.hooks.link_presence(self, message)
        elif isinstance(message, Report) and self.hooks is not None:
            self.hooks.link_report(self, message)

    async def _persist_bindings(self) -> None:
        if self.directory is None:
            return
        unsaved = self.directory.take_unsaved()
        if unsaved:
            await self.astore.write(lambda ctx: ctx.save_bindings(unsaved))

    async def _on_hello(self, hello: Hello) -> None:
        if self.expected_peer_id is not None and hello.peer_id != self.expected_peer_id:
            raise RemoteProtocolError(
                f"peer's hello names {printable(hello.peer_id)} but its TLS certificate is {self.expected_peer_id}")
        if self.directory is not None:
            # The hello binds the peer's own origin: only with the certificate it authenticated
            # with over TLS, checked before anything is bound.
            try:
                cert = self.directory.verify_certificate(hello.certificate)
            except BindingError as exc:
                raise RemoteProtocolError(f"its hello certificate is not acceptable: {exc}") from None
            if cert.peer_id != hello.peer_id:
                raise RemoteProtocolError(f"its hello carries the certificate of {cert.peer_id}, not its own")
            if cert.role != hello.role:
                raise RemoteProtocolError(f"it claims role {printable(hello.role)} but is certified {cert.role}")
            try:
                self.directory.bind(OriginBinding(hello.origin, hello.certificate, hello.origin_proof))
            except BindingError as exc:
                raise RemoteProtocolError(f"its own origin binding is refused: {exc}") from None
            await self._persist_bindings()
        self._hello_known.set()
        if self.hooks is not None:
            self.hooks.link_ready(self)

    async def _on_members(self, members: Members) -> None:
        if self.directory is None:
            return
        refused: list[str] = []
        for binding in members.entries:
            try:
                self.directory.bind(binding)
            except BindingError as exc:
                refused.append(str(exc))
        if refused:
            self.refused_bindings += len(refused)
            self.limits.hit(f"bindings_refused/{self.peer_id}", "peer %s: refused %d binding(s) it relayed (%s)",
                            self._short, len(refused), printable(refused[0], 200))
        await self._persist_bindings()

    def _on_neighbours(self, message: Neighbours) -> None:
        before, self.peer_neighbours = self.peer_neighbours, frozenset(message.peer_ids)
        if before - self.peer_neighbours and self._vector_known.is_set():
            # It lost a first-hand source: what that daemon wrote since is no longer relayed to it
            # by the daemons that skipped it. Our vector lets it pull the difference from us now.
            self._owe(LinkOutbox.vector)

    def _confirm(self, entries: Any) -> None:
        if self.serving.confirm(entries) and self.hooks is not None:
            self.hooks.link_progress(self)

    async def _on_vector(self, vector: Vector) -> None:
        self._confirm((e.origin, e.max_seq) for e in vector.entries)
        heads = await self._heads()

        def hash_at(origin: str, seq: int) -> bytes | None:
            return self.store.stored_hash(origin, seq)

        forks = await self.astore.read(vector_forks, heads, vector, hash_at)
        hooks = self.hooks
        plan = self.pulls.on_vector(
            vector, heads, forks, refused_next=self.store.refusals.next, now=trio.current_time(),
            elsewhere=(lambda origin, max_seq: hooks.pull_elsewhere(self, origin, max_seq)) if hooks is not None else None)
        for origin in plan.new_forks:
            self.log.error("holds a different history of origin %s (fork)", origin)
        self._owe_wants(plan.wants)
        self._vector_known.set()

    def _on_want(self, want: Want) -> None:
        """Record the peer's pull (``ServePlan.on_want``: it replaces whatever of that origin was
        owed); the event sender answers it."""
        if self.serving.on_want(want.origin, want.after_seq):
            self._owed_kick.set()

    async def _on_events(self, message: Events) -> None:
        """Verify a batch (reader side), then queue it for the applier.

        Two stages run side by side: while the writer commits batch N, this side already reads
        and verifies batch N+1. Order is kept (one applier, FIFO)."""
        events = list(message.events)
        self.pulls.events_arrived(trio.current_time())
        # Signatures are checked here, on a worker thread, one per chained run (verify_batch):
        # the single writer thread then recomputes the hashes of exactly these objects and stores.
        if len(events) <= INLINE_VERIFY_EVENTS:
            # A live push (an event or a few): checked right here, sooner than a thread hop away.
            verified_keys = verify_batch(events, self.key_for)
        else:
            verified_keys = await trio.to_thread.run_sync(verify_batch, events, self.key_for)
        # What the sender could prove it holds counts as held by it (it stores before it serves).
        self._confirm([(e.origin, e.origin_seq) for e, k in zip(events, verified_keys, strict=True) if k is not None])
        if (len(events) <= INLINE_VERIFY_EVENTS and not self._applying
                and self._to_apply_send.statistics().current_buffer_used == 0):
            # A live push with nothing ahead of it: applied right here, a scheduler pass sooner
            # than through the applier (issue 27); the order holds, as nothing else is applying.
            await self._apply(events, verified_keys)
            return
        await self._to_apply_send.send((events, verified_keys))

    # -- applying ------------------------------------------------------------------------------

    async def _apply_loop(self) -> None:
        try:
            async for events, verified_keys in self._to_apply_recv:
                await self._apply(events, verified_keys)
        finally:
            self._applier_done.set()

    async def _apply(self, events: list[SignedEvent], verified_keys: list[bytes | None]) -> None:
        self._applying = True
        try:
            await self._store_batch(events, verified_keys)
        finally:
            self._applying = False

    async def _store_batch(self, events: list[SignedEvent], verified_keys: list[bytes | None]) -> None:
        observe = self.directory.observe if self.directory is not None else None
        may_redact = self.directory.redaction_authorized if self.directory is not None else None

        def job(ctx: WriteContext) -> Any:
            return ctx.apply_remote(events, self.key_for, source=self.peer_id, on_applied=observe,
                                    verified_keys=verified_keys, may_redact=may_redact)

        # A catch-up batch (hundreds of events) commits on a thread; a live push in the loop,
        # without waiting for its fsync: the events are on disk at their origin already (it
        # syncs before it pushes), so our watchers see them a fsync sooner (issue 27: ~0.4 ms of
        # the wake from A to B). Our receipt waits for our own sync (``_send_outbox``).
        live = len(events) <= INLINE_VERIFY_EVENTS
        report = await self.astore.write(job, heavy=not live, durable=not live)
        self.received_events += len(report.applied)
        heads = await self._heads()
        if report.rejected:
            self.rejected_events += len(report.rejected)
            self.pulls.rejected(report.rejected, heads)
            self.limits.hit(f"events_rejected/{self.peer_id}", "peer %s: rejected %d event(s) it sent (not from a "
                            "member in good standing, or a bad hash or signature)", self._short, len(report.rejected))
        if report.refused:
            self.refused_events += len(report.refused)
            self.limits.hit(f"events_refused/{self.peer_id}", "peer %s: refused %d authentic event(s) it sent for "
                            "breaking a rule (%s)", self._short, len(report.refused),
                            printable(report.refused[0][1], 200))
        if report.forks:
            self.log.error("refused %d forked event(s) it sent", len(report.forks))
        # Receipt: what we now hold of every origin in the batch (sent once it is on disk here): as
        # of the batches the writer counted, all of which the sender's sync covers (a batch still
        # being committed may already show in ``heads``; issue 43).
        for origin, max_seq in receipts(events, self.astore.committed_heads()):
            self.outbox.have(origin, max_seq)
            self._outbox_kick.set()
        for event in report.missing_artifacts:
            await self._fetch_artifacts(event)
        # A gap means we missed something: pull again from our head (not what we cannot accept).
        self._owe_wants(self.pulls.gap_wants(report.gaps, heads, self.store.refusals.next))

    # -- serving the peer's pulls --------------------------------------------------------------

    async def _spend_serve_budget(self, events: int) -> None:
        """Wait until ``events`` more may be served to this peer (``ServePlan.throttle``)."""
        wait = self.serving.throttle(events, trio.current_time())
        if wait:
            self.limits.hit(f"serve_rate/{self.peer_id}", "peer %s: pulls more than %d events/s; serving it at that "
                            "rate", self._short, int(SERVE_RATE_EVENTS_S))
            await trio.sleep(wait)
            self.serving.throttled(trio.current_time())

    async def _send_owed(self) -> None:
        """The event sender: what the peer pulled and what we commit that it lacks (our pushes), a
        page at a time, round-robin over origins, up to what we hold contiguously of replicated
        origins (never imported history). It is woken by the peer's wants and by every commit (the
        bus calls it directly: a push leaves in the first turn after its commit)."""
        cursor = self.bus.latest_seq
        def kick(records: list[CommittedEvent]) -> bool:
            # Not for events the peer holds (it sent them to us): that would only cost a turn,
            # ahead of the watchers they are for (issue 27).
            if not self.serving.lacks_any(records):
                return False
            self._owed_kick.set()
            return True

        stop_waking = self.bus.call_on_publish(kick)
        try:
            await self._vector_known.wait()
            # Whatever was committed before the peer's vector was known is covered by the vectors.
            while True:
                cursor = self._owe_new_commits(cursor)
                if not self.serving.owes:
                    self._owed_kick = trio.Event()
                    if self.bus.latest_seq <= cursor:
                        await self._owed_kick.wait()
                    continue
                await self._send_next_page()
        finally:
            stop_waking()

    async def _send_next_page(self) -> None:
        page = self.serving.next_page()
        if page is None:
            return  # the peer has since linked to the origin's daemon: it hears (and pulls) it there
        events = await self._fill(page)
        if not events:
            self.serving.page_empty(page.origin)  # nothing beyond what the peer holds (or not ours to offer)
            return
        if self.serving.page_ready(page.origin):
            await self._spend_serve_budget(len(events))
        await self._send_events(events)
        self.serving.page_sent(page.origin, events[-1].origin_seq)

    async def _fill(self, page: OwedPage) -> list[SignedEvent]:
        """The events of a page owed to the peer (at most ``page.limit``); empty when none."""
        if page.limit <= 0:
            return []
        # Just committed, so usually still on the bus as signed: no read, no thread hop. (Imported
        # history is never offered: the bus finds only replicated events.)
        events = self.bus.signed_after(page.origin, page.after_seq, page.limit) or []
        if len(events) == page.limit:
            return events
        head = (await self._heads()).get(page.origin)
        # Bounded by what we hold (None: not an origin we replicate — unknown, or history only).
        limit = self.serving.bound_by_head(page, head.max_seq if head is not None else None)
        if limit <= 0:
            return []
        if len(events) < limit:
            events = await self.astore.signed_events_of_origin(page.origin, page.after_seq, limit)
        return events

    async def _send_events(self, events: list[SignedEvent]) -> None:
        if self.directory is not None:
            # Certificates travel ahead of the events that need them: a peer that never met an
            # origin (a relay) can then verify its events on arrival.
            await self._send_bindings({e.origin for e in events})
        for batch in batch_events(events, _wire_size):
            await self.send(Events(tuple(batch)))
            self.sent_events += len(batch)
            self.serving.sent(batch)
            await trio.sleep(0)  # interleave with local work: a big catch-up must not starve appends

    # -- artifacts -----------------------------------------------------------------------------

    async def _fetch_artifacts(self, event: SignedEvent) -> None:
        for artifact_id in event.artifact_ids:
            present = await self.astore.read(self._has_artifact, artifact_id)
            if present:
                continue
            step = self.pulls.fetch(artifact_id, event.origin)
            if step is Fetch.FULL:
                return  # the rest is asked for once these arrive (the origin is pulled again then)
            if step is Fetch.ASK:
                self._owe(lambda outbox, a=artifact_id: outbox.artifact_want(a, 0))
        if await self.astore.read(lambda: all(self._has_artifact(a) for a in event.artifact_ids)):
            # Another link fetched them meanwhile: just pull the origin again.
            heads = await self._heads()
            self._owe_wants([self.pulls.pull_from_head(event.origin, heads)])

    def _has_artifact(self, artifact_id: str) -> bool:
        try:
            self.store.get_artifact(artifact_id, with_content=False)
        except NotFound:
            return False
        return True

    def _on_artifact_want(self, want: ArtifactWant) -> None:
        self.serving.on_artifact_want(want.artifact_id, want.offset)
        self._artifact_kick.set()

    async def _serve_artifacts(self) -> None:
        """The artifact server: the peer's artifact requests, one at a time, in chunks."""
        while True:
            want = self.serving.next_artifact_ask()
            if want is None:
                self._artifact_kick = trio.Event()
                await self._artifact_kick.wait()
                continue
            await self._serve_artifact(want)

    async def _serve_artifact(self, want: ArtifactWant) -> None:
        try:
            record = await self.astore.get_artifact(want.artifact_id)
        except NotFound:
            await self.send(ArtifactChunk(want.artifact_id, 0, -1, "", "", "", "", "{}", b""))
            return
        content: bytes = record["content"]
        metadata_json = json.dumps(record["metadata"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        offset = min(want.offset, len(content))
        while True:
            piece = content[offset:offset + ARTIFACT_CHUNK_BYTES]
            await self.send(ArtifactChunk(want.artifact_id, offset, len(content), record["sha256"], record["kind"],
                                          record["created_by"], record["created_at"], metadata_json, piece))
            offset += len(piece)
            if offset >= len(content):
                return
            await trio.sleep(0)  # other messages (pushes, wants) interleave between chunks

    async def _on_artifact_chunk(self, chunk: ArtifactChunk) -> None:
        received = self.pulls.on_chunk(chunk)
        if received is Chunk.ABSENT:
            self.log.warning("does not have artifact %s", printable(chunk.artifact_id))
        if not isinstance(received, ArtifactReceived):
            return  # more to come, given up, or not asked for
        content = received.content
        record = artifact_record_from_peer(chunk, self.store.limits)
        if record is None:
            raise RemoteProtocolError(f"artifact {chunk.artifact_id}: its descriptive fields break the rules "
                                      "(kind, created_by, created_at or metadata)")
        await self.astore.write(lambda ctx: ctx.put_verified_artifact(content=content, **record),
                                heavy=len(content) > HEAVY_ARTIFACT_BYTES)
        self.log.info("sent artifact %s (%d bytes)", chunk.artifact_id, len(content))
        heads = await self._heads()
        self._owe_wants(self.pulls.resume(received.origins, heads))

    # -- pushing -------------------------------------------------------------------------------

    def _relayed(self, origin: str) -> bool:
        """Are events of ``origin`` sent to this peer by us? Not if the peer hears the origin's daemon
        first-hand: it gets them there, pushed, and pulls them there (``LinkHooks.pull_elsewhere``)."""
        if not self.peer_neighbours or self.directory is None:
            return True
        owner = self.directory.peer_of_origin(origin)
        return owner is None or self.relays_to_peer(owner)

    def _owe_new_commits(self, cursor: int) -> int:
        """Owe the peer every event committed after local seq ``cursor`` (appended here or arrived
        from another peer: that is how a line relays) that it does not hold and does not hear
        first-hand; returns the new cursor."""
        new = self.bus.records_after(cursor, 10_000)
        if new is None:  # fell behind the ring: the anti-entropy vector exchange repairs it
            self._owe(LinkOutbox.vector)
            return self.bus.latest_seq
        if not new:
            return cursor
        self.serving.owe_committed(new)
        return new[-1].seq

    async def _anti_entropy(self) -> None:
        while True:
            due = self.session.get_timer()
            await trio.sleep_until(due if due is not None else trio.current_time() + ANTI_ENTROPY_S)
            if self.session.get_timer() == due:  # no vector went out meanwhile (the outbox sends them too)
                self._owe(LinkOutbox.vector)
                await trio.sleep(ANTI_ENTROPY_S / 10)  # let the sender take it before looking again
