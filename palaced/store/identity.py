"""The agent registry of one replica: which daemon holds each agent id, as the log says.

Owns: the registry's state derived from the stored registry events (palace_proto.identity) — each
agent's record, each origin's daemon (the fingerprint of its key), and the agents each origin has
registered — loaded when the store opens and brought up to date after each commit; the checks a
local write as an agent must pass (``needs_registration``: held here, free, elsewhere, retired);
the verdict on any stored event (``verdict``: an impersonation, a ``palaced`` event that is no
notice, a registry event not in its daemon's own word, an agent its origin never registered),
which the handlers attach to what they serve and every derivation reads (such an event holds no
role in the authority table); and the meta flag saying this
daemon's agents from before it belonged to a palace were registered to it (``own_agents_registered``,
``note_own_agents_registered``: the handlers' write job registers them once).

An authentic event from a peer is never refused for breaking these rules: it is stored and relayed
(replicas converge whatever their members write), and the verdict flags it everywhere alike.

Threading: ``records``, ``registered`` and ``origin_daemons`` are replaced whole or only added to, so any thread
reads them without a lock; everything else is the writer thread's. The registry events of the
running batch (``WriteContext.batch.registry``) count for the checks at once and for ``records``
once the batch commits (a rolled-back batch leaves no trace here). The checks take the job's
``WriteContext``.

Which registry events count: those of the replicated chains (``origin_seq <= max_seq``, and our
own origin's whole chain, whose row our appends do not move: schema 0015), never imported history
of other palaces (its agents belong to daemons of its own).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, Final

import apsw

from palace_proto.authority import written_as_daemon
from palace_proto.envelope import CommittedEvent, SignedEvent
from palace_proto.errors import ApiError, ValidationError
from palace_proto.event_fields import PublicEvent
from palace_proto.identity import (
    MAX_AGENTS_PER_ORIGIN,
    REGISTER,
    REGISTRY_TYPES,
    SYSTEM_AGENT,
    AgentRecord,
    Claim,
    ca_signature_of,
    claim_from_event,
    derive_record,
    is_human,
    judge,
    registry_metadata,
)
from palace_proto.ids import fingerprint

from .fetch import all_rows

if TYPE_CHECKING:
    from .state import WriteContext

__all__ = ["MAX_AGENTS_PER_ORIGIN", "AgentElsewhere", "AgentRegistry", "AgentRetired", "note_own_agents_registered",
           "own_agents_registered"]

_LOGGER: Final = logging.getLogger("palaced.store")
_NONE: Final[frozenset[str]] = frozenset()
# Why a meta key: the scan of this daemon's own events for the agents it wrote as runs once, when
# it first belongs to a palace; from then on every new agent is registered by its first write.
_REGISTERED_OWN_KEY: Final = "agents_registered_own"


class AgentElsewhere(ApiError):
    """A local write as an agent another daemon holds."""

    code = "agent_elsewhere"


class AgentRetired(ApiError):
    """A local write as an agent that was retired."""

    code = "agent_retired"


def _metadata(event: SignedEvent) -> dict[str, Any]:
    try:
        value = json.loads(event.metadata_json)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _public_view(event: SignedEvent) -> dict[str, Any]:
    """What ``claim_from_event``, ``registry_problem`` and the CA check read of a signed event."""
    return {"id": event.id, "type": event.type, "created_at": event.created_at, "metadata": _metadata(event),
            "from_agent": event.from_agent}


def registry_problem(event: Mapping[str, Any], daemon: str) -> str | None:
    """Why a registry event (public view) written by ``daemon`` is void under the authority
    table's ``agent.*`` rows (None: it is a claim): it is the writing daemon's own word, written
    as ``palaced``, naming an agent (and, for a transfer, the daemon it goes to) and naming the
    daemon that wrote it. Such an event is stored and relayed like any other; it moves nothing."""
    kind = event.get("type")
    if event.get("from_agent") != SYSTEM_AGENT:
        return f"{kind} must be written as {SYSTEM_AGENT} (the daemon's own word)"
    if claim_from_event(event, daemon, ca_verified=False) is None:
        return f"{kind} must name its agent (and, for a transfer, the daemon it goes to)"
    metadata = event.get("metadata")
    if not isinstance(metadata, Mapping) or metadata.get("daemon") != daemon:
        return f"{kind} names another daemon than the one that wrote it"
    return None


class AgentRegistry:
    """See the module docstring. ``daemon``: this replica's peer id; ``origin``: its origin."""

    def __init__(self, daemon: str, origin: str) -> None:
        self.daemon = daemon
        self.origin = origin
        #: agent -> its record (replaced whole after a commit that changed it; any thread)
        self.records: Mapping[str, AgentRecord] = {}
        #: origin -> the daemon (peer id) whose key it is bound to (only added to; any thread)
        self.origin_daemons: dict[str, str] = {}
        #: is this registry event's palace-CA statement valid? (set by the app once the palace is known)
        self.ca_check: Callable[[Mapping[str, Any]], bool] = lambda event: False
        #: on the daemon holding the palace CA: the CA statement (``ca_nonce``, ``ca_signature``)
        #: that makes its registration of a person's id count (issue 25, finding 8)
        self.human_grant: Callable[[str], dict[str, str]] | None = None
        #: how a daemon is named in messages (set by the app: its name from the palace, if known)
        self.daemon_label: Callable[[str], str] = lambda peer_id: f"daemon {peer_id[:7]}"
        #: whether local writes register their agent: from the moment this daemon belongs to a
        #: palace (a daemon alone has no other daemon to tell apart; app.py switches it on and
        #: registers what it wrote as before, ``register_own_agents``)
        self.enforcing = False
        self._claims: dict[str, list[Claim]] = {}  # writer thread
        self._origin_agents: dict[str, set[str]] = {}  # writer thread: origin -> agents it registered
        #: origin -> the agents it registered, committed (replaced whole after a commit; any thread)
        self.registered: Mapping[str, frozenset[str]] = {}

    def __repr__(self) -> str:
        return f"<AgentRegistry {self.daemon[:7]} agents={len(self.records)}>"

    # -- loading and keeping up -----------------------------------------------------------------

    def load(self, conn: apsw.Connection) -> None:
        """Derive everything from the log (the store opening; a palace joined or founded)."""
        self.origin_daemons.update((origin, fingerprint(bytes(key)))
                                   for origin, key in conn.execute("SELECT origin, public_key FROM origins"))
        self._claims, self._origin_agents = {}, {}
        placeholders = ",".join("?" * len(REGISTRY_TYPES))
        rows = all_rows(conn.execute(
            f"SELECT e.id, e.origin, e.type, e.created_at, e.metadata, e.from_agent FROM events e JOIN origins o "
            f"ON o.origin = e.origin WHERE e.type IN ({placeholders}) AND (e.origin_seq <= o.max_seq OR e.origin = ?) "
            f"ORDER BY e.origin, e.origin_seq", (*sorted(REGISTRY_TYPES), self.origin)))
        for event_id, origin, kind, created_at, metadata, from_agent in rows:
            self._take({"id": event_id, "origin": origin, "type": kind, "created_at": created_at,
                        "metadata": json.loads(metadata), "from_agent": from_agent})
        self.records = {agent: derive_record(agent, claims) for agent, claims in self._claims.items()}
        self._publish_registered()

    def _claim(self, event: Mapping[str, Any], daemon: str | None) -> Claim | None:
        """The claim of a registry event (public view) written by ``daemon``, its CA statement checked;
        None when it is no claim the table allows (``registry_problem``): stored, and void."""
        if daemon is None or registry_problem(event, daemon) is not None:
            return None
        return claim_from_event(event, daemon, ca_verified=ca_signature_of(event) is not None and self.ca_check(event))

    def _take(self, event: Mapping[str, Any]) -> str | None:
        """Add one stored registry event (public view); the agent it is about, if any."""
        claim = self._claim(event, self.origin_daemons.get(event["origin"]))
        if claim is None:
            return None
        if claim.kind == REGISTER:
            registered = self._origin_agents.setdefault(event["origin"], set())
            if claim.agent not in registered and len(registered) >= MAX_AGENTS_PER_ORIGIN:
                return None  # beyond the bound of the table's agent.register row: void, counted nowhere
            registered.add(claim.agent)
        self._claims.setdefault(claim.agent, []).append(claim)
        return claim.agent

    def after_commit(self, conn: apsw.Connection, new_events: Sequence[CommittedEvent],
                     registry_events: Sequence[SignedEvent]) -> None:
        """A batch committed: learn the origins of its events and take its registry events."""
        for record in new_events:
            self._daemon_of(conn, record.signed.origin)
        if not registry_events:
            return
        changed = set()
        for event in registry_events:
            agent = self._take({**_public_view(event), "origin": event.origin})
            if agent is not None:
                changed.add(agent)
        if changed:
            records = dict(self.records)
            for agent in changed:
                records[agent] = derive_record(agent, self._claims[agent])
            self.records = records
            self._publish_registered()

    def _publish_registered(self) -> None:
        """The agents each origin registered, as any thread reads them (replaced whole)."""
        self.registered = {origin: frozenset(agents) for origin, agents in self._origin_agents.items()}

    def reload_ca(self, ctx: WriteContext) -> None:
        """The CA check changed (a palace founded or joined): derive again (a write job's step: the
        store parts are told whose record changed, as its verdicts may have: parts.py)."""
        conn = ctx.conn
        before = self.records
        self.load(conn)
        changed = {agent for agent in before.keys() | self.records.keys() if before.get(agent) != self.records.get(agent)}
        for agents_changed in ctx.parts.agents_changed:
            agents_changed(ctx, changed)

    # -- the checks of a write ------------------------------------------------------------------

    def _daemon_of(self, conn: apsw.Connection, origin: str) -> str | None:
        daemon = self.origin_daemons.get(origin)
        if daemon is None:
            row = conn.execute("SELECT public_key FROM origins WHERE origin=?", (origin,)).fetchone()
            if row is not None:
                daemon = self.origin_daemons[origin] = fingerprint(bytes(row[0]))
        return daemon

    def record_of(self, ctx: WriteContext, agent: str) -> AgentRecord | None:
        """``agent``'s record with the running batch's registry events (writer thread)."""
        registry = ctx.batch.registry
        pending = [event for event in registry if _metadata(event).get("agent") == agent] if registry else []
        if not pending:
            return self.records.get(agent)
        claims = list(self._claims.get(agent, ()))
        for event in pending:
            claim = self._claim({**_public_view(event), "origin": event.origin},
                                self._daemon_of(ctx.conn, event.origin))
            if claim is not None:
                claims.append(claim)
        return derive_record(agent, claims)

    def registered_by(self, ctx: WriteContext, origin: str) -> AbstractSet[str]:
        """The agents ``origin`` registered, the running batch included (on the arrival path of
        every event: no copy unless the batch registered something for that origin)."""
        committed = self._origin_agents.get(origin, _NONE)
        pending = [agent for agent in (_metadata(e).get("agent") for e in ctx.batch.registry
                                       if e.origin == origin and e.type == REGISTER) if isinstance(agent, str)]
        return committed | set(pending) if pending else committed

    def needs_registration(self, ctx: WriteContext, agent: str) -> bool:
        """Whether a local write as ``agent`` must first register it from our origin (writer thread).

        Raises:
            AgentElsewhere: another daemon holds it (the message names it, and how to move it).
            AgentRetired: it was retired.
        """
        record = self.record_of(ctx, agent)
        current = record.current if record is not None else None
        if current is None:
            # A person's id this daemon registered without the CA's word stays unproven: asking
            # again would change nothing (and fill the log).
            if is_human(agent) and self.human_grant is None and agent in self.registered_by(ctx, self.origin):
                return False
            return self.enforcing
        if current.daemon is None:
            raise AgentRetired(f"agent {agent} was retired ({current.since}); register it again with "
                               f"`palacectl agent register {agent}` to write as it here")
        if current.daemon != self.daemon:
            raise self.elsewhere(agent, current.daemon)
        if not self.enforcing:
            return False
        return agent not in self.registered_by(ctx, self.origin)

    def elsewhere(self, agent: str, holder: str) -> AgentElsewhere:
        """The refusal of a write as ``agent``, which daemon ``holder`` holds: where it lives, and how to move it."""
        return AgentElsewhere(
            f"agent {agent} belongs to {self.daemon_label(holder)} (peer id {holder}), not to this daemon: write "
            f"as {agent} there, or move it here: run `palacectl agent transfer {agent} --to {self.daemon}` on that "
            "daemon (or on the daemon holding the palace CA). To avoid this, give each machine's agents ids of "
            "their own (mac-claude, linux-codex)")

    def register_metadata(self, agent: str) -> dict[str, Any]:
        """The metadata of this daemon's ``agent.register`` of ``agent`` (with the palace CA's
        statement for a person's id, where this daemon holds the CA)."""
        grant = self.human_grant(agent) if is_human(agent) and self.human_grant is not None else {}
        return registry_metadata(REGISTER, agent, self.daemon, ca_nonce=grant.get("ca_nonce"),
                                 ca_signature=grant.get("ca_signature"))

    def check_room(self, ctx: WriteContext, agent: str) -> None:
        """Refuse one more registration from our origin past ``MAX_AGENTS_PER_ORIGIN``."""
        if len(self.registered_by(ctx, self.origin)) >= MAX_AGENTS_PER_ORIGIN:
            raise ValidationError(f"this daemon has registered {MAX_AGENTS_PER_ORIGIN} agent ids already, the most "
                                  f"one daemon may; write as one of them instead of {agent!r}", field="from_agent")

    def unregistered_own_agents(self, ctx: WriteContext) -> list[str]:
        """The agents this daemon's origins wrote as that nobody holds yet (writer thread): what
        joining or founding a palace registers, so that they are this daemon's from then on."""
        own = [origin for origin, daemon in self.origin_daemons.items() if daemon == self.daemon]
        if not own:
            return []
        marks = ",".join("?" * len(own))
        rows = all_rows(ctx.conn.execute(f"SELECT DISTINCT from_agent FROM events WHERE origin IN ({marks}) AND "
                                            f"from_agent != ?", (*own, SYSTEM_AGENT)))
        out = []
        for (agent,) in rows:
            record = self.record_of(ctx, agent)
            if record is None or record.current is None:
                out.append(agent)
        return sorted(out)

    # -- verdicts (any thread) ------------------------------------------------------------------

    def holds(self, agent: str) -> bool:
        """Whether this daemon holds ``agent`` now (a person it may answer as, and notifies)."""
        record = self.records.get(agent)
        return record is not None and record.current is not None and record.current.daemon == self.daemon

    def verdict(self, event: Mapping[str, Any]) -> dict[str, Any] | None:
        """The identity verdict on a public event object, or None (fine, or not judged): written as
        an agent by a daemon that does not hold it (``palace_proto.identity.judge``), as ``palaced``
        when it is no notice of the daemon's, as a registry event not in the daemon's own word, or
        as an agent nobody holds by an origin that registers its agents but never registered this
        one. Every replica reaches the same verdict from the same events; an event with one holds
        no role anywhere (the authority table's first condition) and moves nothing."""
        agent = event.get("from_agent")
        daemon = self.origin_daemons.get(event.get("origin"))  # type: ignore[arg-type]
        if daemon is None:
            return None
        kind = event.get("type")
        if agent == SYSTEM_AGENT:
            if kind not in written_as_daemon():
                return _flag(agent, daemon, f"only the daemon's own notices are written as {SYSTEM_AGENT}, not {kind}")
            if kind in REGISTRY_TYPES:
                problem = registry_problem(event, daemon)
                if problem is not None:
                    return _flag(agent, daemon, problem)
            return None
        if kind in REGISTRY_TYPES:
            return _flag(agent, daemon, f"{kind} must be written as {SYSTEM_AGENT} (the daemon's own word)")
        record = self.records.get(agent)  # type: ignore[arg-type]
        if record is None:
            registered = self.registered.get(event.get("origin"))  # type: ignore[arg-type]
            if registered and agent not in registered:
                return _flag(agent, daemon, f"written as {agent} by an origin that registers its agents and never "
                                            f"registered {agent}")
            return None
        found = judge(record, daemon, event["created_at"], event["id"])
        return found.to_wire() if found is not None else None

    def annotate(self, events: Iterable[PublicEvent]) -> list[PublicEvent]:
        """The events with ``impersonation`` on those the verdict flags (a copy of each such event:
        the ones given may be shared, e.g. the bus's ring)."""
        out = []
        records, registered = self.records, self.registered
        for event in events:
            agent = event.get("from_agent")
            if agent in records or agent == SYSTEM_AGENT or event.get("type") in REGISTRY_TYPES or (
                    registered and event.get("origin") in registered):
                found = self.verdict(event)
                if found is not None:
                    event = {**event, "impersonation": found}
            out.append(event)
        return out


def _flag(agent: Any, daemon: str, reason: str) -> dict[str, Any]:
    """An identity verdict that is no tenure's (the wire shape of ``Impersonation``)."""
    return {"agent": agent, "holder": None, "since": "", "written_by": daemon, "reason": reason, "unproven": False}


def own_agents_registered(ctx: WriteContext) -> bool:
    """Whether the agents this daemon wrote as before it belonged to a palace were registered to it
    already (a write job's step, with ``note_own_agents_registered``)."""
    return ctx.conn.execute("SELECT 1 FROM meta WHERE key=?", (_REGISTERED_OWN_KEY,)).fetchone() is not None


def note_own_agents_registered(ctx: WriteContext) -> None:
    """They were (in the same write job that registered them)."""
    ctx.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, '1')", (_REGISTERED_OWN_KEY,))
