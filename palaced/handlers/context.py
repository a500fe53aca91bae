"""What every operation of the local API works on: one ``Context`` per daemon, built once by
``palaced/app.py``.

Owns: the state the handler modules share (config, store, bus, identity, the palace membership,
the live watchers) and the guards several of them apply: an observer daemon writes nothing
(``require_writer``), palace operations need a membership (``require_member``) or the palace key
(``require_ca``), and a named event must exist (``event_or_404``). Handlers are plain functions of
``(ctx, args)`` in the sibling modules and keep no state of their own; what they change lives here.

Most fields are fixed when the daemon starts. A few are filled in as the parts they name come up,
and each says who sets it: the network and member directory when this daemon joins a palace (at
start-up, or later by ``init`` / ``join``), the API's address and statistics once it listens.
Handlers read them at call time, so a ``None`` means "not (yet) there", never "broken".

Must not import: ``palaced.api`` or ``palaced.app`` (both import this package).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.errors import ApiError, NotFound
from palace_proto.event_fields import PublicEvent
from palace_proto.ids import fingerprint
from palace_proto.validation import Limits, clean_required
from palace_proto.workers import encode_activity

from ..bus import EventBus
from ..clock import unix_now
from ..config import Config
from ..membership import Membership, load_ca_key
from ..store.aio import AsyncStore

if TYPE_CHECKING:
    from ..feature import Features
    from ..members import MemberDirectory
    from ..peers import Network

__all__ = ["Context", "ReadOnly", "Watcher"]

T = TypeVar("T")


class ReadOnly(ApiError):
    code = "read_only"


@dataclass(slots=True)
class Watcher:
    """A live subscription, as the daemon sees it (reported by ``who``)."""

    conn_id: int
    agent: str | None
    filters: str
    cursor: str | None
    since: str
    pid: int | None
    #: a ``palacectl worker``'s activity (palace_proto.workers), None for other watchers
    worker: dict[str, Any] | None = None
    #: the secret a ``watch_update`` from another of the client's connections names this watch by
    token: str = ""

    def to_wire(self) -> dict[str, Any]:
        return {"agent": self.agent, "filters": self.filters, "cursor": self.cursor, "since": self.since,
                "pid": self.pid, "connection": self.conn_id, "worker": self.worker}


@dataclass(eq=False, slots=True, repr=False)
class Context:
    """The daemon's state as the handlers see it (one per daemon; see the module docstring)."""

    config: Config
    #: the store: its writer (``write``) and its reads, each a typed coroutine (store/aio.py)
    store: AsyncStore
    bus: EventBus
    #: this daemon's Ed25519 key (signs its events; its certificate's key once it joins a palace)
    identity: Ed25519PrivateKey
    #: the features the daemon runs (palaced/feature.py): what the core asks of them, and their ops
    features: Features
    #: the palace this daemon belongs to; None until ``init`` or ``join`` sets it (fleet handlers)
    membership: Membership | None = None
    #: starts the peer network for a new membership, in app.py's nursery (called by ``init``/``join``)
    start_network: Callable[[Membership], Awaitable[None]] | None = None
    #: the peer network and the member directory: set by app.py when the network starts
    network: Network | None = None
    directory: MemberDirectory | None = None
    #: where the local API listens (a socket path or tcp://HOST:PORT): set by app.py once it does
    api_address: str | None = None
    #: the local API's connection statistics: set by ``api.serve_api`` once it listens
    api_statistics: Callable[[], dict[str, Any]] | None = None
    #: live subscriptions by connection id (added and removed by ``log.subscribe``)
    watchers: dict[int, Watcher] = field(default_factory=dict)
    #: the notifier (palaced.notify.notifier.Notifier) when [notify] names people; set by app.py
    notifier: Any = None
    #: what each feature keeps in memory for the daemon's life, by its kind (``state``)
    states: dict[Callable[[Context], Any], Any] = field(default_factory=dict)
    started_at: float = field(default_factory=unix_now)
    started_monotonic: float = field(default_factory=time.monotonic)
    # Derived once from the above (read on every request, so plain attributes rather than properties).
    limits: Limits = field(init=False)
    fingerprint: str = field(init=False)

    def __post_init__(self) -> None:
        self.limits = self.config.limits
        self.fingerprint = fingerprint(self.store.public_key)

    def __repr__(self) -> str:
        palace = self.membership.palace_id if self.membership else None
        return (f"<Context origin={self.store.origin_id} palace={palace} network={self.network is not None} "
                f"watchers={len(self.watchers)}>")

    # -- a feature's state -------------------------------------------------------------------------

    def state(self, kind: Callable[[Context], T]) -> T:
        """A feature's state for the daemon's life — ``kind(ctx)``, made on first use (the leases'
        ``LeaseBook``, the tasks' last look, the memory's vector worker): the core holds it without
        knowing what it is."""
        found = self.states.get(kind)
        if found is None:
            found = self.states[kind] = kind(self)
        return found

    # -- watchers --------------------------------------------------------------------------------

    def watcher_tuples(self) -> list[tuple[str, ...]]:
        """Our watchers as presence gossip carries them: (agent, filters, since), and a worker's
        activity as a fourth element. Read by the network."""
        return [(w.agent or "", w.filters, w.since) + ((encode_activity(w.worker),) if w.worker else ())
                for w in self.watchers.values()]

    def watchers_changed(self) -> None:
        """Tell the peers (presence gossip) that a watch started or ended."""
        if self.network is not None:
            self.network.presence.watchers_changed()

    # -- guards ----------------------------------------------------------------------------------

    def require_writer(self) -> None:
        """Refuse local writes on an observer daemon (roles are enforced by every receiver too)."""
        if self.membership is not None and self.membership.role == "observer":
            raise ReadOnly(f"this daemon is a read-only observer of palace "
                           f"{self.membership.palace_name or self.membership.palace_id}; "
                           "it receives everything and writes nothing — append from a member's machine")

    def require_member(self) -> Membership:
        if self.membership is None:
            raise ApiError("this daemon has not joined a palace; run `palacectl init` on the first machine, "
                           "then `palacectl invite` there and `palacectl join CODE` here", code="not_member")
        return self.membership

    def require_ca(self) -> Membership:
        """The membership, if this daemon holds the palace CA key (invites and revocations need it)."""
        membership = self.require_member()
        if not membership.can_invite:
            raise ApiError("only the daemon that created the palace (ran `palacectl init`) holds the palace key; "
                           "run this command there", code="not_permitted")
        return membership

    def ca_key(self) -> Ed25519PrivateKey:
        return load_ca_key(self.config.home)

    async def committed_after(self, seq: int, limit: int) -> list[PublicEvent]:
        """Committed events with seq > ``seq``, oldest first, at most ``limit``: from the bus ring,
        else SQLite (what every follower of the log reads after a wake)."""
        events = self.bus.events_after(seq, limit)
        if events is None:
            events = await self.store.events_after_seq(seq, limit)
        return events

    async def event_or_404(self, event_id: Any, field: str = "event_id") -> PublicEvent:
        """The event named by a request's ``field``, or ``not_found``."""
        eid = clean_required(field, event_id)
        event = await self.store.get_event(eid)
        if event is None:
            raise NotFound(f"event {eid!r} not found")
        return event
