"""``palace_proto.questions``: the checks on a question and an answer, and ``settle``, which every
replica runs on the same events to agree on the answer that counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palace_proto.errors import ValidationError
from palace_proto.questions import (
    ANSWER,
    ANYONE,
    ASK,
    AskTerms,
    ask_metadata,
    check_addressee,
    check_approval,
    check_choices,
    check_timeout,
    match_choice,
    settle,
)

ASKED_AT = "2026-12-04T10:00:00.000000Z"


def question(to="human:ana", choices=("yes", "no"), timeout_s=600, qid="evt_q"):
    return {"id": qid, "type": ASK, "from_agent": "mac-claude", "to_agent": to, "body": "Drop the orders table?",
            "created_at": ASKED_AT, "metadata": ask_metadata(tuple(choices) if choices else None, ASKED_AT, timeout_s)}


def answer(body, by="human:ana", at="2026-12-04T10:01:00.000000Z", aid="evt_a1", of="evt_q"):
    return {"id": aid, "type": ANSWER, "from_agent": by, "ack_of": of, "body": body, "created_at": at}


def everyone_proven(event):
    return True


NOW = "2026-12-04T10:02:00.000000Z"


def test_the_addressee_is_a_person_or_anyone():
    assert check_addressee("human:ana") == "human:ana"
    assert check_addressee(ANYONE) == ANYONE
    for bad in ("mac-claude", "*", "", None, "human:", "human:a b"):
        with pytest.raises(ValidationError):
            check_addressee(bad)


def test_choices_are_a_short_list_of_distinct_one_line_strings():
    assert check_choices(None) is None
    assert check_choices([" yes", "no "]) == ("yes", "no")
    for bad in (["yes"], [str(i) for i in range(13)], ["yes", "YES"], ["yes", ""], ["a\nb", "c"], "yes,no",
                ["x" * 101, "y"], [1, 2]):
        with pytest.raises(ValidationError):
            check_choices(bad)


def test_the_timeout_is_bounded():
    assert check_timeout(1) == 1 and check_timeout(7 * 86400) == 7 * 86400
    for bad in (0, 7 * 86400 + 1, True, "30", 2.5):
        with pytest.raises(ValidationError):
            check_timeout(bad)


def test_a_choice_matches_without_regard_to_case_and_is_given_as_offered():
    terms = AskTerms(("Yes", "No"))
    assert match_choice(terms, " yes ") == "Yes"
    assert match_choice(terms, "maybe") is None
    assert match_choice(AskTerms(), "  any text ") == "any text"
    assert match_choice(AskTerms(), "   ") is None


def test_a_peers_malformed_terms_are_read_defensively():
    terms = AskTerms.from_metadata({"choices": "yes", "expires_at": "tomorrow"})
    assert terms == AskTerms(None, None)
    assert AskTerms.from_metadata(None) == AskTerms()


def test_an_approval_names_a_tool_and_what_on_and_a_peers_malformed_one_is_an_ordinary_question():
    """Issue 28: a run's permission request is a question marked ``approval``, what makes a task
    "waiting for approval"; a malformed marker from a peer is dropped, never raised. Issue 43: a
    client sends the whole request (``input``); the marker keeps it, or names its artifact, with
    its sha256, and an older palace's {tool, argument} still reads (with no hash to run on)."""
    from palace_proto.questions import (
        MAX_APPROVAL_INPUT_BYTES,
        approval_marker,
        approval_sha256,
        check_approval_marker,
    )

    whole = '{"tool_input": {"command": "git push"}, "tool_name": "Bash"}'
    digest = approval_sha256(whole)
    assert check_approval(None) is None
    assert check_approval({"tool": "Bash", "argument": "git push", "input": whole}) == {
        "tool": "Bash", "argument": "git push", "input": whole, "input_sha256": digest}
    assert check_approval({"tool": "Edit", "input": "x"})["argument"] == ""
    for bad, field in (({"tool": "", "input": "x"}, "approval.tool"),
                       ({"tool": "B\nash", "input": "x"}, "approval.tool"),
                       ({"tool": "t" * 101, "input": "x"}, "approval.tool"),
                       ({"tool": "Bash", "argument": "x" * 1001, "input": "x"}, "approval.argument"),
                       ({"tool": "Bash", "argument": 3, "input": "x"}, "approval.argument"), ("Bash", "approval"),
                       ({"tool": "Bash", "extra": 1}, "approval"),
                       ({"tool": "Bash", "argument": "git push"}, "approval.input"),  # what a person is not shown
                       ({"tool": "Bash", "input": ""}, "approval.input"),
                       ({"tool": "Bash", "input": "\ud800"}, "approval.input"),
                       ({"tool": "Bash", "input": "x" * (MAX_APPROVAL_INPUT_BYTES + 1)}, "approval.input")):
        with pytest.raises(ValidationError) as refused:
            check_approval(bad)
        assert refused.value.field == field
    checked = check_approval({"tool": "Bash", "argument": "git push", "input": whole})
    inline = approval_marker(checked, inline=True)
    assert inline == {"tool": "Bash", "argument": "git push", "input_sha256": digest, "input": whole}
    stored = approval_marker(checked, inline=False)
    assert stored == {"tool": "Bash", "argument": "git push", "input_sha256": digest,
                      "input_artifact": "art_" + digest[:32]}
    for marker in (inline, stored, {"tool": "Bash", "argument": "make"}):
        meta = ask_metadata(("allow", "deny"), ASKED_AT, 60, marker)
        assert AskTerms.from_metadata(meta).approval == marker
        assert settle({**question(), "metadata": meta}, [], everyone_proven, NOW).to_wire()["approval"] == marker
    meta = ask_metadata(("allow", "deny"), ASKED_AT, 60, inline)
    for broken in ({"tool": 7}, {**inline, "input": whole + " "}, {**inline, "input_sha256": "0" * 64},
                   {**stored, "input_artifact": "art_" + "0" * 32},
                   {**inline, "input_artifact": stored["input_artifact"]},
                   {"tool": "Bash", "argument": "x", "input": whole}, {**inline, "input_sha256": digest.upper()}):
        assert AskTerms.from_metadata({**meta, "approval": broken}).approval is None, broken
    with pytest.raises(ValidationError):
        check_approval_marker({"tool": "Bash", "input_sha256": digest})
    assert settle(question(), [], everyone_proven, NOW).to_wire()["approval"] is None


