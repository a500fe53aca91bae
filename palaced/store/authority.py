"""The authority table on the write path: a local write the table does not allow is refused.

Owns: ``refusal`` — whether this daemon may write one event (an append of any kind: a client's
``append``, an ack, a patch, a claim, a room turn, an answer, a run's usage report…), judged in
the writing transaction by the same derivation every replica runs on what arrives, with the new
event appended as a draft (``palace_proto.authority``: a write it would flag is refused with the
flag's own words) — and ``daemon_of``, which daemon an origin belongs to (what a notice's rule
compares). Writer thread only, inside a batch's transaction (``writes.append_event`` calls it).

Which derivation judges: the rule's subject says, and the store part judging that subject
(parts.py: a task's by ``palace_proto.tasks.derive_task`` over the correlation's events, a room's
by ``derive_room``, a person's answer by ``palace_proto.questions.settle``). Only a rule asking
more than "any member's agent, unbounded" needs its subject's state; the others are held by the
identity checks of ``writes.append_event``, and the subjects judged where their events are built
(the registry: ``agents.py``; a redaction: ``handlers/log.py``; leases: their feature).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from palace_proto.authority import ANY_AGENT, Rule, rule_for
from palace_proto.event_content import draft_public
from palace_proto.event_fields import PublicEvent
from palace_proto.validation import AppendRequest

from ..clock import utc_now

if TYPE_CHECKING:
    from .state import WriteContext

__all__ = ["DRAFT_ID", "daemon_of", "refusal"]

# Why this id: after every real id of the same instant ("evt_" then digits): the draft is judged as
# the newest event, where it would be once written.
DRAFT_ID: Final = "evt_~draft"


def daemon_of(ctx: WriteContext, origin: Any) -> Any:
    """The daemon (peer id) an origin belongs to, or the origin itself when its key is unknown."""
    return ctx.agents.origin_daemons.get(origin) or origin


def _draft(ctx: WriteContext, req: AppendRequest, now: str, metadata: Any) -> PublicEvent:
    """The event ``req`` would be, as a derivation reads it."""
    return draft_public(req, event_id=DRAFT_ID, origin=ctx.chain.origin, created_at=now, metadata=metadata)


def refusal(ctx: WriteContext, req: AppendRequest) -> str | None:
    """Why this daemon may not write ``req`` (None: it may), in the words every replica would flag it with.

    Only events whose rule needs its subject's state are derived, by the judge of that subject
    (a store part's: parts.py); a free word, a memory write or a registry event costs nothing here.
    """
    metadata = json.loads(req.metadata_json)
    rule = rule_for(req.type, req.status, on_task=True, later_request=True, metadata=metadata)
    if rule is None:
        return (f"type {req.type!r} is in palace's namespaces but its authority table does not name it: nothing "
                "may write it yet")
    if not _needs_subject(rule):
        return None
    judge = ctx.parts.judges.get(rule.subject)
    if judge is None:
        return None
    return judge(ctx, req, rule, _draft(ctx, req, utc_now(), metadata))


def _needs_subject(rule: Rule) -> bool:
    """Whether judging an event of ``rule`` needs its subject's state: anything more than "any
    member's agent", unbounded."""
    return rule.writers != {ANY_AGENT} or rule.per_origin is not None or rule.per_subject is not None
