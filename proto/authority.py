"""Who may write what: palace's one table of event types, and the one judge every replica asks.

Owns: the roles a rule names (``ROLES``), the table (``RULES``: for each event type — and, on a
task, each status — who may write it, what it must refer to, its bounds per origin and per
subject, how competing events settle, which operation writes it, and the test that attacks it),
the row an event is judged by (``rule_for``), the verdict on one event (``judge``), the refusal of
a client's append whose type the table does not name (``unnamed_type``), the clock rule every
ordering decision keeps (``counts_in_order``), and the table as proto/PROTOCOL.md shows it
(``table_markdown``; a test keeps the two equal). Pure: stdlib only, no clock, no IO.

Theory of operation
-------------------
Every event palace gives a meaning to — a task's claim, a room's close, a person's answer, a run's
usage — is written by someone, and the table says who may. A replica never refuses to *store* an
authentic event for breaking a rule here: it stores and relays every validly signed event, so
replicas always converge. The rules decide what an event *does*:

* on every replica, a feature's derivation (``palace_proto.tasks``, ``rooms``, ``questions``,
  ``leases``, ``agents``) walks its events in the order every replica computes (``created_at``,
  then event id), works out the roles the writer holds on the subject at that point (the task's
  requester, its claimant, a room's opener, the person a question asks…), and asks ``judge``. An
  event the judge does not allow is *flagged* — kept in the view with the rule and why — and
  moves nothing;
* on the daemon where a client writes, the same derivation runs with the new event appended as a
  draft, and an event it would flag is *refused* with the flag's one line (``palaced.store``'s
  append path). So a local refusal and a remote flag are the same judgement, word for word.

Roles are held, never claimed: an event written as an agent by a daemon that does not hold that
id (an impersonation, ``palace_proto.agents``) holds no role at all, and a person's role needs the
palace CA's grant. Statuses on a task are judged by the status's row whatever the event's type
(``event.ack``, ``patch.ready``, ``task.reply``…), except for the types with rows of their own.

Types outside palace's namespaces (``NAMESPACES``) are the agents' own words: anyone may write
them, and they move nothing but a task's status they carry. A type inside a namespace that the
table does not name is refused at ``append`` (``unnamed_type``): a feature's new event type
cannot be written before the table says who may write it. Such an event from a newer peer is
stored and relayed, and moves nothing here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Final, final

from .stamps import STAMP_RE, seconds_between

__all__ = [
    "ADDRESSED", "ADDRESSED_FREE", "ADDRESSEE_FREE", "ANY_AGENT", "ASKED_PERSON", "CLAIMANT", "DAEMON",
    "EVER_CLAIMED", "ID_HOLDER", "LEASE_HOLDER", "LOSING_CLAIMANT", "MAX_CLOCK_SKEW_S", "NAMESPACES", "OPENER",
    "PALACE_CA", "REQUESTER", "ROLES", "ROOM_MEMBER", "RULES", "TARGET_AUTHOR", "TARGET_ORIGIN", "TELLING_DAEMON",
    "Rule", "Verdict", "counts_in_order", "flag_of", "judge", "rule_for", "rule_named", "table_markdown",
    "threats_markdown", "unnamed_type",
]

# -- roles -----------------------------------------------------------------------------------------
# A role is held by a writer on a subject at one point of its events; the feature's derivation
# says which roles a writer holds (it knows the subject's state), the table says which roles may
# write what. Each role's words are what a refusal and the generated table say.

ANY_AGENT: Final = "agent"
REQUESTER: Final = "requester"
CLAIMANT: Final = "claimant"
EVER_CLAIMED: Final = "ever_claimed"
LOSING_CLAIMANT: Final = "losing_claimant"
ADDRESSED: Final = "addressed"
ADDRESSED_FREE: Final = "addressed_free"
ADDRESSEE_FREE: Final = "addressee_free"
OPENER: Final = "opener"
ROOM_MEMBER: Final = "room_member"
ASKED_PERSON: Final = "asked_person"
LEASE_HOLDER: Final = "lease_holder"
DAEMON: Final = "daemon"
TELLING_DAEMON: Final = "telling_daemon"
ID_HOLDER: Final = "id_holder"
PALACE_CA: Final = "palace_ca"
TARGET_ORIGIN: Final = "target_origin"
TARGET_AUTHOR: Final = "target_author"

#: every role, with the words a refusal and the table use for it
ROLES: Final[Mapping[str, str]] = {
    ANY_AGENT: "any member's agent (written by the daemon that holds it)",
    REQUESTER: "the task's requester",
    CLAIMANT: "the task's claimant",
    EVER_CLAIMED: "an agent that has claimed the task",
    LOSING_CLAIMANT: "an agent whose claim lost to an earlier one",
    ADDRESSED: "one the task is addressed to (anyone, for a task to *)",
    ADDRESSED_FREE: "one the task is addressed to, while nobody holds it",
    ADDRESSEE_FREE: "the agent the task names as its addressee, while nobody holds it",
    OPENER: "the room's opener",
    ROOM_MEMBER: "a member of the room (one its opening lists, or one who spoke in it before)",
    ASKED_PERSON: "the proven person asked",
    LEASE_HOLDER: "the lease's holder, while it is in force",
    DAEMON: "the daemon itself (palaced)",
    TELLING_DAEMON: "the daemon that wrote what the notice tells about",
    ID_HOLDER: "the daemon holding the agent id",
    PALACE_CA: "the palace CA (its signature)",
    TARGET_ORIGIN: "the origin that wrote the target event",
    TARGET_AUTHOR: "the target event's author agent, or this daemon's operator",
}

# Why 5 minutes: further than NTP-kept clocks ever drift apart, nearer than anything a person would
# call "at the same time". An event dated further ahead of the judging replica's clock never wins
# an ordering decision there until that clock has caught up with it (issue 43, finding 6): a
# member setting its clock forward cannot make its word the newest, nor hold a claim or a close
# for later.
MAX_CLOCK_SKEW_S: Final = 300

#: palace's namespaces: a type under one of these prefixes is palace's own, and must be named by
#: the table before anything writes it
NAMESPACES: Final = ("agent.", "event.", "lease.", "memory.", "palace.", "question.", "room.", "task.", "usage.")


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    """One row of the table."""

    #: the rule's name, as refusals and flags cite it (``task.close``)
    name: str
    #: the event types it judges; empty for a status row (any type without a row of its own)
    types: tuple[str, ...]
    #: for a task's status rows: the statuses it judges
    statuses: tuple[str, ...]
    #: what the event acts on: task, room, question, lease, agent, event, memory, or nothing
    subject: str
    #: the roles that may write it (any one suffices)
    writers: frozenset[str]
    #: what it must refer to, in words
    refers_to: str
    #: how competing events settle, in words
    settles: str
    #: which operation writes it: ``append`` (any client), or the operation that builds it
    written_by: str = "append"
    #: at most this many such events of one origin count per subject (None: unbounded by this table)
    per_origin: int | None = None
    #: at most this many such events count per subject, in the settling order
    per_subject: int | None = None
    #: the test that attacks the rule (tests/…::name)
    test: str = ""

    @property
    def appendable(self) -> bool:
        """Whether a client's ``append`` may write it (else only its operation does)."""
        return self.written_by == "append"

    def writers_words(self, names: Mapping[str, Any] | None = None) -> str:
        """Who may write it, in words; ``names``: who holds a role now, to name them (``requester`` → alice)."""
        names = names or {}
        return " or ".join(ROLES[role] + (f" ({names[role]})" if names.get(role) else "")
                           for role in sorted(self.writers, key=_ROLE_ORDER.index))