def test_an_open_question_expires_at_its_timeout():
    q = question(timeout_s=60)
    assert settle(q, [], everyone_proven, "2026-12-04T10:00:59.000000Z").status == "open"
    assert settle(q, [], everyone_proven, "2026-12-04T10:01:01.000000Z").status == "expired"


def test_the_first_answer_that_counts_wins_and_every_other_is_flagged_with_why():
    q = question()
    answers = [
        answer("yes", by="human:bob", aid="evt_1", at="2026-12-04T10:00:10.000000Z"),   # not the addressee
        answer("maybe", aid="evt_2", at="2026-12-04T10:00:20.000000Z"),                 # not a choice
        answer("No", aid="evt_3", at="2026-12-04T10:00:30.000000Z"),                    # counts
        answer("yes", aid="evt_4", at="2026-12-04T10:00:40.000000Z"),                   # too late
        answer("yes", by="mac-claude", aid="evt_5", at="2026-12-04T10:00:05.000000Z"),  # not a person
        {**answer("yes", aid="evt_6"), "ack_of": "evt_other"},                          # another question's
    ]
    state = settle(q, answers, everyone_proven, NOW)
    assert state.status == "answered" and state.answer["id"] == "evt_3" and state.choice == "no"  # the choice as offered
    why = {a["id"]: verdict.why for a, verdict in state.flagged}
    assert set(why) == {"evt_1", "evt_2", "evt_4", "evt_5"}
    assert why["evt_1"] == "question.answer is for the proven person asked (human:ana); human:bob is none of them"
    assert "not one of the choices" in why["evt_2"]
    assert "answered already by human:ana (evt_3)" in why["evt_4"]
    assert why["evt_5"].endswith("mac-claude is none of them")
    assert {verdict.rule for _, verdict in state.flagged} == {"question.answer"}
    wire = state.to_wire()
    assert wire["answer"] == {"event_id": "evt_3", "by": "human:ana", "text": "no", "answered_at": "2026-12-04T10:00:30.000000Z"}
    assert wire["status"] == "answered" and wire["choices"] == ["yes", "no"] and len(wire["flagged"]) == 4


