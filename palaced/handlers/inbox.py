"""The inbox the daemon keeps for each agent: ``inbox`` and ``inbox_mark_read``.

Owns: the two operations over ``store/inbox.py``. ``inbox`` lists what is addressed to the agent
(or to ``*``), not written by it, after its cursor, oldest first, and remembers how far it listed;
``inbox_mark_read`` moves the cursor to an event the inbox has listed (never backwards). The
cursor is a local seq, so an event that replicates late is listed after the cursor, never
skipped. Distinct from ``palacectl watch``'s state file: the watch wakes an agent, the inbox is
what it handled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from palace_proto.errors import ValidationError
from palace_proto.validation import clean_required, validate_page_limit

from ..store import WriteContext
from ..store import inbox as store_inbox
from .context import Context

__all__ = ["OPS", "inbox_view"]

DEFAULT_INBOX_LIMIT: Final = 20
# Why 500: the list operation's own page cap.
MAX_INBOX_LIMIT: Final = 500


async def inbox_view(ctx: Context, agent: str, limit: int, preview: bool) -> dict[str, Any]:
    """The agent's inbox page (events flagged by the agent registry), noting how far it listed."""
    scope = ctx.features.inbox_scope(agent)  # what the features add to it, or keep out of it
    cursor, events = await ctx.store.inbox_page(agent, limit + 1, preview, scope)
    more = len(events) > limit
    events = ctx.store.agents.annotate(events[:limit])
    if events and events[-1]["seq"] > cursor.listed_seq:
        last = events[-1]["seq"]
        await ctx.store.write(lambda w: store_inbox.note_listed(w, agent, last))
        cursor = store_inbox.Cursor(cursor.read_seq, cursor.read_event_id, last)
    # The page holds every unread event unless there are more: only then count them apart.
    unread = (await ctx.store.unread_count(agent, cursor.read_seq, scope) if more
              else len(events))
    return {"agent": agent, "events": events, "count": len(events), "more": more, "unread": unread,
            "unread_capped": unread >= store_inbox.UNREAD_COUNT_CAP, "cursor": cursor.to_wire()}


async def inbox(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    agent = clean_required("agent", args.get("agent"))
    preview = args.get("preview", False)
    if not isinstance(preview, bool):
        raise ValidationError("preview must be true or false", field="preview")
    limit = validate_page_limit(args.get("limit"), DEFAULT_INBOX_LIMIT, MAX_INBOX_LIMIT)
    return await inbox_view(ctx, agent, limit, preview)


async def inbox_mark_read(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    agent = clean_required("agent", args.get("agent"))
    upto = clean_required("upto_event_id", args.get("upto_event_id"))

    def job(w: WriteContext) -> tuple[store_inbox.Cursor, bool]:
        return store_inbox.mark_read(w, agent, upto)

    cursor, moved = await ctx.store.write(job)
    unread = await ctx.store.unread_count(agent, cursor.read_seq, ctx.features.inbox_scope(agent))
    return {"agent": agent, "moved": moved, "cursor": cursor.to_wire(), "unread": unread,
            "unread_capped": unread >= store_inbox.UNREAD_COUNT_CAP}


OPS: Final = {
    "inbox": inbox,
    "inbox_mark_read": inbox_mark_read,
}
