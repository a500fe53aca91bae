"""A launched run's permission requests, answered by palace: the policy, else a person (issue 28).

Owns what every harness's hand-off point shares, whatever it is (Claude Code's approve tool over
MCP, Gemini CLI's ``BeforeTool`` command hook): judging a request by the ``[permissions]`` policy
(``judge``), the question a person is asked about the rest (``question_for``: its text, its
``approval`` marker, the arguments of the daemon's ``ask``), what their answer — or its absence —
means (``answer_verdict``), and the whole round trip over the synchronous client (``request``).

A request is one or more *calls*, each a tool as the policy names it and its input: a harness's
one tool call may stand for several (Gemini's ``web_fetch`` names up to 20 URLs in one prompt),
and it is allowed only if each of them is. The harness's own vocabulary is mapped to the policy's
by its adapter (``palacectl.approve_hook`` for Gemini), never here.

Error handling: everything that goes wrong is a deny with a reason the model reads, never a yes —
a policy that cannot be read, a daemon that cannot be asked, silence. ``judge``, ``question_for``
and ``answer_verdict`` are pure (no IO, no clock), so async code calls them around its own call of
the daemon, as the MCP approve tool can::

    calls = [(tool_name, tool_input)]
    decision = judge(policy, calls)                      # allow / deny: Verdict(…, decision.reason)
    question = question_for(policy, calls, agent=agent, task=task)
    try:
        state = await daemon.call("ask", **question.ask_args())
    except (ApiError, DaemonUnreachable, OSError) as exc:
        verdict = ask_failed(exc)
    else:
        verdict = answer_verdict(state, question.timeout_s)

Imports ``palacectl.client`` and the policy; never palaced, never trio.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from palace_proto.errors import ApiError, ProtocolError
from palace_proto.questions import MAX_APPROVAL_ARGUMENT_CHARS, MAX_APPROVAL_TOOL_CHARS
from palace_proto.text import printable

from .client import Client, DaemonUnreachable
from .files import ConfigUnreadable, read_config
from .permission_policy import Decision, PermissionPolicy, PolicyError, main_argument

__all__ = ["ALLOW", "ASK_CHOICES", "Call", "Question", "Verdict", "answer_verdict", "ask_failed", "judge",
           "load_policy", "policy_unreadable", "question_for", "request"]

#: one tool call as the policy judges it: the tool's name in the policy's vocabulary, and its input
Call = tuple[str, Mapping[str, Any]]
#: the choices of an approval question; ``ALLOW`` is the one answer that lets the call run
ALLOW: Final = "allow"
ASK_CHOICES: Final = (ALLOW, "deny")
# Why 100 and 1,000 characters: what a question's approval marker may hold (proto/questions.py);
# the question's text shows the same, cut the same way.
_TOOL_CHARS: Final = MAX_APPROVAL_TOOL_CHARS - 1
_ARGUMENT_CHARS: Final = MAX_APPROVAL_ARGUMENT_CHARS


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """What the harness is told: the call runs (``allowed``) or not, and why (a refusal's reason
    is what the model reads)."""

    allowed: bool
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class Question:
    """The question a person is asked about a request the policy leaves to them."""

    asked_by: str
    to: str
    body: str
    approval: dict[str, str]
    timeout_s: int
    task: str | None

    def ask_args(self) -> dict[str, Any]:
        """The arguments of the daemon's ``ask`` operation (it waits for the answer or the timeout)."""
        return {"from_agent": self.asked_by, "to": self.to, "body": self.body, "choices": list(ASK_CHOICES),
                "timeout_s": self.timeout_s, "correlation_id": self.task, "approval": dict(self.approval)}


def load_policy(home: Path, runner: str | None) -> PermissionPolicy:
    """``[permissions]`` of ``home``'s ``config.toml`` for ``runner``, read at each request (an
    edit applies to the next one).

    Raises:
        PolicyError: the file, or its ``[permissions]``, is not readable as a policy.
    """
    try:
        config = read_config(home)
    except ConfigUnreadable as exc:
        raise PolicyError(str(exc)) from None
    return PermissionPolicy.from_config(config, runner)


