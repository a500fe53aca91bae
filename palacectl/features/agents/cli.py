"""palacectl's agent identity commands: the ``agent`` group (register, transfer, retire) and the
top-level ``agents`` roster.

Owns: the flags, the one-line answers and the roster's columns. An agent id belongs to the daemon
where it was registered (by its first write there, or ``agent register``); the daemon refuses writes
as an agent another daemon holds, and flags events that other replicas wrote as it
(docs/coordination.md, "Agents, inboxes and sessions"). Thin commands over ``common.call_daemon``.
The root registers what ``COMMANDS`` and ``GROUPS`` name."""

from __future__ import annotations

from typing import Annotated, Any, Final, Optional

import typer

from ...cli.common import JsonOpt, call_daemon
from ...output import emit, note, table_header, write_stdout

__all__ = ["COMMANDS", "GROUPS", "agent_app", "agents"]

agent_app = typer.Typer(no_args_is_help=True, help="Agent ids: which daemon each belongs to.")

AgentArg = Annotated[str, typer.Argument(help="The agent id, e.g. mac-claude or human:alice.", show_default=False)]


def _where(agent: dict[str, Any]) -> str:
    if agent.get("daemon") is None:
        return "retired" if agent.get("retired") else "not registered"
    if agent.get("here"):
        return "this daemon"
    return f"{agent.get('daemon_name') or 'daemon'} ({agent['daemon'][:7]})"


@agent_app.command("register")
def register(agent: AgentArg, json_: JsonOpt = False) -> None:
    """Register an agent id to this daemon (its first write here does it too)."""
    result = call_daemon("agent_register", agent=agent)
    if emit(result, json_):
        return
    record = result["agent"]
    note(f"{record['agent']} {'is now registered' if result['registered'] else 'was already registered'} to "
         f"this daemon (since {record['since']})")


@agent_app.command("transfer")
def transfer(
    agent: AgentArg,
    to: Annotated[str, typer.Option("--to", help="The daemon it moves to: its name or peer id (`palacectl peers`).")],
    json_: JsonOpt = False,
) -> None:
    """Move an agent id to another daemon of the palace (on its daemon, or on the palace CA's)."""
    result = call_daemon("agent_transfer", agent=agent, to=to)
    if emit(result, json_):
        return
    record = result["agent"]
    note(f"{record['agent']} now belongs to {_where(record)}" + (" (by the palace CA)" if result["by_ca"] else "")
         + "; write as it there from now on")


@agent_app.command("retire")
def retire(
    agent: AgentArg,
    reason: Annotated[Optional[str], typer.Option("--reason", help="Why (kept with the retirement).")] = None,
    json_: JsonOpt = False,
) -> None:
    """End an agent id held here: its leases and claims are released; its history stays."""
    result = call_daemon("agent_retire", agent=agent, reason=reason)
    if emit(result, json_):
        return
    leases, tasks = result["released_leases"], result["released_tasks"]
    note(f"{agent} is retired: {len(leases)} lease(s) and {len(tasks)} claimed task(s) released"
         + (f" ({', '.join(tasks)})" if tasks else ""))


def agents(
    all_: Annotated[bool, typer.Option("--all", help="Also retired agents.")] = False,
    agent: Annotated[Optional[str], typer.Option("--agent", help="Only this agent.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Every agent of the palace: its daemon, last activity, watching now or not, stale or not."""
    result = call_daemon("agents", all=all_ or None, agent=agent)
    if emit(result, json_):
        return
    if not result["agents"]:
        note("No agents yet: an agent appears with its first write.")
    else:
        table_header("AGENT", "KIND", "DAEMON", "LAST ACTIVITY", "WATCHING", "FLAGS")
    for a in result["agents"]:
        kind = "human" if a["kind"] == "human" else "agent"
        watching = f"watching on {', '.join(a['watching_on'])}" if a["watching"] else "not watching"
        flags = []
        if a["stale"]:
            flags.append("stale")
        if a["retired"]:
            flags.append("retired")
        if a["impersonations"]:
            flags.append(f"{a['impersonations']} impersonation(s)")
        if a["contested"]:
            flags.append(f"contested by {len(a['contested'])} registration(s)")
        write_stdout(f"{a['agent']}\t{kind}\t{_where(a)}\t{a['last_activity'] or '-'}\t{watching}"
                     f"{chr(9) + ', '.join(flags) if flags else ''}\n")


COMMANDS: Final = {"agents": agents}
GROUPS: Final = {"agent": agent_app}
