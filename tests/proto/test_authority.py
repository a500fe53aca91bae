"""palace_proto.authority: the one table of who may write what, its judge, and the table as
proto/PROTOCOL.md shows it (issue 43 §3)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Final

import pytest

from palace_proto import authority
from palace_proto.appends import RESERVED_TYPES
from palace_proto.authority import (
    ANY_AGENT,
    CLAIMANT,
    NAMESPACES,
    REQUESTER,
    ROLES,
    RULES,
    counts_in_order,
    judge,
    rule_for,
    rule_named,
    table_markdown,
    threats_markdown,
    unnamed_type,
)
from palace_proto.identity import REGISTRY_TYPES
from palace_proto.leases import LEASE_TYPES
from palace_proto.memory import MEMORY_TYPES
from palace_proto.questions import ANSWER, ASK
from palace_proto.rooms import ROOM_TYPES
from palace_proto.tasks import CHECK, CONFLICT, REASSIGN, RELEASE, REQUEST, REVIEW, REWORK, STALLED
from palace_proto.usage import BUDGET_TYPE, USAGE_TYPE

ROOT = Path(__file__).resolve().parents[2]
#: every type palace writes or gives a meaning to: each must have a row of its own
PALACE_TYPES = (REGISTRY_TYPES | authority.written_as_daemon() | LEASE_TYPES | MEMORY_TYPES | ROOM_TYPES
                | {REQUEST, RELEASE, REASSIGN, CONFLICT, STALLED, ASK, ANSWER, USAGE_TYPE, BUDGET_TYPE, "event.redact",
                   "event.ack", "task.reply", "task.status"})


@pytest.mark.parametrize("kind", sorted(PALACE_TYPES))
def test_every_type_palace_writes_has_a_row_of_its_own(kind):
    rule = rule_for(kind)
    assert rule is not None and rule.name != "words" and kind in rule.types
    assert kind.startswith(NAMESPACES)  # so no client can write a type of palace's outside the table


def test_statuses_on_a_task_are_judged_by_their_rows_whatever_the_type():
    for kind in ("event.ack", "patch.ready", "task.reply", "status.update"):
        assert rule_for(kind, "claimed", on_task=True).name == "task.claim"
        assert rule_for(kind, "ready", on_task=True).name == "task.deliver"
        assert {rule_for(kind, s, on_task=True).name for s in ("applied", "failed", "blocked")} == {"task.close"}
        assert rule_for(kind, "superseded", on_task=True).name == "task.supersede"
        assert rule_for(kind, "open", on_task=True).name == "task.reopen"
    assert rule_for("patch.ready", "ready").name == "words"  # not on a task: words
    assert rule_for(USAGE_TYPE, "applied", on_task=True).name == "usage.report"  # a row of its own wins
    assert rule_for(REQUEST, later_request=True).name == "task.correct"
    assert rule_for(ASK, metadata={"approval": {"tool": "Bash"}}).name == "question.approval"
    assert rule_for(ASK, metadata={"approval": None}).name == "question.ask"


def test_a_types_second_row_is_chosen_by_its_own_condition_and_the_table_refuses_ambiguity():
    """Which row judges an event is the table's data (``Rule.when``, ``Rule.defers_to_status``), not
    a list of feature names in the judge: a second own row for a type, or a second row deferring
    to the status's, is refused when the table is put together."""
    from palace_proto.authority import Rule, Table

    base = Rule("x.do", ("x.do",), (), "x", frozenset({ANY_AGENT}), "", "")
    Table.of([base, dataclasses.replace(base, name="x.again", when=lambda facts: facts["later_request"])], ["x."])
    with pytest.raises(ValueError, match="two rows of its own"):
        Table.of([base, dataclasses.replace(base, name="x.twice")], ["x."])
    deferring = dataclasses.replace(base, defers_to_status=True)
    with pytest.raises(ValueError, match="defer to the status"):
        Table.of([deferring, dataclasses.replace(deferring, name="x.other", types=("x.other",))], ["x."])


