"""What runs cost: ``usage`` (totals of the ``usage.report`` events, judged against budgets).

Owns: the ``usage`` operation (proto/PROTOCOL.md). A run's usage is a signed ``usage.report``
event on its task (checked field by field at ``append``: ``palace_proto.usage``), replicated like
any event, so every daemon sums the same events to the same totals. Budgets live in the
``config.toml`` of the machine that asks (palacectl reads ``[budgets]`` and sends the table); the
daemon judges them against what it holds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from palace_proto.errors import ValidationError
from palace_proto.stamps import format_stamp
from palace_proto.usage import BY_FIELDS, USAGE_TYPE, judge_budgets, parse_budgets, record_from_event, spending, totals
from palace_proto.validation import validate_created_at_bound

from .context import Context

__all__ = ["OPS"]

# Why 100,000: the usage reports summed per request (one per run: a large fleet's months); older
# ones are left out and the reply says so (``capped``).
MAX_REPORTS: Final = 100_000


async def usage(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Totals of the usage reports ``by`` task, agent, machine, day or model, since ``since``
    (a date or a UTC time; default: all), and, with ``budgets`` (a ``[budgets]`` table), every
    budget judged (ok, warn, over) against what counts now."""
    by = args.get("by", "task")
    if by not in BY_FIELDS:
        raise ValidationError(f"by must be one of {', '.join(BY_FIELDS)}", field="by")
    since = validate_created_at_bound("since", args.get("since")) or ""
    budgets = parse_budgets(args["budgets"]) if args.get("budgets") is not None else None
    events = await ctx.astore.events_of_types([USAGE_TYPE], "", MAX_REPORTS + 1)
    capped = len(events) > MAX_REPORTS
    every = [r for r in (record_from_event(e) for e in events[-MAX_REPORTS:]) if r is not None]
    records = [r for r in every if r.created_at >= since] if since else every
    out: dict[str, Any] = {"by": by, "since": since or None, "reports": len(records), "capped": capped,
                           "totals": [t.to_wire() for t in totals(records, by)]}
    if budgets is not None:
        # A budget's window (today, this month, a task's whole life) is judged on every report,
        # whatever ``since`` narrowed the totals to.
        judged = judge_budgets(budgets, spending(every, format_stamp(time.time())))
        out["budgets"] = [{**b.to_wire(), "line": b.describe()} for b in judged]
    return out


OPS: Final = {"usage": usage}
