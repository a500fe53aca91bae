"""Questions to a person: an agent asks, a person answers, and every replica agrees who answered.

Owns: the two event types (``question.ask``, ``question.answer``), what their metadata says
(``AskTerms``: the choices, if any, and when the question expires), the checks on both, and
``settle``: the state of one question from its answers, the same on every replica.

Theory of operation
-------------------
An agent (or an unattended run) asks ``human:NAME`` — or ``human:*``, anyone — a question and
waits. The question is an event like any other: signed, replicated, seen by every daemon. An
answer is a ``question.answer`` event that acknowledges it (``ack_of``), written as the person.

Only a *proven* person answers: an event written as ``human:NAME`` by the daemon that holds that
id (people's ids are granted by the palace CA: ``agents.py``), the caller's ``proven`` says so. A
question to ``human:ana`` is answered by ana only; one to ``human:*`` by any proven person. A
question with choices takes one of them (matched without regard to case). An answer written after
the question expired (by the answerer's clock, as for claims and leases) does not count.

Several answers can exist — two people answering at once, or on two sides of a partition. They are
ordered by ``(created_at, event id)``, the order every replica computes from the same events; the
first that counts wins, and every other is *flagged* with why it did not count. So each replica
settles a question the same way once it holds the same events, whatever order they arrived in.

A run's permission request is a question marked ``approval``: the harness's tool, its main
argument in one line, and the *whole* request with its sha256 (``check_approval``, what a client
sends; ``approval_marker``, what the metadata holds: the request inline when short, else in an
artifact the question event names, whose id is that sha256's). The run lets a request go only if
the answered question's sha256 is its own (``palacectl.approvals``), so an allow is an allow of
exactly what the person was shown.

Pure: stdlib only; no clock (``now`` is a parameter), no IO.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from .authority import ANY_AGENT, ASKED_PERSON, CLAIMANT, Rule, Verdict, counts_in_order, judge, rule_named
from .errors import ValidationError
from .event_fields import PublicEvent
from .identity import HUMAN_PREFIX, check_agent_id, is_human, order_key
from .ids import artifact_id_for_sha256
from .question_grants import REVOKE
from .stamps import STAMP_RE, add_seconds, seconds_between

__all__ = [
    "ANSWER", "ASK", "ANYONE", "DEFAULT_TIMEOUT_S", "MAX_APPROVAL_ARGUMENT_CHARS", "MAX_APPROVAL_INLINE_BYTES",
    "MAX_APPROVAL_INPUT_BYTES", "MAX_APPROVAL_REASON_CHARS", "MAX_APPROVAL_TOOL_CHARS", "REVOKE", "MAX_CHOICES",
    "MAX_CHOICE_CHARS", "MAX_TIMEOUT_S",
    "MIN_TIMEOUT_S", "QUESTION_ROOM", "QUESTION_STREAM", "MAX_ANSWERS_PER_ORIGIN", "AskTerms", "QuestionState",
    "approval_marker", "approval_sha256", "ask_metadata", "asks_approval", "is_approval", "check_addressee",
    "check_approval", "check_approval_marker", "check_choices", "check_timeout", "match_choice", "settle",
]

ASK: Final = "question.ask"
ANSWER: Final = "question.answer"
#: ``to`` of a question anyone (any proven person) may answer
ANYONE: Final = HUMAN_PREFIX + "*"
#: where questions live unless the asker says otherwise
QUESTION_STREAM: Final = "questions"
QUESTION_ROOM: Final = "general"
# Why 30 minutes: long enough for a person to notice a notification and answer from a phone;
# short enough that a run waiting on nobody gives up within a working session.
DEFAULT_TIMEOUT_S: Final = 30 * 60
# Why 1 s and 7 days: a script may ask with a short fuse (and gets exit 2, never a yes); longer
# than a week is a task, not a wait.
MIN_TIMEOUT_S: Final = 1
MAX_TIMEOUT_S: Final = 7 * 86400
# Why 12 choices of 100 characters: a question is answered with one click on a phone; more is a form.
MAX_CHOICES: Final = 12
MAX_CHOICE_CHARS: Final = 100
# Why 100 and 1,000 characters: an approval names a harness tool (Bash, Edit, mcp__x__y) and the
# command or path it is about in one line a person reads first; more is cut by the asker (the
# whole request is the marker's input, never cut).
MAX_APPROVAL_TOOL_CHARS: Final = 100
MAX_APPROVAL_ARGUMENT_CHARS: Final = 1000
# Why 4 KiB: the whole request rides in the question's metadata up to this (metadata is bounded at
# 64 KiB on every daemon, and JSON escaping may grow text sixfold); longer, it is an artifact the
# question event names, which travels with it to every replica.
MAX_APPROVAL_INLINE_BYTES: Final = 4096
# Why 1 MiB: what a person can be asked to read whole before one click (the dashboard shows it on
# the page); a longer request cannot be shown whole, so it is refused, never cut.
MAX_APPROVAL_INPUT_BYTES: Final = 1 << 20
# Why 300 characters: the run's own reason for a call (Claude Code's Bash ``description``), one
# line a person reads beside the command.
MAX_APPROVAL_REASON_CHARS: Final = 300
# Why 2,000 characters: a shape is a command's words or a path (proto/grants.py, MAX_SHAPE_CHARS).
_MAX_SHAPE_CHARS: Final = 2000
_SHA256_RE: Final = re.compile(r"^[0-9a-f]{64}$")


def check_addressee(to: Any) -> str:
    """``human:NAME`` or ``human:*``.

    Raises:
        ValidationError: anything else (an agent's id, an empty value).
    """
    if not isinstance(to, str) or not (to == ANYONE or is_human(to)):
        raise ValidationError(f"to={to!r}: a question goes to a person, human:NAME, or to anyone, human:*",
                              field="to")
    if to != ANYONE:
        check_agent_id(to, field="to")
    return to


def check_choices(choices: Any) -> tuple[str, ...] | None:
    """The choices offered (None: a free-text answer): 2..MAX_CHOICES distinct, non-empty, short.

    Raises:
        ValidationError: naming what is wrong.
    """
    if choices is None:
        return None
    if not isinstance(choices, (list, tuple)) or not all(isinstance(c, str) for c in choices):
        raise ValidationError("choices must be a list of strings (--choices yes,no)", field="choices")
    cleaned = tuple(c.strip() for c in choices)
    if not 2 <= len(cleaned) <= MAX_CHOICES:
        raise ValidationError(f"choices: offer 2 to {MAX_CHOICES} (or none, for a free-text answer)", field="choices")
    for choice in cleaned:
        if not choice or len(choice) > MAX_CHOICE_CHARS or any(ch < " " for ch in choice):
            raise ValidationError(f"choices: each is 1 to {MAX_CHOICE_CHARS} characters on one line ({choice!r})",
                                  field="choices")
    if len({c.casefold() for c in cleaned}) != len(cleaned):
        raise ValidationError("choices: each must differ from the others (case aside)", field="choices")
    return cleaned


def check_timeout(seconds: Any) -> int:
    """Raises ValidationError unless ``seconds`` is an integer from MIN_TIMEOUT_S to MAX_TIMEOUT_S."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not MIN_TIMEOUT_S <= seconds <= MAX_TIMEOUT_S:
        raise ValidationError(f"timeout: from {MIN_TIMEOUT_S} s to {MAX_TIMEOUT_S // 86400} days (e.g. 30m, 2h)",
                              field="timeout_s")
    return seconds


def asks_approval(metadata: Any) -> bool:
    """Whether a question's ``metadata`` marks it as a run's permission request (``question.approval``)."""
    return isinstance(metadata, Mapping) and metadata.get("approval") is not None


def is_approval(event: PublicEvent) -> bool:
    """Whether ``event`` is a question marked as a run's permission request (``question.approval``)."""
    return event.get("type") == ASK and asks_approval(event.get("metadata"))


def approval_sha256(text: str) -> str:
    """The hex sha256 of a request's whole text (UTF-8): what a person's answer is bound to."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check_tool_and_argument(approval: Mapping[str, Any]) -> tuple[str, str]:
    tool, argument = approval.get("tool"), approval.get("argument", "")
    if not isinstance(tool, str) or not 0 < len(tool) <= MAX_APPROVAL_TOOL_CHARS or not tool.isprintable():
        raise ValidationError(f"approval.tool must be a tool name of 1 to {MAX_APPROVAL_TOOL_CHARS} visible characters",
                              field="approval.tool")
    if not isinstance(argument, str) or len(argument) > MAX_APPROVAL_ARGUMENT_CHARS:
        raise ValidationError(f"approval.argument must be text of at most {MAX_APPROVAL_ARGUMENT_CHARS} characters",
                              field="approval.argument")
    return tool, argument


def check_approval(approval: Any) -> dict[str, str] | None:
    """What a client asks a person to approve, when the question is a run's permission request
    (None: an ordinary question): ``{tool, argument, input}`` — the harness's tool, its main
    argument in one line (a command, a path; cut by the asker), and the *whole* request as text,
    which the person is shown and the answer is bound to. Returns those and ``input_sha256``.
    Strict: this is what a client sends (a peer's marker is ``check_approval_marker``'s).

    Raises:
        ValidationError: naming what is wrong (the whole request missing, or over
            MAX_APPROVAL_INPUT_BYTES: what cannot be shown whole is not asked).
    """
    if approval is None:
        return None
    if not isinstance(approval, Mapping) or set(approval) - {"tool", "argument", "input", "shape", "reason"}:
        raise ValidationError("approval must be {tool, argument, input} (and optionally shape, reason): the harness "
                              "tool a run asks to use, what on, and the whole request a person is shown",
                              field="approval")
    tool, argument = _check_tool_and_argument(approval)
    extras = _check_shape_and_reason(approval)
    text = approval.get("input")
    if not isinstance(text, str) or not text:
        raise ValidationError("approval.input must be the whole request as text: a person answers what they are "
                              "shown", field="approval.input")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError("approval.input is not text (a lone surrogate)", field="approval.input") from None
    if size > MAX_APPROVAL_INPUT_BYTES:
        raise ValidationError(f"approval.input is {size} bytes; a person is shown at most {MAX_APPROVAL_INPUT_BYTES} "
                              "bytes whole", field="approval.input")
    return {"tool": tool, "argument": argument, "input": text, "input_sha256": approval_sha256(text), **extras}


def _check_shape_and_reason(approval: Mapping[str, Any]) -> dict[str, str]:
    """The optional ``shape`` (what a grant is bound to: proto/grants.py) and ``reason`` (the run's
    own words for the call) of an approval, checked."""
    out: dict[str, str] = {}
    shape, reason = approval.get("shape"), approval.get("reason")
    if shape is not None:
        if not isinstance(shape, str) or not 0 < len(shape) <= _MAX_SHAPE_CHARS or "\x00" in shape:
            raise ValidationError(f"approval.shape must be text of 1 to {_MAX_SHAPE_CHARS} characters",
                                  field="approval.shape")
        out["shape"] = shape
    if reason is not None:
        if not isinstance(reason, str) or len(reason) > MAX_APPROVAL_REASON_CHARS or not reason.isprintable():
            raise ValidationError(f"approval.reason must be one line of at most {MAX_APPROVAL_REASON_CHARS} "
                                  "characters", field="approval.reason")
        if reason:
            out["reason"] = reason
    return out


def approval_marker(approval: Mapping[str, str], *, inline: bool) -> dict[str, str]:
    """The ``approval`` a question's metadata holds for a request ``check_approval`` returned:
    ``{tool, argument, input_sha256}`` and either ``input`` (the whole request, ``inline``) or
    ``input_artifact``, the artifact holding it (its id is its sha256's, so it is the same text)."""
    marker = {"tool": approval["tool"], "argument": approval["argument"], "input_sha256": approval["input_sha256"]}
    marker.update((key, approval[key]) for key in ("shape", "reason") if key in approval)
    if inline:
        marker["input"] = approval["input"]
    else:
        marker["input_artifact"] = artifact_id_for_sha256(approval["input_sha256"])
    return marker


def check_approval_marker(marker: Any) -> dict[str, str] | None:
    """A question's ``approval`` marker as its metadata holds it (None: an ordinary question):
    ``{tool, argument, input_sha256, input | input_artifact}``, or an older palace's ``{tool,
    argument}``, which reads as before but carries no hash, so no request is ever run on its answer.

    Raises:
        ValidationError: naming what is wrong (``AskTerms`` reads a peer's malformed marker as none).
    """
    if marker is None:
        return None
    if not isinstance(marker, Mapping) or set(marker) - {"tool", "argument", "input_sha256", "input", "input_artifact",
                                                         "shape", "reason"}:
        raise ValidationError("approval must be {tool, argument, input_sha256, input or input_artifact}",
                              field="approval")
    tool, argument = _check_tool_and_argument(marker)
    checked = {"tool": tool, "argument": argument, **_check_shape_and_reason(marker)}
    digest = marker.get("input_sha256")
    if digest is None:
        if "input" in marker or "input_artifact" in marker:
            raise ValidationError("approval.input_sha256 is missing", field="approval.input_sha256")
        return checked
    if not isinstance(digest, str) or not _SHA256_RE.match(digest):
        raise ValidationError("approval.input_sha256 must be 64 lowercase hex digits", field="approval.input_sha256")
    checked["input_sha256"] = digest
    text, artifact = marker.get("input"), marker.get("input_artifact")
    if (text is None) == (artifact is None):
        raise ValidationError("approval holds the whole request in exactly one of input and input_artifact",
                              field="approval")
    if text is not None:
        try:
            if not isinstance(text, str) or approval_sha256(text) != digest:
                raise ValidationError("approval.input does not match its sha256", field="approval.input")
        except UnicodeEncodeError:
            raise ValidationError("approval.input is not text", field="approval.input") from None
        checked["input"] = text
    elif artifact != artifact_id_for_sha256(digest):
        raise ValidationError("approval.input_artifact is not the artifact of its sha256",
                              field="approval.input_artifact")
    else:
        checked["input_artifact"] = artifact
    return checked


def ask_metadata(choices: tuple[str, ...] | None, asked_at: str, timeout_s: int,
                 approval: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The metadata of a ``question.ask`` written at ``asked_at`` (the daemon's clock);
    ``approval`` (an ``approval_marker``) marks a run's permission request."""
    meta: dict[str, Any] = {"expires_at": add_seconds(asked_at, timeout_s), "timeout_s": timeout_s}
    if choices is not None:
        meta["choices"] = list(choices)
    if approval is not None:
        meta["approval"] = dict(approval)
    return meta


@dataclasses.dataclass(frozen=True, slots=True)
class AskTerms:
    """What a question's metadata says, read defensively (it may come from any peer)."""

    choices: tuple[str, ...] | None = None
    expires_at: str | None = None
    #: the approval marker when the question is a run's permission request (a waiting approval):
    #: {tool, argument, input_sha256, input | input_artifact}, or an older palace's {tool, argument}
    approval: Mapping[str, str] | None = None

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None) -> AskTerms:
        meta = metadata if isinstance(metadata, Mapping) else {}
        try:
            choices = check_choices(meta.get("choices"))
        except ValidationError:
            choices = None  # a peer's malformed choices: the question takes any text
        expires = meta.get("expires_at")
        try:
            approval = check_approval_marker(meta.get("approval"))
        except ValidationError:
            approval = None  # a peer's malformed marker: shown as an ordinary question
        return cls(choices, expires if isinstance(expires, str) and STAMP_RE.match(expires) else None, approval)


def match_choice(terms: AskTerms, text: str) -> str | None:
    """The answer as it counts: the choice ``text`` names (case aside; the choice as offered), or
    the text itself for a free-text question; None when it names no choice."""
    text = text.strip()
    if terms.choices is None:
        return text or None
    folded = text.casefold()
    return next((c for c in terms.choices if c.casefold() == folded), None)


@dataclasses.dataclass(frozen=True, slots=True)
class QuestionState:
    """One question as settled from the answers known here."""

    question: PublicEvent
    terms: AskTerms
    #: open (waiting), answered, or expired (no answer counted before it expired)
    status: str
    #: the answer that counts (the event), if any
    answer: PublicEvent | None
    #: (answer event, the authority table's verdict: its rule and why it did not count), in the settling order
    flagged: tuple[tuple[PublicEvent, Verdict], ...]
    #: why the question's approval marker does not count (asked by another than the task's
    #: claimant: rule question.approval), if it does not; the question then waits as an ordinary one
    approval_refused: str | None = None

    @property
    def approval(self) -> Mapping[str, str] | None:
        """The approval marker, when it counts: the question is a run's permission request."""
        return self.terms.approval if self.approval_refused is None else None

    @property
    def choice(self) -> str | None:
        """The answer's text as it counts (the choice as offered), if answered."""
        return match_choice(self.terms, self.answer.get("body") or "") if self.answer is not None else None

    def to_wire(self) -> dict[str, Any]:
        q = self.question
        out: dict[str, Any] = {
            "question_id": q.get("id"), "asked_by": q.get("from_agent"), "to": q.get("to_agent"),
            "question": q.get("body"), "asked_at": q.get("created_at"), "correlation_id": q.get("correlation_id"),
            "choices": list(self.terms.choices) if self.terms.choices is not None else None,
            "expires_at": self.terms.expires_at, "status": self.status, "answer": None,
            "approval": dict(self.approval) if self.approval is not None else None,
            "flagged": [{"event_id": a.get("id"), "by": a.get("from_agent"), "created_at": a.get("created_at"),
                         "rule": verdict.rule, "why": verdict.why} for a, verdict in self.flagged],
        }
        if self.approval_refused is not None:
            out["approval_refused"] = self.approval_refused
        if self.answer is not None:
            out["answer"] = {"event_id": self.answer.get("id"), "by": self.answer.get("from_agent"),
                             "text": self.choice, "answered_at": self.answer.get("created_at")}
        return out


def _expired(expires_at: str | None, at: str) -> bool:
    return expires_at is not None and seconds_between(expires_at, at) > 0


def settle(question: PublicEvent, answers: Iterable[PublicEvent],
           proven: Callable[[PublicEvent], bool], now: str, *,
           approval_refused: str | None = None) -> QuestionState:
    """The state of ``question`` from ``answers`` (any order; events other than its answers are
    ignored), judged at ``now``. ``proven(answer)``: whether the answer was written by the daemon
    that holds its author's person id (see the module docstring). Each answer is judged by the
    authority table's ``question.answer`` row: written by the person asked (proven), before the
    question expired and not before it was asked, one of its choices, among its daemon's first
    ``MAX_ANSWERS_PER_ORIGIN`` to this question; the earliest that counts settles the question,
    and every other is flagged with its rule and why. ``approval_refused``: the
    ``question.approval`` flag of its task's derivation, when the question's marker does not count."""
    terms = AskTerms.from_metadata(question.get("metadata"))
    addressee = question.get("to_agent")
    asked_at = question.get("created_at")
    mine = [a for a in answers if a.get("type") == ANSWER and a.get("ack_of") == question.get("id")]
    ordered: Sequence[PublicEvent] = sorted(mine, key=lambda a: order_key(a.get("created_at"), a.get("id")))
    rule = rule_named("question.answer")
    winner: PublicEvent | None = None
    flagged: list[tuple[PublicEvent, Verdict]] = []
    seen: set[Any] = set()
    per_origin: dict[Any, int] = {}
    for answer in ordered:
        if answer.get("id") in seen:
            continue
        seen.add(answer.get("id"))
        author, at, origin = answer.get("from_agent"), str(answer.get("created_at")), answer.get("origin")
        count = per_origin.get(origin, 0)
        if is_human(author):  # what the bound counts: answers written as a person's id (others never count)
            per_origin[origin] = count + 1
        if not counts_in_order(at, now):
            flagged.append((answer, Verdict(False, "clock", f"dated {at}, ahead of this replica's clock: it counts "
                                                            "once that clock reaches it")))
            continue
        if winner is not None:
            flagged.append((answer, Verdict(False, rule.name, f"answered already by {winner.get('from_agent')} "
                                                              f"({winner.get('id')})")))
            continue
        asked = is_human(author) and (addressee == ANYONE or author == addressee)
        roles = {ASKED_PERSON} if asked and not answer.get("impersonation") and proven(answer) else {ANY_AGENT}
        refers, why = True, None
        if _expired(terms.expires_at, at):
            refers, why = False, f"written after the question expired ({terms.expires_at})"
        elif isinstance(asked_at, str) and order_key(at, "") < order_key(asked_at, ""):
            refers, why = False, f"dated {at}, before the question was asked ({asked_at})"
        elif match_choice(terms, answer.get("body") or "") is None:
            refers, why = False, "not one of the choices (" + ", ".join(terms.choices or ()) + ")"
        verdict = judge(rule, roles, agent=author, refers=refers, refers_why=why, origin_count=count,
                        names={ASKED_PERSON: addressee if addressee != ANYONE else None})
        if verdict.ok:
            winner = answer
            continue
        if asked and ASKED_PERSON not in roles and verdict.why and verdict.why.endswith("none of them"):
            verdict = Verdict(False, rule.name, f"{author} is not held by the daemon that wrote this answer (not a "
                                                "proven person)")
        flagged.append((answer, verdict))
    status = "answered" if winner is not None else "expired" if _expired(terms.expires_at, now) else "open"
    return QuestionState(question, terms, status, winner, tuple(flagged), approval_refused)


# -- the feature's declaration (palace_proto.features puts every feature's together) ----------------

#: the local API's operations of questions
OPS: Final = frozenset({"ask", "answer", "questions", "grants", "revoke_grant"})
NAMESPACE: Final = "question."
# Why 16 answers per origin per question: a person answers once, and may correct a slip; more
# from one daemon is a flood meant to bury the real answer (issue 43, finding 5).
MAX_ANSWERS_PER_ORIGIN: Final = 16
RULES: Final[tuple[Rule, ...]] = (
    Rule("question.ask", ("question.ask",), (), "question", frozenset({ANY_AGENT}),
         "a person (human:NAME) or anyone (human:*); an agent asks, never a person",
         "each question stands alone", written_by="ask (palacectl ask)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("question.approval", ("question.ask",), (), "task", frozenset({CLAIMANT}),
         "the task its correlation id names (a run asks on its own task)",
         "marks the task waiting for approval", written_by="ask (a run's approve tool or hook)",
         test="tests/e2e/test_authority.py::test_an_approval_on_anothers_task_is_flagged_and_waits_for_nobody",
         when=lambda facts: asks_approval(facts["metadata"])),
    Rule("question.answer", ("question.answer",), (), "question", frozenset({ASKED_PERSON}),
         "the question (ack_of), not before it was asked nor after it expires; one of its choices (a question "
         "to human:* is asked of every proven person)",
         "the earliest answer that counts settles the question; only answers that can count are read, "
         "each daemon's first few per question; an allow of an approval may carry a grant (metadata.grant: its "
         "task, agent or project, for a stated time) that allows later requests of exactly its shape",
         written_by="answer (palacectl answer)", per_origin=MAX_ANSWERS_PER_ORIGIN,
         test="tests/e2e/test_authority.py::test_junk_answers_never_hide_the_persons_answer"),
    Rule("question.revoke", (REVOKE,), (), "question", frozenset({ASKED_PERSON}),
         "the answer that granted (ack_of): an allow carrying a grant wider than its call",
         "ends the grant on every replica from then on; calls it allowed before stay allowed",
         written_by="revoke_grant (palacectl grant revoke)",
         test="tests/e2e/test_grants.py::test_a_revocation_counts_only_from_a_person_the_question_asked"),
)