def judge(policy: PermissionPolicy, calls: Sequence[Call]) -> Decision:
    """The policy's decision on a request: the first call refused refuses it; it is allowed if
    every call is; anything else is a question. No calls at all is refused (nothing to judge is
    not a yes)."""
    if not calls:
        return Decision("deny", None, "palace found no tool call to judge in this request: refused")
    decisions = [policy.decide(tool, tool_input) for tool, tool_input in calls]
    for decision in decisions:
        if decision.verdict == "deny":
            return decision
    asked = [d for d in decisions if d.verdict != "allow"]
    return asked[0] if asked else decisions[0]


def question_for(policy: PermissionPolicy, calls: Sequence[Call], *, agent: str, task: str | None) -> Question:
    """The question about ``calls`` (those the policy did not allow are named: what the person
    decides), to the policy's ``ask_to``, marked as an approval so the task shows it waiting."""
    pending = [(tool, tool_input) for tool, tool_input in calls if policy.decide(tool, tool_input).verdict != "allow"]
    pending = pending or list(calls)
    tool = pending[0][0]
    argument = " ".join(main_argument(name, tool_input) for name, tool_input in pending)
    if len(argument) > _ARGUMENT_CHARS:
        argument = argument[:_ARGUMENT_CHARS - 1] + "…"  # (what approval.argument holds)
    body = f"{agent} asks to run {tool}: {argument}" + (f"\n(task {task})" if task else "") + "\nallow or deny?"
    return Question(agent, policy.ask_to, body, {"tool": printable(tool, _TOOL_CHARS), "argument": argument},
                    policy.timeout_s, task)


def answer_verdict(state: Mapping[str, Any], timeout_s: int) -> Verdict:
    """What the daemon's ``ask`` returned (the question's state), as a verdict: only an answer of
    ``allow`` allows; a ``deny``, silence, or a state that says neither, refuse."""
    answer = state.get("answer") if isinstance(state.get("answer"), Mapping) else {}
    question_id = state.get("question_id")
    if state.get("status") == "answered" and answer.get("text") == ALLOW:
        return Verdict(True, f"allowed by {answer.get('by')} (question {question_id})")
    if state.get("status") == "answered":
        return Verdict(False, f"{answer.get('by')} said no (question {question_id}): do not do it; find another "
                              "way or reply blocked with what you need")
    return Verdict(False, f"nobody answered within {timeout_s} s (question {question_id}): refused, "
                          "silence is never a yes")


def policy_unreadable(exc: Exception) -> Verdict:
    return Verdict(False, f"palace's permission policy cannot be read ({exc}): refused")


def ask_failed(exc: Exception) -> Verdict:
    return Verdict(False, f"palace could not ask a person ({exc}): refused")


def request(home: Path, calls: Sequence[Call], *, agent: str, task: str | None, runner: str | None,
            policy: PermissionPolicy | None = None, bookkeeping: bool = False,
            question_timeout_s: int | None = None) -> Verdict:
    """A request decided from start to end, synchronously: the policy (``policy``, else read from
    ``home`` for ``runner``), and for what it leaves open a question to a person through the daemon
    on ``home``, waited for.

    Args:
        bookkeeping: the harness's own bookkeeping (a to-do list, a progress note) that changes
            nothing outside the run: allowed where the policy would ask (its deny rules still refuse).
        question_timeout_s: at most this long for the person (the harness's own limit on the hand-off
            may be shorter than the policy's timeout); the policy's timeout otherwise.

    Error handling: never raises for what a daemon, a config or an answer does; each is a refusal.
    """
    if policy is None:
        try:
            policy = load_policy(home, runner)
        except PolicyError as exc:
            return policy_unreadable(exc)
    decision = judge(policy, calls)
    if decision.verdict == "allow":
        return Verdict(True, decision.reason)
    if decision.verdict == "deny":
        return Verdict(False, decision.reason)
    if bookkeeping:
        return Verdict(True, "the harness's own bookkeeping: allowed unless the policy denies it")
    if question_timeout_s is not None and question_timeout_s < policy.timeout_s:
        policy = dataclasses.replace(policy, timeout_s=max(1, question_timeout_s))
    question = question_for(policy, calls, agent=agent, task=task)
    try:
        with Client(home, client_name="palacectl-approve") as client:
            state = client.call("ask", **question.ask_args())
    except (ApiError, ProtocolError, DaemonUnreachable, OSError) as exc:
        return ask_failed(exc)
    if not isinstance(state, Mapping):
        return ask_failed(ValueError("palaced's answer to ask is not a question's state"))
    return answer_verdict(state, question.timeout_s)
