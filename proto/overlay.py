"""Partial views (HyParView), sans IO: which daemons one daemon keeps a replication link to.

Owns ``PartialView``: one daemon's *active view* (the peers it keeps a link to) and *passive view*
(members it knows of and may link to when an active peer goes), the overlay messages they exchange
(``Join``, ``ForwardJoin``, ``Neighbor``, ``NeighborReply``, ``Disconnect``, ``Shuffle``,
``ShuffleReply``) and the actions it answers with (``Send``, ``Open``, ``Close``). It is told what
happened — the member set changed, a member was revoked, a link failed, a message arrived, the
shuffle timer fired — and answers what to send and which links to open or close. Pure: no trio,
no clock, no IO, no logging, no randomness of its own (the caller passes a ``random.Random``, so a
seeded one replays a whole overlay; tests/proto/test_overlay.py simulates 200 daemons that way). It
must not import ``palaced``; the wire codec of its messages is ``peer.py``'s, the shell that runs it
``palaced/peers/overlay.py``.

Why partial views (issue 45 §2): in a full mesh every daemon holds N−1 links and sends its vector on
each every 10 s, so idle traffic grows as N³ in total. HyParView (Leitão, Pereira, Rodrigues, DSN
2007) keeps a small, symmetric active view, repaired from a larger passive view, kept fresh by
periodic random-walk shuffles; a connected random graph of small degree.

What it does *not* change, and why the guarantees still hold: a partial view decides only which
links exist. Events still flow as they do today — pushed to each link's peer when its vector or
receipts do not show them (§5.4 rule 4: every committed event, relayed ones too, is pushed on), and
pulled by the per-origin vectors every link exchanges every 10 s. Signed events are verified by
every receiver whoever relayed them. So "any backlog heals" and "a partition heals" hold exactly
as long as the active graph is connected: every event reaches every daemon along some path of
links, by push or by pull, and the tests check connectivity after joins, after 20 % of the daemons
fail and after a revocation. Observers are members here (they hold certificates and links; they
only may not write), so they are in views and receive everything.

Theory of operation
-------------------
* **Only members.** The caller tells the view the member set (``set_members``: the member
  directory, certificates verified, revoked ones left out). Every peer id that arrives — the
  sender of a message, a joiner named by a forward-join, the peers of a shuffle — is taken only
  if it is a member, not revoked, not ourselves and not already there (set semantics); anything
  else is ignored and counted (``statistics().ignored``). The sender of a message is the peer the
  link authenticated (its TLS fingerprint), so nobody speaks for another daemon.
* **Full mesh when small.** With at most ``FULL_MESH_MAX`` members (ourselves included) every
  other member is active and there is no passive view: that is today's behaviour, at most
  ``ACTIVE_MAX`` links each, and it is the fastest at that size (one hop everywhere). Past it the
  view leaves the mesh by keeping ``ACTIVE_TARGET`` of its links at random and disconnecting the
  rest, so that joiners find room.
* **Joining.** A new daemon sends ``Join`` to a contact; the contact links to it if it has room
  and sends ``ForwardJoin(joiner, ARWL)`` to each of its active peers. Each forward-join walks at
  random for at most ``ARWL`` hops; at hop ``PRWL`` the joiner goes into that daemon's passive view;
  where the walk ends (TTL 0, or a daemon with a single link) that daemon asks the joiner for a
  link (``Neighbor``) if it has room, else keeps it as passive.
* **Repair.** A daemon with fewer than ``ACTIVE_TARGET`` active peers asks random passive ones
  (``Neighbor``, high priority when it has no link at all); the asked one accepts a low-priority
  request while it has fewer than ``ACCEPT_LOW`` peers and a high-priority one while it has
  fewer than ``ACTIVE_MAX``: the slots above are kept for a daemon with no link at all, which
  asks one peer at a time. A failed link
  drops its peer from both views (the paper's rule: it may be gone), a ``Disconnect`` moves it to
  the passive view (it is alive); the passive view is topped up from the member directory when
  it runs dry, so an isolated daemon always has members to ask.
* **Shuffles.** On its timer a daemon sends ``Shuffle`` (itself, ``SHUFFLE_ACTIVE`` active and
  ``SHUFFLE_PASSIVE`` passive peers) on a random walk of ``SHUFFLE_TTL`` hops; where it ends, the
  receiver answers with as many of its passive peers and both merge what they got into their
  passive views, evicting first what they sent. Passive views so learn who is alive.

Attack bounds (each tested). Views never exceed their caps, whatever arrives. A hostile member is
one id: it holds at most one slot in any view. **No healthy link is ever dropped on a claim**: our
active view loses a peer only on that peer's own ``Disconnect``, a failure the shell saw, its
revocation, or its leaving the member set — never to make room (we differ from the paper here,
which evicts a random active peer for a joiner or a high-priority request: a member could then
churn our links by naming others in forward-joins). A revoked member is never taken again. A reply
nobody asked for (``NeighborReply``, ``ShuffleReply``) is ignored. What a hostile member can still
do: be in the active view of any daemon with a free slot (one slot each), fill passive views with
real members of its choice (repair then asks some that are busy or down, and moves on), and
forward walks badly (its neighbours' walks, not others'); connectivity rests on the honest
daemons' random choices, and the vectors repair whatever it withholds.

The shell's side (palaced/peers/overlay.py): ``Open(peer)`` when a peer enters the active view (dial it
unless a link is up: both sides may dial, the shell keeps one), ``Close(peer)`` when it leaves.
``Send(to, message)`` may name a peer we hold no link to (a ``Neighbor`` request to a passive
peer, a ``ShuffleReply`` to the walk's origin, a ``Join`` to the contact): the shell delivers it on
a short-lived connection. A ``Neighbor`` request whose connection cannot be made or which is not
answered within the shell's dial timeout is reported as ``link_failed(peer)``.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable
from typing import Final, final

__all__ = [
    "ACCEPT_LOW", "ACTIVE_MAX", "ACTIVE_TARGET", "ARWL", "FULL_MESH_MAX", "GOSSIP_SCALE_MEMBERS",
    "MAX_SHUFFLE_PEERS", "PASSIVE_MAX", "PRWL", "SHUFFLE_ACTIVE",
    "SHUFFLE_PASSIVE", "SHUFFLE_TTL", "Action", "Close", "Disconnect", "ForwardJoin", "Join", "Neighbor",
    "NeighborReply", "Open", "OverlayMessage", "OverlayStatistics", "PartialView", "Send", "Shuffle",
    "ShuffleReply", "gossip_period",
]

# Why 5: the active view the paper sizes as log10(N) + 1 and its implementations run at 10,000
# daemons (iroh-gossip: 5 active, 30 passive); log2(50) + c would ask more links than a connected
# random graph of 50 needs. Repair seeks this many links.
ACTIVE_TARGET: Final = 5
# Why 8: issue 45's bound on links per daemon. The slack of 3 above the target is what lets a
# joiner or a daemon left without links find room without anyone dropping a healthy link.
ACTIVE_MAX: Final = 8
# Why ACTIVE_TARGET + 1: a request from a daemon that has links already (low priority), a joiner
# and the end of a forward-join are taken while the asked and the linked are fewer than this. Since
# we never drop a link to make room (see "Attack bounds"), every join adds links; one above the
# target is what keeps the mean degree near 6 (simulated: 6.5 after 50 and 200 joins, against 7.6
# at ACTIVE_MAX - 1) while a joiner still finds daemons with room. Above it, up to ACTIVE_MAX, only
# a daemon with no link at all is taken (high priority).
ACCEPT_LOW: Final = ACTIVE_TARGET + 1
# Why ACTIVE_MAX + 1: a full mesh of that many members gives each daemon exactly ACTIVE_MAX links,
# and at that size one hop everywhere is faster than any tree.
FULL_MESH_MAX: Final = ACTIVE_MAX + 1
# Why 30: the paper's and iroh-gossip's passive view; enough candidates for repair after a fifth
# of the palace fails at once.
PASSIVE_MAX: Final = 30
# Why 6 and 3: the paper's active and passive random walk lengths (forward-joins).
ARWL: Final = 6
PRWL: Final = 3
# Why 3 active and 4 passive peers per shuffle, on a walk of ARWL hops: the paper's values.
SHUFFLE_ACTIVE: Final = 3
SHUFFLE_PASSIVE: Final = 4
SHUFFLE_TTL: Final = ARWL
#: the most peers a shuffle or its reply names (ourselves plus the samples); more are not read
MAX_SHUFFLE_PEERS: Final = 1 + SHUFFLE_ACTIVE + SHUFFLE_PASSIVE
# Why 10: the palace size the gossip heartbeats (presence 10 s, reports 30 s) were sized for — a
# full mesh of ten. Every daemon's records reach every daemon, so what one daemon receives grows
# with the members; past ten, ``gossip_period`` stretches the heartbeats as much, and per daemon
# the gossip costs what it cost at ten. Changes still go at once; only the beats slow down.
GOSSIP_SCALE_MEMBERS: Final = 10
# Why 4: replies to our shuffles accepted at once; a reply is taken only while a shuffle of ours
# is unanswered, so nobody can feed our passive view unasked faster than our own timer.
MAX_OPEN_SHUFFLES: Final = 4


def gossip_period(base_s: float, members: int) -> float:
    """A gossip heartbeat of ``base_s`` in a palace of ``members`` daemons (see ``GOSSIP_SCALE_MEMBERS``);
    a daemon's records are judged silent after the same multiple of it by every daemon alike."""
    return base_s * max(1.0, members / GOSSIP_SCALE_MEMBERS)


