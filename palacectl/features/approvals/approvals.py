"""A launched run's permission requests, answered by palace: the policy, else a person (issue 28;
issue 43).

Owns what every harness's hand-off point shares, whatever it is (Claude Code's approve tool over
MCP, Gemini CLI's ``BeforeTool`` command hook): where the run works (``worktree_of``: the folder a
file tool's path must stay in) and how a path is resolved (``real_path``); judging a request by
the ``[permissions]`` policy (``judge``); the question a person is asked about the rest
(``question_for``: its text, its ``approval`` marker carrying the *whole* request, the arguments
of the daemon's ``ask``); what their answer — or its absence — means (``answer_verdict``: only an
``allow`` of exactly this request); ``first_step``, which is either the verdict or the question;
and the whole round trip over the synchronous client (``request``).

A request is one or more *calls*, each a tool as the policy names it and its input: a harness's
one tool call may stand for several (Gemini's ``web_fetch`` names up to 20 URLs in one prompt),
and it is allowed only if each of them is. The harness's own vocabulary is mapped to the policy's
by its adapter (``approve_hook`` for Gemini), never here. What a person is shown and
answers is the harness's own call (``asked``: its tool name and input, ``request_text``), whole:
an allow is bound to its sha256, and the tool lets run exactly the input it hashed.

Error handling: everything that goes wrong is a deny with a reason the model reads, never a yes —
a policy that cannot be read, a request too long to show whole, a daemon that cannot be asked,
silence, an answer to another request. ``judge``, ``question_for``, ``first_step`` and
``answer_verdict`` do no IO but resolve paths (``real_path``, passed to the policy), so async code
calls them around its own call of the daemon, as the MCP approve tool does::

    step = first_step(policy, calls, agent=agent, task=task, worktree=worktree)
    if isinstance(step, Verdict):
        verdict = step                                   # the policy decided, or the request is refused
    else:
        try:
            state = await daemon.call("ask", **step.ask_args())
        except (ApiError, DaemonUnreachable, OSError) as exc:
            verdict = ask_failed(exc)
        else:
            verdict = answer_verdict(state, step)

Imports ``palacectl.client`` and the policy; never palaced, never trio.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from palace_proto.errors import ApiError, ProtocolError
from palace_proto.questions import (
    MAX_APPROVAL_ARGUMENT_CHARS,
    MAX_APPROVAL_INPUT_BYTES,
    MAX_APPROVAL_REASON_CHARS,
    MAX_APPROVAL_TOOL_CHARS,
    approval_sha256,
)
from palace_proto.text import printable

from ...client import Client, DaemonUnreachable
from ...files import ConfigUnreadable, read_config
from .permission_policy import Decision, PermissionPolicy, PolicyError, main_argument
from .shapes import shape_of

__all__ = ["ALLOW", "ASK_CHOICES", "Call", "Question", "Unshowable", "Verdict", "answer_verdict", "ask_failed",
           "first_step", "judge", "load_policy", "policy_unreadable", "question_for", "real_path", "reason_of", "request",
           "request_text", "worktree_of"]

#: one tool call as the policy judges it: the tool's name in the policy's vocabulary, and its input
Call = tuple[str, Mapping[str, Any]]
#: the choices of an approval question; ``ALLOW`` is the one answer that lets the call run
ALLOW: Final = "allow"
ASK_CHOICES: Final = (ALLOW, "deny")
# Why 100 and 1,000 characters: what a question's approval marker may hold (proto/questions.py);
# the question's text shows the same, cut the same way. The whole request is the marker's input.
_TOOL_CHARS: Final = MAX_APPROVAL_TOOL_CHARS - 1
_ARGUMENT_CHARS: Final = MAX_APPROVAL_ARGUMENT_CHARS - 1  # (printable adds its "…" past them)


class Unshowable(ValueError):
    """A request palace cannot show a person whole (too long, or not JSON): never asked, refused."""


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """What the harness is told: the call runs (``allowed``) or not, and why (a refusal's reason
    is what the model reads)."""

    allowed: bool
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class Question:
    """The question a person is asked about a request the policy leaves to them; ``input_sha256``
    is the sha256 of ``approval["input"]``, the whole request, which an allow must be bound to."""

    asked_by: str
    to: str
    body: str
    approval: dict[str, str]
    timeout_s: int
    task: str | None
    input_sha256: str
    #: what a person's grant would be bound to (``shapes.shape_of``); None: this call only
    shape: str | None = None

    def ask_args(self) -> dict[str, Any]:
        """The arguments of the daemon's ``ask`` operation (it waits for the answer or the timeout;
        a grant in force that covers the request's shape answers at once)."""
        return {"from_agent": self.asked_by, "to": self.to, "body": self.body, "choices": list(ASK_CHOICES),
                "timeout_s": self.timeout_s, "correlation_id": self.task, "approval": dict(self.approval)}


