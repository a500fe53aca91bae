"""Identity: agents bound to their daemon, who may write as an agent id, derived the same way on every replica.

This is the core's, not a feature's: the authority table judges every event by who holds its
writer's id, so the registry's rows are the core's (``RULES``, ``NAMESPACE``); the agents feature
(palace_proto.agents) is the operations that manage ids and list them.

Owns: the registry events (``agent.register``, ``agent.transfer``, ``agent.retire``; written by
palaced only, never by ``append``), what they say (``Claim``), the derivation of one agent's
*tenures* from them (``derive_record``: which daemon holds the id from when, or since when it is
retired, and which claims changed nothing and why), the verdict on any event written as that
agent (``judge``: ``None``, or an ``Impersonation``), the id rules (``check_agent_id``, ``human:``
ids for people, the daemon's own ``palaced``), the palace-CA statement a transfer or retirement
may carry (``ca_statement``). Pure: stdlib only; no clock, no
IO. The caller supplies, for each registry event, the daemon whose origin wrote it (the
fingerprint of the origin's key) and whether its CA signature verified.

Theory of operation
-------------------
A daemon is identified by its peer id: the fingerprint of the key its origins are bound to. An
agent id is held by one daemon at a time. Registry events are ordered by ``(created_at, event
id)`` — the order every replica computes from the same events, whatever order they arrived in —
and replayed:

* ``agent.register`` by daemon D: the id is free (never registered, or retired) → D holds it
  from this event on. D holds it already → nothing changes (a daemon registers an id again from
  each of its origins, and after a transfer to it). Another daemon holds it → *void*: that
  registration lost (a partition where two daemons took the same new id: the earlier wins).
* ``agent.transfer`` to daemon P, by the holder, or carrying the palace CA's signature → P holds
  it from this event on. By anyone else → void.
* ``agent.retire``, by the holder, or with the CA's signature → the id is retired: nobody holds
  it (its history stays). By anyone else → void.

A CA statement names a nonce; a nonce counts once (the first event carrying it, in the order
above): a copied statement cannot move an agent again later.

The verdict on an event written as agent A by daemon D at ``(created_at, id)``: the tenure in
force at that point (registry events up to and including that point) — none (A was not
registered yet: history from before registration, never judged), held by D (fine), held by
another daemon or retired (an ``Impersonation``, with the holder and since when). Because the
verdict depends only on the set of registry events and the event itself, every replica reaches
the same one once it holds the same events: an event written during a partition by a daemon
that did not know the id was taken is flagged everywhere once the registration arrives.
Machine clocks decide "earlier", as for leases and task claims.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from .authority import DAEMON, ID_HOLDER, PALACE_CA, Rule, rule_named
from .authority import judge as judge_rule  # (``judge`` here is the verdict on an event written as an agent)
from .errors import ValidationError

__all__ = [
    "AGENT_EVENT_ROOM", "AGENT_EVENT_STREAM", "HUMAN_PREFIX", "MAX_AGENT_ID_CHARS", "MAX_AGENTS_PER_ORIGIN", "NAMESPACE",
    "REGISTER", "REGISTRY_TYPES", "RETIRE", "RULES", "SYSTEM_AGENT", "TRANSFER", "AgentRecord", "Claim",
    "Impersonation", "Tenure", "ca_signature_of", "ca_statement", "check_agent_id", "claim_from_event",
    "derive_record", "is_human", "judge", "new_ca_nonce", "order_key", "registry_metadata",
]

REGISTER: Final = "agent.register"
TRANSFER: Final = "agent.transfer"
RETIRE: Final = "agent.retire"
REGISTRY_TYPES: Final = frozenset({REGISTER, TRANSFER, RETIRE})
#: where registry events live (the palace's own stream, like revocations)
AGENT_EVENT_STREAM: Final = "palace"
AGENT_EVENT_ROOM: Final = "agents"
#: the id the daemon writes its own events as (notices, revocations, registry events); every
#: daemon writes as it, so it is never registered nor judged, and no client may write as it
SYSTEM_AGENT: Final = "palaced"
#: ids of people: ``human:<name>``, for the operator's own messages
HUMAN_PREFIX: Final = "human:"
# Why 200: agent ids are routing keys, file names (watch state, worker locks) and unit names.
MAX_AGENT_ID_CHARS: Final = 200
_HUMAN_NAME_RE: Final = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_CA_DOMAIN: Final = "palace/agent-ca/v1"


def is_human(agent: str | None) -> bool:
    """Whether ``agent`` is a person's id (``human:<name>``)."""
    return isinstance(agent, str) and agent.startswith(HUMAN_PREFIX)


