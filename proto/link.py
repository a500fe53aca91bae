"""The link machine: one replication link's whole protocol, sans IO (proto/PROTOCOL.md §5.4).

Owns ``LinkMachine``, which composes the session (``PeerSession``: framing, message order), the
peer's side (``ServePlan``: what it holds, the events and artifacts it is owed), our side
(``PullPlan``: what we pull, forks, refused origins, artifacts on their way in), the coalesced small
messages (``LinkOutbox``: receipts, wants, artifact requests, neighbours, a vector due) and the
gossip waiting for the link (the newest presence record and report per daemon). It is told what
happened and answers what to send now and when to wake next — the shape of aioquic's
``QuicConnection`` under its asyncio protocol. Must not import trio, apsw, logging or a clock:
time comes in as ``now``; the store's answers come in as arguments (our heads, the refusals, an
apply report, the artifacts we lack, a synced version vector).

Theory of operation
-------------------
The shell (``palaced.peers.link.PeerLink``) runs three tasks around one machine, and the machine
has one entry point per thing that can happen:

* **Network data** (the reader). ``reading(now)`` before it waits, ``receive_data(data, now)``
  when bytes came, then ``next_event(now)`` until ``NEED_DATA``. What needs nothing but the
  machine's own state is handled inside (``want``, ``have``, ``artifact_want``, ``neighbours``,
  chunks of an artifact still incomplete); the rest comes out for the shell: ``Hello`` and
  ``Members`` (bind with the member directory), ``Vector`` (find forks in the store, then
  ``vector_checked``), ``Events`` (verify, apply, then ``events_verified`` and
  ``batch_applied``), ``ArtifactArrived`` (store it, then ``artifact_stored``), ``Presence``,
  ``Report``, ``Addresses`` and ``Seen`` (the network's), ``PeerConfirmed`` (link progress), ``ArtifactAbsent`` (logged) and
  ``ConnectionClosed``. The reader never writes: everything owed in return is recorded here.
* **Local facts** (the applier, the event bus, the network): ``batch_applied``,
  ``artifact_stored``, ``committed`` (every commit on the bus: owe the peer what it lacks and does
  not hear first-hand), ``tell_neighbours``, ``gossip``, ``discard_gossip``.
* **Sending** (the sender). ``next_send(now)`` answers the one next thing to do: bytes to write
  (``bytes``), ``SyncWal`` (sync the WAL, then ``synced(durable_heads)``: receipts and vectors
  name only what is on disk), an ``OwedPage`` (read those events, then ``page_filled``) or an
  ``ArtifactWant`` (read that artifact, then ``artifact_read``); None when nothing is owed. The
  shell writes the bytes, telling ``sending(now)`` / ``data_sent(n)`` around each piece.
* **Timers.** ``get_timer()`` is the next deadline (our hello's answer, the peer's silence, the
  anti-entropy vector, a throttled page); ``handle_timer(now)`` once it passed. A dead peer
  raises ``RemoteProtocolError`` there.

What ``next_send`` answers, in order (each rule is tested in tests/proto/test_link.py):

1. Our opening: ``hello``, then every binding we can prove (``members``, in chunks), then a
   ``vector`` once a sync covers it. Nothing else goes before it.
2. Receipts (``have``) and a vector whose sync is done (a receipt names what we held before that
   sync started; a vector what is on disk after it), each vector preceded by the bindings of the
   origins it names that the peer was not sent.
3. The outbox's small messages: ``neighbours``, ``want``, ``artifact_want``.
4. A sync when receipts or a vector wait for one (one at a time; the shell runs it beside the
   sender, so a receipt waiting for the disk never holds a push).
5. Gossip, newest per daemon and kind, each preceded by its daemon's bindings; not about a daemon
   the peer hears first-hand (§5.4 rule 4).
6. Events and artifact chunks, alternately: the peer's pulls and our pushes one page at a time,
   round-robin over origins (``ServePlan``), a page's batches each bounded by count and bytes and
   preceded by the bindings they need; a page answering the peer's pull waits for the serve
   budget (``page_filled`` says how long); the peer's artifact requests one at a time, one chunk
   per turn.

Error handling: what the peer breaks raises ``RemoteProtocolError`` out of ``next_event`` or
``handle_timer`` (the session is put in ``ERROR`` when the framing or the message order broke);
our own misuse raises ``LocalProtocolError`` from the session. After the session closed or failed
``next_send`` answers None and ``goodbye`` None.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Protocol, final

from .bindings import OriginBinding
from .broadcast import BroadcastMessage
from .envelope import CommittedEvent, SignedEvent
from .errors import ProtocolError, RemoteProtocolError, ValidationError
from .framing import NEED_DATA
from .outbox import LinkOutbox
from .overlay import OverlayMessage
from .peer import (
    ARTIFACT_CHUNK_BYTES,
    CONTROL_MESSAGES,
    MAX_BINDINGS_PER_MESSAGE,
    Addresses,
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
    Seen,
    Vector,
    VectorEntry,
    Want,
    bindings_digest,
)
from .session import ANTI_ENTROPY_S, ConnectionClosed, PeerSession, SessionState
from .sync import OriginHead, batch_events
from .sync_plan import (
    ArtifactReceived,
    Chunk,
    Fetch,
    OwedPage,
    PullPlan,
    ServePlan,
    receipts,
)
from .validation import Limits, check_replicated_artifact

__all__ = [
    "HELLO_TIMEOUT_S", "PULL_STALL_S", "SILENCE_S", "STALL_REPORT_S", "SYNC_WAL", "ApplyOutcome",
    "ArtifactAbsent", "ArtifactArrived", "Directory", "GossipRecord", "LinkMachine", "LinkStatistics", "PeerConfirmed", "SyncWal",
    "artifact_record_from_peer", "wire_size",
]

# Why 10 s: an authenticated peer that does not say hello within the TLS handshake's own limit is
# stuck or stalling on purpose; its link would block the real one (one link per peer).
HELLO_TIMEOUT_S: Final = 10.0
# Why 3 anti-entropy periods: every live peer sends its vector every ANTI_ENTROPY_S whatever else it
# does, so a link we have read nothing from for this long has a peer that is gone (a laptop shut,
# a cable pulled: no FIN ever comes) or stuck; it ends and is dialled again.
SILENCE_S: Final = 3 * ANTI_ENTROPY_S
# Why 15 s: a live peer sends its vector every ANTI_ENTROPY_S and takes a 1 MiB frame in well under a
# second on any LAN; neither for half again that long is worth a person's attention (`status`
# health) well before the link is ended for it (SILENCE_S, and the shell's send stall).
STALL_REPORT_S: Final = 1.5 * ANTI_ENTROPY_S
# Why 30 s: we asked the peer for events its vector shows and nothing came for three anti-entropy
# periods (each re-asks a stalled pull): the link is alive but makes no progress — `status` says so.
PULL_STALL_S: Final = 3 * ANTI_ENTROPY_S
# Why 512: the fixed fields (hashes, signature, ids, names) of an event on the wire stay below it.
EVENT_OVERHEAD_BYTES: Final = 512


def wire_size(event: SignedEvent) -> int:
    """Roughly what an event costs on the wire (exact for ASCII; at most 4x under for other
    text, which batches of ~1 MiB under a 16 MiB frame limit absorb) — without encoding it."""
    return EVENT_OVERHEAD_BYTES + len(event.body or "") + len(event.metadata_json)


def artifact_record_from_peer(chunk: ArtifactChunk, limits: Limits) -> dict[str, str] | None:
    """The descriptive fields of a received artifact, if they obey the local rules (else None)."""
    try:
        check_replicated_artifact(kind=chunk.kind, created_by=chunk.created_by, created_at=chunk.created_at,
                                  metadata_json=chunk.metadata_json, limits=limits)
    except ValidationError:
        return None
    return {"sha256": chunk.sha256, "kind": chunk.kind, "created_by": chunk.created_by,
            "created_at": chunk.created_at, "metadata_json": chunk.metadata_json}


class Directory(Protocol):
    """What the machine asks of the member directory (``palaced.members.MemberDirectory``): which
    key verifies an origin's events and which bindings exist, all from memory."""

    def key_for(self, origin: str, origin_seq: int) -> bytes | None: ...
    def is_bound(self, origin: str) -> bool: ...
    def peer_of_origin(self, origin: str) -> str | None: ...
    def binding(self, origin: str) -> OriginBinding | None: ...
    def origins_of_peer(self, peer_id: str) -> list[str]: ...
    def entries(self) -> tuple[OriginBinding, ...]: ...