def test_a_type_in_palaces_namespaces_without_a_row_is_unnamed_and_refused():
    for kind in ("task.approve", "room.join", "usage.refund", "agent.adopt"):
        assert rule_for(kind) is None
        assert "its authority table does not name it" in unnamed_type(kind)
        verdict = judge(None, {ANY_AGENT}, kind=kind)
        assert (verdict.ok, verdict.rule) == (False, "unnamed")
    assert unnamed_type("patch.ready") is None and unnamed_type("note") is None
    every = {t for r in RULES for t in r.types}
    assert set(RESERVED_TYPES) == {t for t in every if not rule_for(t).appendable}


def test_the_judge_names_the_rule_the_holders_and_the_bounds():
    close = rule_named("task.close")
    assert judge(close, {ANY_AGENT, CLAIMANT}).ok
    flagged = judge(close, {ANY_AGENT}, agent="mallory", names={REQUESTER: "alice", CLAIMANT: "bob"})
    assert (flagged.ok, flagged.rule) == (False, "task.close")
    assert flagged.why == ("task.close is for the task's requester (alice) or the task's claimant (bob) or the agent "
                           "the task names as its addressee, while nobody holds it or the integrator the task's "
                           "request names, once the delivered patch is approved where a review is required; mallory "
                           "is none of them")
    report = rule_named("usage.report")
    assert judge(report, {authority.EVER_CLAIMED}, subject_count=255).ok
    assert "first 256 count" in judge(report, {authority.EVER_CLAIMED}, subject_count=256).why
    answer = rule_named("question.answer")
    assert "one daemon's first 16 count" in judge(answer, {authority.ASKED_PERSON}, origin_count=16).why
    assert judge(report, {authority.EVER_CLAIMED}, refers=False, refers_why="no such task").why == "no such task"


def test_an_event_far_ahead_of_the_clock_takes_no_part_yet():
    now = "2026-12-01T10:00:00.000000Z"
    assert counts_in_order("2026-12-01T10:04:59.000000Z", now)
    assert not counts_in_order("2026-12-01T10:05:01.000000Z", now)
    assert counts_in_order("2020-01-01T00:00:00Z", now)  # the past is a partition's, never refused
    assert not counts_in_order("not a stamp", now) and counts_in_order("anything", None)


def test_every_role_a_rule_names_has_words_and_every_rule_a_test_that_exists():
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))
    for rule in RULES:
        assert rule.writers and rule.writers <= set(ROLES), rule.name
        path, _, test = rule.test.partition("::")
        source = (ROOT / path).read_text(encoding="utf-8")
        assert re.search(rf"^(async )?def {re.escape(test)}\(", source, re.M), f"{rule.name}: {rule.test} not found"


def test_the_protocol_shows_the_table_the_code_has():
    """proto/PROTOCOL.md shows the table between its markers exactly as ``table_markdown`` makes it
    (regenerate with `python -c 'from palace_proto.authority import table_markdown; print(table_markdown())'`)."""
    text = (ROOT / "proto" / "PROTOCOL.md").read_text(encoding="utf-8")
    for name, made in (("authority-table", table_markdown()), ("authority-threats", threats_markdown())):
        start, end = f"<!-- {name}:start -->\n", f"\n<!-- {name}:end -->"
        shown = text[text.index(start) + len(start):text.index(end)]
        assert shown == made, f"proto/PROTOCOL.md's {name} differs from palace_proto.authority: regenerate it"


# -- generated from the table: every role a rule names may write it ---------------------------------
# For each (rule, role) of the table, a scenario in which a writer holding that role writes an event
# of the rule; the derivation every replica runs must let it count (not flag it). A rule or role
# added to the table without a scenario here fails ``test_every_role_a_rule_names_can_write_it``.

from palace_proto import identity as _agents  # noqa: E402
from palace_proto.leases import LeaseLedger  # noqa: E402
from palace_proto.rooms import ROOM_CLOSE, ROOM_MESSAGE, ROOM_OPEN, derive_room, keyed_room_id  # noqa: E402
from palace_proto.tasks import derive_task  # noqa: E402

CID = "task_demo_0001"
NONCE = "ab" * 16
ROOM_ID = keyed_room_id("api", origin="o_alice", opener="alice", nonce=NONCE)


def _at(seconds: int) -> str:
    return f"2026-12-01T10:{seconds // 60:02d}:{seconds % 60:02d}.000000Z"


