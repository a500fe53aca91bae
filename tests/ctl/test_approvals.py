"""palacectl.approvals, the harness-neutral part of a run's permission requests (issue 28): how a
request of several calls is judged, the question a person gets (its text and approval marker, as
the approve tool has always asked it), and what an answer — or silence — means."""

from __future__ import annotations

import pytest

from palacectl.approvals import ASK_CHOICES, answer_verdict, judge, question_for, request
from palacectl.permission_policy import PermissionPolicy

POLICY = PermissionPolicy.parse({"allow": ["Read", "WebFetch(https://docs.python.org/*)"], "deny": ["Bash(git push*)"],
                                 "ask_to": "human:ana", "timeout": "2m"})


def test_a_request_is_refused_by_any_call_and_allowed_only_by_all():
    fetch_ok, fetch_other = ("WebFetch", {"url": "https://docs.python.org/3/"}), ("WebFetch", {"url": "https://x.io"})
    assert judge(POLICY, [fetch_ok]).verdict == "allow"
    assert judge(POLICY, [fetch_ok, fetch_other]).verdict == "ask"
    refused = judge(POLICY, [fetch_ok, ("Bash", {"command": "git push"}), fetch_other])
    assert refused.verdict == "deny" and refused.rule == "Bash(git push*)"
    assert judge(POLICY, []).verdict == "deny"


def test_the_question_names_what_the_policy_left_open_and_marks_it_an_approval():
    question = question_for(POLICY, [("WebFetch", {"url": "https://docs.python.org/3/"}),
                                     ("WebFetch", {"url": "https://x.io"})], agent="linux-gemini", task="task_7")
    assert question.body == "linux-gemini asks to run WebFetch: https://x.io\n(task task_7)\nallow or deny?"
    assert question.approval == {"tool": "WebFetch", "argument": "https://x.io"}
    assert question.ask_args() == {"from_agent": "linux-gemini", "to": "human:ana", "body": question.body,
                                   "choices": list(ASK_CHOICES), "timeout_s": 120, "correlation_id": "task_7",
                                   "approval": {"tool": "WebFetch", "argument": "https://x.io"}}
    long = question_for(POLICY, [("Bash", {"command": "x" * 5000})], agent="a", task=None)
    assert len(long.approval["argument"]) == 1000 and long.approval["argument"].endswith("…")
    assert long.body.endswith("…\nallow or deny?") and "(task" not in long.body
    odd = question_for(POLICY, [("mcp\u202e_tool", {"a": 1})], agent="a", task=None)
    assert odd.approval == {"tool": "mcp\\u202e_tool", "argument": '{"a":1}'}


@pytest.mark.parametrize(("state", "allowed", "words"), [
    ({"status": "answered", "question_id": "q1", "answer": {"by": "human:ana", "text": "allow"}}, True,
     "allowed by human:ana (question q1)"),
    ({"status": "answered", "question_id": "q1", "answer": {"by": "human:ana", "text": "deny"}}, False,
     "human:ana said no (question q1)"),
    ({"status": "answered", "question_id": "q1", "answer": {"by": "human:ana", "text": "Allow!"}}, False, "said no"),
    ({"status": "expired", "question_id": "q1"}, False, "nobody answered within 120 s (question q1)"),
    ({"status": "open", "question_id": "q1"}, False, "silence is never a yes"),
    ({"status": "answered", "answer": "allow"}, False, "said no"),
    ({}, False, "silence is never a yes"),
])
def test_only_an_allow_allows(state, allowed, words):
    verdict = answer_verdict(state, 120)
    assert verdict.allowed is allowed and words in verdict.reason


def test_a_request_that_cannot_be_asked_or_read_is_refused(short_tmp):
    home = short_tmp / "nobody"
    home.mkdir()
    unasked = request(home, [("Bash", {"command": "make deploy"})], agent="a", task=None, runner=None)
    assert not unasked.allowed and unasked.reason.startswith("palace could not ask a person (palaced is not running")
    assert request(home, [("Read", {"file_path": "/w/a"})], agent="a", task=None, runner=None).allowed
    assert request(home, [("update_topic", {})], agent="a", task=None, runner=None, bookkeeping=True).allowed
    denied = request(home, [("Bash", {"command": "git push"})], agent="a", task=None, runner=None, bookkeeping=True)
    assert not denied.allowed and "Bash(git push*)" in denied.reason
    (home / "config.toml").write_text('[permissions]\nallow = "Read"\n')
    broken = request(home, [("Read", {"file_path": "/w/a"})], agent="a", task=None, runner=None)
    assert not broken.allowed and "cannot be read" in broken.reason and "must be a list of rules" in broken.reason
    (home / "config.toml").write_bytes(b"\xff")
    assert "cannot be read" in request(home, [("Read", {})], agent="a", task=None, runner=None).reason
