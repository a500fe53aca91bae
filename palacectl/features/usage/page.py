"""The usage feature's dashboard part: the Usage page's data (``page.js`` draws it).

Owns the route ``GET /api/usage``: what runs cost, summed ``by`` task, agent, machine, day or
model ``since`` a window, this machine's ``[budgets]`` judged by the daemon, the reports that count
nowhere, and the workers a budget holds (``palacectl.ui.views.Route``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import trio

from palace_proto.errors import ApiError, ValidationError
from palace_proto.paths import CONFIG_FILENAME
from palace_proto.usage import BY_FIELDS as USAGE_BY
from palace_proto.usage import STATES as BUDGET_STATES
from palace_proto.usage import parse_budgets

from ...files import ConfigUnreadable, read_config
from ...ui.http import HttpError, Request
from ...ui.views import Route, Views, gather

__all__ = ["ROUTES", "USAGE_SINCE", "usage"]

#: The Usage page's windows: ``since`` -> how many UTC days back, today included (None: every run).
USAGE_SINCE: Final = {"today": 1, "7d": 7, "30d": 30, "all": None}


def _percent(spent: Any, limit: Any) -> int | None:
    """How much of a budget is spent, in whole percent (None if the daemon's figures are not numbers)."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (spent, limit))
    if not numbers or limit <= 0:
        return None
    return int(spent * 100 / limit + 1e-9)  # floored: 100 % only once a budget is over


def _overall(totals: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The sum of ``totals``: a cost only when some run reported one (unknown is None, never 0),
    summed in whole micro-dollars as the daemon does."""
    priced = [t["cost_usd"] for t in totals if isinstance(t.get("cost_usd"), (int, float))]
    return {"runs": sum(t.get("runs", 0) for t in totals), "tokens_in": sum(t.get("tokens_in", 0) for t in totals),
            "tokens_out": sum(t.get("tokens_out", 0) for t in totals),
            "cost_usd": sum(round(c * 1_000_000) for c in priced) / 1_000_000 if priced else None,
            "unpriced_runs": sum(t.get("unpriced_runs", 0) for t in totals)}


async def usage(views: Views, request: Request) -> dict[str, Any]:
    """What runs cost (docs/usage.md): the totals of the usage reports ``by`` task, agent,
    machine, day or model ``since`` today, 7 or 30 UTC days ago (today included) or ever; this
    machine's ``[budgets]`` judged by the daemon, the most severe first (or why they cannot be:
    ``budgets_error``, one line; ``budgets`` None when there are none); how many reports held
    count nowhere (``flagged``: not their task's claimant's); and the workers a budget holds
    (``who``: a worker over its budget claims nothing and says why)."""
    by = request.one("by") or "task"
    if by not in USAGE_BY:
        raise HttpError(400, f"by must be one of {', '.join(USAGE_BY)}")
    since = request.one("since") or "all"
    if since not in USAGE_SINCE:
        raise HttpError(400, f"since must be one of {', '.join(USAGE_SINCE)}")
    days = USAGE_SINCE[since]
    since_date = None if days is None else time.strftime("%Y-%m-%d", time.gmtime(time.time() - (days - 1) * 86400))
    # The config may change while the dashboard runs (a budget raised): read at every request, off the loop.
    budgets, problem = await trio.to_thread.run_sync(_budgets_table, views)

    async def spent() -> Any:
        nonlocal problem
        try:
            return await views.optional("usage", by=by, since=since_date, budgets=budgets)
        except ApiError as exc:
            if budgets is None or exc.code != "invalid_argument":
                raise
            # A daemon of another version may refuse what this palacectl accepts: the totals still show.
            problem = f"{_config_path(views)}: {exc.message}"
            return await views.optional("usage", by=by, since=since_date)

    result, who = await gather([spent, lambda: views.call("who")])
    held = [{"agent": w.get("agent"), "daemon": (w.get("daemon") or {}).get("name"), "local": w.get("local"),
             "runner": w["worker"].get("runner"), "held": w["worker"]["held"]}
            for w in who.get("watchers", []) if isinstance(w.get("worker"), dict) and w["worker"].get("held")]
    out: dict[str, Any] = {"by": by, "since": since, "since_date": since_date, "config": str(_config_path(views)),
                           "budgets_error": problem, "held": held, "supported": result is not None}
    if result is None:  # a daemon from before usage reports
        return {**out, "totals": [], "overall": _overall([]), "reports": 0, "flagged": 0, "budgets": None}
    judged = None
    if budgets is not None and problem is None:
        severity: dict[str | None, int] = {state: rank for rank, state in enumerate(reversed(BUDGET_STATES))}
        judged = sorted(({**b, "percent": _percent(b.get("spent"), b.get("limit"))}
                         for b in result.get("budgets") or []), key=lambda b: severity.get(b.get("state"), 0))
    totals = result.get("totals", [])
    return {**out, "totals": totals, "overall": _overall(totals), "reports": result.get("reports", 0),
            "flagged": int(result.get("flagged") or 0), "budgets": judged}


def _config_path(views: Views) -> Path:
    return views.daemon.home / CONFIG_FILENAME


def _budgets_table(views: Views) -> tuple[Any, str | None]:
    """This machine's ``[budgets]`` table (None: there is none) and, when it cannot be used,
    why in one line (it is then not sent, and the totals still show)."""
    try:
        table = read_config(views.daemon.home).get("budgets")
    except ConfigUnreadable as exc:
        return None, " ".join(str(exc).split())
    if table is None:
        return None, None
    try:
        parse_budgets(table)  # palace_proto's own check, the one the daemon makes
    except ValidationError as exc:
        return None, f"{_config_path(views)}: {exc.message}"
    return table, None


ROUTES: Final = (Route("GET", r"^/api/usage$", usage),)