def _ev(kind, who, t, *, status=None, to=None, eid=None, origin="o1", **extra):
    return {"id": eid or f"evt_{t:04d}_{kind}_{who}", "type": kind, "from_agent": who, "to_agent": to,
            "created_at": _at(t), "status": status, "correlation_id": CID, "origin": origin,
            "metadata": extra.pop("metadata", {}), **extra}


def _request(to="bob", t=0, **metadata):
    return _ev(REQUEST, "alice", t, status="open", to=to, metadata=metadata)


#: a task whose review is human:ana's and whose integrator is lander, with bob's patch waiting
_DELIVERED: Final = [_request(review_by="human:ana", integrator="lander"), _ev("event.ack", "bob", 5, status="claimed"),
                     _ev("patch.ready", "bob", 6, status="ready", eid="evt_patch")]
_APPROVED: Final = [*_DELIVERED, _ev(REVIEW, "human:ana", 7, ack_of="evt_patch", metadata={"verdict": "approve"})]


def _claim(who, t, **kw):
    return _ev("event.ack", who, t, status="claimed", **kw)


def _task_counts(events, written) -> bool:
    view = derive_task(CID, events)
    return view is not None and written["id"] not in {f["event_id"] for f in view["out_of_role"]}


def _task_case(before, written):
    return lambda: _task_counts([*before, written], written)


def _room_event(n, kind, who, body="", **extra):
    return {"id": f"evt_{n:04d}", "type": kind, "stream": "project/shop", "room": "rooms", "from_agent": who,
            "to_agent": "*", "correlation_id": ROOM_ID, "body": body, "origin": extra.pop("origin", "o_alice"),
            "metadata": extra.pop("metadata", {}), "created_at": f"2026-01-01T00:00:{n:02d}.000000Z", **extra}


def _room_counts(events, written) -> bool:
    room = derive_room(ROOM_ID, events)
    return room is not None and written["id"] not in room.flagged_ids


_OPENING = _room_event(1, ROOM_OPEN, "alice", "agenda", metadata={"name": "api", "nonce": NONCE, "members": ["carol"]})


def _lease_case(kind):
    def case() -> bool:
        taken = {"type": "lease.acquire", "id": "evt_l", "correlation_id": "lease_" + "0" * 16, "from_agent": "alice",
                 "origin": "o1", "stream": "project/p", "created_at": _at(0),
                 "metadata": {"patterns": ["src/**"], "mode": "exclusive", "ttl_s": 3600}}
        if kind == "lease.acquire":
            ledger = LeaseLedger()
            return ledger.feed([taken]) and ledger.leases()[0].end is None
        rival = {**taken, "id": "evt_r", "correlation_id": "lease_" + "1" * 16, "from_agent": "bob", "origin": "o2",
                 "created_at": _at(5)}
        written = {"type": kind, "id": "evt_w", "correlation_id": taken["correlation_id"], "from_agent": "alice",
                   "origin": "o1", "created_at": _at(10), "metadata": {"ttl_s": 3600}}
        if kind == "lease.conflict":
            written = {**written, "correlation_id": rival["correlation_id"], "from_agent": "palaced", "origin": "o2",
                       "metadata": {"lease_id": rival["correlation_id"]}}
        ledger = LeaseLedger()
        ledger.feed([taken, rival, written])
        return ledger.flagged_count == 0
    return case


def _registry_case(kind, by_ca):
    def case() -> bool:
        register = _agents.Claim("evt_1", _at(0), _agents.REGISTER, "bot", "daemon-a")
        if kind == _agents.REGISTER:
            return not _agents.derive_record("bot", [register]).void
        writer = "daemon-ca" if by_ca else "daemon-a"
        claim = _agents.Claim("evt_2", _at(5), kind, "bot", writer, "daemon-b" if kind == _agents.TRANSFER else None,
                              ca_nonce="n1" if by_ca else None)
        return not _agents.derive_record("bot", [register, claim]).void
    return case


