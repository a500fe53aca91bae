"""What runs cost: ``usage`` (totals of the usage reports that count, judged against budgets).

Owns: the ``usage`` operation (proto/PROTOCOL.md). A run's usage is a signed ``usage.report``
event on its task (checked field by field at ``append``: ``palace_proto.usage``), replicated like
any event. Only the reports the authority table lets count are summed (rule ``usage.report``: the
task's claimant's, written by the daemon that holds it, on a task that exists, its first 256); the
store keeps their totals per UTC day as it commits (palaced/store/usage.py), so an answer costs
the groups it sums, not the reports, and every daemon holding the same events gives the same one.
Budgets live in the ``config.toml`` of the machine that asks (palacectl reads ``[budgets]`` and
sends the table); the daemon judges them against the same totals.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from palace_proto.errors import ValidationError
from palace_proto.usage import BUDGET_TYPE, BY_FIELDS, judge_budgets, parse_budgets
from palace_proto.validation import validate_created_at_bound

from ..clock import utc_now
from ..feature import Feature
from ..handlers.context import Context
from ..notify.triggers import Trigger
from ..store import usage as store_usage
from ..store.usage import UsageReads

__all__ = ["FEATURE", "OPS"]


async def usage(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Totals of the usage reports that count ``by`` task, agent, machine, day or model, since
    ``since`` (a date or a UTC time; default: all), how many reports held here count nowhere
    (``flagged``), and, with ``budgets`` (a ``[budgets]`` table), every budget judged (ok, warn,
    over) against what counts now. ``capped`` is always false (every report that counts is summed),
    kept for clients from before the totals."""
    by = args.get("by", "task")
    if by not in BY_FIELDS:
        raise ValidationError(f"by must be one of {', '.join(BY_FIELDS)}", field="by")
    since = validate_created_at_bound("since", args.get("since")) or ""
    budgets = parse_budgets(args["budgets"]) if args.get("budgets") is not None else None
    # A budget's window (today, this month, a task's whole life) is judged on every report that
    # counts, whatever ``since`` narrowed the totals to; each task's is read only if a task budget is set.
    figures = await ctx.store.reads(UsageReads).usage(
        by, since, utc_now() if budgets is not None else None,
        tasks=budgets is not None and (budgets.task_usd is not None or budgets.task_tokens is not None))
    out: dict[str, Any] = {"by": by, "since": since or None, "reports": sum(t.runs for t in figures.totals),
                           "capped": False, "flagged": figures.flagged,
                           "totals": [t.to_wire() for t in figures.totals]}
    if budgets is not None:
        assert figures.spending is not None
        out["budgets"] = [{**b.to_wire(), "line": b.describe()} for b in judge_budgets(budgets, figures.spending)]
    return out


OPS: Final = {"usage": usage}


# -- the feature's declaration --------------------------------------------------------------------

#: a budget reached (a worker writes it: palacectl's worker)
TRIGGERS: Final = (Trigger("budget", lambda e: e.get("type") == BUDGET_TYPE, lambda e: "Budget reached",
                           lambda e: "palacectl usage"),)

FEATURE: Final = Feature(name="usage", ops=OPS, builds_on=("tasks",), store=store_usage.PART, triggers=TRIGGERS)