_ROLE_ORDER: Final = list(ROLES)


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """What the judge says of one event: it counts (``ok``), or it is flagged with why."""

    ok: bool
    rule: str
    why: str | None = None


# Why 256 reports per task: one per run; a task run 256 times is a loop, not work (issue 43, finding 4).
MAX_USAGE_REPORTS_PER_TASK: Final = 256
# Why 16 answers per origin per question: a person answers once, and may correct a slip; more
# from one daemon is a flood meant to bury the real answer (issue 43, finding 5).
MAX_ANSWERS_PER_ORIGIN: Final = 16
# Why 5,000: the turns one daemon lets one room take (palaced.handlers.rooms.MAX_ROOM_TURNS).
MAX_ROOM_TURNS_PER_ORIGIN: Final = 5_000
# Why 10,000: the agents one origin may register (palaced.store.agents.MAX_AGENTS_PER_ORIGIN).
MAX_AGENTS_PER_ORIGIN: Final = 10_000

_TASK_STATUS_SUBJECT: Final = "task"

#: the table, in the order PROTOCOL.md shows it
RULES: Final[tuple[Rule, ...]] = (
    # -- tasks: a task is every event on its correlation id (palace_proto.tasks) ----------------
    Rule("task.open", ("task.request",), (), "task", frozenset({ANY_AGENT}),
         "a correlation id no request names yet (task_create mints one)",
         "the earliest request (created_at, event id) opens the task; its writer is the requester",
         test="tests/proto/test_tasks.py::test_roles_give_the_same_verdict_whatever_order_the_events_arrive_in"),
    Rule("task.correct", ("task.request",), (), "task", frozenset({REQUESTER}),
         "the task it corrects (its correlation id)",
         "the newest request is the task's wording; earlier ones read as superseded; a correction opens the "
         "task again, unclaimed, for its addressee",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.claim", (), ("claimed",), "task", frozenset({ADDRESSED}),
         "an existing task, open",
         "the earliest claim since the task (re)opened holds it; a later one by another agent is a conflict, "
         "told to its agent once (task.conflict)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.deliver", (), ("ready",), "task", frozenset({CLAIMANT, ADDRESSED_FREE}),
         "an existing task",
         "ready for review; from one the task is addressed to while nobody holds it, its claim and its report "
         "at once; on a closed task it moves nothing",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.close", (), ("applied", "failed", "blocked"), "task",
         frozenset({REQUESTER, CLAIMANT, ADDRESSEE_FREE}),
         "an existing task",
         "the requester's word moves the task at any time; the claimant's and the addressee's close it while "
         "it is open, and on a closed task stand as their closing ack, moving nothing",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.supersede", (), ("superseded",), "task", frozenset({REQUESTER, LOSING_CLAIMANT}),
         "an existing task (with ack_of: one of its earlier requests)",
         "the requester's supersedes the task, or only the earlier request its ack_of names; a losing "
         "claimant's withdraws its claim and moves nothing",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.reopen", (), ("open",), "task", frozenset({REQUESTER}),
         "an existing task",
         "a new round: open, nobody holds it",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.release", ("task.release",), (), "task", frozenset({CLAIMANT}),
         "an existing task, open", "open again, nobody holds it",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.reassign", ("task.reassign",), (), "task", frozenset({REQUESTER}),
         "an existing task, open", "open again for the agent it names (to_agent), nobody holds it",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.conflict", ("task.conflict",), (), "task", frozenset({TELLING_DAEMON}),
         "the losing claim (metadata.claim_event_id)", "moves nothing: tells the loser once",
         written_by="palaced (to a claim's loser)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.stalled", ("task.stalled",), (), "task", frozenset({TELLING_DAEMON}),
         "the stalled claim (metadata.claim_event_id)", "moves nothing: tells the requester once per stall",
         written_by="palaced (to a stalled task's requester)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("usage.report", ("usage.report",), (), "task", frozenset({EVER_CLAIMED}),
         "an existing task, named both by its correlation id and by metadata.task_id",
         "summed into every total and budget; only the first reports of a task count",
         per_subject=MAX_USAGE_REPORTS_PER_TASK,
         test="tests/e2e/test_usage.py::test_a_forged_usage_report_counts_nowhere_and_stops_no_worker"),
    # -- questions to a person (palace_proto.questions) ---------------------------------------------
    Rule("question.ask", ("question.ask",), (), "question", frozenset({ANY_AGENT}),
         "a person (human:NAME) or anyone (human:*); an agent asks, never a person",
         "each question stands alone", written_by="ask (palacectl ask)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("question.approval", ("question.ask",), (), "task", frozenset({CLAIMANT}),
         "the task its correlation id names (a run asks on its own task)",
         "marks the task waiting for approval", written_by="ask (a run's approve tool or hook)",
         test="tests/e2e/test_authority.py::test_an_approval_on_anothers_task_is_flagged_and_waits_for_nobody"),
    Rule("question.answer", ("question.answer",), (), "question", frozenset({ASKED_PERSON}),
         "the question (ack_of), not before it was asked nor after it expires; one of its choices (a question "
         "to human:* is asked of every proven person)",
         "the earliest answer that counts settles the question; only answers that can count are read, "
         "each daemon's first few per question",
         written_by="answer (palacectl answer)", per_origin=MAX_ANSWERS_PER_ORIGIN,
         test="tests/e2e/test_authority.py::test_junk_answers_never_hide_the_persons_answer"),
    # -- rooms (palace_proto.rooms) -------------------------------------------------------------------
    Rule("room.open", ("room.open",), (), "room", frozenset({ANY_AGENT}),
         "a room id bound to this very opening (its opener, origin and nonce)",
         "a room is its opening: no later event, however dated, replaces it",
         written_by="room_open (palacectl room open)",
         test="tests/proto/test_rooms.py::test_a_keyed_room_is_its_opening_and_a_backdated_second_opening_changes_nothing"),
    Rule("room.message", ("room.message",), (), "room", frozenset({ANY_AGENT}),
         "an open room (anyone with its id joins, as in MemPalace)",
         "turns in (created_at, event id) order; those after the close are after_close",
         written_by="room_say (palacectl room say)", per_origin=MAX_ROOM_TURNS_PER_ORIGIN,
         test="tests/proto/test_rooms.py::test_one_daemons_turns_beyond_the_bound_are_no_turns"),
    Rule("room.close", ("room.close",), (), "room", frozenset({OPENER, ROOM_MEMBER}),
         "an open room",
         "the earliest close by the opener or a member closes the room",
         written_by="room_close (palacectl room close)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    # -- leases (palace_proto.leases) ------------------------------------------------------------------
    Rule("lease.acquire", ("lease.acquire",), (), "lease", frozenset({ANY_AGENT}),
         "paths or resources of a project",
         "the earlier of two colliding leases holds; a forced acquire ends the leases it names; beyond 32 in "
         "force per agent and project, over_limit",
         written_by="lease_acquire (palacectl lease acquire)",
         test="tests/proto/test_leases.py::test_an_agent_holds_at_most_max_held_leases_in_a_project_on_every_replica"),
    Rule("lease.renew", ("lease.renew",), (), "lease", frozenset({LEASE_HOLDER}),
         "a lease in force", "extends it from the renewal on",
         written_by="lease_renew (palacectl lease renew)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("lease.release", ("lease.release",), (), "lease", frozenset({LEASE_HOLDER}),
         "a lease in force", "ends it",
         written_by="lease_release (palacectl lease release)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("lease.conflict", ("lease.conflict",), (), "lease", frozenset({TELLING_DAEMON}),
         "the losing lease", "moves nothing: tells the loser once",
         written_by="palaced (to a lease's loser)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    # -- the agent registry (palace_proto.agents) ------------------------------------------------------
    Rule("agent.register", ("agent.register",), (), "agent", frozenset({DAEMON}),
         "an agent id for the writing daemon itself (a person's id: with the palace CA's signature)",
         "the earliest registration of a free id holds it; a later one by another daemon is void",
         written_by="palaced (before an agent's first write, or agent_register)",
         per_origin=MAX_AGENTS_PER_ORIGIN,
         test="tests/daemon/test_store_agents.py::test_a_registry_event_must_be_the_daemons_own_word"),
    Rule("agent.transfer", ("agent.transfer",), (), "agent", frozenset({ID_HOLDER, PALACE_CA}),
         "an agent id and the daemon it moves to", "the id moves from this event on",
         written_by="agent_transfer (palacectl agent transfer)",
         test="tests/proto/test_agents.py::test_a_palace_ca_statement_counts_once"),
    Rule("agent.retire", ("agent.retire",), (), "agent", frozenset({ID_HOLDER, PALACE_CA}),
         "an agent id", "nobody holds the id from this event on",
         written_by="agent_retire (palacectl agent retire)",
         test="tests/proto/test_agents.py::test_a_palace_ca_statement_counts_once"),
    # -- the palace itself ---------------------------------------------------------------------------------
    Rule("palace.revoke", ("palace.revoke",), (), "agent", frozenset({PALACE_CA}),
         "a member's key and its origins' cutoffs", "every receiver refuses the peer from then on",
         written_by="revoke (palacectl revoke)",
         test="tests/e2e/test_fleet_security.py::test_a_revoked_peer_is_cut_off_everywhere"),
    Rule("event.redact", ("event.redact",), (), "event", frozenset({TARGET_ORIGIN, TARGET_AUTHOR, PALACE_CA}),
         "an existing event (metadata.redacts)",
         "purges the target's body where it is honoured (from a peer: its own origin or the palace CA)",
         written_by="redact (palacectl redact)",
         test="tests/e2e/test_redaction_authority.py::test_a_peers_redaction_is_honoured_only_from_the_origin_or_the_palace_ca"),
    # -- the shared memory (palace_proto.memory) -------------------------------------------------------
    Rule("memory.drawer", ("memory.drawer",), (), "memory", frozenset({ANY_AGENT}),
         "a wing and a room", "content-addressed: the first filing of a content makes the drawer",
         written_by="memory_add (palacectl remember)",
         test="tests/daemon/test_memory_views.py::test_malformed_memory_events_are_left_out_of_the_views_and_logged_once"),
    Rule("memory.diary", ("memory.diary",), (), "memory", frozenset({ANY_AGENT}),
         "an agent's diary wing", "entries are never merged", written_by="diary_write (palacectl diary write)",
         test="tests/daemon/test_memory_views.py::test_malformed_memory_events_are_left_out_of_the_views_and_logged_once"),
    Rule("memory.kg.add", ("memory.kg.add",), (), "memory", frozenset({ANY_AGENT}),
         "a fact", "facts stay as history", written_by="kg_add (palacectl kg add)",
         test="tests/daemon/test_memory_views.py::test_malformed_memory_events_are_left_out_of_the_views_and_logged_once"),
    Rule("memory.kg.invalidate", ("memory.kg.invalidate",), (), "memory", frozenset({ANY_AGENT}),
         "an open fact", "ends every open fact of that triple", written_by="kg_invalidate (palacectl kg invalidate)",
         test="tests/daemon/test_memory_views.py::test_malformed_memory_events_are_left_out_of_the_views_and_logged_once"),
    # -- words ---------------------------------------------------------------------------------------------
    Rule("usage.budget", ("usage.budget",), (), "", frozenset({ANY_AGENT}),
         "a budget reached (a worker says so)", "moves nothing",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.words", ("event.ack", "task.reply", "task.status"), (), "task", frozenset({ANY_AGENT}),
         "anything (ack_of: an existing event); a status it carries on a task is judged by that status's row",
         "moves nothing; the claimant's count as its activity (a task stalls without them)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("words", (), (), "", frozenset({ANY_AGENT}),
         "any type outside palace's namespaces (patch.ready, status, note…): the agents' own words; a status "
         "it carries on a task is judged by that status's row",
         "moves nothing",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
)

_BY_NAME: Final = {rule.name: rule for rule in RULES}
_BY_TYPE: Final = {t: rule for rule in RULES for t in rule.types if rule.name not in ("task.correct", "question.approval")}
_BY_STATUS: Final = {s: rule for rule in RULES for s in rule.statuses}
_WORDS: Final = _BY_NAME["words"]
_TASK_WORDS: Final = _BY_NAME["task.words"]


def rule_named(name: str) -> Rule:
    """The rule called ``name``. Raises KeyError for a name the table does not have."""
    return _BY_NAME[name]


def in_namespace(kind: str) -> bool:
    """Whether ``kind`` is under one of palace's namespaces (``NAMESPACES``)."""
    return kind.startswith(NAMESPACES)


def rule_for(kind: str, status: str | None = None, *, on_task: bool = False, later_request: bool = False,
             approval: bool = False) -> Rule | None:
    """The row an event of type ``kind`` with ``status`` is judged by, or None when the table does
    not name it (a type in palace's namespaces without a row: ``unnamed_type``).

    Args:
        on_task: its correlation id names a task (a status then moves the task, by its row).
        later_request: a ``task.request`` on a task that has its request already (a correction).
        approval: a ``question.ask`` marked as a run's permission request.
    """
    if kind == "task.request":
        return _BY_NAME["task.correct"] if later_request else _BY_NAME["task.open"]
    if kind == "question.ask" and approval:
        return _BY_NAME["question.approval"]
    own = _BY_TYPE.get(kind)
    if own is None and in_namespace(kind):
        return None  # palace's own namespace, no row: it moves nothing, whatever status it carries
    if own is not None and own is not _TASK_WORDS:
        return own
    if on_task and status:
        return _BY_STATUS.get(status, _TASK_WORDS)
    return own if own is not None else _WORDS


def unnamed_type(kind: str) -> str | None:
    """Why a client may not append ``kind`` (None: it may): a type in palace's namespaces that the
    table does not name, or one only its operation writes (with that operation)."""
    rule = rule_for(kind, on_task=False)
    if rule is None:
        prefix = next(p for p in NAMESPACES if kind.startswith(p))
        return (f"type {kind!r} is in palace's namespace {prefix!r} but its authority table does not name it: "
                f"no one may write it (types of your own go outside {', '.join(NAMESPACES)})")
    if not rule.appendable:
        return f"type {kind!r} is reserved: it is written by {rule.written_by}, not by append"
    return None


def judge(rule: Rule | None, roles: Iterable[str], *, kind: str = "", agent: Any = None, refers: bool = True,
          refers_why: str | None = None, origin_count: int = 0, subject_count: int = 0,
          names: Mapping[str, Any] | None = None) -> Verdict:
    """The verdict on one event judged by ``rule``, written by a writer holding ``roles`` on the
    subject at that point.

    Args:
        rule: ``rule_for`` of the event (None: its type is not in the table: flagged).
        roles: the roles the writer holds (the feature's derivation says which).
        kind, agent: the event's type and writer, for the words of a flag.
        refers: whether what the event refers to is there (``refers_why``: why not, in words).
        origin_count: how many events of this rule the writer's origin had on this subject before.
        subject_count: how many events of this rule counted on this subject before.
        names: who holds a role on the subject now (``{REQUESTER: "alice"}``), named in a flag.

    Returns:
        ``Verdict(ok=True)``, or a flag naming the rule and why — the same words a local refusal gives.
    """
    if rule is None:
        return Verdict(False, "unnamed", f"type {kind!r} is in palace's namespaces but not in its authority table: "
                                         "it moves nothing")
    if not refers:
        return Verdict(False, rule.name, refers_why or f"{rule.name} must refer to {rule.refers_to}")
    held = frozenset(roles)
    if not held & rule.writers:
        return Verdict(False, rule.name, f"{rule.name} is for {rule.writers_words(names)}; "
                                         f"{agent if agent is not None else 'the writer'} is none of them")
    if rule.per_origin is not None and origin_count >= rule.per_origin:
        return Verdict(False, rule.name, f"{rule.name}: one daemon's first {rule.per_origin} count on one subject; "
                                         "this one is beyond them")
    if rule.per_subject is not None and subject_count >= rule.per_subject:
        return Verdict(False, rule.name, f"{rule.name}: the first {rule.per_subject} count on one subject; "
                                         "this one is beyond them")
    return Verdict(True, rule.name)


def flag_of(event: Mapping[str, Any], verdict: Verdict) -> dict[str, Any]:
    """How a derivation lists a flagged event (every feature the same way)."""
    return {"event_id": event.get("id"), "agent": event.get("from_agent"), "type": event.get("type"),
            "status": event.get("status"), "created_at": event.get("created_at"), "rule": verdict.rule,
            "why": verdict.why}


def counts_in_order(created_at: Any, now: str | None) -> bool:
    """Whether an event dated ``created_at`` may take part in an ordering decision judged at
    ``now`` (the judging replica's clock): not when it is dated more than ``MAX_CLOCK_SKEW_S``
    ahead of it (see ``MAX_CLOCK_SKEW_S``). Without a clock, always."""
    if now is None:
        return True
    if not isinstance(created_at, str) or not STAMP_RE.match(created_at):
        return False
    return seconds_between(now, created_at) <= MAX_CLOCK_SKEW_S


def threats_markdown() -> str:
    """Each rule as the threat model (proto/PROTOCOL.md §6) names it: who may write it, that a
    member writing it otherwise moves nothing anywhere, and the test that attacks it."""
    lines = []
    for rule in RULES:
        lines.append(f"- **`{rule.name}`** — only {rule.writers_words()}; written otherwise by a member's modified "
                     f"daemon it is stored, flagged and moves nothing on every replica — `{rule.test}`")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table_markdown() -> str:
    """The table as proto/PROTOCOL.md shows it (between its markers; a test keeps them equal)."""
    lines = ["| rule | type (status) | who may write it | refers to | bounds | settles | written by | attacked by |",
             "|---|---|---|---|---|---|---|---|"]
    for rule in RULES:
        kinds = ", ".join(f"`{t}`" for t in rule.types) if rule.types else "any type without a row of its own"
        if rule.statuses:
            kinds += " with status " + ", ".join(f"`{s}`" for s in rule.statuses)
        if rule.name == "words":
            kinds = "any other type outside " + ", ".join(f"`{p}*`" for p in NAMESPACES)
        bounds = "; ".join(b for b in (
            f"{rule.per_origin} per origin per subject" if rule.per_origin is not None else "",
            f"{rule.per_subject} per subject" if rule.per_subject is not None else "") if b) or "–"
        lines.append("| " + " | ".join(_cell(c) for c in (
            f"`{rule.name}`", kinds, rule.writers_words(), rule.refers_to, bounds, rule.settles,
            f"`{rule.written_by}`" if rule.appendable else rule.written_by, f"`{rule.test}`")) + " |")
    lines.append("")
    lines.append("Roles: " + "; ".join(f"*{words}*" for words in ROLES.values()) + ".")
    return "\n".join(lines)