def real_path(path: Path) -> Path:
    """``path`` with its symlinks followed and ``..`` resolved (the policy's ``resolve``)."""
    return Path(os.path.realpath(path))


def worktree_of(folder: str | Path | None, *, home: Path | None) -> Path | None:
    """The run's worktree, from the folder the harness runs it in (the MCP server's working
    directory, the hook's ``cwd``), resolved; None — so every file tool is asked — when there is
    none, it is not an absolute folder, or it is one a file tool must never roam whole: the
    file system's root, the user's home, or a folder holding palace's home (``home``: its
    config.toml and identity key)."""
    if folder is None or not str(folder) or not Path(folder).is_absolute():
        return None
    try:
        real = real_path(Path(folder))
        if not real.is_dir():
            return None
        user_home = real_path(Path.home())
    except (OSError, RuntimeError):
        return None
    if real == Path(real.anchor) or real == user_home:
        return None
    if home is not None:
        palace = real_path(home)
        if real == palace or real in palace.parents:
            return None
    return real


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


def judge(policy: PermissionPolicy, calls: Sequence[Call], worktree: Path | None = None) -> Decision:
    """The policy's decision on a request (file tools judged inside ``worktree``, their paths
    resolved on this machine): the first call refused refuses it; it is allowed if every call is;
    anything else is a question. No calls at all is refused (nothing to judge is not a yes)."""
    if not calls:
        return Decision("deny", None, "palace found no tool call to judge in this request: refused")
    decisions = [policy.decide(tool, tool_input, worktree, real_path) for tool, tool_input in calls]
    for decision in decisions:
        if decision.verdict == "deny":
            return decision
    asked = [d for d in decisions if d.verdict != "allow"]
    return asked[0] if asked else decisions[0]