# -- the overlay's messages (wire nouns; their codec is peer.py's) -------------------------------


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Join:
    """The sender is new to the overlay and asks us, its contact, to link to it and walk it in."""


@final
@dataclasses.dataclass(frozen=True, slots=True)
class ForwardJoin:
    """``peer`` joined: link to it where this walk ends, ``ttl`` more hops at most."""

    peer: str
    ttl: int


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Neighbor:
    """The sender asks for an active link; ``high``: it has no link at all."""

    high: bool


@final
@dataclasses.dataclass(frozen=True, slots=True)
class NeighborReply:
    """The answer to our ``Neighbor`` (or our ``Join``): linked, or not."""

    accepted: bool


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Disconnect:
    """The sender drops its link to us (it stays alive: keep it as passive)."""


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Shuffle:
    """A sample of ``origin``'s views, on a random walk of ``ttl`` more hops."""

    origin: str
    ttl: int
    peers: tuple[str, ...]


@final
@dataclasses.dataclass(frozen=True, slots=True)
class ShuffleReply:
    """A sample of the passive view of the daemon where our shuffle's walk ended."""

    peers: tuple[str, ...]


OverlayMessage = Join | ForwardJoin | Neighbor | NeighborReply | Disconnect | Shuffle | ShuffleReply


# -- what the view answers ------------------------------------------------------------------


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Send:
    """Send ``message`` to ``to`` (on its link, or a short-lived connection if there is none)."""

    to: str
    message: OverlayMessage


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Open:
    """``peer`` entered the active view: keep a link to it."""

    peer: str


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Close:
    """``peer`` left the active view: close our link to it."""

    peer: str


