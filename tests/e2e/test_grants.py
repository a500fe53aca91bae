"""Grants end to end (issue 47 §3.1): a person's allow widened to a task, an agent or a project for
a stated time, bound to the request's shape, listed, revoked, and judged the same on every replica.

The requests are built by palacectl's own approval code (``first_step``: the policy, the shape,
the question) and asked of a real daemon; the person answers with ``palacectl answer … --grant``.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from palace_proto.question_grants import grants_in_force
from palacectl.features.approvals.approvals import Question, Verdict, answer_verdict, first_step
from palacectl.features.approvals.permission_policy import PermissionPolicy
from tests.fleet import api, ctl_json, wait_converged, wait_until
from tests.helpers import run_ctl
from tests.hostile_peer import ModifiedDaemon, Scene

pytestmark = pytest.mark.transport_fixed

POLICY = PermissionPolicy.from_config({}, None)  # the default: `npm test` is asked


def _question(command: str, cid: str, worktree: Path, agent: str = "bot", **extra: str) -> Question:
    step = first_step(POLICY, [("Bash", {"command": command, **extra})], agent=agent, task=cid, worktree=worktree)
    assert isinstance(step, Question), step
    return step


def _ask(home: Path, step: Question) -> dict:
    return api(home, "ask", **step.ask_args(), wait=False)


def _task(home: Path, goal: str, project: str = "shop") -> str:
    cid = ctl_json(home, "task", "create", "--project", project, "--from-agent", "boss", "--to-agent", "bot",
                   "--goal", goal, "--branch", "main", "--base-commit", "a" * 40, "--done", "d")["task"]["correlation_id"]
    ctl_json(home, "task", "claim", cid, "--agent", "bot")
    return cid


def test_an_allow_for_the_task_lets_exactly_its_shape_run_until_revoked(fleet, tmp_path):
    alpha = fleet.found("alpha")
    cid, other = _task(alpha.home, "Fix the tests"), _task(alpha.home, "Fix the docs")
    first = _question("npm test", cid, tmp_path, description="Run the test suite")
    assert first.shape == "Bash: npm test"
    asked = _ask(alpha.home, first)
    assert asked["status"] == "open" and "why: Run the test suite" in asked["question"]
    (listed,) = api(alpha.home, "questions", status="open")["questions"]
    assert (listed["machine"], listed["approval"]["reason"], listed["approval"]["shape"]) == (
        "alpha", "Run the test suite", "Bash: npm test")
    # A grant widens an allow only: a deny with --grant, or a bad scope or time, is refused whole.
    for bad, words in ((["deny", "--grant", "task"], "widens an allow"), (["allow", "--grant", "forever"], "grant must"),
                       (["allow", "--grant", "task", "--for", "30d"], "7 days"), (["allow", "--for", "1h"], "--grant")):
        refused = run_ctl(alpha.home, "answer", asked["question_id"], *bad, "--as", "human:ana")
        assert refused.returncode in (1, 64) and words in refused.stderr and refused.stderr.count("\n") == 1, refused
    assert api(alpha.home, "questions", status="open")["count"] == 1
    answered = run_ctl(alpha.home, "answer", asked["question_id"], "allow", "--grant", "task", "--for", "2h",
                       "--as", "human:ana")
    assert answered.returncode == 0 and "for this task" in answered.stdout, answered

    # The same shape on the same task: allowed at once, no question written.
    again = _question("npm   test", cid, tmp_path)  # the same command, written differently
    state = _ask(alpha.home, again)
    assert state["status"] == "granted" and state["grant"]["answer_id"] == answered_id(alpha.home, asked)
    verdict = answer_verdict(state, again)
    assert verdict.allowed and "human:ana's grant for this task" in verdict.reason, verdict
    assert api(alpha.home, "questions", status="open")["count"] == 0
    # Only the task's claimant asks for approval on it: another agent naming the task is asked (and
    # refused, as question.approval says), never granted.
    with pytest.raises(AssertionError, match="not_permitted"):
        _ask(alpha.home, _question("npm test", cid, tmp_path, agent="eve"))
    # Nothing wider: more words, a redirection, another task, another agent's run.
    for command, task in (("npm test --watch", cid), ("npm test > out.txt", cid), ("npm test", other)):
        step = _question(command, task, tmp_path)
        assert _ask(alpha.home, step)["status"] == "open", command
    unshaped = _question("npm test > out.txt", cid, tmp_path)
    assert unshaped.shape is None  # a redirection: palace cannot vouch for every later line like it
    (open_unshaped,) = [q for q in api(alpha.home, "questions", status="open")["questions"]
                        if q["approval"]["argument"] == "npm test > out.txt"]
    refused = run_ctl(alpha.home, "answer", open_unshaped["question_id"], "allow", "--grant", "task", "--as", "human:ana")
    assert refused.returncode in (1, 64) and "for this call only" in refused.stderr, refused

    # Listed where a person looks, then revoked: the same shape is asked again.
    (grant,) = ctl_json(alpha.home, "grant", "list")["grants"]
    assert (grant["scope"], grant["shape"], grant["task"], grant["by"]) == ("task", "Bash: npm test", cid, "human:ana")
    listed_text = run_ctl(alpha.home, "grant", "list").stdout
    assert "Bash: npm test" in listed_text and f"for task {cid}" in listed_text
    who = run_ctl(alpha.home, "who").stdout
    assert "grants in force (1)" in who and f"Bash: npm test\tfor task {cid}\tby human:ana" in who, who
    assert [g["answer_id"] for g in ctl_json(alpha.home, "who")["grants"]] == [grant["answer_id"]]
    revoked = run_ctl(alpha.home, "grant", "revoke", grant["answer_id"])
    assert revoked.returncode == 0, revoked
    assert ctl_json(alpha.home, "grant", "list")["grants"] == []
    assert _ask(alpha.home, _question("npm test", cid, tmp_path))["status"] == "open"
    gone = run_ctl(alpha.home, "grant", "revoke", grant["answer_id"])
    assert gone.returncode != 0 and "no grant in force" in gone.stderr, gone


def test_a_malformed_shape_reason_or_grant_is_refused_in_one_line_and_writes_nothing(fleet, tmp_path):
    """What a client sends with an approval (its shape, its reason) and with an answer (a grant's
    scope and time) is checked: too long, a control character, a lone surrogate, the wrong type."""
    alpha = fleet.found("alpha")
    cid = _task(alpha.home, "Bad input")
    step = _question("npm test", cid, tmp_path)
    before = api(alpha.home, "status")["events"]
    for bad in ({"shape": "x" * 2001}, {"shape": ""}, {"shape": 7}, {"shape": "a\x00b"}, {"reason": "two\nlines"},
                {"reason": "r" * 301}, {"reason": "\ud800"}):
        args = step.ask_args()
        args["approval"] = {**args["approval"], **bad}
        with pytest.raises(AssertionError, match=r"invalid_argument|approval"):
            api(alpha.home, "ask", **args, wait=False)
    assert api(alpha.home, "status")["events"] == before
    asked = _ask(alpha.home, step)
    for bad in (["--grant", "task", "--for", "soon"], ["--grant", "task", "--for", "0s"], ["--grant", ""]):
        refused = run_ctl(alpha.home, "answer", asked["question_id"], "allow", *bad, "--as", "human:ana")
        assert refused.returncode in (1, 64) and refused.stderr.count("\n") == 1, refused
    for bad in ({"grant": ["task"]}, {"grant": "task", "for_s": "8h"}, {"grant": "task", "for_s": True}):
        with pytest.raises(AssertionError, match="invalid_argument"):
            api(alpha.home, "answer", event_id=asked["question_id"], text="allow", **bad, **{"as": "human:ana"})
    for bad in (None, 7, "evt_nope", "x" * 10_000):
        with pytest.raises(AssertionError):
            api(alpha.home, "revoke_grant", answer_id=bad)
    assert api(alpha.home, "questions", status="open")["count"] == 1 and api(alpha.home, "grants")["grants"] == []


def answered_id(home: Path, asked: dict) -> str:
    (state,) = [q for q in api(home, "questions")["questions"] if q["question_id"] == asked["question_id"]]
    return state["answer"]["event_id"]


def test_an_allow_for_the_agent_or_the_project_reaches_its_other_tasks_and_no_one_elses(fleet, tmp_path):
    alpha = fleet.found("alpha")
    cid, other, elsewhere = _task(alpha.home, "One"), _task(alpha.home, "Two"), _task(alpha.home, "Three", "blog")
    asked = _ask(alpha.home, _question("make lint", cid, tmp_path))
    ctl_json(alpha.home, "answer", asked["question_id"], "allow", "--grant", "agent", "--as", "human:ana")
    assert _ask(alpha.home, _question("make lint", other, tmp_path))["status"] == "granted"
    assert _ask(alpha.home, _question("make lint", elsewhere, tmp_path))["status"] == "granted"  # the agent's, anywhere
    # Another agent's run on a task of the same project: not this agent's grant.
    third = ctl_json(alpha.home, "task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent", "eve",
                     "--goal", "Four", "--branch", "main", "--base-commit", "a" * 40, "--done", "d")["task"]
    ctl_json(alpha.home, "task", "claim", third["correlation_id"], "--agent", "eve")
    eve = _question("make lint", third["correlation_id"], tmp_path, agent="eve")
    assert _ask(alpha.home, eve)["status"] == "open"
    # For the project: eve's run on shop is covered, bot's on blog only by the agent grant above.
    asked = _ask(alpha.home, _question("make docs", cid, tmp_path))
    ctl_json(alpha.home, "answer", asked["question_id"], "allow", "--grant", "project", "--as", "human:ana")
    assert _ask(alpha.home, _question("make docs", third["correlation_id"], tmp_path, agent="eve"))["status"] == "granted"
    assert _ask(alpha.home, _question("make docs", elsewhere, tmp_path))["status"] == "open"


def test_a_grant_whose_shape_differs_from_the_request_is_not_an_allow():
    """The client checks what the daemon says: a grant of another shape never lets a request run."""
    step = Question("bot", "human:*", "b", {}, 60, "task_x", "0" * 64, "Bash: npm test")
    state = {"status": "granted", "grant": {"shape": "Bash: npm test --watch", "by": "human:ana"}}
    assert answer_verdict(state, step) == Verdict(False, "palace cannot match the grant it was given to this request "
                                                         "(its shape differs): refused")


async def test_a_revocation_counts_only_from_a_person_the_question_asked(fleet, short_tmp, tmp_path):
    """The question.revoke row: a member's forged revocations — as its own agent, or as the person
    (whose id its daemon does not hold) — are stored and flagged nowhere as a revocation: the grant
    stays in force on every replica. A client may not append one either."""
    scene = Scene(fleet, short_tmp)
    alpha = scene.alpha
    cid = _task(alpha.home, "Guarded")
    asked = _ask(alpha.home, _question("npm test", cid, tmp_path))
    ctl_json(alpha.home, "answer", asked["question_id"], "allow", "--grant", "task", "--as", "human:ana")
    grant_id = answered_id(alpha.home, asked)
    wait_converged(alpha, scene.beta)
    mallory = ModifiedDaemon(scene.mallory)
    at = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    forged = [mallory.say(agent, type="question.revoke", stream="questions", room="general", to_agent="bot",
                          ack_of=grant_id, created_at=at, body="revoked").id for agent in ("mallory", "human:ana")]
    peer = await scene.connect()
    try:
        await peer.handshake()
        await mallory.push(peer)
        await peer.drain(1.0)
    finally:
        await peer.aclose()
    wait_converged(alpha, scene.beta)
    for daemon in (alpha, scene.beta):
        for event_id in forged:
            assert api(daemon.home, "get_event", event_id=event_id)["type"] == "question.revoke"  # stored
        assert [g["answer_id"] for g in api(daemon.home, "grants")["grants"]] == [grant_id]
    assert _ask(alpha.home, _question("npm test", cid, tmp_path))["status"] == "granted"
    appended = run_ctl(alpha.home, "append", "--type", "question.revoke", "--stream", "questions", "--room", "general",
                       "--from-agent", "human:ana", "--ack-of", grant_id, "--body", "x")
    assert appended.returncode != 0, appended
    # beta holds no person: its revocation would not count, so it is refused where it is written.
    refused = run_ctl(scene.beta.home, "grant", "revoke", grant_id, "--as", "human:ana")
    assert refused.returncode != 0 and "not a person this daemon holds" in refused.stderr, refused
    # The person revokes on alpha: ended on every replica.
    ctl_json(alpha.home, "grant", "revoke", grant_id)
    wait_until(lambda: api(scene.beta.home, "grants")["grants"] == [], "the revocation to reach beta")
    scene.still_serving_and_converging("forged revocations")


def test_grants_in_force_reads_no_grant_from_a_malformed_answer():
    """A peer's answer whose grant is not one (an unknown scope, a time past the bound) grants nothing."""
    from palace_proto.questions import AskTerms, QuestionState

    question = {"id": "evt_q", "type": "question.ask", "from_agent": "bot", "to_agent": "human:ana",
                "correlation_id": "task_t", "created_at": "2026-12-06T10:00:00.000000Z"}
    approval = {"tool": "Bash", "argument": "npm test", "input_sha256": "0" * 64, "shape": "Bash: npm test"}
    for grant in ({"scope": "everything", "for_s": 60}, {"scope": "task", "for_s": 10**9}, {"scope": "task", "x": 1},
                  "task"):
        answer = {"id": "evt_a", "type": "question.answer", "from_agent": "human:ana", "ack_of": "evt_q",
                  "created_at": "2026-12-06T10:01:00.000000Z", "body": "allow", "metadata": {"grant": grant}}
        state = QuestionState(question, AskTerms(("allow", "deny"), None, approval), "answered", answer, ())
        assert grants_in_force([(state, "shop")], [], lambda e: True, "2026-12-06T10:02:00.000000Z") == [], grant
    answer["metadata"] = {"grant": {"scope": "task", "for_s": 3600}}
    state = QuestionState(question, AskTerms(("allow", "deny"), None, approval), "answered", answer, ())
    (grant,) = grants_in_force([(state, "shop")], [], lambda e: True, "2026-12-06T10:02:00.000000Z")
    assert grant.until == "2026-12-06T11:01:00.000000Z"
    assert not grant.covers("Bash: npm test", agent="bot", task="task_t", project="shop",
                            now="2026-12-06T11:01:00.000001Z")  # past its time