def check_agent_id(value: Any, *, field: str = "agent") -> str:
    """An agent id a registry command may name: visible characters, no spaces, not ``*`` nor the
    daemon's own id; ``human:`` ids have a plain name after the prefix.

    Raises:
        ValidationError: naming ``field`` and what to change.
    """
    text = value.strip() if isinstance(value, str) else ""
    if not text:
        raise ValidationError(f"{field} must be an agent id like mac-claude", field=field)
    if len(text) > MAX_AGENT_ID_CHARS:
        raise ValidationError(f"{field} is {len(text)} characters long; an agent id has at most "
                              f"{MAX_AGENT_ID_CHARS}", field=field)
    if not text.isprintable() or any(c.isspace() for c in text):
        raise ValidationError(f"{field} {text[:40]!r} must be one token of visible characters (no spaces)",
                              field=field)
    if text in ("*", SYSTEM_AGENT):
        raise ValidationError(f"{field} {text!r} is not an agent id ({'everyone' if text == '*' else 'the daemon'})",
                              field=field)
    if is_human(text) and not _HUMAN_NAME_RE.match(text[len(HUMAN_PREFIX):]):
        raise ValidationError(f"{field} {text!r}: a person's id is human:<name>, the name letters, digits, "
                              "'.', '_' or '-' (at most 64)", field=field)
    return text


def _normal_stamp(stamp: str) -> str:
    """``created_at`` with six fraction digits, so that strings compare in time order."""
    if not isinstance(stamp, str) or not stamp.endswith("Z"):
        return str(stamp)
    body = stamp[:-1]
    whole, _, fraction = body.partition(".")
    return f"{whole}.{(fraction + '000000')[:6]}Z"


def order_key(created_at: str, event_id: str) -> tuple[str, str]:
    """The order every replica agrees on: time as written, then event id."""
    return _normal_stamp(created_at), str(event_id)


def ca_statement(palace_id: str, kind: str, agent: str, to_daemon: str | None, nonce: str) -> bytes:
    """The bytes the palace CA signs to transfer (``to_daemon``) or retire an agent."""
    return json.dumps([_CA_DOMAIN, palace_id, kind, agent, to_daemon, nonce], separators=(",", ":")).encode()


def registry_metadata(kind: str, agent: str, daemon: str, *, to_daemon: str | None = None,
                      ca_nonce: str | None = None, ca_signature: str | None = None) -> dict[str, Any]:
    """The metadata of a registry event (what ``claim_from_event`` reads back)."""
    out: dict[str, Any] = {"agent": agent, "daemon": daemon}
    if kind == TRANSFER:
        out["to"] = to_daemon
    if ca_signature is not None:
        out["ca_nonce"], out["ca_signature"] = ca_nonce, ca_signature
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class Claim:
    """One registry event as the derivation reads it. ``daemon``: the peer id whose origin wrote
    it (from the origin's key, never from the metadata); ``ca_nonce``: set only when the event
    carries a palace-CA signature that verified."""

    event_id: str
    created_at: str
    kind: str
    agent: str
    daemon: str
    to_daemon: str | None = None
    ca_nonce: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return order_key(self.created_at, self.event_id)


def claim_from_event(event: Mapping[str, Any], daemon: str, *, ca_verified: bool) -> Claim | None:
    """The claim of a registry event (a public event object, metadata a dict), or None when it
    is not one or says nothing usable (an unusable statement changes nothing anywhere)."""
    kind = event.get("type")
    if kind not in REGISTRY_TYPES:
        return None
    metadata = event.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    agent = metadata.get("agent")
    if not isinstance(agent, str) or not agent:
        return None
    to_daemon = metadata.get("to") if kind == TRANSFER else None
    if kind == TRANSFER and (not isinstance(to_daemon, str) or not to_daemon):
        return None
    nonce = metadata.get("ca_nonce") if ca_verified else None
    return Claim(str(event.get("id")), str(event.get("created_at")), kind, agent, daemon,
                 to_daemon if isinstance(to_daemon, str) else None, nonce if isinstance(nonce, str) else None)