def test_an_unproven_person_and_an_answer_after_expiry_never_count():
    q = question(to=ANYONE, timeout_s=60)
    forged = answer("yes", by="human:root", aid="evt_f", at="2026-12-04T10:00:10.000000Z")
    late = answer("yes", aid="evt_l", at="2026-12-04T10:05:00.000000Z")
    state = settle(q, [forged, late], lambda a: a["id"] != "evt_f", NOW)
    assert state.status == "expired" and state.answer is None
    why = {a["id"]: verdict.why for a, verdict in state.flagged}
    assert "not a proven person" in why["evt_f"] and "after the question expired" in why["evt_l"]


def test_anyone_may_answer_a_question_to_anyone():
    state = settle(question(to=ANYONE, choices=None), [answer("go ahead", by="human:bob")], everyone_proven, NOW)
    assert state.answer["from_agent"] == "human:bob" and state.choice == "go ahead"


@settings(max_examples=60, deadline=None)
@given(st.permutations(range(5)), st.lists(st.booleans(), min_size=5, max_size=5))
def test_every_replica_settles_the_same_whatever_order_the_answers_arrived_in(order, proven_flags):
    """Guards convergence: the answer that counts depends on the set of answers only."""
    answers = [answer(["yes", "no", "maybe", "YES", "No"][i], by=["human:ana", "human:bob"][i % 2], aid=f"evt_{i}",
                      at=f"2026-12-04T10:00:0{i % 3}.000000Z") for i in range(5)]
    proven = {f"evt_{i}": flag for i, flag in enumerate(proven_flags)}
    reference = settle(question(to=ANYONE), answers, lambda a: proven[a["id"]], NOW)
    shuffled = [answers[i] for i in order]
    state = settle(question(to=ANYONE), shuffled + shuffled[:2], lambda a: proven[a["id"]], NOW)  # duplicates too
    assert (state.status, state.answer and state.answer["id"]) == (reference.status, reference.answer and reference.answer["id"])
    assert [a["id"] for a, _ in state.flagged] == [a["id"] for a, _ in reference.flagged]


def test_junk_from_one_daemon_never_buries_the_persons_answer():
    """Regression (issue 43, finding 5): answers were read first-10,000-in-local-order, counting or
    not; the owner's answer came 10,001st and the question stayed open. A daemon's first
    MAX_ANSWERS_PER_ORIGIN answers to a question are judged, the rest flagged; the person's answer
    from its own daemon counts whatever came before it."""
    q = question()
    junk = [{**answer("yes", by="human:ana", aid=f"evt_j{i:05d}", at="2026-12-04T10:00:01.000000Z"),
             "origin": "o_mallory"} for i in range(100)]
    real = {**answer("no", aid="evt_real", at="2026-12-04T10:00:30.000000Z"), "origin": "o_alpha"}
    state = settle(q, [*junk, real], lambda a: a["origin"] == "o_alpha", NOW)
    assert state.status == "answered" and state.answer["id"] == "evt_real"
    # The bound itself: a daemon's 17th answer to one question is not judged, however good.
    slips = [{**answer("maybe", aid=f"evt_s{i:02d}", at="2026-12-04T10:00:01.000000Z"), "origin": "o_alpha"}
             for i in range(16)]
    state = settle(q, [*slips, real], everyone_proven, NOW)
    assert state.status == "open"
    assert [v.why for a, v in state.flagged if a["id"] == "evt_real"] == [
        "question.answer: one daemon's first 16 count on one subject; this one is beyond them"]


def test_an_answer_dated_before_the_question_or_far_ahead_of_the_clock_does_not_count():
    q = question()
    backdated = answer("yes", aid="evt_b", at="2026-12-04T09:59:00.000000Z")
    ahead = answer("yes", aid="evt_a", at="2026-12-04T11:00:00.000000Z")
    state = settle(q, [backdated, ahead], everyone_proven, NOW)
    assert state.status == "open"
    why = {a["id"]: (v.rule, v.why) for a, v in state.flagged}
    assert why["evt_b"][0] == "question.answer" and "before the question was asked" in why["evt_b"][1]
    assert why["evt_a"][0] == "clock"