def _revoke_counts() -> bool:
    """A grant in force, then the person asked revokes it: in force no more."""
    from palace_proto.question_grants import REVOKE, grants_in_force
    from palace_proto.questions import ask_metadata, settle
    approval = {"tool": "Bash", "argument": "npm test", "input_sha256": "0" * 64, "input": "x", "shape": "Bash: npm test"}
    question = {"id": "evt_q", "type": ASK, "from_agent": "bot", "to_agent": "human:ana", "created_at": _at(0),
                "correlation_id": "task_t", "metadata": ask_metadata(("allow", "deny"), _at(0), 600)}
    question["metadata"]["approval"] = {**approval, "input_sha256": __import__("hashlib").sha256(b"x").hexdigest()}
    answer = {"id": "evt_a", "type": ANSWER, "from_agent": "human:ana", "ack_of": "evt_q", "body": "allow",
              "created_at": _at(5), "origin": "o1", "metadata": {"grant": {"scope": "task", "for_s": 3600}}}
    state = settle(question, [answer], lambda a: True, _at(10))
    before = grants_in_force([(state, None)], [], lambda e: True, _at(10))
    revoke = {"id": "evt_r", "type": REVOKE, "from_agent": "human:ana", "ack_of": "evt_a", "created_at": _at(11)}
    return len(before) == 1 and grants_in_force([(state, None)], [revoke], lambda e: True, _at(12)) == []


def _answer_counts() -> bool:
    from palace_proto.questions import ask_metadata, settle
    question = {"id": "evt_q", "type": ASK, "from_agent": "bot", "to_agent": "human:ana", "created_at": _at(0),
                "metadata": ask_metadata(("yes", "no"), _at(0), 600)}
    answer = {"id": "evt_a", "type": ANSWER, "from_agent": "human:ana", "ack_of": "evt_q", "body": "yes",
              "created_at": _at(5), "origin": "o1"}
    return settle(question, [answer], lambda a: True, _at(10)).answer is not None


def _words(rule_name):
    return lambda: judge(rule_named(rule_name), {ANY_AGENT}).ok


