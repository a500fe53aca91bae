"""palacectl's task commands: delegate work and follow its lifecycle.

Owns: the ``task`` group (create: a ``task.request`` with goal, branch, base commit and definition
of done, printed with its hand-off text; show: one task's events and state; list: tasks and their
state). Thin commands over ``common.call_daemon``. Registered on the root app by ``cli.root``;
imports ``cli.common`` only.
"""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from .. import output
from ..output import emit_json, note, write_stdout
from .common import JsonOpt, call_daemon, text_or_file

__all__ = ["task_app"]

task_app = typer.Typer(no_args_is_help=True, help="Delegate work and follow its lifecycle.")


@task_app.command("create")
def task_create(
    project: Annotated[str, typer.Option()],
    from_agent: Annotated[str, typer.Option("--from-agent")],
    to_agent: Annotated[str, typer.Option("--to-agent")],
    branch: Annotated[str, typer.Option()],
    base_commit: Annotated[str, typer.Option("--base-commit", help="A hex commit id (≥7 chars), not a branch.")],
    goal: Annotated[Optional[str], typer.Option()] = None,
    goal_file: Annotated[Optional[str], typer.Option("--goal-file")] = None,
    done: Annotated[Optional[str], typer.Option(help="Definition of done.")] = None,
    done_file: Annotated[Optional[str], typer.Option("--done-file")] = None,
    json_: JsonOpt = False,
) -> None:
    """Delegate work: a task.request with goal, branch, base commit and definition of done."""
    goal_text = text_or_file(goal, goal_file, "goal")
    done_text = text_or_file(done, done_file, "done")
    result = call_daemon("task_create", project=project, from_agent=from_agent, to_agent=to_agent, goal=goal_text or "",
                         branch=branch, base_commit=base_commit, done=done_text or "")
    if json_:
        emit_json(result)
        return
    task = result["task"]
    write_stdout(f"Task created: {task['correlation_id']}\nEvent: {task['id']}\nTo: {task['to_agent']}\n\n"
                 f"Ready to paste:\n{result['handoff']}\n")


@task_app.command("show")
def task_show(
    correlation_id: Annotated[str, typer.Argument()],
    json_: JsonOpt = False,
) -> None:
    """A task's lifecycle: the request, every event on its correlation, its state and claimant."""
    view = call_daemon("task_show", correlation_id=correlation_id)
    if json_:
        emit_json(view)
        return
    write_stdout(f"Task {view['correlation_id']}: {view['state']}"
                 f"{' (claimed by ' + view['claimed_by'] + ')' if view['claimed_by'] else ''}\n"
                 f"  requested by {view['requested_by']} for {view['assigned_to'] or '*'}\n"
                 + output.events_block(view["events"]))


@task_app.command("list")
def task_list(
    agent: Annotated[Optional[str], typer.Option("--agent", help="Tasks this agent requested or was asked to do.")] = None,
    open_: Annotated[bool, typer.Option("--open", help="Only tasks without a terminal state.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Tasks and their state (with --open: the loops still to close)."""
    result = call_daemon("task_list", agent=agent, open=open_)
    if json_:
        emit_json(result)
        return
    if not result["tasks"] and sys.stderr.isatty():
        note("No tasks.")
    for t in result["tasks"]:
        write_stdout(f"{t['correlation_id']}\t{t['state']}\t{t['requested_by']}->{t['assigned_to'] or '*'}\t"
                     f"{t['claimed_by'] or '-'}\t{t['last_activity']}\n")