class ApplyOutcome(Protocol):
    """What the store answered for a batch of the peer's events (``palaced.store.apply.ApplyReport``)."""

    @property
    def applied(self) -> Sequence[Any]: ...
    @property
    def gaps(self) -> Sequence[SignedEvent]: ...
    @property
    def rejected(self) -> Sequence[SignedEvent]: ...
    @property
    def refused(self) -> Sequence[Any]: ...


# -- what the machine answers ----------------------------------------------------------------


@final
@dataclasses.dataclass(frozen=True, slots=True)
class PeerConfirmed:
    """The peer confirmed holding more than it had said (a receipt or a vector): link progress."""


@final
@dataclasses.dataclass(frozen=True, slots=True)
class ArtifactAbsent:
    """The peer does not have an artifact we asked it for (the fetch is given up)."""

    artifact_id: str


@final
@dataclasses.dataclass(frozen=True, slots=True)
class ArtifactArrived:
    """An artifact we asked for arrived whole, its sha256 and descriptive fields checked: to be
    stored (``record`` holds ``put_verified_artifact``'s fields), then ``artifact_stored``."""

    received: ArtifactReceived
    record: dict[str, str]


@final
@dataclasses.dataclass(frozen=True, slots=True)
class SyncWal:
    """Sync the WAL (receipts or our vector wait for it), then call ``synced``."""