ALLOWED: dict[tuple[str, str], Any] = {
    ("task.open", ANY_AGENT): lambda: derive_task(CID, [_request()]) is not None,
    ("task.correct", REQUESTER): _task_case([_request()], _ev(REQUEST, "alice", 5, status="open", to="bob")),
    ("task.claim", authority.ADDRESSED): _task_case([_request()], _claim("bob", 5)),
    ("task.deliver", CLAIMANT): _task_case([_request(), _claim("bob", 5)], _ev("patch.ready", "bob", 9, status="ready")),
    ("task.deliver", authority.ADDRESSED_FREE): _task_case([_request()], _ev("patch.ready", "bob", 9, status="ready")),
    ("task.close", REQUESTER): _task_case([_request(), _claim("bob", 5)], _ev("event.ack", "alice", 9, status="failed")),
    ("task.close", CLAIMANT): _task_case([_request(), _claim("bob", 5)], _ev("event.ack", "bob", 9, status="applied")),
    ("task.close", authority.ADDRESSEE_FREE): _task_case([_request()], _ev("event.ack", "bob", 9, status="blocked")),
    ("task.supersede", REQUESTER): _task_case([_request()], _ev("event.ack", "alice", 9, status="superseded")),
    ("task.supersede", authority.LOSING_CLAIMANT): _task_case(
        [_request(to="*"), _claim("bob", 5), _claim("carol", 6)], _ev("event.ack", "carol", 9, status="superseded")),
    ("task.reopen", REQUESTER): _task_case([_request(), _claim("bob", 5)], _ev("event.ack", "alice", 9, status="open")),
    ("task.release", CLAIMANT): _task_case([_request(), _claim("bob", 5)], _ev(RELEASE, "bob", 9, status="open")),
    ("task.reassign", REQUESTER): _task_case([_request()], _ev(REASSIGN, "alice", 9, status="open", to="carol")),
    ("task.conflict", authority.TELLING_DAEMON): _task_case(
        [_request(to="*"), _claim("bob", 5), _claim("carol", 6, origin="o2", eid="evt_carol")],
        _ev(CONFLICT, "palaced", 9, origin="o2", to="carol", metadata={"claim_event_id": "evt_carol"})),
    ("task.stalled", authority.TELLING_DAEMON): _task_case(
        [_request(), _claim("bob", 5, eid="evt_bob")],
        _ev(STALLED, "palaced", 9, to="alice", metadata={"claim_event_id": "evt_bob"})),
    ("usage.report", authority.EVER_CLAIMED): _task_case(
        [_request(), _claim("bob", 5)], _ev(USAGE_TYPE, "bob", 9, metadata={"task_id": CID})),
    ("question.ask", ANY_AGENT): _words("question.ask"),
    ("question.approval", CLAIMANT): _task_case(
        [_request(), _claim("bob", 5)], _ev(ASK, "bob", 9, to="human:*", metadata={"approval": {"tool": "Bash"}})),
    ("question.answer", authority.ASKED_PERSON): lambda: _answer_counts(),
    ("question.revoke", authority.ASKED_PERSON): lambda: _revoke_counts(),
    ("room.open", ANY_AGENT): lambda: derive_room(ROOM_ID, [_OPENING]) is not None,
    ("room.message", ANY_AGENT): lambda: _room_counts([_OPENING, m := _room_event(2, ROOM_MESSAGE, "zed", "hi",
                                                                                 origin="o_zed")], m),
    ("room.close", authority.OPENER): lambda: _room_counts([_OPENING, c := _room_event(2, ROOM_CLOSE, "alice")], c),
    ("room.close", authority.ROOM_MEMBER): lambda: _room_counts([_OPENING, c := _room_event(2, ROOM_CLOSE, "carol")], c),
    ("lease.acquire", ANY_AGENT): _lease_case("lease.acquire"),
    ("lease.renew", authority.LEASE_HOLDER): _lease_case("lease.renew"),
    ("lease.release", authority.LEASE_HOLDER): _lease_case("lease.release"),
    ("lease.conflict", authority.TELLING_DAEMON): _lease_case("lease.conflict"),
    ("agent.register", authority.DAEMON): _registry_case(_agents.REGISTER, False),
    ("agent.transfer", authority.ID_HOLDER): _registry_case(_agents.TRANSFER, False),
    ("agent.transfer", authority.PALACE_CA): _registry_case(_agents.TRANSFER, True),
    ("agent.retire", authority.ID_HOLDER): _registry_case(_agents.RETIRE, False),
    ("agent.retire", authority.PALACE_CA): _registry_case(_agents.RETIRE, True),
    ("palace.revoke", authority.PALACE_CA): lambda: judge(rule_named("palace.revoke"), {authority.PALACE_CA}).ok,
    ("event.redact", authority.TARGET_ORIGIN): lambda: judge(rule_named("event.redact"), {authority.TARGET_ORIGIN}).ok,
    ("event.redact", authority.TARGET_AUTHOR): lambda: judge(rule_named("event.redact"), {authority.TARGET_AUTHOR}).ok,
    ("event.redact", authority.PALACE_CA): lambda: judge(rule_named("event.redact"), {authority.PALACE_CA}).ok,
    ("memory.drawer", ANY_AGENT): _words("memory.drawer"),
    ("memory.diary", ANY_AGENT): _words("memory.diary"),
    ("memory.kg.add", ANY_AGENT): _words("memory.kg.add"),
    ("memory.kg.invalidate", ANY_AGENT): _words("memory.kg.invalidate"),
    ("usage.budget", ANY_AGENT): _words("usage.budget"),
    ("task.words", ANY_AGENT): _task_case([_request(), _claim("bob", 5)], _ev("task.reply", "zed", 9)),
    ("task.review", authority.REVIEWER): _task_case(
        _DELIVERED, _ev(REVIEW, "human:ana", 9, ack_of="evt_patch", metadata={"verdict": "changes_requested"})),
    ("task.rework", REQUESTER): _task_case(_DELIVERED, _ev(REWORK, "alice", 9, metadata={"base": "b" * 40})),
    ("task.rework", authority.INTEGRATOR): _task_case(
        _APPROVED, _ev(REWORK, "lander", 9, metadata={"base": "b" * 40})),
    ("task.check", authority.INTEGRATOR): _task_case(
        _APPROVED, _ev(CHECK, "lander", 9, ack_of="evt_patch", metadata={"result": "failed"})),
    ("task.close", authority.INTEGRATOR): _task_case(_APPROVED, _ev("event.ack", "lander", 9, status="applied")),
    ("words", ANY_AGENT): _task_case([_request()], _ev("note", "zed", 9)),
}


