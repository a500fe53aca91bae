"""Who may write what: palace's one table of event types, and the one judge every replica asks.

Owns: the roles a rule names (``ROLES``), what a row of the table is (``Rule``: for one event type
— and, on a task, each status — who may write it, what it must refer to, its bounds per origin and
per subject, how competing events settle, which operation writes it, and the test that attacks
it), the core's own rows (``CORE_RULES``: redactions, and the agents' own words), the table as a
whole (``table()``, ``RULES``: every feature declares its rows beside its event types, and
``palace_proto.features`` puts them together),
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
id (an impersonation, ``palace_proto.identity``) holds no role at all, and a person's role needs the
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
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, final

from .stamps import STAMP_RE, seconds_between

__all__ = [
    "ADDRESSED", "ADDRESSED_FREE", "ADDRESSEE_FREE", "ANY_AGENT", "ASKED_PERSON", "CLAIMANT", "CORE_NAMESPACES",
    "CORE_RULES", "DAEMON", "EVER_CLAIMED", "ID_HOLDER", "INTEGRATOR", "LEASE_HOLDER", "LOSING_CLAIMANT",
    "MAX_CLOCK_SKEW_S", "OPENER", "PALACE_CA", "REQUESTER", "REVIEWER", "ROLES", "ROOM_MEMBER", "TARGET_AUTHOR",
    "TARGET_ORIGIN", "TELLING_DAEMON",
    "Rule", "Table", "Verdict", "counts_in_order", "flag_of", "judge", "rule_for", "rule_named", "table_markdown",
    "table", "threats_markdown", "unnamed_type", "written_as_daemon",
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
REVIEWER: Final = "reviewer"
INTEGRATOR: Final = "integrator"
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
    REVIEWER: ("a reviewer of the delivered patch: the one the task's review_by names (any agent or person for "
               "any-other-agent; the requester when it names none), never the patch's author nor another agent "
               "of the daemon that wrote the patch"),
    INTEGRATOR: "the integrator the task's request names, once the delivered patch is approved where a review is required",
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
    #: a second row of its types: it judges such an event only when ``when(facts)`` holds (facts:
    #: the event's ``metadata``, and ``later_request``: its subject has its opening event already);
    #: the type's own row (no ``when``) judges the rest
    when: Callable[[Mapping[str, Any]], bool] | None = dataclasses.field(default=None, compare=False)
    #: an event of its types carrying a status on its subject is judged by that status's row (and
    #: an event of a type no row names, too: this row is their default)
    defers_to_status: bool = False
    #: palaced writes it as itself (``from_agent`` palaced: a notice, a registry event, a
    #: revocation), and no client may write its types under that name
    as_daemon: bool = False
    #: checks what an event of it refers to beyond its subject's id: ``refers(event, subject_id)``
    #: says why it does not (None: it does), for a row of another feature judged on a subject
    #: (a usage report must name its task in its metadata too)
    refers: Callable[[Mapping[str, Any], str], str | None] | None = dataclasses.field(default=None, compare=False)

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


#: the rows of the core itself (the log's own operations): every other row is a feature's, declared
#: by its module (``palace_proto.features`` puts them together in the order PROTOCOL.md shows)
CORE_RULES: Final[tuple[Rule, ...]] = (
    Rule("event.redact", ("event.redact",), (), "event", frozenset({TARGET_ORIGIN, TARGET_AUTHOR, PALACE_CA}),
         "an existing event (metadata.redacts)",
         "purges the target's body where it is honoured (from a peer: its own origin or the palace CA)",
         written_by="redact (palacectl redact)",
         test="tests/e2e/test_redaction_authority.py::test_a_peers_redaction_is_honoured_only_from_the_origin_or_the_palace_ca"),
    # -- words: any type no row names, outside palace's namespaces; always the table's last row ------
    Rule("words", (), (), "", frozenset({ANY_AGENT}),
         "any type outside palace's namespaces (patch.ready, status, note…): the agents' own words; a status "
         "it carries on a task is judged by that status's row",
         "moves nothing",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
)
#: the core's own namespace (every feature declares its own: ``palace_proto.features.NAMESPACES``)
CORE_NAMESPACES: Final = ("event.",)


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Table:
    """The rows of every feature and the core, indexed the ways ``rule_for`` looks them up."""

    rules: tuple[Rule, ...]
    namespaces: tuple[str, ...]
    by_name: Mapping[str, Rule]
    by_type: Mapping[str, Rule]
    #: the second rows of a type (``Rule.when``), in the table's order
    variants: Mapping[str, tuple[Rule, ...]]
    by_status: Mapping[str, Rule]
    #: the row a status on a subject falls back to (``Rule.defers_to_status``), if any
    status_default: Rule | None
    #: the types palaced writes as itself (``Rule.as_daemon``)
    as_daemon: frozenset[str]

    @classmethod
    def of(cls, rules: Iterable[Rule], namespaces: Iterable[str]) -> Table:
        """Raises ``ValueError``: a type with two rows of its own, or two rows deferring to status."""
        ordered = tuple(rules)
        own: dict[str, Rule] = {}
        variants: dict[str, list[Rule]] = {}
        for rule in ordered:
            for kind in rule.types:
                if rule.when is not None:
                    variants.setdefault(kind, []).append(rule)
                elif own.setdefault(kind, rule) is not rule:
                    raise ValueError(f"type {kind!r} has two rows of its own: {own[kind].name} and {rule.name}")
        deferring = [rule for rule in ordered if rule.defers_to_status]
        if len(deferring) > 1:
            raise ValueError(f"two rows defer to the status's: {[rule.name for rule in deferring]}")
        return cls(ordered, tuple(namespaces), {r.name: r for r in ordered}, own,
                   {kind: tuple(rows) for kind, rows in variants.items()},
                   {s: r for r in ordered for s in r.statuses}, deferring[0] if deferring else None,
                   frozenset(kind for rule in ordered if rule.as_daemon for kind in rule.types))


_table: Table | None = None


def table() -> Table:
    """The whole table: the core's rows and every feature's (``palace_proto.features``, imported at
    the first look: every feature module builds on this one, so this one cannot import them first)."""
    global _table
    if _table is None:
        from . import features  # noqa: PLC0415 - see the docstring

        _table = Table.of(features.RULES, features.NAMESPACES)
    return _table


def __getattr__(name: str) -> Any:
    """``RULES`` and ``NAMESPACES``: the assembled table's (module attributes computed on first use)."""
    if name == "RULES":
        return table().rules
    if name == "NAMESPACES":
        return table().namespaces
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def written_as_daemon() -> frozenset[str]:
    """The types palaced writes as itself (its rows say ``as_daemon``)."""
    return table().as_daemon


