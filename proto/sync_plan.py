"""The bookkeeping of one replication link, sans IO: what the peer holds, what it is owed, what we pull.

Owns two state machines, one per direction of a link (proto/PROTOCOL.md §5.4):

* ``ServePlan`` — the peer's side: what we believe it holds (its vectors, receipts and wants, and
  what we sent it), which events of which origin it is owed next (its pulls and our new commits),
  a page at a time, round-robin over origins; the token bucket that throttles what its pulls may
  take; its artifact requests.
* ``PullPlan`` — our side: the origins we pull from it and whether that makes progress, the forks
  its vectors show, the origins whose next event it sent and we rejected, the wants a gap calls
  for, and the artifacts we are receiving from it in chunks.

The link machine (``link.py``) composes both, and ``palaced.peers.link.PeerLink`` drives it: the
shell owns the socket, the tasks, the event bus and the store; the machine asks these classes what
to send and tells them what happened. They answer from their state and from what is passed in: our heads
(``OriginHead`` per origin, kept in memory by the
store), the store's refusals, the time (``now``, as aioquic takes it), and a few predicates fixed
per link (is an origin bound here, is it relayed to this peer). Nothing here imports trio or apsw,
reads a clock, draws a random number or logs: the same calls give the same answers, so every rule
is tested without a socket (tests/proto/test_sync_plan.py).

Inputs are decoded messages: ``palace_proto.peer`` has already refused what breaks the wire
format (an origin id of the wrong shape, an integer below 0 or above 2**62, more than
``MAX_VECTOR_ENTRIES`` entries). What the planners keep grows with the origins bound here
(``verifiable``), never with what the peer invents; each map has its bound beside it.

Why a module of its own rather than sync.py: sync.py holds the stateless rules one message is
judged by (``plan_wants``, ``classify``, ``verify_batch``, and the cryptography they need); these
are the per-link state those rules are applied to, with their own limits and theory of operation.
The planners use sync.py's rules; sync.py knows nothing of them.

Theory of operation: one queue per origin, a page at a time
-------------------------------------------------------------
Everything a link owes its peer in events — the peer's pulls (``want``) and our pushes (events
committed here, appended or relayed, that the peer lacks and does not hear first-hand) — is one
entry per origin in ``ServePlan``: a cursor (the peer holds up to there), a target (where to stop;
None: up to our head, looked up when the page is filled) and whether the peer asked (a pull:
throttled) or not (a push: never throttled, it is what a live link is for). So an origin's events
leave in order from one place, never twice at once from a push and a pull. The link machine asks
``next_page`` for the first origin in turn and its shell fills that page from the bus (just committed:
no read) or the store, bounding it by our head (``bound_by_head``) when the bus did not hold all
of it; once the page is sent (``page_sent``) the origin goes to the back of the queue, so one
origin's long catch-up never holds up another's live pushes. A want that arrives while a page of
its origin is on its way says exactly what the peer holds: it resets the entry, and the page in
flight does not move the cursor the want set (``reset``).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, final

from .envelope import CommittedEvent, SignedEvent
from .errors import RemoteProtocolError
from .ids import artifact_id_for_sha256
from .peer import MAX_VECTOR_ENTRIES, ArtifactChunk, ArtifactWant, Vector, Want
from .sync import OriginHead, plan_wants
from .text import printable

__all__ = [
    "FETCH_SLACK_BYTES", "MAX_ARTIFACT_ASKS", "MAX_FETCHES", "SERVE_BURST_EVENTS", "SERVE_PAGE",
    "SERVE_RATE_EVENTS_S", "ArtifactReceived", "Chunk", "Fetch", "OwedPage", "PullPlan", "ServePlan",
    "VectorPlan", "receipts",
]

# Why 500: one read of the store per page when serving a want; batches are then bounded by bytes.
SERVE_PAGE: Final = 500
# Why 250,000 events at once and 25,000/s after: a fresh peer's whole catch-up of a large palace
# is served at full speed, while a peer that pulls the log again and again (endless wants) gets
# at most this rate from us — throttled, never refused, so an honest re-ask is only delayed.
SERVE_BURST_EVENTS: Final = 250_000
SERVE_RATE_EVENTS_S: Final = 25_000.0
# Why 16 and max_artifact_bytes + 16 MiB: artifacts being received are held in memory until their
# sha256 is checked; a peer must not make us hold more than about one maximal artifact at a time.
MAX_FETCHES: Final = 16
FETCH_SLACK_BYTES: Final = 16 << 20
# Why 64: an honest peer has at most MAX_FETCHES artifact requests open on a link; four times that
# leaves room for requests crossing our answers, and no more (each is served whole, up to 64 MiB).
MAX_ARTIFACT_ASKS: Final = 4 * MAX_FETCHES


def _held(heads: Mapping[str, OriginHead], origin: str) -> int:
    head = heads.get(origin)
    return head.max_seq if head is not None else 0


def receipts(events: Iterable[SignedEvent], heads: Mapping[str, OriginHead]) -> list[tuple[str, int]]:
    """The receipts (``have``) a committed batch calls for: what we now hold durably of every
    origin in it that we replicate, in origin order."""
    return [(origin, heads[origin].max_seq) for origin in sorted({e.origin for e in events}) if origin in heads]


# -- the peer's side: what it holds and what it is owed ---------------------------------------


@dataclasses.dataclass(slots=True)
class _Owed:
    """Events of one origin owed to the peer: those after ``cursor``, up to ``target`` (None: up to
    our head, looked up when a page is filled)."""

    cursor: int
    target: int | None
    #: the peer asked (a want: throttled by the serve budget), rather than being pushed to
    pulled: bool
    #: a want came while a page of this origin was on its way: its ``cursor`` stands
    reset: bool = False


@final
@dataclasses.dataclass(frozen=True, slots=True)
class OwedPage:
    """The next page the peer is owed: events of ``origin`` after ``after_seq``, at most ``limit``
    of them (``limit`` <= 0: none; the link sends nothing and says so with ``page_empty``)."""

    origin: str
    after_seq: int
    limit: int


class ServePlan:
    """What one peer holds and what it is owed, in events and artifacts.

    Args:
        verifiable: is an origin one we could verify events of (bound here)? What the peer's
            vectors, receipts and wants tell us is kept only for such origins, so its size is
            bounded by our bindings. None: every origin (a link without a member directory).
        relayed: are events of an origin sent to this peer by us? Not when the peer hears the
            origin's daemon first-hand (§5.4 rule 4). None: every origin.
    """

    def __init__(self, *, verifiable: Callable[[str], bool] | None = None,
                 relayed: Callable[[str], bool] | None = None) -> None:
        self._verifiable = verifiable
        self._relayed = relayed
        #: what we believe the peer holds, per origin (its vectors, receipts and wants, and what
        #: we sent it): push planning
        self.peer_has: dict[str, int] = {}
        #: what the peer confirmed holding durably, per origin (its vectors and receipts)
        self.confirmed: dict[str, int] = {}
        #: events owed, per origin, in turn order (round-robin: an origin served goes to the back);
        #: at most MAX_VECTOR_ENTRIES pulled ones (a want per origin bound here) plus our pushes
        self._owed: dict[str, _Owed] = {}
        #: events this peer may still be sent in answer to wants, and when that was reckoned (0.0:
        #: never spent, or spent at the clock's zero: no refill counted until a throttled wait)
        self._budget = float(SERVE_BURST_EVENTS)
        self._budget_at = 0.0
        #: the peer's artifact requests waiting to be served, in arrival order: artifact id -> offset
        self._artifact_asks: dict[str, int] = {}

    def __repr__(self) -> str:
        pulled = sum(owed.pulled for owed in self._owed.values())
        return (f"<ServePlan owed={len(self._owed)} pulled={pulled} peer_has={len(self.peer_has)} "
                f"budget={self._budget:.0f} artifact_asks={len(self._artifact_asks)}>")

    @property
    def owes(self) -> bool:
        """Are events owed to the peer (its pulls, our pushes)?"""
        return bool(self._owed)

    def owed(self, origin: str) -> tuple[int, int | None, bool] | None:
        """What is owed of ``origin``: (cursor, target, pulled), or None (nothing)."""
        entry = self._owed.get(origin)
        return None if entry is None else (entry.cursor, entry.target, entry.pulled)

    def owed_origins(self) -> list[str]:
        """The origins owed, in the order they will be served."""
        return list(self._owed)

    # -- what the peer tells us it holds -----------------------------------------------------

    def confirm(self, entries: Iterable[tuple[str, int]]) -> bool:
        """The peer holds each ``(origin, max_seq)`` (from its vector, a receipt, or events it proved
        it holds by sending them). Returns whether it confirmed more than before (link progress)."""
        verifiable = self._verifiable
        peer_has, confirmed = self.peer_has, self.confirmed
        changed = False
        for origin, max_seq in entries:
            if verifiable is not None and not verifiable(origin):
                continue
            if max_seq > confirmed.get(origin, 0):
                confirmed[origin] = max_seq
                changed = True
            peer_has[origin] = max(peer_has.get(origin, 0), max_seq)
        return changed

    def on_want(self, origin: str, after_seq: int) -> bool:
        """The peer pulls ``origin`` after ``after_seq``. A pull says exactly what the peer holds, so
        it replaces whatever we believed and whatever of that origin was still owed (a peer re-asks
        from its head when events it was sent could not be applied yet).

        Returns:
            Whether the pull was recorded (the link's sender has work). Not for an origin we could
            not hold (``verifiable``), nor a new origin beyond ``MAX_VECTOR_ENTRIES`` owed ones.
        """
        if self._verifiable is not None and not self._verifiable(origin):
            return False
        owed = self._owed.get(origin)
        if owed is None:
            if len(self._owed) >= MAX_VECTOR_ENTRIES:
                return False
            self._owed[origin] = _Owed(after_seq, None, pulled=True)
        else:
            owed.cursor, owed.target, owed.pulled, owed.reset = after_seq, None, True, True
        self.peer_has[origin] = after_seq
        return True

    def owe_one(self, origin: str, seq: int) -> bool:
        """Push the peer event ``seq`` of ``origin`` (it grafted it: it misses that one, and the
        vectors will pull whatever else it lacks), unless it is owed already or the peer holds it.
        Returns whether it was recorded."""
        if (self._verifiable is not None and not self._verifiable(origin)) or self.peer_has.get(origin, 0) >= seq:
            return False
        owed = self._owed.get(origin)
        if owed is not None:
            if owed.target is not None and owed.cursor < seq:
                owed.target = max(owed.target, seq)
            return True
        if len(self._owed) >= MAX_VECTOR_ENTRIES:
            return False
        self._owed[origin] = _Owed(seq - 1, seq, pulled=False)
        return True

    # -- pushing ---------------------------------------------------------------------------

    def lacks_any(self, records: Iterable[CommittedEvent]) -> bool:
        """Whether the peer may lack one of these committed events: one it is not known to hold
        (imported history is never offered, so it never counts)."""
        peer_has = self.peer_has
        return any(not record.history and record.signed.origin_seq > peer_has.get(record.signed.origin, 0)
                   for record in records)

    def owe_committed(self, records: Iterable[CommittedEvent]) -> None:
        """These events were committed here (appended, or arrived from another peer: that is how a
        line relays), in local seq order: owe the peer every one it does not hold and does not hear
        first-hand. Imported history is never offered."""
        # Per origin, the newest of these events: committed, so held up to there (an origin's
        # events are stored in chain order).
        newest: dict[str, int] = {}
        for record in records:
            if not record.history:
                event = record.signed
                newest[event.origin] = max(newest.get(event.origin, 0), event.origin_seq)
        relayed, peer_has = self._relayed, self.peer_has
        for origin, head in newest.items():
            if head <= peer_has.get(origin, 0) or (relayed is not None and not relayed(origin)):
                continue
            owed = self._owed.get(origin)
            if owed is None:
                self._owed[origin] = _Owed(peer_has.get(origin, 0), head, pulled=False)
            elif owed.target is not None:
                owed.target = max(owed.target, head)

    # -- serving, a page at a time -----------------------------------------------------------

    def next_page(self) -> OwedPage | None:
        """The next page owed: of the first origin in turn, after what the peer holds, at most
        ``SERVE_PAGE`` events and never beyond the target.

        Returns:
            None when nothing is owed, or when the first origin in turn is no longer relayed to
            the peer (it has since linked to the origin's daemon, and hears and pulls it there):
            that origin is dropped, and the next call looks at the next one.
        """
        if not self._owed:
            return None
        origin, owed = next(iter(self._owed.items()))
        if self._relayed is not None and not self._relayed(origin):
            del self._owed[origin]
            return None
        cursor = max(owed.cursor, self.peer_has.get(origin, 0))
        limit = SERVE_PAGE if owed.target is None else min(SERVE_PAGE, owed.target - cursor)
        return OwedPage(origin, cursor, limit)

    def bound_by_head(self, page: OwedPage, head: int | None) -> int:
        """The bus did not hold the whole page: bound what is owed by what we hold of its origin.

        Args:
            head: our highest contiguous origin_seq of ``page.origin`` (None: not an origin we
                replicate — unknown, or imported history only).

        Returns:
            How many events the page may now hold (<= 0: none).
        """
        owed = self._owed.get(page.origin)
        if head is None or owed is None:
            return 0
        owed.target = head if owed.target is None else min(owed.target, head)
        return min(SERVE_PAGE, owed.target - page.after_seq)

    def page_empty(self, origin: str) -> None:
        """Nothing of ``origin`` could be sent (the peer holds it all, or it is not ours to offer): it
        is owed no more — unless a want came meanwhile, which stands."""
        owed = self._owed.get(origin)
        if owed is None:
            return
        if not owed.reset:
            del self._owed[origin]
        owed.reset = False

    def page_ready(self, origin: str) -> bool:
        """A page of ``origin`` is about to go. Returns whether it answers the peer's pull (spend the
        serve budget first: ``throttle``) rather than being a push."""
        owed = self._owed.get(origin)
        if owed is None:
            return False
        owed.reset = False
        return owed.pulled

    def sent(self, events: Iterable[SignedEvent]) -> None:
        """A batch is on the wire: the peer holds these events now (for push planning)."""
        peer_has = self.peer_has
        for event in events:
            peer_has[event.origin] = max(peer_has.get(event.origin, 0), event.origin_seq)

    def page_sent(self, origin: str, last_seq: int) -> None:
        """The page of ``origin`` ending at ``last_seq`` was sent: its cursor moves there (unless a
        want came meanwhile and set where to go on from); done at the target, else the origin goes
        to the back of the queue (its next page after the other origins' next one)."""
        owed = self._owed.get(origin)
        if owed is None:
            return
        if not owed.reset:
            owed.cursor = last_seq
        if not owed.reset and owed.target is not None and owed.cursor >= owed.target:
            del self._owed[origin]
        else:
            self._owed[origin] = self._owed.pop(origin)

    # -- the serve budget (token bucket) -----------------------------------------------------

    def throttle(self, events: int, now: float) -> float:
        """Spend ``events`` of what this peer may be sent in answer to its pulls (refilled at
        ``SERVE_RATE_EVENTS_S`` up to ``SERVE_BURST_EVENTS``).

        Returns:
            0.0 when they may go now (spent), else how many seconds to wait first; nothing is
            spent then: call ``throttled`` once waited.
        """
        budget, at = self._budget, self._budget_at
        budget = min(float(SERVE_BURST_EVENTS), budget + (now - at) * SERVE_RATE_EVENTS_S if at else budget)
        if budget < events:
            return (events - budget) / SERVE_RATE_EVENTS_S
        self._budget, self._budget_at = budget - events, now
        return 0.0

    def throttled(self, now: float) -> None:
        """The wait ``throttle`` asked for is over at ``now``: the page goes, the budget is empty
        and refills from ``now``."""
        self._budget, self._budget_at = 0.0, now

    # -- artifacts the peer asks for ---------------------------------------------------------

    def on_artifact_want(self, artifact_id: str, offset: int) -> None:
        """The peer asks for an artifact from ``offset`` (a newer ask for one still waiting replaces it).

        Raises:
            RemoteProtocolError: more than ``MAX_ARTIFACT_ASKS`` artifacts asked for at once.
        """
        if artifact_id not in self._artifact_asks and len(self._artifact_asks) >= MAX_ARTIFACT_ASKS:
            raise RemoteProtocolError(f"it asked for more than {MAX_ARTIFACT_ASKS} artifacts at once (an honest "
                                      f"peer has at most {MAX_FETCHES} in flight)")
        self._artifact_asks[artifact_id] = offset

    def next_artifact_ask(self) -> ArtifactWant | None:
        """The oldest artifact request not served yet, taken (None: none)."""
        for artifact_id in self._artifact_asks:
            return ArtifactWant(artifact_id, self._artifact_asks.pop(artifact_id))
        return None


# -- our side: what we pull from the peer -------------------------------------------------------


@final
@dataclasses.dataclass(frozen=True, slots=True)
class VectorPlan:
    """What a vector from the peer calls for: the forks it shows that we had not seen on this link,
    and the wants to send (a pull of each fork's differing event first, then the pulls)."""

    new_forks: tuple[str, ...]
    wants: tuple[Want, ...]


class Fetch(enum.Enum):
    """What ``PullPlan.fetch`` decided for an artifact an arriving event needs."""

    #: a new fetch: ask the peer for it (``ArtifactWant(artifact_id, 0)``)
    ASK = "ask"
    #: already on its way: the event's origin waits for it too
    WAIT = "wait"
    #: ``MAX_FETCHES`` are on their way: ask for no more now (the origin is pulled again once
    #: these arrive, and what it still lacks is asked for then)
    FULL = "full"


class Chunk(enum.Enum):
    """What ``PullPlan.on_chunk`` did with a chunk that did not complete an artifact."""

    #: not asked for (or already given up): dropped
    IGNORED = "ignored"
    #: the peer does not have the artifact: the fetch is given up
    ABSENT = "absent"
    #: kept; more chunks are to come
    PARTIAL = "partial"


@final
@dataclasses.dataclass(frozen=True, slots=True)
class ArtifactReceived:
    """An artifact received whole, its sha256 checked: to be stored, then its origins pulled again
    (``PullPlan.resume``)."""

    artifact_id: str
    content: bytes
    #: the origins whose next event waited for it, sorted
    origins: tuple[str, ...]


class _Fetch:
    """An artifact being received in chunks."""

    __slots__ = ("buffer", "origins")

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.origins: set[str] = set()


class PullPlan:
    """What we pull from one peer, whether it comes, and what to ask for again.

    Args:
        key_for: the key that verifies an origin's event at a given origin_seq (None: none here,
            so what would come could not be accepted and is not asked for).
        max_artifact_bytes: the largest artifact this daemon accepts.
    """

    def __init__(self, key_for: Callable[[str, int], bytes | None], *, max_artifact_bytes: int) -> None:
        self._key_for = key_for
        self.max_artifact_bytes = max_artifact_bytes
        #: the peer's newest vector, origin -> max_seq (at most MAX_VECTOR_ENTRIES: one message's)
        self.their_heads: dict[str, int] = {}
        #: origins whose history the peer holds differently (seen in its vectors), in order seen
        self.forks: list[str] = []
        #: origins we are pulling, with our head when we last (re)asked or saw progress
        self._pulling: dict[str, int] = {}
        #: when we last saw our pulls progress (set when a pull starts, and whenever events
        #: arrive); None while we pull nothing
        self.progress_at: float | None = None
        #: origins whose next event this peer sent us and we rejected (bad signature, no key), with
        #: our head then: not asked of this peer again until our head moves (never re-pulled forever)
        self._rejected_at: dict[str, int] = {}
        #: artifacts being received (at most MAX_FETCHES)
        self._fetches: dict[str, _Fetch] = {}

    def __repr__(self) -> str:
        return (f"<PullPlan pulling={len(self._pulling)} forks={len(self.forks)} rejected={len(self._rejected_at)} "
                f"fetches={len(self._fetches)}>")

    @property
    def pulling(self) -> int:
        """How many origins we are pulling from the peer."""
        return len(self._pulling)

    @property
    def fetching(self) -> bool:
        """Artifacts are on their way (events wait for them)."""
        return bool(self._fetches)

    # -- the peer's vector -------------------------------------------------------------------

    def on_vector(self, vector: Vector, heads: Mapping[str, OriginHead], forks: Sequence[str], *,
                  refused_next: Mapping[str, tuple[int, bytes, str]], now: float,
                  elsewhere: Callable[[str, int], bool] | None = None) -> VectorPlan:
        """The peer announced ``vector``: what to ask it for (§5.4 rule 3).

        Args:
            heads: what we hold, per origin.
            forks: the origins where the vector's head differs from our event at that seq
                (``sync.vector_forks``): each is pulled once, so the store keeps the peer's
                differing event as evidence, and not pulled otherwise.
            refused_next: the store's refusals, origin -> (origin_seq of the event refused for
                breaking a rule, its hash, why): that origin stops there on this replica.
            now: the time (for ``progress_at``).
            elsewhere: should ``origin`` up to ``max_seq`` be pulled on another link (the link to
                the daemon that writes it)? None: pull everything here.
        """
        theirs = self.their_heads = {e.origin: e.max_seq for e in vector.entries}
        new_forks: list[str] = []
        wants: list[Want] = []
        for origin in forks:
            if origin not in self.forks:
                self.forks.append(origin)
                new_forks.append(origin)
                # Pull their differing event once, so the store keeps it as evidence of the fork.
                wants.append(Want(origin, theirs[origin] - 1))
        skip = self._not_to_ask(heads, vector, refused_next)
        if elsewhere is not None:
            # Each origin is pulled from the daemon that writes it when we are linked to it: pulling
            # it from every peer that holds some of it would bring each event once per such peer.
            away = {o for o, seq in theirs.items() if o not in skip and elsewhere(o, seq)}
            for origin in away:
                self._pulling.pop(origin, None)
            skip |= away
        for want in plan_wants(heads, vector, skip):
            if want.origin in forks:
                continue
            asked = self._pulling.get(want.origin)
            if asked is not None and want.after_seq > asked:
                # A pull of this origin is under way and advanced since the last vector: asking
                # again would make the peer send the rest of the log a second time.
                self._pulling[want.origin] = want.after_seq
                continue
            if not self._pulling:
                self.progress_at = now
            self._pulling[want.origin] = want.after_seq  # new, or stalled since last time: (re)ask
            wants.append(want)
        for origin in list(self._pulling):
            if origin not in theirs or (origin in heads and heads[origin].max_seq >= theirs[origin]):
                del self._pulling[origin]  # caught up with what that vector showed
        if not self._pulling:
            self.progress_at = None
        return VectorPlan(tuple(new_forks), tuple(wants))

    def _not_to_ask(self, heads: Mapping[str, OriginHead], vector: Vector,
                    refused_next: Mapping[str, tuple[int, bytes, str]]) -> set[str]:
        """Origins not worth a want: unbound (what came would be rejected), an origin whose next
        event this replica refused for breaking a rule, or one whose next event this very peer sent
        us and we rejected — unless our head moved since (another peer filled it)."""
        skip: set[str] = set()
        for entry in vector.entries:
            origin = entry.origin
            ours = _held(heads, origin)
            if (self._key_for(origin, ours + 1) is None  # unbound
                    or (origin in refused_next and refused_next[origin][0] == ours + 1)  # it broke a rule here
                    or self._rejected_at.get(origin) == ours):  # this peer sent it and we rejected it
                skip.add(origin)
        for origin, at in list(self._rejected_at.items()):
            if _held(heads, origin) != at:
                del self._rejected_at[origin]
        return skip

    # -- what arrives --------------------------------------------------------------------------

    def events_arrived(self, now: float) -> None:
        """Events came from the peer: our pulls (if any) make progress."""
        if self.progress_at is not None:
            self.progress_at = now

    def rejected(self, events: Iterable[SignedEvent], heads: Mapping[str, OriginHead]) -> None:
        """The peer sent these events and we rejected them (not from a member in good standing, a
        bad hash or signature): their origins are not asked of this peer again until our head
        moves (``heads``: ours when they were rejected)."""
        for event in events:
            self._rejected_at.setdefault(event.origin, _held(heads, event.origin))

    def gap_wants(self, gaps: Iterable[SignedEvent], heads: Mapping[str, OriginHead],
                  refused_next: Mapping[str, tuple[int, bytes, str]]) -> list[Want]:
        """A gap (an event beyond our head arrived) means we missed something: pull again from our
        head — not an origin whose next event we cannot accept (refused here, or rejected from this
        peer), nor one whose next event waits for an artifact (it is pulled again on arrival)."""
        wants = []
        for origin in sorted({e.origin for e in gaps}):
            ours = _held(heads, origin)
            if (origin in refused_next and refused_next[origin][0] == ours + 1) or self._rejected_at.get(origin) == ours:
                continue
            if not self._waits_for_artifact(origin):
                wants.append(Want(origin, ours))
        return wants

    @staticmethod
    def pull_from_head(origin: str, heads: Mapping[str, OriginHead]) -> Want:
        """A pull of ``origin`` from what we hold of it."""
        return Want(origin, _held(heads, origin))

    # -- artifacts we receive ------------------------------------------------------------------

    def _waits_for_artifact(self, origin: str) -> bool:
        return any(origin in fetch.origins for fetch in self._fetches.values())

    def fetch(self, artifact_id: str, origin: str) -> Fetch:
        """``origin``'s next event needs ``artifact_id``, which we do not hold: fetch it (at most
        ``MAX_FETCHES`` at once)."""
        fetch = self._fetches.get(artifact_id)
        step = Fetch.WAIT
        if fetch is None:
            if len(self._fetches) >= MAX_FETCHES:
                return Fetch.FULL
            fetch = self._fetches[artifact_id] = _Fetch()
            step = Fetch.ASK
        fetch.origins.add(origin)
        return step

    def on_chunk(self, chunk: ArtifactChunk) -> ArtifactReceived | Chunk:
        """A chunk of an artifact arrived: kept, until the artifact is whole and its sha256 checked.

        Raises:
            RemoteProtocolError: the artifact is over ``max_artifact_bytes``, a chunk is out of
                order or names another artifact's hash, what is in flight exceeds what one link may
                hold in memory, or the whole does not match its sha256.
        """
        fetch = self._fetches.get(chunk.artifact_id)
        if fetch is None:
            return Chunk.IGNORED
        if chunk.size < 0:
            del self._fetches[chunk.artifact_id]
            return Chunk.ABSENT
        if chunk.size > self.max_artifact_bytes:
            del self._fetches[chunk.artifact_id]
            raise RemoteProtocolError(
                f"artifact {chunk.artifact_id} is {chunk.size} bytes, over this daemon's limit of "
                f"{self.max_artifact_bytes} (raise limits.max_artifact_bytes to accept it)")
        if chunk.offset != len(fetch.buffer) or artifact_id_for_sha256(chunk.sha256) != chunk.artifact_id:
            raise RemoteProtocolError(f"artifact {printable(chunk.artifact_id)}: chunk out of order or for another "
                                      "artifact")
        held = sum(len(f.buffer) for f in self._fetches.values())
        if held + len(chunk.data) > self.max_artifact_bytes + FETCH_SLACK_BYTES:
            raise RemoteProtocolError("artifacts in flight exceed what one link may hold in memory")
        fetch.buffer += chunk.data
        if len(fetch.buffer) < chunk.size:
            return Chunk.PARTIAL
        del self._fetches[chunk.artifact_id]
        content = bytes(fetch.buffer)
        if hashlib.sha256(content).hexdigest() != chunk.sha256:
            raise RemoteProtocolError(f"artifact {chunk.artifact_id} does not match its sha256")
        return ArtifactReceived(chunk.artifact_id, content, tuple(sorted(fetch.origins)))

    def resume(self, origins: Iterable[str], heads: Mapping[str, OriginHead]) -> list[Want]:
        """An artifact these origins waited for is stored: pull each again from our head, unless it
        still waits for another one."""
        return [self.pull_from_head(origin, heads) for origin in origins if not self._waits_for_artifact(origin)]
