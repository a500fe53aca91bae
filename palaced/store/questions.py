"""The questions' part of the store: the answers that can count, and how a local answer is judged.

Owns: ``person_answers`` — the answers to questions that ``palace_proto.questions.settle`` judges
(a person's, each origin's first few per question: index seeks only, schema 0014), offered to the
event loop in ``QuestionReads`` — and ``judge``, the authority table on a local ``question.answer``
(settled with the question's answers that can count, the new one appended as a draft: an answer
it would flag is refused with the flag's words). ``PART`` declares it to the store (parts.py).
Reads on the calling thread's reader; ``judge`` in the writing transaction (writer thread).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import apsw

from palace_proto.authority import Rule
from palace_proto.event_fields import PublicEvent
from palace_proto.identity import is_human
from palace_proto.question_grants import REVOKE
from palace_proto.questions import ANSWER, ASK, MAX_ANSWERS_PER_ORIGIN, settle
from palace_proto.validation import AppendRequest

from .parts import StorePart
from .queries import event_by_id
from .reads import ReadSet, StoreRead
from .rows import PUBLIC_COLUMNS, row_to_public

if TYPE_CHECKING:
    from .queries import Reads
    from .state import WriteContext

__all__ = ["PART", "QuestionReads", "judge", "person_answers"]


def person_answers(conn: apsw.Connection, question_ids: Sequence[str], per_origin: int,
                   kind: str = ANSWER) -> list[PublicEvent]:
    """The answers to each of ``question_ids`` that can count: written as a person's id, each
    origin's first ``per_origin`` (by created_at, then id) per question — the ones
    ``palace_proto.questions.settle`` judges (issue 43, finding 5). Index seeks only (schema 0014):
    one per origin that answered, then one page of ``per_origin`` rows each, whatever an origin
    wrote besides; a question's answers never share a cap with another's. ``kind``: the type read
    (``question.revoke``: the revocations of grants, acknowledging their answers, read the same way)."""
    assert kind in (ANSWER, REVOKE), kind
    found: list[PublicEvent] = []
    person = f"type='{kind}' AND from_agent >= 'human:' AND from_agent < 'human;'"
    for question_id in dict.fromkeys(question_ids):
        origins = [o for (o,) in conn.execute(
            f"WITH RECURSIVE seen(o) AS (SELECT min(origin) FROM events WHERE {person} AND ack_of=?1 "
            f"UNION ALL SELECT (SELECT min(origin) FROM events WHERE {person} AND ack_of=?1 AND origin > o) "
            "FROM seen WHERE o IS NOT NULL) SELECT o FROM seen WHERE o IS NOT NULL", (question_id,))]
        for origin in origins:
            rows = conn.execute(f"SELECT {PUBLIC_COLUMNS} FROM events WHERE {person} AND ack_of=? AND origin=? "
                                "ORDER BY created_at, id LIMIT ?", (question_id, origin, per_origin)).fetchall()
            found.extend(row_to_public(r) for r in rows)
    return found


def _person_answers(reads: Reads, question_ids: Sequence[str], per_origin: int) -> list[PublicEvent]:
    return person_answers(reads.db.reader(), question_ids, per_origin)


def _grant_answers(reads: Reads, since: str, limit: int) -> list[PublicEvent]:
    """The newest ``limit`` answers written as a person's id since ``since`` that carry a grant
    (``palace_proto.question_grants``), newest first."""
    rows = reads.db.reader().execute(
        f"SELECT {PUBLIC_COLUMNS} FROM events WHERE type='{ANSWER}' AND from_agent >= 'human:' AND "
        "from_agent < 'human;' AND created_at >= ? AND json_extract(metadata, '$.grant') IS NOT NULL "
        "ORDER BY created_at DESC, id DESC LIMIT ?", (since, limit)).fetchall()
    return [row_to_public(r) for r in rows]


def _revocations(reads: Reads, answer_ids: Sequence[str], per_origin: int) -> list[PublicEvent]:
    return person_answers(reads.db.reader(), answer_ids, per_origin, REVOKE)


def judge(ctx: WriteContext, req: AppendRequest, rule: Rule, draft: PublicEvent) -> str | None:
    """Why this daemon may not write the answer ``req`` (None: it may), as
    ``palace_proto.questions.settle`` will judge it everywhere. Only an answer is judged by its
    question's state (an ask is any agent's)."""
    if rule.name != "question.answer":
        return None
    question = event_by_id(ctx, req.ack_of) if req.ack_of else None
    if question is None or question.get("type") != ASK:
        return f"question.answer must acknowledge a question ({ASK}) with ack_of"
    answers = ctx.agents.annotate(person_answers(ctx.conn, [question["id"]], MAX_ANSWERS_PER_ORIGIN))
    state = settle(question, [*answers, draft], lambda answer: _proven(ctx, answer, draft["id"]),
                   str(draft["created_at"]))
    for answer, verdict in state.flagged:
        if answer.get("id") == draft["id"]:
            return verdict.why
    return None


def _proven(ctx: WriteContext, answer: Mapping[str, Any], draft_id: str) -> bool:
    """Whether ``answer`` was written as a person's id by the daemon holding it (the draft: by
    this daemon, the running batch's registration included). A daemon in no palace has no
    registry: its own user is the only person there is."""
    agent = answer.get("from_agent")
    if not is_human(agent):
        return False
    if not ctx.agents.enforcing:
        return True
    if answer.get("id") == draft_id:
        record = ctx.agents.record_of(ctx, str(agent))
        return record is not None and record.current is not None and record.current.daemon == ctx.agents.daemon
    return ctx.agents.records.get(str(agent)) is not None and not answer.get("impersonation")


class QuestionReads(ReadSet):
    """The questions' reads on the async store (``store.reads(QuestionReads)``), on a reader thread."""

    person_answers = StoreRead(_person_answers)
    grant_answers = StoreRead(_grant_answers)
    revocations = StoreRead(_revocations)


#: the questions' part of the store (parts.py)
PART: Final = StorePart("questions", judges={"question": judge})