def rule_named(name: str) -> Rule:
    """The rule called ``name``. Raises KeyError for a name the table does not have."""
    return table().by_name[name]


def in_namespace(kind: str) -> bool:
    """Whether ``kind`` is under one of palace's namespaces (``NAMESPACES``)."""
    return kind.startswith(table().namespaces)


def rule_for(kind: str, status: str | None = None, *, on_task: bool = False, later_request: bool = False,
             metadata: Any = None) -> Rule | None:
    """The row an event of type ``kind`` with ``status`` is judged by, or None when the table does
    not name it (a type in palace's namespaces without a row: ``unnamed_type``).

    Args:
        on_task: its correlation id names a subject whose rows judge statuses (a status then moves
            it, by its row).
        later_request: its subject has its opening event already (a correction, not an opening).
        metadata: the event's metadata (a second row of its type may look at it: an approval).
    """
    rows = table()
    facts = {"metadata": metadata, "later_request": later_request}
    for variant in rows.variants.get(kind, ()):
        assert variant.when is not None
        if variant.when(facts):
            return variant
    own = rows.by_type.get(kind)
    if own is None and in_namespace(kind):
        return None  # palace's own namespace, no row: it moves nothing, whatever status it carries
    if own is not None and not own.defers_to_status:
        return own
    if on_task and status and rows.status_default is not None:
        return rows.by_status.get(status, rows.status_default)
    return own if own is not None else rows.by_name["words"]


def unnamed_type(kind: str) -> str | None:
    """Why a client may not append ``kind`` (None: it may): a type in palace's namespaces that the
    table does not name, or one only its operation writes (with that operation)."""
    rule = rule_for(kind, on_task=False)
    if rule is None:
        namespaces = table().namespaces
        prefix = next(p for p in namespaces if kind.startswith(p))
        return (f"type {kind!r} is in palace's namespace {prefix!r} but its authority table does not name it: "
                f"no one may write it (types of your own go outside {', '.join(namespaces)})")
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
    for rule in table().rules:
        lines.append(f"- **`{rule.name}`** — only {rule.writers_words()}; written otherwise by a member's modified "
                     f"daemon it is stored, flagged and moves nothing on every replica — `{rule.test}`")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table_markdown() -> str:
    """The table as proto/PROTOCOL.md shows it (between its markers; a test keeps them equal)."""
    lines = ["| rule | type (status) | who may write it | refers to | bounds | settles | written by | attacked by |",
             "|---|---|---|---|---|---|---|---|"]
    rows = table()
    for rule in rows.rules:
        kinds = ", ".join(f"`{t}`" for t in rule.types) if rule.types else "any type without a row of its own"
        if rule.statuses:
            kinds += " with status " + ", ".join(f"`{s}`" for s in rule.statuses)
        if rule.name == "words":
            kinds = "any other type outside " + ", ".join(f"`{p}*`" for p in rows.namespaces)
        bounds = "; ".join(b for b in (
            f"{rule.per_origin} per origin per subject" if rule.per_origin is not None else "",
            f"{rule.per_subject} per subject" if rule.per_subject is not None else "") if b) or "–"
        lines.append("| " + " | ".join(_cell(c) for c in (
            f"`{rule.name}`", kinds, rule.writers_words(), rule.refers_to, bounds, rule.settles,
            f"`{rule.written_by}`" if rule.appendable else rule.written_by, f"`{rule.test}`")) + " |")
    lines.append("")
    lines.append("Roles: " + "; ".join(f"*{words}*" for words in ROLES.values()) + ".")
    return "\n".join(lines)
