"""Grants: a person's allow of a run's permission request, widened past the one call it answered.

Owns: what a grant is (``Grant``), what an answer's metadata says of one (``grant_terms``; what a
client asks for, ``check_grant``), the *shape* a request is matched by (``check_shape``), which
grants are in force from the settled approvals and the revocations known here (``grants_in_force``),
and whether one covers a new request (``Grant.covers``).

Theory of operation
-------------------
A person answers an approval question ``allow`` and may say for how wide, and for how
long: this call only (the default, and no grant at all), this task, this agent, or this project,
for a stated time (``for_s``, at most ``MAX_GRANT_S``). The grant is the answer itself: its
metadata carries ``grant: {scope, for_s}``, so it replicates, is signed by the person's daemon,
and counts only if the answer counts (the ``question.answer`` row).

A grant never widens to a call the person did not see. It is bound to the request's *shape*,
which the asker computes from the parsed call and the question carries in its approval marker
beside the whole request (``approval.shape``): for a shell line, its one command's literal words
(a line of several commands, or one palace cannot read whole, has no shape, so it is allowed for
its call only); for a file tool, the tool and the resolved path; for any other tool, the tool and
its main argument. A later request is covered when its shape is *equal* — never a prefix, never a
glob — and its agent, task or project is the grant's, within its time.

A grant ends at ``granted_at + for_s`` (the answer's own time: the person's daemon's clock) or
when a person revokes it: a ``question.revoke`` event acknowledging the granting answer, written
by a person who could have answered its question (the ``question.revoke`` row), counted on every
replica the same way.

Pure: stdlib only; no clock (``now`` is a parameter), no IO.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol

from .authority import ANY_AGENT, ASKED_PERSON, counts_in_order, judge, rule_named
from .errors import ValidationError
from .event_fields import PublicEvent
from .identity import HUMAN_PREFIX, is_human
from .stamps import STAMP_RE, add_seconds, seconds_between

__all__ = ["DEFAULT_GRANT_S", "MAX_GRANT_S", "MAX_SHAPE_CHARS", "REVOKE", "SCOPES", "WIDE_SCOPES", "Grant", "Settled",
           "check_grant", "check_shape", "grant_terms", "grants_in_force"]

#: a person ends a grant: it acknowledges the answer that granted it (a row of the questions' table)
REVOKE: Final = "question.revoke"
_ANYONE: Final = HUMAN_PREFIX + "*"

#: how wide an allow reaches: the call it answered (no grant), or every call of its shape in its task,
#: by its agent, or in its project
SCOPES: Final = ("call", "task", "agent", "project")
WIDE_SCOPES: Final = SCOPES[1:]
# Why 8 hours by default and 7 days at most: a working day or a night's run; past a week a standing
# permission belongs in the policy file ([permissions] allow), where it is read and reviewed.
DEFAULT_GRANT_S: Final = 8 * 3600
MAX_GRANT_S: Final = 7 * 86400
# Why 2,000 characters: a command's words or a path, as a person reads them in one glance.
MAX_SHAPE_CHARS: Final = 2000


def check_shape(shape: Any) -> str | None:
    """A request's shape as a client or a peer gives it (None: it has none, so it is allowed only
    for its call).

    Raises:
        ValidationError: not text of 1 to MAX_SHAPE_CHARS characters.
    """
    if shape is None:
        return None
    if not isinstance(shape, str) or not 0 < len(shape) <= MAX_SHAPE_CHARS or "\x00" in shape:
        raise ValidationError(f"approval.shape must be text of 1 to {MAX_SHAPE_CHARS} characters", field="approval.shape")
    return shape


def check_grant(scope: Any, for_s: Any = None) -> dict[str, Any] | None:
    """What a person asks for when they allow: ``{scope, for_s}``, or None for this call only.

    Raises:
        ValidationError: an unknown scope, or a time outside 1 s .. MAX_GRANT_S.
    """
    if scope is None or scope == "call":
        if for_s is not None:
            raise ValidationError("a time (--for) goes with a grant wider than this call: --grant task, agent or "
                                  "project", field="for_s")
        return None
    if scope not in WIDE_SCOPES:
        raise ValidationError(f"grant must be one of {', '.join(SCOPES)} (how far this allow reaches)", field="grant")
    seconds = DEFAULT_GRANT_S if for_s is None else for_s
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= MAX_GRANT_S:
        raise ValidationError(f"a grant lasts 1 s to {MAX_GRANT_S // 86400} days (e.g. 30m, 8h, 2d)", field="for_s")
    return {"scope": scope, "for_s": seconds}


def grant_terms(metadata: Any) -> dict[str, Any] | None:
    """The grant an answer's metadata carries, read defensively (a peer's malformed one is none)."""
    raw = metadata.get("grant") if isinstance(metadata, Mapping) else None
    if not isinstance(raw, Mapping) or set(raw) - {"scope", "for_s"}:
        return None
    try:
        return check_grant(raw.get("scope"), raw.get("for_s"))
    except ValidationError:
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class Grant:
    """One grant in force: who allowed what shape, how wide, until when."""

    answer_id: str
    question_id: str
    by: str
    scope: str
    shape: str
    agent: str
    task: str | None
    project: str | None
    granted_at: str
    until: str

    def covers(self, shape: str | None, *, agent: str, task: str | None, project: str | None, now: str) -> bool:
        """Whether a request of ``shape`` by ``agent`` on ``task`` (of ``project``) is allowed by
        this grant at ``now``: the same shape exactly, within its scope and its time."""
        if shape is None or shape != self.shape or seconds_between(now, self.until) <= 0:
            return False
        if self.scope == "task":
            return task is not None and task == self.task
        if self.scope == "agent":
            return agent == self.agent
        return project is not None and project == self.project

    def to_wire(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Settled(Protocol):
    """A question as settled (a ``QuestionState`` is one): what a grant reads."""

    @property
    def question(self) -> PublicEvent: ...

    @property
    def answer(self) -> PublicEvent | None: ...

    @property
    def approval(self) -> Mapping[str, str] | None: ...

    @property
    def choice(self) -> str | None: ...


def _revoked(grant_answer: PublicEvent, question: PublicEvent, revokes: Iterable[PublicEvent],
             proven: Callable[[PublicEvent], bool], now: str) -> bool:
    """Whether a revocation that counts acknowledges ``grant_answer``: written by a proven person
    the question asked (``question.revoke``), not dated ahead of this replica's clock."""
    rule = rule_named("question.revoke")
    addressee = question.get("to_agent")
    for event in revokes:
        if event.get("type") != REVOKE or event.get("ack_of") != grant_answer.get("id"):
            continue
        author = event.get("from_agent")
        asked = is_human(author) and (addressee == _ANYONE or author == addressee)
        roles = {ASKED_PERSON} if asked and not event.get("impersonation") and proven(event) else {ANY_AGENT}
        if counts_in_order(event.get("created_at"), now) and judge(rule, roles, agent=author).ok:
            return True
    return False


