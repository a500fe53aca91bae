"""palacectl's ``usage``: what runs cost, summed by task, agent, machine, day or model, and the
budgets of this machine's ``config.toml`` judged against it.

Owns: the command line over the daemon's ``usage`` operation. ``[budgets]`` is read here (palacectl's
section of ``config.toml``) and sent with the request; the daemon judges it against the usage
reports that count (``palace_proto.usage``; those that count nowhere are said in one line). Exit 0,
or 1 when a budget is over. The root registers what ``COMMANDS`` and ``GROUPS`` name.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Optional

import typer

from palace_proto.usage import format_usd

from ...cli.common import JsonOpt, UsageProblem, call_daemon, current_home
from ...files import ConfigUnreadable, read_config
from ...output import EXIT_FAILED, emit, write_stdout

__all__ = ["COMMANDS", "GROUPS", "usage"]


def _budgets_table() -> Any:
    try:
        return read_config(current_home()).get("budgets")
    except ConfigUnreadable as exc:
        raise UsageProblem(str(exc)) from None


def _cost(total: dict[str, Any]) -> str:
    if total["cost_usd"] is None:
        return "?"
    return format_usd(total["cost_usd"]) + ("+" if total["unpriced_runs"] else "")


def usage(
    by: Annotated[str, typer.Option("--by", help="task, agent, machine, day or model.")] = "task",
    since: Annotated[Optional[str], typer.Option("--since", help="YYYY-MM-DD or a UTC time (default: all).")] = None,
    json_: JsonOpt = False,
) -> None:
    """What runs cost (their usage reports), and this machine's [budgets]; exit 1 if one is over."""
    result = call_daemon("usage", by=by, since=since, budgets=_budgets_table())
    over = [b for b in result.get("budgets") or [] if b["state"] == "over"]
    if emit(result, json_):
        if over:
            raise typer.Exit(EXIT_FAILED)
        return
    write_stdout(f"{by.upper()}\tRUNS\tTOKENS IN\tTOKENS OUT\tCOST\n")
    for total in result["totals"]:
        write_stdout(f"{total['key']}\t{total['runs']}\t{total['tokens_in']}\t{total['tokens_out']}\t{_cost(total)}\n")
    if result.get("flagged"):
        write_stdout(f"({result['flagged']} usage report(s) held here count nowhere: not written by their task's "
                     "claimant, or past its first 256; see docs/usage.md)\n")
    for budget in result.get("budgets") or []:
        if budget["state"] != "ok":
            write_stdout(f"budget {budget['state']}: {budget['line']}\n")
    if over:
        raise typer.Exit(EXIT_FAILED)


COMMANDS: Final = {"usage": usage}
GROUPS: Final[dict[str, typer.Typer]] = {}