def ca_signature_of(event: Mapping[str, Any]) -> tuple[str, str] | None:
    """(nonce, signature hex) of a registry event that carries a CA statement, else None."""
    metadata = event.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    nonce, signature = metadata.get("ca_nonce"), metadata.get("ca_signature")
    if isinstance(nonce, str) and isinstance(signature, str) and 0 < len(nonce) <= 64 and len(signature) <= 256:
        return nonce, signature
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Tenure:
    """A stretch of an agent's life: held by ``daemon`` (None: retired) from event ``event_id``."""

    daemon: str | None
    since: str
    event_id: str
    how: str  # registered, transferred, retired
    by_ca: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return order_key(self.since, self.event_id)

    def to_wire(self) -> dict[str, Any]:
        return {"daemon": self.daemon, "since": self.since, "event_id": self.event_id, "how": self.how,
                "by_ca": self.by_ca}


@dataclasses.dataclass(frozen=True, slots=True)
class Impersonation:
    """An event written as ``agent`` by a daemon that did not hold it at that point."""

    agent: str
    holder: str | None  # the daemon that held it then (None: it was retired, or never granted)
    since: str
    by: str  # the daemon that wrote the event
    #: a person's id the palace CA had not granted to anyone at that point
    unproven: bool = False

    @property
    def reason(self) -> str:
        if self.unproven:
            return (f"written as {self.agent} by daemon {self.by[:7]}, but the palace CA never granted that "
                    "person's id to it: unproven")
        if self.holder is None:
            return f"written as {self.agent} after it was retired ({self.since})"
        return f"written as {self.agent} by daemon {self.by[:7]}, but it belongs to daemon {self.holder[:7]} " \
               f"(since {self.since})"

    def to_wire(self) -> dict[str, Any]:
        return {"agent": self.agent, "holder": self.holder, "since": self.since, "written_by": self.by,
                "reason": self.reason, "unproven": self.unproven}


@dataclasses.dataclass(frozen=True, slots=True)
class AgentRecord:
    """One agent's tenures (in order) and the claims that changed nothing, each with why."""

    agent: str
    tenures: tuple[Tenure, ...]
    void: tuple[tuple[Claim, str], ...] = ()

    @property
    def current(self) -> Tenure | None:
        return self.tenures[-1] if self.tenures else None

    @property
    def retired(self) -> bool:
        return bool(self.tenures) and self.tenures[-1].daemon is None

    def holder_at(self, created_at: str, event_id: str) -> Tenure | None:
        """The tenure in force at ``(created_at, event_id)`` (that point included), None before the first."""
        point = order_key(created_at, event_id)
        found = None
        for tenure in self.tenures:
            if tenure.key > point:
                break
            found = tenure
        return found

    def daemons(self) -> frozenset[str]:
        """Every daemon that ever held the id."""
        return frozenset(t.daemon for t in self.tenures if t.daemon is not None)

    def to_wire(self) -> dict[str, Any]:
        current = self.current
        return {
            "agent": self.agent,
            "daemon": current.daemon if current else None,
            "since": current.since if current else None,
            "retired": self.retired,
            "tenures": [t.to_wire() for t in self.tenures],
            "void": [{"event_id": c.event_id, "kind": c.kind, "daemon": c.daemon, "created_at": c.created_at,
                      "why": why} for c, why in self.void],
        }