Action = Send | Open | Close


@final
@dataclasses.dataclass(frozen=True, slots=True)
class OverlayStatistics:
    active: int
    passive: int
    pending: int
    full_mesh: bool
    #: peer ids refused (non-members, revoked, ourselves) and messages ignored (unasked replies,
    #: senders that are no members, disconnects from peers that were not linked)
    ignored: int


class PartialView:
    """One daemon's active and passive views.

    Args:
        me: our peer id.
        rng: every random choice is drawn from it (a seeded one makes a run reproducible).
        members: the member set, as ``set_members`` takes it (may also be told later).

    Every method answers the actions to take now, in order. Error handling: nothing a peer sends
    raises; what breaks the rules above is ignored and counted.
    """

    def __init__(self, me: str, rng: random.Random, members: Iterable[str] = ()) -> None:
        self.me = me
        self._rng = rng
        self._members: set[str] = set()
        self._revoked: set[str] = set()
        self._active: dict[str, None] = {}  # insertion-ordered sets: choices stay reproducible
        self._passive: dict[str, None] = {}
        #: peers we asked for a link (Neighbor or Join) and that have not answered
        self._pending: dict[str, None] = {}
        #: passive peers that refused us since the last ``repair`` (not asked again until then)
        self._refused: set[str] = set()
        #: members the shell knows an address of (``set_reachable``): asked first for a link
        self._reachable: frozenset[str] = frozenset()
        self._open_shuffles = 0
        self._ignored = 0
        self._full_mesh = True
        if members:
            self.set_members(members)

    def __repr__(self) -> str:
        mode = "mesh" if self._full_mesh else "partial"
        return f"<PartialView {self.me[:6]} {mode} active={len(self._active)} passive={len(self._passive)}>"

    @property
    def active(self) -> frozenset[str]:
        return frozenset(self._active)

    @property
    def passive(self) -> frozenset[str]:
        return frozenset(self._passive)

    @property
    def pending(self) -> frozenset[str]:
        """The peers we asked for a link (``Neighbor`` or ``Join``) that have not answered."""
        return frozenset(self._pending)

    @property
    def full_mesh(self) -> bool:
        return self._full_mesh

    def statistics(self) -> OverlayStatistics:
        return OverlayStatistics(len(self._active), len(self._passive), len(self._pending), self._full_mesh,
                                 self._ignored)

    # -- local facts --------------------------------------------------------------------------

    def set_members(self, members: Iterable[str]) -> list[Action]:
        """The member directory's current members (ourselves may be among them; revoked ones are
        dropped whatever it says). Peers no longer members leave both views; below
        ``FULL_MESH_MAX`` every member is active; past it, a view that was a full mesh keeps
        ``ACTIVE_TARGET`` links at random and disconnects the rest."""
        self._members = {m for m in members if m != self.me and m not in self._revoked}
        actions: list[Action] = []
        for peer in [p for p in self._active if p not in self._members]:
            actions += self._drop_active(peer, tell=True)
        for peer in [p for p in self._passive if p not in self._members]:
            del self._passive[peer]
        for peer in [p for p in self._pending if p not in self._members]:
            del self._pending[peer]
        was_mesh, self._full_mesh = self._full_mesh, len(self._members) + 1 <= FULL_MESH_MAX
        if self._full_mesh:
            self._passive.clear()
            self._pending.clear()
            return actions + self.repair()
        if was_mesh:
            for peer in self._sample(self._active, len(self._active) - ACTIVE_TARGET):
                actions += self._drop_active(peer, tell=True)
                self._add_passive(peer)
        self._top_up_passive()
        return actions + self.repair()

    def set_reachable(self, peers: Iterable[str]) -> None:
        """The members the shell can dial now (it knows an address of each). A view in want of links
        asks those first: a request to a member nobody can dial waits out the shell's delivery
        timeout for nothing (a daemon restarting knows only the addresses it dialled before)."""
        self._reachable = frozenset(peers)

    def revoke(self, peer: str) -> list[Action]:
        """``peer`` was revoked: out of every view for good (its link closed, no goodbye sent)."""
        self._revoked.add(peer)
        return self._drop_active(peer, tell=False) + self.set_members(self._members)

    def join(self, contact: str) -> list[Action]:
        """We are new: ask ``contact`` (a member) to walk us into the overlay."""
        if self._full_mesh or not self._admissible(contact) or contact in self._active:
            return []
        self._passive.pop(contact, None)
        self._pending[contact] = None
        return [Send(contact, Join())]

    def link_up(self, peer: str) -> list[Action]:
        """A link to ``peer`` came up. In a full mesh a member that dialled us is active at once;
        in a partial view a link means nothing by itself (the message it carries decides)."""
        if self._full_mesh and self._admissible(peer):
            return self._add_active(peer, opened=True)
        return []

    def link_failed(self, peer: str) -> list[Action]:
        """The link to ``peer`` failed, or a request to it could not be delivered or answered. In a
        full mesh it stays active (the shell dials again); otherwise it leaves both views, and the
        active view is repaired from the passive one."""
        if self._full_mesh:
            return []
        self._passive.pop(peer, None)
        self._pending.pop(peer, None)
        if peer in self._active:
            del self._active[peer]
            return [Close(peer), *self._seek()]
        return self._seek()

    def repair(self) -> list[Action]:
        """The shell's periodic repair (and after a change of members): forget which peers refused
        us, top the passive view up from the member directory if it ran dry, and ask passive peers
        for links until the asked and the linked make ``ACTIVE_TARGET``."""
        actions: list[Action] = []
        if self._full_mesh:
            for peer in sorted(self._members - self._active.keys()):
                actions += self._add_active(peer)
            return actions
        self._refused.clear()
        if not self._passive:
            self._top_up_passive()
        return self._seek()

    def _seek(self) -> list[Action]:
        """Ask random passive peers for links, up to ``ACTIVE_TARGET`` asked and linked; not those
        that refused since the last ``repair`` (so a palace where all are busy is not asked in a
        loop: the shell's timer asks again)."""
        if self._full_mesh:
            return []
        missing = ACTIVE_TARGET - len(self._active) - len(self._pending)
        if not self._active:
            # with no link at all, one high-priority request at a time: it takes another's last
            # slot, so we spend no more of them than we need
            missing = 0 if self._pending else min(missing, 1)
        actions: list[Action] = []
        candidates = [p for p in self._passive if p not in self._refused]
        reachable = [p for p in candidates if p in self._reachable]
        chosen = self._sample(reachable, missing)
        chosen += self._sample([p for p in candidates if p not in self._reachable], missing - len(chosen))
        for peer in chosen:
            del self._passive[peer]
            self._pending[peer] = None
            actions.append(Send(peer, Neighbor(high=not self._active)))
        return actions

    def probe(self, peer: str) -> list[Action]:
        """Ask ``peer`` for a link again (low priority): a member we lost to a failure, which may
        be on the far side of a partition that has healed since. Nothing while the asked and the
        linked fill the view, or for a peer linked or asked already. A partition leaves each side a
        connected view of its own; without this, nothing would link the sides again once it heals."""
        if (self._full_mesh or not self._admissible(peer) or peer in self._active or peer in self._pending
                or len(self._active) + len(self._pending) >= ACTIVE_MAX):
            return []
        self._passive.pop(peer, None)
        self._pending[peer] = None
        return [Send(peer, Neighbor(high=False))]

    def shuffle_due(self) -> list[Action]:
        """The shuffle timer fired: send a sample of our views on a random walk."""
        if self._full_mesh or not self._active:
            return []
        target = self._rng.choice(list(self._active))
        peers = (self.me, *self._sample([p for p in self._active if p != target], SHUFFLE_ACTIVE),
                 *self._sample(self._passive, SHUFFLE_PASSIVE))
        self._open_shuffles = min(self._open_shuffles + 1, MAX_OPEN_SHUFFLES)
        return [Send(target, Shuffle(self.me, SHUFFLE_TTL, peers))]

    # -- what peers send ----------------------------------------------------------------------

    def receive(self, sender: str, message: OverlayMessage) -> list[Action]:
        """``message`` arrived from ``sender`` (the peer its link authenticated)."""
        if not self._admissible(sender):
            self._ignored += 1
            return []
        match message:
            case Join():
                return self._on_join(sender)
            case ForwardJoin(peer, ttl):
                return self._on_forward_join(sender, peer, ttl)
            case Neighbor(high):
                return self._on_neighbor(sender, high)
            case NeighborReply(accepted):
                return self._on_neighbor_reply(sender, accepted)
            case Disconnect():
                return self._on_disconnect(sender)
            case Shuffle(origin, ttl, peers):
                return self._on_shuffle(sender, origin, ttl, peers)
            case ShuffleReply(peers):
                return self._on_shuffle_reply(peers)
        raise AssertionError(f"not an overlay message: {message!r}")  # pragma: no cover

    def _on_join(self, joiner: str) -> list[Action]:
        if self._full_mesh:
            return self._add_active(joiner, opened=True)
        if joiner in self._active:
            return [Send(joiner, NeighborReply(True))]
        walkers = list(self._active)
        if self._room(high=False):
            actions = self._add_active(joiner, opened=True)
            actions.append(Send(joiner, NeighborReply(True)))
        else:
            self._add_passive(joiner)
            actions = [Send(joiner, NeighborReply(False))]
        return actions + [Send(p, ForwardJoin(joiner, ARWL)) for p in walkers]

    def _on_forward_join(self, sender: str, joiner: str, ttl: int) -> list[Action]:
        if self._full_mesh:
            return []
        if not self._admissible(joiner):
            self._ignored += 1
            return []
        ttl = max(0, min(ttl, ARWL))  # a walk is never longer than ours, whatever it says
        onward = [p for p in self._active if p not in (sender, joiner)]
        if ttl == 0 or not onward:
            if joiner in self._active or joiner in self._pending:
                return []
            if self._room(high=False):
                self._passive.pop(joiner, None)
                self._pending[joiner] = None
                return [Send(joiner, Neighbor(high=False))]
            self._add_passive(joiner)
            return []
        if ttl == PRWL:
            self._add_passive(joiner)
        return [Send(self._rng.choice(onward), ForwardJoin(joiner, ttl - 1))]

    def _on_neighbor(self, sender: str, high: bool) -> list[Action]:
        if sender in self._active:
            return [Send(sender, NeighborReply(True))]
        # a request crossing ours is an answer to it
        if len(self._active) < ACTIVE_MAX and (self._full_mesh or sender in self._pending or self._room(high=high)):
            return [*self._add_active(sender, opened=True), Send(sender, NeighborReply(True))]
        self._add_passive(sender)
        return [Send(sender, NeighborReply(False))]

    def _on_neighbor_reply(self, sender: str, accepted: bool) -> list[Action]:
        if sender not in self._pending:
            if accepted and sender not in self._active:
                # a request we no longer hold (refused by a crossing message, or never sent):
                # undo its side, so active views stay symmetric
                return [Send(sender, Disconnect())]
            self._ignored += 1
            return []
        del self._pending[sender]
        if accepted and len(self._active) < ACTIVE_MAX:
            return self._add_active(sender) + self._seek()
        self._add_passive(sender)
        self._refused.add(sender)
        if accepted:  # it took us while our last slot filled: undo its side
            return [Send(sender, Disconnect()), *self._seek()]
        return self._seek()

    def _on_disconnect(self, sender: str) -> list[Action]:
        if sender in self._pending:  # a refusal by another name
            return self._on_neighbor_reply(sender, False)
        if sender not in self._active:
            return []  # it dropped us already (the echo of our own Disconnect)
        del self._active[sender]
        # echoed: a Disconnect may overtake the request that linked us again (they travel on
        # different connections); the echo makes the sender drop us too, so views stay symmetric
        actions: list[Action] = [Send(sender, Disconnect()), Close(sender)]
        if self._full_mesh:
            return actions
        self._add_passive(sender)
        return actions + self._seek()

    def _on_shuffle(self, sender: str, origin: str, ttl: int, peers: tuple[str, ...]) -> list[Action]:
        if self._full_mesh:
            return []
        if not self._admissible(origin):
            self._ignored += 1
            return []
        ttl = max(0, min(ttl, SHUFFLE_TTL))
        onward = [p for p in self._active if p not in (sender, origin)]
        if ttl > 1 and onward:
            return [Send(self._rng.choice(onward), Shuffle(origin, ttl - 1, peers))]
        reply = tuple(self._sample([p for p in self._passive if p != origin], len(peers[:MAX_SHUFFLE_PEERS])))
        self._merge(peers, sent=reply)
        return [Send(origin, ShuffleReply(reply))]

    def _on_shuffle_reply(self, peers: tuple[str, ...]) -> list[Action]:
        if self._full_mesh or self._open_shuffles == 0:
            self._ignored += 1
            return []
        self._open_shuffles -= 1
        self._merge(peers, sent=())
        return []

    # -- the views ----------------------------------------------------------------------------

    def _admissible(self, peer: str) -> bool:
        return peer in self._members  # never ourselves nor a revoked member (set_members, revoke)

    def _room(self, *, high: bool) -> bool:
        """Is there a slot for a peer asking (high: one with no link at all gets the last slot)?"""
        limit = ACTIVE_MAX if high else ACCEPT_LOW
        return len(self._active) + len(self._pending) < limit

    def _add_active(self, peer: str, *, opened: bool = False) -> list[Action]:
        """``peer`` becomes active (the caller checked it is admissible and there is room);
        ``opened``: its link is up already (it asked on it), so nothing to open."""
        if peer in self._active or len(self._active) >= ACTIVE_MAX:
            return []
        self._passive.pop(peer, None)
        self._pending.pop(peer, None)
        self._active[peer] = None
        return [] if opened else [Open(peer)]

    def _drop_active(self, peer: str, *, tell: bool) -> list[Action]:
        if peer not in self._active:
            return []
        del self._active[peer]
        return [Send(peer, Disconnect()), Close(peer)] if tell else [Close(peer)]

    def _add_passive(self, peer: str) -> None:
        if not self._admissible(peer) or peer in self._active or peer in self._pending or peer in self._passive:
            return
        if len(self._passive) >= PASSIVE_MAX:
            del self._passive[self._rng.choice(list(self._passive))]
        self._passive[peer] = None

    def _merge(self, peers: tuple[str, ...], *, sent: tuple[str, ...]) -> None:
        """Merge a shuffle's peers into the passive view, evicting first those we sent back."""
        evictable = [p for p in sent if p in self._passive]
        for peer in dict.fromkeys(peers[:MAX_SHUFFLE_PEERS]):
            if not self._admissible(peer):
                self._ignored += 1
                continue
            if peer in self._active or peer in self._pending or peer in self._passive:
                continue
            if len(self._passive) >= PASSIVE_MAX and evictable:
                del self._passive[evictable.pop()]
            self._add_passive(peer)

    def _top_up_passive(self) -> None:
        """Fill the passive view from the member directory (random members not linked; those the
        shell can dial first)."""
        candidates = sorted(self._members - self._active.keys() - self._pending.keys() - self._passive.keys())
        room = PASSIVE_MAX - len(self._passive)
        reachable = [p for p in candidates if p in self._reachable]
        chosen = self._sample(reachable, room)
        chosen += self._sample([p for p in candidates if p not in self._reachable], room - len(chosen))
        for peer in chosen:
            self._passive[peer] = None

    def _sample(self, peers: Iterable[str], k: int) -> list[str]:
        population = list(peers)
        return self._rng.sample(population, min(max(k, 0), len(population)))