@pytest.mark.parametrize(("rule", "role"), sorted((r.name, role) for r in RULES for role in r.writers))
def test_every_role_a_rule_names_can_write_it(rule, role):
    """Generated from the table: a writer holding any role a rule names writes an event of that
    rule, and the derivation every replica runs lets it count."""
    assert (rule, role) in ALLOWED, f"no scenario for {rule} written by {ROLES[role]}"
    assert ALLOWED[(rule, role)](), f"{rule} by {ROLES[role]} was flagged"


def test_no_scenario_names_a_rule_or_role_the_table_does_not_have():
    assert set(ALLOWED) == {(r.name, role) for r in RULES for role in r.writers}


# -- generated from the table: every position a writer may hold on a task, against every task rule --
# Each position names the roles its writer holds on the task at the end of its events (the oracle,
# written by hand from the roles' words). For every task rule and every position, the rule's event
# written from that position counts exactly when the position holds a role the rule names: the
# roles the table does not allow are flagged, the ones it allows succeed, whatever their mix.

A = authority
_POSITIONS: tuple[tuple[str, list[dict[str, Any]], str, frozenset[str]], ...] = (
    ("a bystander", [_request(), _claim("bob", 5)], "zed", frozenset({ANY_AGENT})),
    ("the requester", [_request(), _claim("bob", 5)], "alice", frozenset({ANY_AGENT, REQUESTER})),
    ("the claimant", [_request(), _claim("bob", 5)], "bob",
     frozenset({ANY_AGENT, CLAIMANT, A.EVER_CLAIMED, A.ADDRESSED})),
    ("the addressee, nobody holding it", [_request()], "bob",
     frozenset({ANY_AGENT, A.ADDRESSED, A.ADDRESSED_FREE, A.ADDRESSEE_FREE})),
    ("anyone, on a task to * nobody holds", [_request(to="*")], "zed",
     frozenset({ANY_AGENT, A.ADDRESSED, A.ADDRESSED_FREE})),
    ("anyone, on a task to * held by another", [_request(to="*"), _claim("bob", 5)], "zed",
     frozenset({ANY_AGENT, A.ADDRESSED})),
    ("a losing claimant", [_request(to="*"), _claim("bob", 5), _claim("carol", 6)], "carol",
     frozenset({ANY_AGENT, A.ADDRESSED, A.EVER_CLAIMED, A.LOSING_CLAIMANT})),
    ("a claimant that released it", [_request(), _claim("bob", 5), _ev(RELEASE, "bob", 6, status="open")], "bob",
     frozenset({ANY_AGENT, A.ADDRESSED, A.ADDRESSED_FREE, A.ADDRESSEE_FREE, A.EVER_CLAIMED})),
    ("a claimant the task was reassigned away from",
     [_request(), _claim("bob", 5), _ev(REASSIGN, "alice", 6, status="open", to="carol")], "bob",
     frozenset({ANY_AGENT, A.EVER_CLAIMED})),
    # With a patch waiting (human:ana reviews, lander integrates): the rows that act on a patch.
    ("a bystander, a patch waiting", _DELIVERED, "zed", frozenset({ANY_AGENT})),
    ("the requester, a patch waiting", _DELIVERED, "alice", frozenset({ANY_AGENT, REQUESTER})),
    ("the patch's author", _DELIVERED, "bob", frozenset({ANY_AGENT, CLAIMANT, A.EVER_CLAIMED, A.ADDRESSED})),
    ("the named reviewer, a patch waiting", _DELIVERED, "human:ana", frozenset({ANY_AGENT, A.REVIEWER})),
    ("the integrator, before the review", _DELIVERED, "lander", frozenset({ANY_AGENT})),
    ("the integrator, after the review", _APPROVED, "lander", frozenset({ANY_AGENT, A.INTEGRATOR})),
    ("the reviewer, after approving", _APPROVED, "human:ana", frozenset({ANY_AGENT, A.REVIEWER})),
)
#: the rows that act on a delivered patch: from a position without one they refer to nothing
_ON_A_PATCH: Final = frozenset({"task.review", "task.rework", "task.check"})
#: one event of each task rule a writer can write (notices are the daemon's: TELLING_DAEMON only)
_TASK_WRITES: dict[str, Any] = {
    "task.correct": lambda who: _ev(REQUEST, who, 30, status="open", to="bob"),
    "task.claim": lambda who: _claim(who, 30),
    "task.deliver": lambda who: _ev("patch.ready", who, 30, status="ready"),
    "task.close": lambda who: _ev("event.ack", who, 30, status="failed"),
    "task.supersede": lambda who: _ev("event.ack", who, 30, status="superseded"),
    "task.reopen": lambda who: _ev("event.ack", who, 30, status="open"),
    "task.release": lambda who: _ev(RELEASE, who, 30, status="open"),
    "task.reassign": lambda who: _ev(REASSIGN, who, 30, status="open", to="dave"),
    "usage.report": lambda who: _ev(USAGE_TYPE, who, 30, metadata={"task_id": CID}),
    "question.approval": lambda who: _ev(ASK, who, 30, to="human:*", metadata={"approval": {"tool": "Bash"}}),
    "task.words": lambda who: _ev("task.reply", who, 30),
    "task.review": lambda who: _ev(REVIEW, who, 30, ack_of="evt_patch", metadata={"verdict": "approve"}),
    "task.rework": lambda who: _ev(REWORK, who, 30, metadata={"base": "b" * 40}),
    "task.check": lambda who: _ev(CHECK, who, 30, ack_of="evt_patch", metadata={"result": "passed"}),
}