def derive_record(agent: str, claims: Iterable[Claim]) -> AgentRecord:
    """Replay the claims on ``agent`` (any order; others are ignored) into its record. See the
    module docstring for the rules; the answer depends on nothing else."""
    ordered = sorted((c for c in claims if c.agent == agent), key=lambda c: c.key)
    tenures: list[Tenure] = []
    void: list[tuple[Claim, str]] = []
    nonces: set[str] = set()
    seen_ids: set[str] = set()
    for claim in ordered:
        if claim.event_id in seen_ids:
            continue
        seen_ids.add(claim.event_id)
        holder = tenures[-1].daemon if tenures else None
        by_ca = claim.ca_nonce is not None and claim.ca_nonce not in nonces
        if claim.ca_nonce is not None:
            nonces.add(claim.ca_nonce)
        roles = {DAEMON} | ({PALACE_CA} if by_ca else set()) | (
            {ID_HOLDER} if holder is not None and holder == claim.daemon else set())
        if claim.kind == REGISTER:
            # A person's id is the operator's word on every screen: taking it first proves nothing
            # (issue 25, finding 8). Only the palace CA grants it: the authority table's refers_to.
            verdict = judge_rule(rule_named(REGISTER), roles, refers=not is_human(agent) or by_ca,
                            refers_why=f"{agent} is a person's id: only the palace CA grants it (register it on the "
                                       "CA's daemon, or transfer it from there)")
            if not verdict.ok:
                void.append((claim, str(verdict.why)))
                continue
            if holder is None:
                tenures.append(Tenure(claim.daemon, claim.created_at, claim.event_id, "registered"))
            elif holder != claim.daemon:
                void.append((claim, f"{agent} was registered to daemon {holder[:7]} first"))
            continue
        if not judge_rule(rule_named(claim.kind), roles).ok:  # the holder, or the palace CA (agent.transfer/retire)
            why = ("only the palace CA may transfer or retire an agent nobody holds" if holder is None else
                   f"written by daemon {claim.daemon[:7]}, which did not hold {agent} (daemon {holder[:7]} did)")
            if claim.ca_nonce is not None and not by_ca:
                why = "a palace-CA statement already used by an earlier event"
            void.append((claim, why))
            continue
        if claim.kind == TRANSFER:
            assert claim.to_daemon is not None
            if claim.to_daemon == holder:
                void.append((claim, f"{agent} is held by daemon {holder[:7]} already"))
                continue
            tenures.append(Tenure(claim.to_daemon, claim.created_at, claim.event_id, "transferred", by_ca))
        else:
            if holder is None:
                void.append((claim, f"{agent} is not held by anyone"))
                continue
            tenures.append(Tenure(None, claim.created_at, claim.event_id, "retired", by_ca))
    return AgentRecord(agent, tuple(tenures), tuple(void))


def judge(record: AgentRecord | None, daemon: str, created_at: str, event_id: str) -> Impersonation | None:
    """The verdict on an event written as ``record.agent`` by ``daemon`` at ``(created_at,
    event_id)``: None (fine, or from before the agent was registered), or an Impersonation."""
    if record is None:
        return None
    tenure = record.holder_at(created_at, event_id)
    if tenure is None and is_human(record.agent):
        return Impersonation(record.agent, None, "", daemon, unproven=True)
    if tenure is None or tenure.daemon == daemon:
        return None
    return Impersonation(record.agent, tenure.daemon, tenure.since, daemon)


def new_ca_nonce(random_bytes: bytes) -> str:
    """A CA statement's nonce from the caller's randomness (this module has none of its own)."""
    return hashlib.sha256(random_bytes).hexdigest()[:32]



# -- the registry's rows of the authority table: the core's (palace_proto.features puts them right
# after authority's own), as every event is judged by who holds its writer's id --------------------

#: the registry's namespace: no client may write a type in it
NAMESPACE: Final = "agent."
# Why 10,000: the agents one origin may register. Each record stays in memory on every replica, so
# a member inventing ids without end must hit a bound; a daemon with ten thousand agent ids is not a
# machine running agents. Counted along the origin's own chain: every replica agrees.
MAX_AGENTS_PER_ORIGIN: Final = 10_000
RULES: Final[tuple[Rule, ...]] = (
    Rule("agent.register", ("agent.register",), (), "agent", frozenset({DAEMON}),
         "an agent id for the writing daemon itself (a person's id: with the palace CA's signature)",
         "the earliest registration of a free id holds it; a later one by another daemon is void",
         written_by="palaced (before an agent's first write, or agent_register)", as_daemon=True,
         per_origin=MAX_AGENTS_PER_ORIGIN,
         test="tests/daemon/test_store_agents.py::test_a_registry_event_must_be_the_daemons_own_word"),
    Rule("agent.transfer", ("agent.transfer",), (), "agent", frozenset({ID_HOLDER, PALACE_CA}),
         "an agent id and the daemon it moves to", "the id moves from this event on",
         written_by="agent_transfer (palacectl agent transfer)", as_daemon=True,
         test="tests/proto/test_identity.py::test_a_palace_ca_statement_counts_once"),
    Rule("agent.retire", ("agent.retire",), (), "agent", frozenset({ID_HOLDER, PALACE_CA}),
         "an agent id", "nobody holds the id from this event on",
         written_by="agent_retire (palacectl agent retire)", as_daemon=True,
         test="tests/proto/test_identity.py::test_a_palace_ca_statement_counts_once"),
)
