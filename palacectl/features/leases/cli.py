"""palacectl's lease commands: claim paths and resources so agents stop colliding.

Owns: the ``lease`` group (acquire, renew, release, list, check) over the daemon's lease operations
(palaced/handlers/leases.py; the rules are palace_proto.leases). The root registers what
``COMMANDS`` and ``GROUPS`` name."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any, Final, Optional

import typer

from palace_proto.text import printable

from ...cli.common import JsonOpt, UsageProblem, call_daemon
from ...output import EXIT_FAILED, emit, note, write_stdout

__all__ = ["COMMANDS", "GROUPS", "describe_lease", "lease_app"]

lease_app = typer.Typer(no_args_is_help=True, help="Advisory leases on paths and resources, palace-wide.")

AgentOpt = Annotated[str, typer.Option("--agent", help="The agent taking or holding the lease.")]
ProjectOpt = Annotated[Optional[str], typer.Option("--project", help="The project (a repository) the paths belong to.")]
TtlOpt = Annotated[Optional[str], typer.Option("--ttl", help="How long it lasts without renewal: 90s, 30m, 2h, 7d.")]


def describe_lease(lease: dict[str, Any]) -> str:
    """One line: who holds what, how, why and until when."""
    # Escaped: another member wrote these (bidi overrides, C1 controls stay visible as escapes).
    reason = f" — {printable(lease['reason'], 200)}" if lease.get("reason") else ""
    state = printable(lease["state"])
    until = printable(str(lease["expires_at"])[:19]) + "Z"
    tail = f"until {until}" if state == "active" else state
    if state in ("lost", "forced") and lease.get("ended_by_agent"):
        tail += f" (to {printable(lease['ended_by_agent'])}, {printable(lease['ended_by'])})"
    return (f"{printable(lease['id'])}  {printable(lease['agent'])}  {printable(lease['mode'])}  "
            f"{printable(', '.join(map(str, lease['patterns'])), 300)}  [{printable(lease['project'])}] {tail}{reason}")


@lease_app.command("acquire")
def acquire(
    patterns: Annotated[list[str], typer.Argument(help="Path globs relative to the repository root (src/api/**, "
                                                        "README.md) or res:NAME.")],
    agent: AgentOpt,
    project: Annotated[str, typer.Option("--project", help="The project (a repository) the paths belong to.")],
    ttl: TtlOpt = None,
    shared: Annotated[bool, typer.Option("--shared", help="Others may hold shared leases on it too.")] = False,
    reason: Annotated[Optional[str], typer.Option("--reason", help="What you are doing (shown to others).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Take it even if others hold it (they are told).")] = False,
    json_: JsonOpt = False,
) -> None:
    """Take a lease; refused (exit 1, naming the holder) if another agent holds an overlapping one."""
    result = call_daemon("lease_acquire", patterns=patterns, agent=agent, project=project, ttl_s=ttl,
                         shared=shared or None, reason=reason, force=force or None)
    if emit(result, json_):
        return
    lease = result["lease"]
    if lease is None or lease["state"] != "active":
        write_stdout(f"Lease taken but not in force: {describe_lease(lease) if lease else 'unknown'}\n")
        raise typer.Exit(EXIT_FAILED)
    write_stdout(f"Leased: {describe_lease(lease)}\n")
    for forced in result["forced"]:
        note(f"Forced out: {describe_lease(forced)} (they are told)")


@lease_app.command("renew")
def renew(
    lease_id: Annotated[str, typer.Argument(help="The lease's id (lease_…).")],
    ttl: TtlOpt = None,
    agent: Annotated[Optional[str], typer.Option("--agent", help="Its holder (default: whoever holds it).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Extend a lease (by --ttl, or as long as it was taken for)."""
    result = call_daemon("lease_renew", lease_id=lease_id, ttl_s=ttl, agent=agent)
    if emit(result, json_):
        return
    write_stdout(f"Renewed: {describe_lease(result['lease'])}\n")


@lease_app.command("release")
def release(
    lease_id: Annotated[Optional[str], typer.Argument(help="The lease's id (lease_…).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every active lease of --agent.")] = False,
    agent: Annotated[Optional[str], typer.Option("--agent", help="Its holder (required with --all).")] = None,
    project: ProjectOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Give a lease back (or all of an agent's with --all)."""
    if all_ == (lease_id is not None):
        raise UsageProblem("name one lease id, or pass --all --agent ID")
    if all_ and not agent:
        raise UsageProblem("Missing option '--agent' (release --all needs the agent whose leases to release)")
    result = call_daemon("lease_release", lease_id=lease_id, all=all_ or None, agent=agent, project=project)
    emit(result, json_,
         f"Released {result['count']} lease(s){': ' + ', '.join(result['released']) if result['released'] else ''}")


@lease_app.command("list")
def list_(
    project: ProjectOpt = None,
    agent: Annotated[Optional[str], typer.Option("--agent", help="Only this agent's leases.")] = None,
    path: Annotated[Optional[str], typer.Option("--path", help="Only leases covering this path.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Also expired, released, lost and forced ones.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Active leases (with --all: every lease of the last 30 days)."""
    result = call_daemon("lease_list", project=project, agent=agent, path=path, all=all_ or None)
    if emit(result, json_):
        return
    if not result["leases"] and sys.stderr.isatty():
        note("No leases.")
    for lease in result["leases"]:
        write_stdout(describe_lease(lease) + "\n")


@lease_app.command("check")
def check(
    paths: Annotated[list[str], typer.Argument(help="Paths relative to the repository root (or res:NAME).")],
    agent: AgentOpt,
    project: ProjectOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Exit 1 if a path is under another agent's exclusive lease (printing who holds it)."""
    result = call_daemon("lease_check", paths=paths, agent=agent, project=project)
    if not emit(result, json_):
        for blocked in result["blocked"]:
            for lease in blocked["leases"]:
                write_stdout(f"{blocked['path']}: {describe_lease(lease)}\n")
        if result["ok"] and sys.stderr.isatty():
            note(f"{result['checked']} path(s) free for {agent}.")
    if not result["ok"]:
        raise typer.Exit(EXIT_FAILED)


COMMANDS: Final[dict[str, Callable[..., None]]] = {}
GROUPS: Final = {"lease": lease_app}