SYNC_WAL: Final = SyncWal()
_CONFIRMED: Final = PeerConfirmed()


@dataclasses.dataclass(slots=True)
class LinkStatistics:
    """A link's counters, as ``status`` and ``peers`` show them (the shell counts the bindings it
    refused, the machine the rest)."""

    sent_events: int = 0
    received_events: int = 0
    rejected_events: int = 0
    refused_events: int = 0
    refused_bindings: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0


@dataclasses.dataclass(slots=True)
class _Sync:
    """A sync under way (``heads`` None) or done: what waited for it."""

    vector: bool
    haves: list[Have]
    heads: dict[str, OriginHead] | None = None


@dataclasses.dataclass(slots=True)
class _Filled:
    """A page read from the store, waiting to go (``until``: not before, the serve budget's wait)."""

    page: OwedPage
    events: list[SignedEvent]
    until: float | None


def _artifact_chunks(want: ArtifactWant, record: Mapping[str, Any] | None) -> Iterator[ArtifactChunk]:
    """The chunks answering ``want``: one of size -1 when we do not hold the artifact."""
    if record is None:
        yield ArtifactChunk(want.artifact_id, 0, -1, "", "", "", "", "{}", b"")
        return
    content: bytes = record["content"]
    metadata_json = json.dumps(record["metadata"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    offset = min(want.offset, len(content))
    while True:
        piece = content[offset:offset + ARTIFACT_CHUNK_BYTES]
        yield ArtifactChunk(want.artifact_id, offset, len(content), record["sha256"], record["kind"],
                            record["created_by"], record["created_at"], metadata_json, piece)
        offset += len(piece)
        if offset >= len(content):
            return


#: what ``next_event`` hands the shell
#: what daemons gossip about themselves, relayed newest-wins: their watchers, reports and addresses
GossipRecord = Presence | Report | Addresses
#: what ``next_event`` hands the shell
LinkEvent = (Hello | Members | Vector | Events | GossipRecord | Seen | PeerConfirmed | ArtifactArrived
             | ArtifactAbsent | ConnectionClosed | OverlayMessage | BroadcastMessage)
#: what ``next_send`` asks the shell to do
SendStep = bytes | SyncWal | OwedPage | ArtifactWant


class LinkMachine:
    """One replication link's protocol, from one side (see the module's theory of operation).

    Args:
        hello: our hello.
        directory: the member directory (bindings travel with the link, and what the peer says of
            origins not bound here is not kept). None: no bindings, and ``key_for`` verifies.
        key_for: ``(origin, origin_seq) -> key``, without a directory.
        expected_peer_id: the peer id its TLS certificate showed (its hello must name it).
        max_artifact_bytes: the largest artifact we accept.
        limits: this daemon's limits (an artifact's descriptive fields are checked against them).
    """

    def __init__(self, hello: Hello, *, directory: Directory | None = None,
                 key_for: Callable[[str, int], bytes | None] | None = None, expected_peer_id: str | None = None,
                 max_artifact_bytes: int = 64 * 1024 * 1024, limits: Limits | None = None) -> None:
        if directory is not None:
            key_for = directory.key_for
        if key_for is None:
            raise TypeError("a LinkMachine needs a member directory or a key_for function")
        self.session = PeerSession(hello)
        self.directory = directory
        self.key_for: Callable[[str, int], bytes | None] = key_for
        self.expected_peer_id = expected_peer_id
        self.limits = limits if limits is not None else Limits()
        self.serving = ServePlan(verifiable=directory.is_bound if directory is not None else None,
                                 relayed=self._relayed if directory is not None else None)
        self.pulls = PullPlan(key_for, max_artifact_bytes=max_artifact_bytes)
        self.outbox = LinkOutbox()
        self.stats = LinkStatistics()
        #: the daemons the peer hears first-hand (its Neighbours): their events are not relayed to it
        self.peer_neighbours: frozenset[str] = frozenset()
        #: the broadcast tree made the peer lazy (``palace_proto.broadcast``): what is committed
        #: here is announced to it (``IHave``, by the shell), not pushed — but our own events, which
        #: no other daemon relays to a peer that hears us first-hand; its pulls and grafts are
        #: still served
        self.lazy = False
        self._neighbours_told: tuple[str, ...] | None = None
        self._bindings_sent: set[str] = set()
        #: our bindings as of our hello, until the peer's hello says whether it needs them
        self._opening_entries: tuple[OriginBinding, ...] | None = None
        #: what our vectors on this link said so far, per origin (the next one says what changed)
        self._vector_sent: dict[str, tuple[int, bytes]] | None = None
        self._events: collections.deque[LinkEvent] = collections.deque()
        self._hello_deadline: float | None = None
        self._hello_sent = False
        self._opened = False
        #: since when the shell waits for the peer's bytes / for the peer to take ours (None: not)
        self._reading_since: float | None = None
        self._sending_since: float | None = None
        self._sync: _Sync | None = None
        self._gossip: dict[tuple[type, str], GossipRecord] = {}
        self._filling = False
        self._filled: _Filled | None = None
        #: the batches of the page on its way, after the one sent last, and its origin
        self._batches: collections.deque[list[SignedEvent]] = collections.deque()
        self._page_origin = ""
        self._reading_artifact = False
        self._artifact: Iterator[ArtifactChunk] | None = None
        self._artifact_turn = False

    def __repr__(self) -> str:
        return (f"<LinkMachine {self.session!r} sent={self.stats.sent_events} received={self.stats.received_events} "
                f"owed={len(self.serving.owed_origins())} pulling={self.pulls.pulling}>")

    # -- what the rest of the daemon reads -------------------------------------------------------

    @property
    def peer_id(self) -> str | None:
        hello = self.session.their_hello
        return hello.peer_id if hello is not None else self.expected_peer_id

    @property
    def their_hello(self) -> Hello | None:
        return self.session.their_hello

    @property
    def their_vector(self) -> Vector | None:
        return self.session.their_vector

    @property
    def confirmed(self) -> dict[str, int]:
        """What the peer confirmed holding durably, per origin (its vectors and receipts)."""
        return self.serving.confirmed

    @property
    def their_heads(self) -> dict[str, int]:
        """The peer's newest vector, origin -> max_seq."""
        return self.pulls.their_heads

    @property
    def forks(self) -> list[str]:
        """Origins whose history the peer holds differently (seen in its vectors)."""
        return self.pulls.forks

    @property
    def fetching(self) -> bool:
        """Artifacts are on their way (events wait for them)."""
        return self.pulls.fetching

    def stall(self, now: float) -> str | None:
        """Why this link makes no progress now, in plain words (None: it does, or has nothing to do)."""
        if self._sending_since is not None and now - self._sending_since > STALL_REPORT_S:
            return f"it has taken nothing we sent for {now - self._sending_since:.0f} s"
        if self._reading_since is not None and now - self._reading_since > STALL_REPORT_S:
            return f"it has sent nothing for {now - self._reading_since:.0f} s"
        progress_at = self.pulls.progress_at
        if progress_at is not None and now - progress_at > PULL_STALL_S:
            return (f"we asked for events of {self.pulls.pulling} origin(s) it holds and none came for "
                    f"{now - progress_at:.0f} s")
        return None

    def relays_to_peer(self, peer_id: str) -> bool:
        """Should events and gossip *about* daemon ``peer_id`` go to this peer? Not when the peer
        hears that daemon first-hand (its Neighbours), nor when it is the peer itself; our own
        always go."""
        if peer_id == self.peer_id:
            return False
        return peer_id == self.session.our_hello.peer_id or peer_id not in self.peer_neighbours

    def _relayed(self, origin: str) -> bool:
        """Are events of ``origin`` sent to this peer by us? Not if it hears the origin's daemon."""
        if not self.peer_neighbours or self.directory is None:
            return True
        owner = self.directory.peer_of_origin(origin)
        return owner is None or self.relays_to_peer(owner)

    # -- network data ------------------------------------------------------------------------------

    def start(self, now: float) -> None:
        """The link runs from ``now``: the peer's hello is due within ``HELLO_TIMEOUT_S``."""
        self._hello_deadline = now + HELLO_TIMEOUT_S

    def reading(self, now: float) -> None:
        """The shell waits for the peer's bytes from ``now`` (the silence rule counts from here)."""
        self._reading_since = now

    def receive_data(self, data: bytes | bytearray, now: float) -> None:
        """Bytes from the peer (``b""``: EOF)."""
        self._reading_since = None
        self.stats.bytes_received += len(data)
        self.session.receive_data(data)

    def next_event(self, now: float) -> LinkEvent | Any:
        """The next thing the shell must act on, ``NEED_DATA`` when the bytes are used up.

        Raises:
            RemoteProtocolError: the peer broke the protocol.
        """
        if self._events:
            return self._events.popleft()
        while True:
            message = self.session.next_event()
            if message is NEED_DATA or isinstance(message, ConnectionClosed):
                return message
            if isinstance(message, Hello):
                if self.expected_peer_id is not None and message.peer_id != self.expected_peer_id:
                    raise RemoteProtocolError(f"peer's hello names {message.peer_id!r} but its TLS certificate is "
                                              f"{self.expected_peer_id}")
                return message
            if isinstance(message, Vector):
                if self.serving.confirm((e.origin, e.max_seq) for e in message.entries):
                    self._events.append(message)
                    return _CONFIRMED
                return message
            if isinstance(message, Events):
                self.pulls.events_arrived(now)
                return message
            if isinstance(message, (Members, Presence, Report, Addresses, Seen, *CONTROL_MESSAGES)):
                return message
            event = self._absorb(message)
            if event is not None:
                return event

    def _absorb(self, message: Any) -> LinkEvent | None:
        """A message the machine handles alone; returns what the shell must still hear of it."""
        if isinstance(message, Have):
            return _CONFIRMED if self.serving.confirm(message.entries) else None
        if isinstance(message, Want):
            self.serving.on_want(message.origin, message.after_seq)
        elif isinstance(message, ArtifactWant):
            self.serving.on_artifact_want(message.artifact_id, message.offset)
        elif isinstance(message, ArtifactChunk):
            received = self.pulls.on_chunk(message)
            if received is Chunk.ABSENT:
                return ArtifactAbsent(message.artifact_id)
            if isinstance(received, ArtifactReceived):
                record = artifact_record_from_peer(message, self.limits)
                if record is None:
                    raise RemoteProtocolError(f"artifact {message.artifact_id}: its descriptive fields break the "
                                              "rules (kind, created_by, created_at or metadata)")
                return ArtifactArrived(received, record)
        elif isinstance(message, Neighbours):
            before, self.peer_neighbours = self.peer_neighbours, frozenset(message.peer_ids)
            if before - self.peer_neighbours and self.session.their_vector is not None:
                # It lost a first-hand source: what that daemon wrote since is no longer relayed to
                # it by the daemons that skipped it. Our vector lets it pull the difference from us.
                self.outbox.vector()
        return None  # a goodbye: the session is closed, EOF follows

    # -- what the shell found out ------------------------------------------------------------------

    def vector_checked(self, vector: Vector, heads: Mapping[str, OriginHead], forks: Sequence[str], *,
                       refused_next: Mapping[str, tuple[int, bytes, str]], now: float,
                       elsewhere: Callable[[str, int], bool] | None = None) -> tuple[str, ...]:
        """The peer's ``vector`` against our ``heads`` and the ``forks`` the store found in it
        (``PullPlan.on_vector``): the wants it calls for are owed. Returns the new forks."""
        plan = self.pulls.on_vector(vector, heads, forks, refused_next=refused_next, now=now, elsewhere=elsewhere)
        self._want(plan.wants)
        return plan.new_forks

    def events_verified(self, events: Sequence[SignedEvent], keys: Sequence[bytes | None]) -> bool:
        """The peer's batch was verified (``keys`` by position): what it proved it holds counts as
        held by it (it stores before it serves). Returns whether that is link progress."""
        return self.serving.confirm([(e.origin, e.origin_seq) for e, k in zip(events, keys, strict=True)
                                     if k is not None])

    def batch_applied(self, events: Sequence[SignedEvent], report: ApplyOutcome,
                      missing: Iterable[tuple[SignedEvent, Sequence[str]]] = (), *,
                      heads: Mapping[str, OriginHead], committed: Mapping[str, OriginHead],
                      refused_next: Mapping[str, tuple[int, bytes, str]]) -> None:
        """The store applied the peer's batch: count it; owe receipts as of ``committed`` (the
        writer's version vector once the batch was counted: the next sync covers it); fetch what
        ``missing`` events lack (``(event, the artifact ids we do not hold)``; none left: pull its
        origin again); pull again from ``heads`` after a gap; don't ask this peer again for an
        origin whose event it sent we rejected."""
        stats = self.stats
        stats.received_events += len(report.applied)
        if report.rejected:
            stats.rejected_events += len(report.rejected)
            self.pulls.rejected(report.rejected, heads)
        stats.refused_events += len(report.refused)
        for origin, max_seq in receipts(events, committed):
            self.outbox.have(origin, max_seq)
        for event, absent in missing:
            if not absent:  # another link fetched them meanwhile: just pull the origin again
                self._want([self.pulls.pull_from_head(event.origin, heads)])
            for artifact_id in absent:
                step = self.pulls.fetch(artifact_id, event.origin)
                if step is Fetch.FULL:
                    break  # the rest is asked for once these arrive (the origin is pulled again then)
                if step is Fetch.ASK:
                    self.outbox.artifact_want(artifact_id, 0)
        self._want(self.pulls.gap_wants(report.gaps, heads, refused_next))

    def artifact_stored(self, received: ArtifactReceived, heads: Mapping[str, OriginHead]) -> None:
        """An artifact the peer sent is stored: pull again the origins that waited for it."""
        self._want(self.pulls.resume(received.origins, heads))

    def _want(self, wants: Iterable[Want]) -> None:
        for want in wants:
            self.outbox.want(want.origin, want.after_seq)

    # -- local facts -------------------------------------------------------------------------------

    def committed(self, records: Sequence[CommittedEvent]) -> bool:
        """Events were committed here (appended, or from another peer: that is how a line relays):
        owe the peer those it lacks and does not hear first-hand (a lazy peer: only our own, which
        nobody else relays to a peer that hears us first-hand). Returns whether it is owed any."""
        if self.lazy:
            ours = self.session.our_hello.origin
            records = [r for r in records if r.signed.origin == ours]
        if not records or not self.serving.lacks_any(records):
            return False
        self.serving.owe_committed(records)
        return True

    def send_control(self, message: OverlayMessage | BroadcastMessage) -> None:
        """A message of the partial views or the broadcast tree for the peer (sent with the small
        messages, in order; the oldest are dropped past ``CONTROL_QUEUE_MAX`` unsent)."""
        self.outbox.control(message)

    def serve_from(self, origin: str, seq: int) -> bool:
        """The peer grafted ``(origin, seq)`` (it misses that event): push it that one (a graft
        answered with everything from there on would resend what eager links are delivering),
        unless it confirmed holding it. Returns whether anything is owed."""
        return self.serving.owe_one(origin, seq)

    def tell_seen(self, host: str) -> None:
        """The peer dialled us from ``host``: it is told once (``Seen``), so it may offer that host."""
        self.outbox.seen(host)

    def tell_neighbours(self, peer_ids: Iterable[str]) -> bool:
        """Our neighbour set: the peer is told if it changed (replacing a set not sent yet).
        Returns whether it changed."""
        told = tuple(p for p in peer_ids if p != self.peer_id)
        if told == self._neighbours_told:
            return False
        self._neighbours_told = told
        self.outbox.neighbours(told)
        return True

    def gossip(self, record: GossipRecord) -> None:
        """Gossip for the peer: kept until sent, the newest per daemon and kind only."""
        key = (type(record), record.peer_id)
        known = self._gossip.get(key)
        if known is None or known.serial < record.serial:
            self._gossip[key] = record

    def discard_gossip(self, peer_id: str) -> None:
        """Forget whatever gossip about daemon ``peer_id`` waits (it was revoked)."""
        self._gossip = {key: record for key, record in self._gossip.items() if key[1] != peer_id}

    # -- sending ---------------------------------------------------------------------------------

    def next_send(self, now: float) -> SendStep | None:
        """The next thing to send (see the module's theory of operation), or None: nothing now."""
        session = self.session
        if session.state not in (SessionState.HANDSHAKE, SessionState.SYNCING):
            return None
        if not self._hello_sent:
            return self._opening(now)
        if self._opening_entries is not None:
            opening = self._opening_bindings(now)
            if opening is None:
                return None  # the peer's hello first: it says whether it lacks any of our bindings
            if opening:
                return opening
        sync = self._sync
        if sync is not None and sync.heads is not None:
            self._sync = None
            return self._after_sync(sync, now)
        if not self._opened:
            return self._start_sync() if sync is None else None
        messages = self.outbox.take()
        if messages:
            return b"".join(session.send(m, now=now) for m in messages)
        if sync is None and self.outbox.awaits_sync:
            return self._start_sync()
        if self._gossip:
            data = self._gossip_frames(now)
            if data:
                return data
        if session.their_vector is None:
            return None
        self._artifact_turn = not self._artifact_turn
        first, second = ((self._artifact_step, self._event_step) if self._artifact_turn
                         else (self._event_step, self._artifact_step))
        step = first(now)
        return step if step is not None else second(now)

    def _opening(self, now: float) -> bytes:
        """Our hello, saying which bindings we hold (``bindings_digest``); our bindings follow once
        the peer's hello says it lacks some (``_opening_bindings``), then our vector once synced."""
        session = self.session
        if self.directory is not None:
            self._opening_entries = self.directory.entries()
            session.our_hello = dataclasses.replace(
                session.our_hello, bindings=bindings_digest(b.origin for b in self._opening_entries))
        frame = session.send(session.our_hello, now=now)
        self._hello_sent = True
        self.outbox.vector()
        return frame

    def _opening_bindings(self, now: float) -> bytes | None:
        """Every binding we held at our hello, in chunks (however many origins a palace has seen, no
        message outgrows a frame) — none when the peer's hello says it holds the same set: in a
        settled palace every daemon does, and a link then opens without a member's worth of
        certificates each way. None until the peer's hello came."""
        their_hello = self.session.their_hello
        if their_hello is None:
            return None
        entries, self._opening_entries = self._opening_entries, None
        assert entries is not None
        self._bindings_sent.update(b.origin for b in entries)
        if their_hello.bindings and their_hello.bindings == self.session.our_hello.bindings:
            return b""
        return b"".join(self.session.send(Members(entries[start:start + MAX_BINDINGS_PER_MESSAGE]), now=now)
                        for start in range(0, max(len(entries), 1), MAX_BINDINGS_PER_MESSAGE))

    def _start_sync(self) -> SyncWal:
        vector, haves = self.outbox.take_after_sync()
        self._sync = _Sync(vector, haves)
        return SYNC_WAL

    def synced(self, durable_heads: Mapping[str, OriginHead]) -> None:
        """The sync ``SyncWal`` asked for is done; ``durable_heads`` is what is on disk now."""
        if self._sync is not None:
            self._sync.heads = dict(durable_heads)

    def _after_sync(self, sync: _Sync, now: float) -> bytes:
        """The receipts that waited for the sync, then our vector (bindings of its origins first:
        a peer that cannot verify an origin never asks for its events). Never empty: a sync is
        started only for one or the other."""
        frames = [self.session.send(have, now=now) for have in sync.haves]
        if sync.vector and sync.heads is not None:
            vector = self._vector_of(sync.heads)
            frames += self._bindings_frames((e.origin for e in vector.entries), now)
            frames.append(self.session.send(vector, now=now))
            if self._vector_sent is None:
                self._vector_sent = {}
            self._vector_sent.update((e.origin, (e.max_seq, e.head_hash)) for e in vector.entries)
            self._opened = True
        return b"".join(frames)

    def _vector_of(self, heads: Mapping[str, OriginHead]) -> Vector:
        """Our vector as of ``heads``: whole on the link's first, then only the origins whose head
        moved since the last one we sent on it (the peer merges it: a TCP link loses nothing in
        between, and a new link starts whole again)."""
        entries = tuple(VectorEntry(o, h.max_seq, h.head_hash) for o, h in sorted(heads.items()))
        sent = self._vector_sent
        if sent is None:
            return Vector(entries)
        return Vector(tuple(e for e in entries if sent.get(e.origin) != (e.max_seq, e.head_hash)), delta=True)

    def _bindings_frames(self, origins: Iterable[str], now: float) -> list[bytes]:
        """``members`` with the bindings of ``origins`` this peer was not sent (those not bound here
        yet are sent once they are)."""
        if self.directory is None:
            return []
        missing = sorted(set(origins) - self._bindings_sent)
        if not missing:
            return []
        bindings = tuple(b for b in map(self.directory.binding, missing) if b is not None)
        self._bindings_sent.update(b.origin for b in bindings)
        return [self.session.send(Members(bindings[start:start + MAX_BINDINGS_PER_MESSAGE]), now=now)
                for start in range(0, len(bindings), MAX_BINDINGS_PER_MESSAGE)]

    def _gossip_frames(self, now: float) -> bytes:
        pending, self._gossip = list(self._gossip.values()), {}
        frames: list[bytes] = []
        for record in pending:
            if not self.relays_to_peer(record.peer_id):
                continue  # the peer hears that daemon first-hand: it has this record or a newer one
            if self.directory is not None:  # so the peer can verify it
                frames += self._bindings_frames(self.directory.origins_of_peer(record.peer_id), now)
            frames.append(self.session.send(record, now=now))
        return b"".join(frames)

    def _event_step(self, now: float) -> bytes | OwedPage | None:
        """The next batch of the page on its way, a filled page to start, or a page to fill."""
        if self._batches:
            return self._next_batch(now)
        filled = self._filled
        if filled is not None:
            if filled.until is not None:
                if now < filled.until:
                    return None
                self.serving.throttled(now)
            self._filled = None
            self._batches.extend(batch_events(filled.events, wire_size))
            self._page_origin = filled.page.origin
            bindings = self._bindings_frames({e.origin for e in filled.events}, now)
            return b"".join([*bindings, self._next_batch(now)])
        if self._filling:
            return None
        while self.serving.owes:
            page = self.serving.next_page()
            if page is None:
                continue  # the peer has since linked to the origin's daemon: it hears (and pulls) it there
            if page.limit <= 0:
                self.serving.page_empty(page.origin)
                continue
            self._filling = True
            return page
        return None

    def _next_batch(self, now: float) -> bytes:
        batch = self._batches.popleft()
        data = self.session.send(Events(tuple(batch)), now=now)
        self.stats.sent_events += len(batch)
        self.serving.sent(batch)
        if not self._batches:
            self.serving.page_sent(self._page_origin, batch[-1].origin_seq)
        return data

    def bound_by_head(self, page: OwedPage, head: int | None) -> int:
        """The bus did not hold the whole page: how many events it may hold, given our head of its
        origin (None: not an origin we replicate). See ``ServePlan.bound_by_head``."""
        return self.serving.bound_by_head(page, head)

    def page_filled(self, page: OwedPage, events: list[SignedEvent], now: float) -> float:
        """The shell read ``page``'s events (from the bus or the store; empty: none to offer).

        Returns:
            How long the page waits for the serve budget (0.0: it goes at once); a page answering
            the peer's pull spends the budget, a push never waits.
        """
        self._filling = False
        if not events:
            self.serving.page_empty(page.origin)
            return 0.0
        wait = self.serving.throttle(len(events), now) if self.serving.page_ready(page.origin) else 0.0
        self._filled = _Filled(page, events, now + wait if wait else None)
        return wait

    def _artifact_step(self, now: float) -> bytes | ArtifactWant | None:
        """The next chunk of the artifact being served, or the next request to read."""
        if self._artifact is not None:
            chunk = next(self._artifact, None)
            if chunk is not None:
                return self.session.send(chunk, now=now)
            self._artifact = None
        if self._reading_artifact:
            return None
        want = self.serving.next_artifact_ask()
        self._reading_artifact = want is not None
        return want

    def artifact_read(self, want: ArtifactWant, record: Mapping[str, Any] | None) -> None:
        """The shell read the artifact ``want`` asks for (None: we do not hold it): its chunks go,
        one per turn, between the event batches."""
        self._reading_artifact = False
        self._artifact = _artifact_chunks(want, record)

    def sending(self, now: float) -> None:
        """A piece of ours waits for the peer to take it from ``now``."""
        self._sending_since = now

    def data_sent(self, nbytes: int) -> None:
        """The peer took ``nbytes`` (0: it took nothing; the shell gives up on the link)."""
        self._sending_since = None
        self.stats.bytes_sent += nbytes

    def goodbye(self, code: str, reason: str) -> bytes | None:
        """A goodbye to send, or None: the session failed or closed, or half a frame of ours is on
        its way (a goodbye now would garble it)."""
        if self._sending_since is not None:
            return None
        try:
            return self.session.send(Goodbye(code, reason))
        except ProtocolError:
            return None

    # -- timers --------------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """The next deadline: the peer's hello, its silence, our anti-entropy vector, a page the
        serve budget holds (None: none)."""
        if self.session.state not in (SessionState.HANDSHAKE, SessionState.SYNCING):
            return None
        deadlines = []
        if self.session.their_hello is None and self._hello_deadline is not None:
            deadlines.append(self._hello_deadline)
        if self._reading_since is not None:
            deadlines.append(self._reading_since + SILENCE_S)
        if self._filled is not None and self._filled.until is not None:
            deadlines.append(self._filled.until)
        anti_entropy = self._anti_entropy_at()
        if anti_entropy is not None:
            deadlines.append(anti_entropy)
        return min(deadlines, default=None)

    def _anti_entropy_at(self) -> float | None:
        """When our next vector is due (None: one is on its way already, or we are not open yet)."""
        if not self._opened or self.outbox.vector_due or (self._sync is not None and self._sync.vector):
            return None
        return self.session.get_timer()

    def handle_timer(self, now: float) -> None:
        """Deadlines up to ``now`` passed.

        Raises:
            RemoteProtocolError: no hello within ``HELLO_TIMEOUT_S``, or nothing from the peer for
                ``SILENCE_S`` (it is gone without closing the connection, or stuck).
        """
        if self.session.their_hello is None and self._hello_deadline is not None and now >= self._hello_deadline:
            raise RemoteProtocolError(f"no hello within {HELLO_TIMEOUT_S:.0f} s")
        if self._reading_since is not None and now >= self._reading_since + SILENCE_S:
            raise RemoteProtocolError(f"it sent nothing for {SILENCE_S:.0f} s (gone without closing the connection, "
                                      "or stuck)")
        anti_entropy = self._anti_entropy_at()
        if anti_entropy is not None and now >= anti_entropy:
            self.outbox.vector()
