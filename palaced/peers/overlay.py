"""Which peers this daemon links to, and on which links what is new is pushed (issue 45 §2).

Owns ``Overlay``: the IO shell around two protocol objects of ``palace_proto`` — the partial views
(``overlay.PartialView``, HyParView: the active view is the set of peers we keep a link to) and
the broadcast tree (``broadcast.Broadcast``, Plumtree: the links an event or a gossip record is
pushed on, the others only told "I have"). It tells them what happened and carries out what they
answer; they decide, it does the IO.

What it wires, and to what:

* **The member set** (the member directory, polled each ``MEMBERS_POLL_S``: certificates bound,
  revoked ones left out) goes to the view. With at most ``FULL_MESH_MAX`` members the view is a
  full mesh: every member is active, which is how palace linked before partial views.
* **Which peers are dialled.** The dialler asks ``may_dial(peer)`` before each dial of a known
  peer: a member in the active view, one we asked for a link (a ``Neighbor`` or ``Join`` not
  answered yet), one a message waits for, or a daemon no binding tells us of yet (dialled once to
  learn it). Every other member the dialler knows an address of (from mDNS, gossip, earlier links)
  stays a *candidate*: known, not dialled.
* **Links that come and go** (the registry's changes): a ready link tells the view (``link_up``;
  a daemon in a partial palace with no active peer asks the first it meets to walk it in:
  ``join``), flushes the messages that waited for it and joins the tree if its peer is active; a
  link that ends is a failure for the view if its peer was active or asked.
* **Lost peers.** An active peer whose link failed (silence, a lost connection, an error — not
  a close by either side) is asked for a link again on a back-off
  (``LOST_FIRST_S`` doubling to ``LOST_MAX_S``, for ``LOST_GIVE_UP_S``): what heals a partition,
  whose sides would otherwise each keep a view of their own.
* **Receipts beyond the view.** ``append --replicated K`` with K past the links up links to as many
  more members while it waits (``reach``): each confirms on a link of its own, as in a full mesh.
* **Links nobody wants.** A link to a peer that is neither active nor asked nor owed a message is
  closed after ``TRANSIENT_S`` (a daemon that dialled us to ask for a link, to deliver a shuffle's
  reply, or one we stopped wanting).
* **The view's messages** go on the peer's link. A request for a link (``Neighbor``, ``Join``) to
  a peer we hold none to waits for the dialler (at most ``UNDELIVERED_PER_PEER`` per peer and
  ``UNDELIVERED_PEERS`` peers, for ``DELIVER_S``: then it is a failed link); anything else to an
  unlinked peer (a shuffle's reply) is dropped rather than dialled for.
  ``Close`` lets a ``Disconnect`` before it go first (``CLOSE_GRACE_S``).
* **The trees** (one for events, one for gossip records: their sources differ). Their neighbours
  are the active peers with a ready link. A link's peer that the tree
  made lazy gets no pushes (``LinkMachine.lazy``). Events: ours are ``local`` (from the bus);
  those a link applied are ``received`` from its peer (a duplicate prunes it). Gossip records
  (presence, reports, addresses) share the tree under keys of their own (``p:``, ``r:``, ``a:`` and
  16 characters of the daemon's peer id, with the record's serial): relayed only to eager peers, announced to
  lazy ones. An ``IHave`` of something we hold is dropped before the tree hears it; a ``Graft`` is
  answered from the store (events) or from the newest record (gossip).
* **Neighbours** (§5.4 rule 4: a peer that hears a daemon first-hand is not relayed its events) are
  the active peers only: a passing link to a daemon is no first-hand source.

Why not every link: see ``palace_proto.overlay`` and ``palace_proto.broadcast``; the guarantees
(backlog, partitions, observers, ``--replicated``) rest on the vectors every link still exchanges
and on the active graph staying connected.

Imports the registry, the dialler and the gossip (the parts it steers); the network wires it.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

import trio

from palace_proto import broadcast as tree_protocol
from palace_proto import overlay as view_protocol
from palace_proto.broadcast import Broadcast, BroadcastMessage, EventKey, Graft, IHave, Prune
from palace_proto.envelope import CommittedEvent, SignedEvent
from palace_proto.link import GossipRecord
from palace_proto.overlay import Join, Neighbor, OverlayMessage, PartialView
from palace_proto.peer import CONTROL_MESSAGES, is_gossip_name

from ..bus import EventBus
from ..limits import LimitLog
from ..members import MemberDirectory
from ..store.aio import AsyncStore
from .dialing import Dialer
from .gossip import Gossip, gossip_key
from .registry import LinkChange, LinkRegistry

if TYPE_CHECKING:
    from .link import PeerLink

__all__ = ["Overlay"]

LOGGER: Final = logging.getLogger("palaced.peers.overlay")

# Why 1 s: members change when a daemon joins or is revoked; a second is nothing next to a join,
# and reading a few dozen certificates from memory costs microseconds.
MEMBERS_POLL_S: Final = 1.0
# Why 30 s: the view asks passive peers for links until it has ACTIVE_TARGET; after a failure it
# asks at once (link_failed), this is the retry when those it asked were busy. Each ask opens a
# link (a TLS handshake, every binding), so a view short of its target by one does not ask often.
REPAIR_S: Final = 30.0
# Why 120 s: HyParView's shuffles refresh passive views with live peers. The paper's 30 s assumes
# passive views fed by nothing else; here the member directory tops them up, and a shuffle's walk
# costs six messages of eight peer ids each (measured at 50 daemons: 7 KB/min per daemon at 30 s).
SHUFFLE_S: Final = 120.0
# Why 10 s: a link to a peer in no view lives this long before it is closed, whatever it carried:
# time for the request it came to make to be answered (a request answered, either way, closes it
# sooner: CLOSE_GRACE_S after the answer).
TRANSIENT_S: Final = 10.0
# Why 2 s: how often passing links past TRANSIENT_S are closed, requests past DELIVER_S given up
# and lost peers asked again (a look over a few dozen entries).
SWEEP_S: Final = 2.0
# Why 10 s: a message for a peer we hold no link to waits this long for the dialler (a connect and
# a TLS handshake take well under a second on any network palace runs on).
DELIVER_S: Final = 10.0
# Why 8 and 32: a handful of messages per change wait for a link (a request, a shuffle's reply); a
# view asks at most ACTIVE_TARGET peers at once. Past these, the oldest are dropped.
UNDELIVERED_PER_PEER: Final = 8
UNDELIVERED_PEERS: Final = 32
# Why 0.5 s: a Disconnect queued before a Close reaches the peer's sender well within it.
CLOSE_GRACE_S: Final = 0.5
# Why 15 s doubling to 10 min: an active peer whose link failed is asked again (``probe``) on this
# schedule — a partition healing, a laptop waking — and given up after LOST_GIVE_UP_S (it stays a
# member: repair may pick it again from the passive view).
LOST_FIRST_S: Final = 15.0
LOST_MAX_S: Final = 600.0
LOST_GIVE_UP_S: Final = 3600.0

# Why 0.25 s: announcements gathered this long go several to a message (at 50 daemons, each daemon
# announces some 200 records a minute); repair waits as much longer, while eager pushes, the fast
# path, do not wait at all.
LAZY_DELAY_S: Final = 0.25


class Overlay:
    """The partial views and the broadcast tree of one daemon, wired to its links (see the module).

    Args:
        rng: the views' random choices (a seeded one in tests).
        own_origin: this daemon's origin (its events are ``local`` to the tree).
    """

    def __init__(self, *, peer_id: str, own_origin: str, directory: MemberDirectory, registry: LinkRegistry,
                 dialer: Dialer, gossip: Gossip, store: AsyncStore, bus: EventBus, limits: LimitLog,
                 rng: random.Random | None = None) -> None:
        self.peer_id = peer_id
        self.own_origin = own_origin
        self.directory = directory
        self.registry = registry
        self.dialer = dialer
        self.gossip = gossip
        self.store = store
        self.bus = bus
        self.limits = limits
        self._rng = rng if rng is not None else random.SystemRandom()
        self.view = PartialView(peer_id, self._rng)
        #: the events' tree, and the gossip records' (their sources differ: fifty daemons' heartbeats
        #: grafting the links the writers' tree had pruned cost 1.7 copies per event when shared)
        self.tree = Broadcast(peer_id, lazy_delay=LAZY_DELAY_S)
        self.gossip_tree = Broadcast(peer_id, lazy_delay=LAZY_DELAY_S)
        #: messages waiting for a link to their peer: peer -> (when they give up, the messages)
        self._undelivered: dict[str, tuple[float, list[OverlayMessage]]] = {}
        #: when each live link became ready (a link nobody wants is closed TRANSIENT_S after)
        self._ready_at: dict[str, float] = {}
        self._members: frozenset[str] = frozenset()
        #: active peers lost to a failure: peer -> (when to ask again, the interval, when to give up)
        self._lost: dict[str, tuple[float, float, float]] = {}
        #: members linked for a while beyond the views (``reach``): peer -> until when
        self._reaching: dict[str, float] = {}
        self._revoked: set[str] = set()
        self._wake = trio.Event()
        self._nursery: trio.Nursery | None = None
        registry.subscribe(self._on_change)
        registry.first_hand = self.first_hand
        dialer.gate = self.may_dial
        gossip.tree = self
        gossip.takes = self.first_hand
        gossip.pushes_to = lambda peer: self.view.full_mesh or peer in self.gossip_tree.eager

    def __repr__(self) -> str:
        return f"<Overlay {self.peer_id[:7]} {self.view!r} {self.tree!r}>"

    # -- what the other parts ask --------------------------------------------------------------

    def may_dial(self, peer_id: str) -> bool:
        """May the dialler dial ``peer_id`` now? A member active, asked or owed a message; and a
        daemon we know no binding of yet (one dial makes it known: mDNS, a static address, a
        daemon enrolled offline), which the view then keeps or lets go like any member."""
        view = self.view
        # "no binding yet" asks the directory itself, not the members polled last: a joiner learns
        # every binding and every address record within a second, and must not dial them all
        # before its view has been told they are members (measured: 20-28 links each for 10 s).
        return (peer_id in view.active or peer_id in view.pending or peer_id in self._undelivered
                or peer_id in self._reaching or self.directory.certificate_of_peer(peer_id) is None)

    def reach(self, count: int, seconds: float) -> set[str]:
        """Link to ``count`` members for ``seconds``, beyond the active view: ``append --replicated
        K`` counts the peers that confirmed an event on a link of ours (their vectors and receipts,
        authenticated by the link), so with K past the active view, K members are linked while it
        waits (random ones, not linked yet; each such link opens like any other and closes as a
        passing one once the wait is over — the member, which does not keep it, may close it
        first, and it is dialled again while the wait lasts). Nothing in a full mesh: every
        member is linked."""
        if self.view.full_mesh:
            return set()
        linked = {link.peer_id for link in self.registry.links()}
        wanted = count - len(linked)
        if wanted <= 0:
            return set()
        until = trio.current_time() + seconds
        candidates = sorted(self._members - linked - self._reaching.keys())
        # two more than the count: a member asleep must not fail the wait alone
        chosen = set(self._rng.sample(candidates, min(wanted + 2, len(candidates))))
        for peer in chosen:
            self._reaching[peer] = until
        self.dialer.gate_changed()
        return chosen

    def release(self, peers: Iterable[str]) -> None:
        """The wait ``reach`` linked ``peers`` for is over: their links go as passing ones do."""
        for peer in peers:
            if self._reaching.pop(peer, None) is not None:
                self._start(self._close_soon, peer)
        self.dialer.gate_changed()

    def keeps_link(self, peer_id: str) -> bool:
        """Is ``peer_id`` a link of ours, as reports name links (every peer in a full mesh; the
        active view and whatever link is up in a palace of partial views)?"""
        return self.view.full_mesh or peer_id in self.view.active or self.registry.link_of(peer_id) is not None

    def first_hand(self, peer_id: str) -> bool:
        """Do we hear ``peer_id`` first-hand, for the ``Neighbours`` we tell and the gossip a link
        takes? In a full mesh, every linked daemon; past it, an active peer (a passing link is no
        first-hand source)."""
        return self.view.full_mesh or peer_id in self.view.active

    def status(self) -> dict[str, Any]:
        """What ``status`` shows of the views and the tree."""
        view, tree, gossip = self.view.statistics(), self.tree.statistics(), self.gossip_tree.statistics()
        return {"mode": "full mesh" if view.full_mesh else "partial views", "members": len(self._members),
                "active": sorted(self.view.active), "passive": view.passive, "asked": view.pending,
                "eager": tree.eager, "lazy": tree.lazy, "gossip_eager": gossip.eager,
                "grafts_sent": tree.grafts_sent + gossip.grafts_sent, "prunes_sent": tree.prunes_sent + gossip.prunes_sent,
                "ignored": view.ignored + tree.ignored + gossip.ignored,
                "undelivered": sum(len(m) for _, m in self._undelivered.values())}

    # -- lifetime ------------------------------------------------------------------------------

    async def serve(self) -> None:
        """Poll the members, repair and shuffle the view, run the tree's timers, close the links
        nobody wants; until cancelled."""
        stop = self.bus.call_on_publish(self._on_commit)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self._run()
        finally:
            self._nursery = None
            stop()

    async def _run(self) -> None:
        now = trio.current_time()
        next_members, next_repair, next_sweep = now, now + REPAIR_S, now + SWEEP_S
        next_shuffle = now + SHUFFLE_S * self._rng.uniform(0.5, 1.5)
        while True:
            now = trio.current_time()
            if now >= next_members:
                self._poll_members()
                next_members = now + MEMBERS_POLL_S
            if now >= next_sweep:
                self._expire_undelivered(now)
                self._close_unwanted(now)
                self._probe_lost(now)
                next_sweep = now + SWEEP_S
            if now >= next_repair:
                self._act(self.view.repair())
                next_repair = now + REPAIR_S
            if now >= next_shuffle:
                self._act(self.view.shuffle_due())
                next_shuffle = now + SHUFFLE_S * self._rng.uniform(0.8, 1.2)
            for tree in (self.tree, self.gossip_tree):
                due = tree.get_timer()
                if due is not None and now >= due:
                    self._act_tree(tree.tick(now), gossip=tree is self.gossip_tree)
            timer = min((t for t in (self.tree.get_timer(), self.gossip_tree.get_timer()) if t is not None),
                        default=None)
            deadline = min(next_members, next_repair, next_sweep, next_shuffle,
                           timer if timer is not None else next_members)
            self._wake = trio.Event()
            with trio.move_on_at(deadline):
                await self._wake.wait()

    # -- members -------------------------------------------------------------------------------

    def _poll_members(self) -> None:
        self.view.set_reachable(t.peer_id for t in self.dialer.targets.values() if t.peer_id)
        directory = self.directory
        certified = {cert.peer_id for cert in directory.certificates()}
        for peer in sorted(certified - self._revoked):
            if directory.is_revoked(peer):
                self._revoked.add(peer)
                self.tree.neighbor_down(peer)
                self.gossip_tree.neighbor_down(peer)
                self._act(self.view.revoke(peer))
        members = frozenset(certified - self._revoked)
        if members != self._members:
            self._members = members
            self._act(self.view.set_members(members))

    # -- links ---------------------------------------------------------------------------------

    def _on_change(self, change: LinkChange) -> None:
        peer, link = change.peer_id, change.link
        if peer is None or link is None:
            return
        if change.kind == "ready":
            self._ready_at[peer] = trio.current_time()
            self._poll_members()  # a joiner learns the members on its first link: decide with them
            actions = self.view.link_up(peer)
            if not self.view.full_mesh and not self.view.active and not self.view.pending:
                actions += self.view.join(peer)  # new here (or cut off): ask it to walk us in
            self._act(actions)
            self._flush_undelivered(peer, link)
            self._sync_tree()
        elif change.kind == "removed" and change.current:
            self._ready_at.pop(peer, None)
            if change.failed and peer in self.view.active:
                now = trio.current_time()
                self._lost[peer] = (now + LOST_FIRST_S, LOST_FIRST_S, now + LOST_GIVE_UP_S)
            if peer in self.view.active or peer in self.view.pending:
                self._act(self.view.link_failed(peer))
            self._sync_tree()

    def _probe_lost(self, now: float) -> None:
        """Ask the active peers lost to a failure for a link again, each on its own back-off."""
        for peer, (due, interval, give_up) in list(self._lost.items()):
            if peer in self.view.active or now >= give_up or peer not in self._members:
                del self._lost[peer]
            elif now >= due:
                self._lost[peer] = (now + min(interval * 2, LOST_MAX_S), min(interval * 2, LOST_MAX_S), give_up)
                self._act(self.view.probe(peer))

    def _ready_link(self, peer_id: str) -> PeerLink | None:
        link = self.registry.link_of(peer_id)
        return link if link is not None and link.machine.their_hello is not None else None

    def _sync_tree(self) -> None:
        """The tree's neighbours are the active peers with a ready link; every other link is lazy
        (a passing link pushes nothing: it pulls and is pulled by its vectors). A full mesh has no
        tree: every peer hears every writer first-hand, so nothing is relayed, and every link pushes."""
        tree, active = self.tree, self.view.active
        linked = {p for p in active if self._ready_link(p) is not None}
        for peer in linked:
            link = self._ready_link(peer)
            if link is not None:
                self.gossip.welcome(link)  # active on a link that was up already: it takes gossip now
        if self.view.full_mesh:
            linked = set()
        for each in (tree, self.gossip_tree):
            known = each.eager | each.lazy
            for peer in sorted(known - linked):
                each.neighbor_down(peer)
            for peer in sorted(linked - known):
                each.neighbor_up(peer)
        self._sync_lazy()
        self.registry.tell_neighbours()

    def _close_unwanted(self, now: float) -> None:
        for peer, until in list(self._reaching.items()):
            if now >= until:
                del self._reaching[peer]
        for peer, since in list(self._ready_at.items()):
            if now - since >= TRANSIENT_S and not self.may_dial(peer):
                link = self.registry.link_of(peer)
                if link is not None:
                    LOGGER.debug("closing the passing link with %s (in no view of ours)", peer)
                    self.registry.cancel(link)

    # -- the view's actions --------------------------------------------------------------------

    def _act(self, actions: Sequence[view_protocol.Action]) -> None:
        for action in actions:
            match action:
                case view_protocol.Send(to, message):
                    self._send(to, message)
                case view_protocol.Close(peer):
                    self._start(self._close_soon, peer)
                # An Open needs no act of its own: the gate admits the peer now, and the dialler
                # looks again (below).
        if actions:
            self.dialer.gate_changed()
            self._sync_tree()
            self._wake.set()

    def _send(self, to: str, message: OverlayMessage) -> None:
        link = self._ready_link(to)
        if link is not None:
            self._control_to(link, message)
            return
        if not isinstance(message, (Neighbor, Join)):
            # Only a request for a link is worth dialling for (a link brings every binding along):
            # a shuffle's reply to a daemon we hold no link to is dropped (passive views are
            # topped up from the member directory anyway), and the rest go to linked peers.
            return
        entry = self._undelivered.get(to)
        if entry is None:
            if len(self._undelivered) >= UNDELIVERED_PEERS:
                self.limits.hit("overlay_undelivered", "dropping overlay messages: %d peers wait for a link already",
                                UNDELIVERED_PEERS)
                return
            entry = self._undelivered[to] = (trio.current_time() + DELIVER_S, [])
        entry[1].append(message)
        del entry[1][:-UNDELIVERED_PER_PEER]

    def _flush_undelivered(self, peer: str, link: PeerLink) -> None:
        entry = self._undelivered.pop(peer, None)
        if entry is not None:
            for message in entry[1]:
                self._control_to(link, message)

    def _expire_undelivered(self, now: float) -> None:
        for peer, (deadline, _) in list(self._undelivered.items()):
            if now >= deadline:
                del self._undelivered[peer]
                if peer in self.view.pending:  # asked, and never reached: as good as refused
                    self._act(self.view.link_failed(peer))

    def _start(self, task: Callable[[str], Awaitable[None]], peer: str) -> None:
        """Start ``task(peer)`` beside the overlay (not once it stops: the daemon is stopping)."""
        if self._nursery is not None:
            with contextlib.suppress(RuntimeError):  # closed to new arrivals: shutting down
                self._nursery.start_soon(task, peer)

    async def _close_soon(self, peer: str) -> None:
        await trio.sleep(CLOSE_GRACE_S)
        link = self.registry.link_of(peer)
        if link is not None and not self.may_dial(peer):
            self.registry.cancel(link)

    # -- what links bring ----------------------------------------------------------------------

    def control(self, link: PeerLink, message: OverlayMessage | BroadcastMessage) -> None:
        """A view's or the tree's message arrived on ``link`` (``LinkHooks.link_control``)."""
        peer = link.peer_id
        if peer is None or not isinstance(message, CONTROL_MESSAGES):
            return
        now = trio.current_time()
        if self.view.full_mesh and isinstance(message, (IHave, Graft, Prune)):
            return  # no tree in a full mesh (a peer that counts members differently for a moment)
        match message:
            case IHave(keys):
                lacking = [key for key in keys if not self._holds(key)]
                events = tuple(key for key in lacking if not is_gossip_name(key[0]))
                records = tuple(key for key in lacking if is_gossip_name(key[0]))
                if events:
                    self._act_tree(self.tree.ihave(peer, events, now))
                if records:
                    self._act_tree(self.gossip_tree.ihave(peer, records, now), gossip=True)
            case Graft(origin, seq):
                (self.gossip_tree if is_gossip_name(origin) else self.tree).graft(peer, (origin, seq))
                self._serve_graft(link, (origin, seq))
                self._sync_lazy()
            case Prune(gossip):
                (self.gossip_tree if gossip else self.tree).prune(peer)
                self._sync_lazy()
            case _:
                self._act(self.view.receive(peer, message))
                if not self.may_dial(peer):  # refused, or told to go: the link has done its work
                    self._start(self._close_soon, peer)

    def applied(self, link: PeerLink, applied: Iterable[SignedEvent], duplicates: Iterable[SignedEvent]) -> None:
        """``link`` brought events, stored (``applied``) or held already (``duplicates``)."""
        peer = link.peer_id
        if peer is None:
            return
        if self.view.full_mesh:
            return
        now, tree, actions = trio.current_time(), self.tree, []
        for event in applied:
            actions += tree.received(peer, (event.origin, event.origin_seq), now)[1]
        peer_of = self.directory.peer_of_origin
        for event in duplicates:
            # A copy from the writer itself prunes nobody: it pushes its own to every neighbour
            # (nobody relays them to us), so the copy that came first was the redundant one.
            if peer_of(event.origin) != peer:
                actions += tree.received(peer, (event.origin, event.origin_seq), now)[1]
        self._act_tree(actions)

    def gossip_received(self, peer: str, record: GossipRecord) -> None:
        """A gossip record arrived from ``peer`` (new here, or one we held: then it prunes, unless
        ``peer`` is the record's own daemon, which sends its own to every neighbour)."""
        if self.view.full_mesh or (peer == record.peer_id and self.gossip_tree.has(gossip_key(record))):
            return
        _, actions = self.gossip_tree.received(peer, gossip_key(record), trio.current_time())
        self._act_tree(actions, gossip=True)

    def _on_commit(self, records: list[CommittedEvent]) -> bool:
        """Our own events, as the bus publishes them: new to the tree (announced to lazy peers)."""
        if self.view.full_mesh:
            return False
        now, ours = trio.current_time(), False
        for record in records:
            event = record.signed
            if event.origin == self.own_origin and not record.history:
                # Its pushes are the links' own (LinkMachine.committed); what the tree adds is the
                # announcements it queues for lazy peers, which the loop sends at its next tick.
                self.tree.local((event.origin, event.origin_seq), now)
                ours = True
        if ours:
            self._wake.set()
        return False

    # -- the tree's actions --------------------------------------------------------------------

    def _act_tree(self, actions: Sequence[tree_protocol.Action], *, gossip: bool = False) -> None:
        for action in actions:
            if isinstance(action, tree_protocol.Send):
                link = self._ready_link(action.to)
                if link is not None:
                    message = action.message
                    self._control_to(link, Prune(gossip=True) if gossip and isinstance(message, Prune) else message)
            # A Push to an eager peer needs nothing here: its link pushes what is committed to
            # every peer that is not lazy and lacks it (LinkMachine.committed); grafts are served
            # in ``control``. Nothing a tree answers with changes whom it pushes to (only a graft
            # or prune received, or a neighbour come or gone: their callers sync the links).
        self._wake.set()

    def _sync_lazy(self) -> None:
        eager, mesh = self.tree.eager, self.view.full_mesh
        for link in self.registry.links():
            link.machine.lazy = not mesh and link.peer_id not in eager

    @staticmethod
    def _control_to(link: PeerLink, message: OverlayMessage | BroadcastMessage) -> None:
        link.machine.send_control(message)
        link.wake()

    def _holds(self, key: EventKey) -> bool:
        """Do we hold ``key`` (an event, or a gossip record at least that new)?"""
        name, seq = key
        if is_gossip_name(name):
            record = self.gossip.newest_of(name)
            return record is not None and record.serial >= seq
        head = self.store.heads().get(name)
        return head is not None and head.max_seq >= seq

    def _serve_graft(self, link: PeerLink, key: EventKey) -> None:
        """``link``'s peer misses ``key``: push it the event (from the store) or the record."""
        name, seq = key
        if not is_gossip_name(name):
            if self._holds(key):
                link.machine.serve_from(name, seq)
                link.wake()
            return
        record = self.gossip.newest_of(name)
        if record is not None and record.serial >= seq:
            link.machine.gossip(record)
            link.wake()

