"""Broadcast trees (Plumtree), sans IO: on which links an event is pushed, and where only announced.

Owns ``Broadcast``: one daemon's split of its links (the active view ``palace_proto.overlay``
decides) into *eager* peers, to which a new event is pushed whole, and *lazy* peers, which get
only an "I have" notice (``IHave``); the messages that maintain the split (``IHave``, ``Graft``,
``Prune``) and the actions it answers with (``Push``: send that event to that peer; ``Send``: send
that message). It is told what happened — a link came up or went, an event arrived or was written
here, a peer's message arrived, time passed — and answers what to do. Pure: no trio, no clock (every
call that needs the time is passed ``now``), no randomness, no IO, no logging. It must not import
``palaced``; the wire codec of its messages is ``peer.py``'s, the shell that runs it
``palaced/peers/overlay.py``.

Why a tree (issue 45 §2): pushing every event on every link sends each daemon one copy per link
(about 6 on a partial view of degree 6). Plumtree (Leitão, Pereira, Rodrigues, "Epidemic Broadcast
Trees", SRDS 2007; shipped by Corrosion and iroh-gossip) pushes eagerly only on a spanning tree that
the traffic itself carves out of the links, and announces on the others, so each daemon receives
about one copy per event, and a cut tree is repaired from the announcements.

Theory of operation
-------------------
An event is named by its key ``(origin, origin_seq)``: what palace's per-origin vectors count.

* **Links start eager.** ``neighbor_up`` makes a new link eager, so the first events flood and the
  tree forms from them; ``neighbor_down`` forgets the link and whatever it announced.
* **First copy.** ``received(peer, key, now)`` for a key we do not remember: it is new (the caller
  delivers it); push it to every eager peer except the sender, queue an ``IHave`` for every lazy
  peer except the sender and those that announced it to us, and cancel the graft timer of that key.
* **Duplicate.** A key we remember, arriving again: the sender's pushes to us are redundant; it
  gets ``Prune`` (once, until we graft it again), and on receiving it makes us lazy. Each daemon so
  cuts only its own incoming pushes, one that just delivered a copy it had, until it receives each
  event once: the pushes left form a tree from wherever the events come from.
* **Directed edges, where the paper has undirected ones.** In the paper a duplicate makes the link
  lazy both ways (the sender prunes it too). Simulated with messages in random order (the tests),
  that cut a third of the daemons off the tree for good: a daemon's only parent, receiving a copy
  from it by way of a stale path, pruned the link that fed the daemon, and each event then came by
  graft after 0.5 s (17 grafts and 1.5 copies per event). Here a ``Prune`` only stops the pushes
  *to* the daemon that sent it, and a graft asks only for the grafted peer's pushes, so no daemon
  loses its last incoming push by another's decision; and a duplicate whose first copy came
  *stale* — from a peer we pruned, before our ``Prune`` reached it — prunes nobody (that link may
  be our only live one). With several origins the tree edges end up pushed both ways, the same
  spanning tree the paper keeps.
* **Announcements.** ``IHave`` notices are queued per lazy peer, coalesced, and sent at most
  ``LAZY_DELAY`` after the first is queued (``tick``), ``IHAVE_MAX`` keys a message. An ``IHave``
  for a key we lack starts a timer of ``GRAFT_TIMEOUT`` and remembers the announcer; more
  announcers of the key queue behind it.
* **Graft.** When the timer of a missing key expires, its first announcer gets ``Graft(key)`` and
  is no longer counted as pruned (the edge that was cut is replaced by its pushes), and the timer
  restarts with ``GRAFT_RETRY`` for the next announcer. Receiving ``Graft`` makes its sender eager
  and answers with ``Push`` of the event if we remember it (the caller sends it from its store).
* **Prune.** Receiving ``Prune`` makes its sender lazy; nothing else.

Correctness: the tree is an optimisation of *push* only. Palace keeps its per-origin vectors,
exchanged on every link, and pulls what a vector shows missing (anti-entropy every 10 s, proto/
PROTOCOL.md §5.4). An event the tree loses — a timer that gave up, an announcement dropped at a
bound, a hostile peer that prunes us and then withholds — is still pulled within one anti-entropy
round, so "any backlog heals" and "a partition heals" hold whatever this module decides, as long as
the links connect the palace (overlay.py's job). What the tree buys is that the push, the fast path,
costs about one copy per daemon and event instead of one per link.

Bounds (each tested): every table fed from outside has one. Remembered keys: ``RECEIVED_MAX``,
oldest forgotten first. Missing keys with a timer: ``MISSING_MAX`` at once, at most
``MISSING_PER_PEER`` of them waiting on one peer, at most ``ANNOUNCERS_MAX`` announcers per key over
its whole life (so a key's timer gives up after at most ``GRAFT_TIMEOUT + (ANNOUNCERS_MAX - 1) *
GRAFT_RETRY``). Queued announcements: ``IHAVE_QUEUE_MAX`` keys per peer, oldest dropped. An ``IHave``
is read up to ``IHAVE_MAX`` keys. So a hostile peer announcing keys that never come holds at most
``MISSING_PER_PEER`` timers, is grafted at most once per key and timer, and its ``Prune`` and
``Graft`` change only whether *it* is eager. The neighbours themselves are the links the shell
holds (overlay.py bounds them at ``ACTIVE_MAX``); messages from a peer that is no neighbour are
ignored and counted.

The shell's side (palaced/peers/overlay.py): call ``neighbor_up``/``neighbor_down`` as links come and go,
``received`` for each event pushed to us (after it is verified and stored: only verified events may
make us forward or prune), ``local`` for each event written here or obtained by a pull (no sender to
promote or prune), ``receive`` for each broadcast message, and ``tick`` at ``get_timer()``.
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import Final, final

__all__ = [
    "ANNOUNCERS_MAX", "GRAFT_RETRY", "GRAFT_TIMEOUT", "IHAVE_MAX", "IHAVE_QUEUE_MAX", "LAZY_DELAY", "MISSING_MAX",
    "MISSING_PER_PEER", "RECEIVED_MAX", "Action", "Broadcast", "BroadcastMessage", "BroadcastStatistics", "EventKey",
    "Graft", "IHave", "Prune", "Push", "Send",
]

#: an event's name: its origin (the daemon whose chain it is on) and its ``origin_seq``
EventKey = tuple[str, int]

# Why 0.5 s: an eager copy crosses a LAN or tailnet hop in milliseconds to tens of them (plus the
# sender's LAZY_DELAY of batching on the announcing side), so an announcement not followed by the
# event within half a second means the tree is cut here; and it is 20 times shorter than the 10 s
# anti-entropy round, so the tree repairs itself well before the pull would. The paper's timeout.
GRAFT_TIMEOUT: Final = 0.5
# Why 0.25 s: the paper's second, shorter timeout — the first announcer we grafted did not answer,
# the next is asked sooner.
GRAFT_RETRY: Final = 0.25
# Why 0.05 s: coalesces the announcements of a burst into one message per lazy peer, and stays an
# order below GRAFT_TIMEOUT, so it does not delay repair noticeably.
LAZY_DELAY: Final = 0.05
# Why 256: keys per IHave message; 256 × (a 32-byte id + a seq) stays far below a frame's bound,
# and a burst of 100 events fits one notice. More in a received notice are not read.
IHAVE_MAX: Final = 256
# Why 4 × IHAVE_MAX: a lazy peer's queued notices; past that within one LAZY_DELAY the burst is a
# backlog, which the vectors' pull moves anyway, so the oldest notices are dropped.
IHAVE_QUEUE_MAX: Final = 4 * IHAVE_MAX
# Why 10,000, in one ring for all origins: duplicates arrive within a few hops' latency and grafted
# copies within seconds, while 10,000 keys are 100 s of a busy palace at 100 events/s; per-origin
# windows would multiply the bound by the origins, which an IHave can name at will. A key forgotten
# and seen again costs at most one extra push round; memory is about 1 MB.
RECEIVED_MAX: Final = 10_000
# Why 4096: missing keys with a running timer; a backlog larger than that is the pull's job.
MISSING_MAX: Final = 4096
# Why MISSING_MAX / 4: one peer can hold at most a quarter of the timers waiting on it, so a hostile
# neighbour flooding IHave for keys that never come cannot starve honest announcements.
MISSING_PER_PEER: Final = MISSING_MAX // 4
# Why 8: announcers remembered per missing key over its life (the overlay's ACTIVE_MAX: every
# neighbour); a key gives up after GRAFT_TIMEOUT + 7 × GRAFT_RETRY = 2.25 s at most.
ANNOUNCERS_MAX: Final = 8
# Why: stale heap entries (timers cancelled or restarted) are dropped when they outnumber the live
# timers this much, so the heap too stays bounded.
_HEAP_SLACK: Final = 2 * MISSING_MAX


# -- the messages (wire nouns; their codec is peer.py's) ------------------------------


@final
@dataclasses.dataclass(frozen=True, slots=True)
class IHave:
    """The sender holds these events (at most ``IHAVE_MAX`` keys are read)."""

    keys: tuple[EventKey, ...]


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Graft:
    """The sender misses ``(origin, seq)``: push it, and push eagerly to the sender from now on."""

    origin: str
    seq: int


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Prune:
    """The sender got a copy twice: send it only announcements from now on.

    ``gossip``: which of a daemon's trees it is about — its shell runs one for events and one for
    gossip records (their sources differ, and one tree shaped by both would suit neither); this
    module never reads it."""

    gossip: bool = False


BroadcastMessage = IHave | Graft | Prune


# -- what the tree answers ---------------------------------------------------------------------


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Push:
    """Send the event ``key`` (from the store) to ``to``."""

    to: str
    key: EventKey


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Send:
    """Send ``message`` to ``to`` on its link."""

    to: str
    message: BroadcastMessage


Action = Push | Send


@final
@dataclasses.dataclass(frozen=True, slots=True)
class BroadcastStatistics:
    eager: int
    lazy: int
    #: missing keys with a running timer
    missing: int
    remembered: int
    #: announcements queued for lazy peers
    queued: int
    grafts_sent: int
    prunes_sent: int
    #: messages from peers that are no neighbours, announcements past a bound, malformed keys
    ignored: int


@dataclasses.dataclass(slots=True)
class _Missing:
    """A key announced to us and not received: its timer and announcers."""

    deadline: float
    #: announcers not asked yet, in order of announcement
    waiting: list[str]
    #: the announcers still linked (asked or not): they hold the event, and each holds this entry
    #: against its MISSING_PER_PEER until it ends
    announcers: list[str]
    #: announcers ever taken for this key, at most ANNOUNCERS_MAX
    taken: int = 0


class Broadcast:
    """One daemon's broadcast tree over its links.

    Args:
        me: our peer id.
        lazy_delay: how long announcements are gathered (``LAZY_DELAY``; longer batches more keys
            per message, and delays repair as much).

    Every method answers the actions to take now, in order. Error handling: nothing a peer sends
    raises; messages from peers that are no neighbours, malformed keys and announcements past a
    bound are ignored and counted (``statistics().ignored``).
    """

    def __init__(self, me: str, *, lazy_delay: float = LAZY_DELAY) -> None:
        self.me = me
        #: how long announcements are gathered before they go (``LAZY_DELAY`` unless told)
        self.lazy_delay = lazy_delay
        # insertion-ordered sets, so the actions' order is reproducible
        self._eager: dict[str, None] = {}
        self._lazy: dict[str, None] = {}
        #: peers we told to stop pushing to us (Prune) and have not grafted since
        self._pruned: dict[str, None] = {}
        #: a ring, oldest first: key -> its first copy came from a peer we had made lazy (a stale push)
        self._received: dict[EventKey, bool] = {}
        self._missing: dict[EventKey, _Missing] = {}
        self._held_by: dict[str, int] = {}  # peer -> live missing entries it announced
        self._timers: list[tuple[float, EventKey]] = []  # a heap; stale entries skipped
        self._queued: dict[str, dict[EventKey, None]] = {}
        self._flush_at: float | None = None
        self._grafts = 0
        self._prunes = 0
        self._ignored = 0

    def __repr__(self) -> str:
        return (f"<Broadcast {self.me[:6]} eager={len(self._eager)} lazy={len(self._lazy)} "
                f"missing={len(self._missing)}>")

    @property
    def eager(self) -> frozenset[str]:
        return frozenset(self._eager)

    @property
    def lazy(self) -> frozenset[str]:
        return frozenset(self._lazy)

    def statistics(self) -> BroadcastStatistics:
        return BroadcastStatistics(len(self._eager), len(self._lazy), len(self._missing), len(self._received),
                                   sum(len(q) for q in self._queued.values()), self._grafts, self._prunes,
                                   self._ignored)

    def has(self, key: EventKey) -> bool:
        """Do we remember receiving ``key`` (within the last ``RECEIVED_MAX`` keys)?"""
        return key in self._received

    # -- links --------------------------------------------------------------------------------

    def neighbor_up(self, peer: str) -> None:
        """A link to ``peer`` is up: it starts eager (the first events flood, duplicates prune)."""
        if peer == self.me or peer in self._eager or peer in self._lazy:
            return
        self._eager[peer] = None

    def neighbor_down(self, peer: str) -> None:
        """The link to ``peer`` is gone: forget it, its queued notices and what it announced."""
        self._eager.pop(peer, None)
        self._lazy.pop(peer, None)
        self._pruned.pop(peer, None)
        self._queued.pop(peer, None)
        if self._held_by.pop(peer, None):
            for entry in self._missing.values():
                if peer in entry.announcers:
                    entry.announcers.remove(peer)
                    if peer in entry.waiting:
                        entry.waiting.remove(peer)

    # -- events -------------------------------------------------------------------------------

    def local(self, key: EventKey, now: float) -> list[Action]:
        """An event new here that no peer pushed to us: written here, or obtained by a pull.
        Push it to every eager peer, announce it to every lazy one. Nothing if we know it."""
        if key in self._received:
            return []
        return self._first_copy(None, key, now)

    def received(self, peer: str, key: EventKey, now: float) -> tuple[bool, list[Action]]:
        """``peer`` pushed the event ``key`` to us (verified by the caller).

        Returns:
            ``(is_new, actions)``: whether this is the first copy (the caller delivers it), and
            what to do — on a first copy, push it on and announce it; on a duplicate, ``Prune``
            to the sender.
        """
        stale = self._received.get(key)
        if stale is not None:
            # a stale first copy (from a peer whose Prune is on its way) says nothing of this link,
            # which may be our only live one; a peer pruned already is not told twice
            if stale or peer in self._pruned or not self._is_neighbor(peer):
                return False, []
            self._pruned[peer] = None
            self._prunes += 1
            return False, [Send(peer, Prune())]
        return True, self._first_copy(peer, key, now)

    def _first_copy(self, sender: str | None, key: EventKey, now: float) -> list[Action]:
        self._remember(key, stale=sender in self._pruned)
        entry = self._forget_missing(key)
        holders = set(entry.announcers) if entry else set()
        actions: list[Action] = [Push(p, key) for p in self._eager if p != sender]
        for peer in self._lazy:
            if peer != sender and peer not in holders:
                self._queue(peer, key, now)
        return actions

    def _remember(self, key: EventKey, *, stale: bool) -> None:
        self._received[key] = stale
        if len(self._received) > RECEIVED_MAX:
            del self._received[next(iter(self._received))]

    # -- messages -----------------------------------------------------------------------------

    def receive(self, peer: str, message: BroadcastMessage, now: float) -> list[Action]:
        """A broadcast message arrived from ``peer`` (the peer its link authenticated)."""
        match message:
            case IHave(keys):
                return self.ihave(peer, keys, now)
            case Graft(origin, seq):
                return self.graft(peer, (origin, seq))
            case Prune():
                return self.prune(peer)
        raise AssertionError(f"not a broadcast message: {message!r}")  # pragma: no cover

    def ihave(self, peer: str, keys: tuple[EventKey, ...], now: float) -> list[Action]:
        """``peer`` announces ``keys``: a timer starts for each we lack (the first ``IHAVE_MAX``)."""
        if not self._is_neighbor(peer):
            return []
        if len(keys) > IHAVE_MAX:
            self._ignored += len(keys) - IHAVE_MAX
        for key in keys[:IHAVE_MAX]:
            if not _well_formed(key):
                self._ignored += 1
            elif key not in self._received:
                self._announced(peer, key, now)
        return []

    def _announced(self, peer: str, key: EventKey, now: float) -> None:
        entry = self._missing.get(key)
        if entry is not None and (peer in entry.announcers or entry.taken >= ANNOUNCERS_MAX):
            return
        if self._held_by.get(peer, 0) >= MISSING_PER_PEER:
            self._ignored += 1
            return
        if entry is None:
            if len(self._missing) >= MISSING_MAX:
                self._ignored += 1
                return
            entry = self._missing[key] = _Missing(now + GRAFT_TIMEOUT, [], [])
            self._push_timer(entry.deadline, key)
        entry.waiting.append(peer)
        entry.announcers.append(peer)
        entry.taken += 1
        self._held_by[peer] = self._held_by.get(peer, 0) + 1

    def graft(self, peer: str, key: EventKey) -> list[Action]:
        """``peer`` misses ``key``: it becomes eager, and gets the event if we remember it."""
        if not self._is_neighbor(peer):
            return []
        self._lazy.pop(peer, None)
        self._eager[peer] = None
        return [Push(peer, key)] if key in self._received else []

    def prune(self, peer: str) -> list[Action]:
        """``peer`` got a copy twice: it becomes lazy."""
        if self._is_neighbor(peer):
            self._make_lazy(peer)
        return []

    # -- time ---------------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """When ``tick`` is next due (a graft timer or queued announcements), or None."""
        self._drop_stale_timers()
        deadlines = [t for t in (self._timers[0][0] if self._timers else None, self._flush_at) if t is not None]
        return min(deadlines, default=None)

    def tick(self, now: float) -> list[Action]:
        """Time passed: graft for the missing keys whose timer expired, and send the queued
        announcements if they are due."""
        actions: list[Action] = []
        while self._timers and self._timers[0][0] <= now:
            deadline, key = heapq.heappop(self._timers)
            entry = self._missing.get(key)
            if entry is None or entry.deadline != deadline:
                continue  # cancelled or restarted
            if not entry.waiting:
                self._forget_missing(key)  # every announcer was asked: the pull will bring it
                continue
            peer = entry.waiting.pop(0)
            self._pruned.pop(peer, None)
            self._grafts += 1
            actions.append(Send(peer, Graft(*key)))
            entry.deadline = now + GRAFT_RETRY
            self._push_timer(entry.deadline, key)
        if self._flush_at is not None and self._flush_at <= now:
            actions += self.flush()
        return actions

    def flush(self) -> list[Action]:
        """Send every queued announcement now, ``IHAVE_MAX`` keys a message."""
        actions: list[Action] = []
        for peer, queued in self._queued.items():
            keys = list(queued)
            actions += [Send(peer, IHave(tuple(keys[i:i + IHAVE_MAX]))) for i in range(0, len(keys), IHAVE_MAX)]
        self._queued.clear()
        self._flush_at = None
        return actions

    # -- internals ----------------------------------------------------------------------------

    def _is_neighbor(self, peer: str) -> bool:
        if peer in self._eager or peer in self._lazy:
            return True
        self._ignored += 1
        return False

    def _make_lazy(self, peer: str) -> None:
        self._eager.pop(peer, None)
        self._lazy[peer] = None

    def _queue(self, peer: str, key: EventKey, now: float) -> None:
        queued = self._queued.setdefault(peer, {})
        queued[key] = None
        if len(queued) > IHAVE_QUEUE_MAX:
            del queued[next(iter(queued))]
        if self._flush_at is None:
            self._flush_at = now + self.lazy_delay

    def _forget_missing(self, key: EventKey) -> _Missing | None:
        entry = self._missing.pop(key, None)
        if entry is not None:
            for peer in entry.announcers:
                left = self._held_by[peer] - 1
                if left:
                    self._held_by[peer] = left
                else:
                    del self._held_by[peer]
        return entry

    def _push_timer(self, deadline: float, key: EventKey) -> None:
        heapq.heappush(self._timers, (deadline, key))
        if len(self._timers) > len(self._missing) + _HEAP_SLACK:
            self._timers = [(e.deadline, k) for k, e in self._missing.items()]
            heapq.heapify(self._timers)

    def _drop_stale_timers(self) -> None:
        while self._timers:
            deadline, key = self._timers[0]
            entry = self._missing.get(key)
            if entry is not None and entry.deadline == deadline:
                return
            heapq.heappop(self._timers)


def _well_formed(key: object) -> bool:
    """A key the codec should have refused already: a (str, int ≥ 1) pair."""
    return (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str)
            and type(key[1]) is int and key[1] >= 1)