def test_every_task_rule_written_from_every_position_counts_exactly_when_the_table_allows_it():
    task_rules = {r.name for r in RULES if r.subject == "task" and A.TELLING_DAEMON not in r.writers
                  and r.name != "task.open"}
    assert task_rules == set(_TASK_WRITES), "a task rule without an event to write here"
    wrong = []
    for rule_name, write in _TASK_WRITES.items():
        rule = rule_named(rule_name)
        for position, before, who, roles in _POSITIONS:
            written = write(who)
            view = derive_task(CID, [*before, written])
            flags = {f["event_id"]: f["rule"] for f in view["out_of_role"]}
            waiting = any(e.get("type") == "patch.ready" for e in before)
            expected = bool(roles & rule.writers) and (waiting or rule_name not in _ON_A_PATCH)
            if (written["id"] not in flags) != expected or (not expected and flags[written["id"]] != rule_name):
                wrong.append(f"{rule_name} by {position}: {'flagged' if written['id'] in flags else 'counted'}")
    assert wrong == []


def test_the_features_assemble_one_table_and_refuse_what_two_declare():
    """Each feature declares its own rows, namespace and operations (palace_proto.features); the
    assembly refuses one declared twice or missing, so a feature declares everything it needs."""
    import types

    from palace_proto import features, rooms

    assert rule_named("room.close") in rooms.RULES and features.RULES[-1].name == "words"
    twice = types.ModuleType("palace_proto.twice")
    twice.OPS, twice.NAMESPACE, twice.RULES = frozenset({"room_open"}), "twice.", ()
    with pytest.raises(ValueError, match="operations declared already"):
        features.assemble((rooms, twice))
    bare = types.ModuleType("palace_proto.bare")
    with pytest.raises(ValueError, match="declares no OPS, NAMESPACE, RULES"):
        features.assemble((bare,))
    stray = types.ModuleType("palace_proto.stray")
    stray.OPS, stray.NAMESPACE, stray.RULES = frozenset(), "stray.", (rule_named("room.open"),)
    with pytest.raises(ValueError, match="rules named twice"):
        features.assemble((rooms, stray))
    # A row written by an operation no feature declares: the feature forgot its operation.
    orphan = types.ModuleType("palace_proto.orphan")
    orphan.OPS, orphan.NAMESPACE = frozenset(), "orphan."
    orphan.RULES = (dataclasses.replace(rule_named("room.open"), name="orphan.open", types=("orphan.open",),
                                        written_by="orphan_open (palacectl orphan open)"),)
    with pytest.raises(ValueError, match="written by 'orphan_open', an operation nobody declares"):
        features.assemble((*features.FEATURES, orphan))