def grants_in_force(approvals: Iterable[tuple[Settled, str | None]], revokes: Iterable[PublicEvent],
                    proven: Callable[[PublicEvent], bool], now: str) -> list[Grant]:
    """The grants in force at ``now`` among settled approval questions (each with its task's
    project, or None), given the revocations known here: an approval answered ``allow`` by an
    answer that counts, carrying a grant wider than the call, on a question whose marker counts
    and has a shape, not past its time, not revoked."""
    revokes = list(revokes)
    out: list[Grant] = []
    for state, project in approvals:
        answer, approval = state.answer, state.approval
        if answer is None or approval is None or state.choice != "allow" or not approval.get("shape"):
            continue
        terms = grant_terms(answer.get("metadata"))
        granted_at = answer.get("created_at")
        if terms is None or not isinstance(granted_at, str) or not STAMP_RE.match(granted_at):
            continue
        until = add_seconds(granted_at, terms["for_s"])
        if seconds_between(now, until) <= 0 or _revoked(answer, state.question, revokes, proven, now):
            continue
        question = state.question
        out.append(Grant(str(answer.get("id")), str(question.get("id")), str(answer.get("from_agent")),
                         terms["scope"], approval["shape"], str(question.get("from_agent")),
                         question.get("correlation_id"), project, granted_at, until))
    return out