def request_text(asked: Call) -> str:
    """The whole request a person is shown and answers: the harness's tool name and input as JSON
    (keys sorted, indented, every character past ASCII escaped, so nothing hides in look-alike or
    invisible characters). Its sha256 is what an answer is bound to.

    Raises:
        Unshowable: not JSON (a NaN, a value JSON has no word for), or over
            MAX_APPROVAL_INPUT_BYTES (a person cannot be asked to read it whole).
    """
    tool_name, tool_input = asked
    try:
        text = json.dumps({"tool_name": tool_name, "tool_input": tool_input}, sort_keys=True, ensure_ascii=True,
                          indent=2, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise Unshowable(f"the request is not JSON palace can show a person ({type(exc).__name__})") from None
    if len(text) > MAX_APPROVAL_INPUT_BYTES:
        raise Unshowable(f"the request is {len(text)} bytes as text, over the {MAX_APPROVAL_INPUT_BYTES} a person is "
                         "shown whole")
    return text


def question_for(policy: PermissionPolicy, calls: Sequence[Call], *, agent: str, task: str | None,
                 worktree: Path | None = None, asked: Call | None = None) -> Question:
    """The question about ``calls`` (those the policy did not allow are named in its one line:
    what the person decides), to the policy's ``ask_to``, marked as an approval so the task shows
    it waiting, carrying ``asked`` — the harness's own call (by default the one call of ``calls``,
    or all of them) — whole.

    Raises:
        Unshowable: the request cannot be shown whole (``request_text``).
    """
    if asked is None:
        asked = calls[0] if len(calls) == 1 else ("calls", {"calls": [list(call) for call in calls]})
    text = request_text(asked)
    pending = [(tool, tool_input) for tool, tool_input in calls
               if policy.decide(tool, tool_input, worktree, real_path).verdict != "allow"]
    pending = pending or list(calls)
    tool = pending[0][0]
    argument = printable(" ".join(main_argument(name, tool_input) for name, tool_input in pending), _ARGUMENT_CHARS)
    reason = reason_of(asked)
    shape = shape_of(calls, worktree, real_path)
    body = (f"{agent} asks to run {tool}: {argument}" + (f"\nwhy: {reason}" if reason else "")
            + (f"\n(task {task})" if task else "") + "\nallow or deny?")
    approval = {"tool": printable(tool, _TOOL_CHARS), "argument": argument, "input": text}
    if shape is not None:
        approval["shape"] = shape
    if reason:
        approval["reason"] = reason
    return Question(agent, policy.ask_to, body, approval, policy.timeout_s, task, approval_sha256(text), shape)


def reason_of(asked: Call) -> str | None:
    """The run's own reason for the call, where its harness gives one (Claude Code's ``Bash``
    ``description``; Gemini CLI's ``description``), on one line, cut to what a question shows."""
    _tool, tool_input = asked
    value = tool_input.get("description") if isinstance(tool_input, Mapping) else None
    if not isinstance(value, str) or not value.strip():
        return None
    return printable(" ".join(value.split()), MAX_APPROVAL_REASON_CHARS - 1)


def first_step(policy: PermissionPolicy, calls: Sequence[Call], *, agent: str, task: str | None,
               worktree: Path | None = None, asked: Call | None = None, bookkeeping: bool = False,
               question_timeout_s: int | None = None) -> Verdict | Question:
    """What the policy decides (a ``Verdict``), or the ``Question`` to ask a person and wait on.

    Args:
        bookkeeping: the harness's own bookkeeping (a to-do list, a progress note) that changes
            nothing outside the run: allowed where the policy would ask (its deny rules still refuse).
        question_timeout_s: at most this long for the person (the harness's own limit on the hand-off
            may be shorter than the policy's timeout); the policy's timeout otherwise.
    """
    decision = judge(policy, calls, worktree)
    if decision.verdict == "allow":
        return Verdict(True, decision.reason)
    if decision.verdict == "deny":
        return Verdict(False, decision.reason)
    if bookkeeping:
        return Verdict(True, "the harness's own bookkeeping: allowed unless the policy denies it")
    if question_timeout_s is not None and question_timeout_s < policy.timeout_s:
        policy = dataclasses.replace(policy, timeout_s=max(1, question_timeout_s))
    try:
        return question_for(policy, calls, agent=agent, task=task, worktree=worktree, asked=asked)
    except Unshowable as exc:
        return Verdict(False, f"palace would ask a person about this ({decision.reason}), but {exc}: refused; split "
                              "it into smaller steps")


def answer_verdict(state: Mapping[str, Any], question: Question) -> Verdict:
    """What the daemon's ``ask`` returned (the question's state), as a verdict: only an answer of
    ``allow`` to a question whose whole request is this one (its ``input_sha256``) allows; a
    ``deny``, silence, an answer to another request, or a state that says none of it, refuse."""
    raw_answer = state.get("answer")
    answer = raw_answer if isinstance(raw_answer, Mapping) else {}
    question_id = state.get("question_id")
    if state.get("status") == "granted":
        raw_grant = state.get("grant")
        grant = raw_grant if isinstance(raw_grant, Mapping) else {}
        if question.shape is None or grant.get("shape") != question.shape:
            return Verdict(False, "palace cannot match the grant it was given to this request (its shape differs): "
                                  "refused")
        return Verdict(True, f"allowed by {grant.get('by')}'s grant for this {grant.get('scope')} until "
                             f"{grant.get('until')} (answer {grant.get('answer_id')})")
    if state.get("status") == "answered" and answer.get("text") == ALLOW:
        raw_approval = state.get("approval")
        approval = raw_approval if isinstance(raw_approval, Mapping) else {}
        if approval.get("input_sha256") != question.input_sha256:
            return Verdict(False, f"{answer.get('by')} allowed question {question_id}, but palace cannot match what "
                                  "they were shown to this request (its sha256 differs): refused")
        return Verdict(True, f"allowed by {answer.get('by')} (question {question_id})")
    if state.get("status") == "answered":
        return Verdict(False, f"{answer.get('by')} said no (question {question_id}): do not do it; find another "
                              "way or reply blocked with what you need")
    return Verdict(False, f"nobody answered within {question.timeout_s} s (question {question_id}): refused, "
                          "silence is never a yes")


def policy_unreadable(exc: Exception) -> Verdict:
    return Verdict(False, f"palace's permission policy cannot be read ({exc}): refused")


def ask_failed(exc: Exception) -> Verdict:
    return Verdict(False, f"palace could not ask a person ({exc}): refused")


def request(home: Path, calls: Sequence[Call], *, agent: str, task: str | None, runner: str | None,
            policy: PermissionPolicy | None = None, bookkeeping: bool = False,
            question_timeout_s: int | None = None, worktree: Path | None = None,
            asked: Call | None = None) -> Verdict:
    """A request decided from start to end, synchronously: the policy (``policy``, else read from
    ``home`` for ``runner``), and for what it leaves open a question to a person through the daemon
    on ``home``, waited for (``first_step`` says what the arguments mean).

    Error handling: never raises for what a daemon, a config or an answer does; each is a refusal.
    """
    if policy is None:
        try:
            policy = load_policy(home, runner)
        except PolicyError as exc:
            return policy_unreadable(exc)
    step = first_step(policy, calls, agent=agent, task=task, worktree=worktree, asked=asked, bookkeeping=bookkeeping,
                      question_timeout_s=question_timeout_s)
    if isinstance(step, Verdict):
        return step
    try:
        with Client(home, client_name="palacectl-approve") as client:
            state = client.call("ask", **step.ask_args())
    except (ApiError, ProtocolError, DaemonUnreachable, OSError) as exc:
        return ask_failed(exc)
    if not isinstance(state, Mapping):
        return ask_failed(ValueError("palaced's answer to ask is not a question's state"))
    return answer_verdict(state, step)
