"""The tasks feature's commands: delegate work and follow its lifecycle.

Owns: the ``task`` group (create: a ``task.request`` with goal, branch, base commit and definition
of done — and the queue's blockers, priority and stall time — printed with its hand-off text;
show: one task's events, state, claims and blockers; list: tasks and their state; ready, claim,
release, reassign: the queue, ready and claim with the loop's bodies, ``quick``). Thin commands
over ``cli.common.call_daemon``; the root registers what ``COMMANDS`` and ``GROUPS`` name (the
worker feature adds ``task launch``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any, Final, Optional, get_origin

import typer

from ... import output
from ...cli.common import JsonOpt, call_daemon, current_home, option, text_or_file, with_options
from ...output import emit, note, warn, write_stdout
from . import quick
from .request import ARGUMENTS

__all__ = ["COMMANDS", "GROUPS", "task_app"]

task_app = typer.Typer(no_args_is_help=True, help="Delegate work and follow its lifecycle.")


def _create_options() -> list[inspect.Parameter]:
    """``task create``'s options: the sender's identity, then ``request.ARGUMENTS`` (long text
    inline or from a file, ``--goal``/``--goal-file``; a list one value at a time)."""
    options = [option("from_agent", Annotated[str, typer.Option("--from-agent")], required=True)]
    for arg in ARGUMENTS:
        flag, said = "--" + arg.name.replace("_", "-"), arg.help or None
        if arg.from_file:
            options.append(option(arg.name, Annotated[Optional[str], typer.Option(flag, help=said)]))
            options.append(option(f"{arg.name}_file", Annotated[Optional[str], typer.Option(f"{flag}-file")]))
        elif arg.required:
            options.append(option(arg.name, Annotated[arg.type, typer.Option(flag, help=said)], required=True))
        else:
            options.append(option(arg.name, Annotated[Optional[arg.type], typer.Option(flag, help=said)]))
    return options


@task_app.command("create")
@with_options(_create_options())
def task_create(json_: JsonOpt = False, **args: Any) -> None:
    """Delegate work: a task.request with goal, branch, base commit and definition of done."""
    for arg in ARGUMENTS:
        if arg.from_file:
            args[arg.name] = text_or_file(args[arg.name], args.pop(f"{arg.name}_file"), arg.name) or ""
        elif get_origin(arg.type) is list:
            args[arg.name] = args[arg.name] or None  # an empty list is none (the daemon's default)
    result = call_daemon("task_create", **args)
    if emit(result, json_):
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
    if emit(view, json_):
        return
    lines = [f"Task {view['correlation_id']}: {view['state']}"
             f"{' (claimed by ' + view['claimed_by'] + ')' if view['claimed_by'] else ''}",
             f"  requested by {view['requested_by']} for {view['assigned_to'] or '*'}, priority {view['priority']}"]
    if view["blocked_by"]:
        waiting = set(view.get("waiting_on", []))
        lines.append("  blocked by " + ", ".join(f"{b} ({'waiting' if b in waiting else 'applied'})"
                                                 for b in view["blocked_by"]))
    for conflict in view["conflicts"]:
        lines.append(f"  double claim: {conflict['agent']} claimed too ({conflict['event_id']}); the first claim, "
                     f"{conflict['claimant']}'s, holds")
    lines += _landing_lines(view)
    for question in view.get("questions", []):
        state = (f"{question['answer']['by']}: {question['answer']['text']}" if question["answer"] else
                 ("waiting for approval" if question.get("approval") else "waiting for a person")
                 if question["status"] == "open" else "expired, unanswered")
        text = " ".join(str(question["question"] or "").split())[:100]
        lines.append(f"  question {question['question_id']} to {question['to']}: {text} ({state})")
    write_stdout("\n".join(lines) + "\n" + output.events_block(view["events"]))


def _landing_lines(view: dict[str, Any]) -> list[str]:
    """The patch waiting, its review, its checks and the rounds it went back (issue 46)."""
    lines = []
    delivery, review = view.get("delivery"), view.get("review") or {}
    if delivery is not None:
        lines.append(f"  patch {delivery['event_id']} by {delivery['author']}"
                     + (f" on {delivery['base'][:12]}" if delivery.get("base") else ""))
    if review.get("by") is not None:
        said = {"approved": f"approved by {review.get('approved_by')}", "waiting": "waiting for the review",
                "changes_requested": "changes requested", "no_patch": "no patch yet"}.get(review["state"],
                                                                                       review["state"])
        lines.append(f"  review by {review['by']}: {said}")
    if view.get("integrator"):
        lines.append(f"  integrator {view['integrator']}")
    for check in view.get("checks") or []:
        took = f" in {check['duration_s']:.1f} s" if isinstance(check.get("duration_s"), (int, float)) else ""
        log = f", log {check['artifact_ids'][0]}" if check.get("artifact_ids") else ""
        lines.append(f"  check {check['result']}{took} on {str(check.get('commit') or '?')[:12]} ({check['by']}{log})")
    for rework in view.get("reworks") or []:
        why = "changes requested" if rework["kind"] == "changes_requested" else "sent back"
        lines.append(f"  {why} by {rework['by']} ({rework['created_at']}): {' '.join(rework['said'].split())[:120]}")
    return lines


@task_app.command("list")
def task_list(
    agent: Annotated[Optional[str], typer.Option("--agent", help="Tasks this agent requested or was asked to do.")] = None,
    open_: Annotated[bool, typer.Option("--open", help="Only tasks without a terminal state.")] = False,
    stalled: Annotated[bool, typer.Option("--stalled", help="Only claimed tasks whose claimant went quiet.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Tasks and their state (with --open: the loops still to close)."""
    result = call_daemon("task_list", agent=agent, open=open_, stalled=stalled or None)
    if emit(result, json_):
        return
    if not result["tasks"]:  # said also to an agent's shell: an empty answer looked like a failure
        note("No open tasks." if open_ else "No tasks.")
    for t in result["tasks"]:
        write_stdout(f"{t['correlation_id']}\t{t['state']}\t{t['requested_by']}->{t['assigned_to'] or '*'}\t"
                     f"{t['claimed_by'] or '-'}\t{t['last_activity']}\n")
    if result.get("capped"):
        warn(f"more older unfinished tasks than a listing holds: the oldest are not listed (the newest "
             f"{result.get('newest')} tasks and the newest unfinished older ones are); close or supersede "
             "the ones nobody will do")


@task_app.command("ready")
def task_ready(
    agent: Annotated[str, typer.Option("--agent", help="The agent looking for work.")],
    json_: JsonOpt = False,
) -> None:
    """Tasks the agent can take now: for it (or *), open, unclaimed, blockers applied; urgent and oldest first."""
    quick.task_ready(current_home(), {"agent": agent, "json": json_})


@task_app.command("claim")
def task_claim(
    correlation_id: Annotated[str, typer.Argument()],
    agent: Annotated[str, typer.Option("--agent", help="The agent taking the task.")],
    json_: JsonOpt = False,
) -> None:
    """Claim a task; refused if someone else holds it, it is blocked, or it is closed."""
    quick.task_claim(current_home(), {"correlation_id": correlation_id, "agent": agent, "json": json_})


@task_app.command("release")
def task_release(
    correlation_id: Annotated[str, typer.Argument()],
    agent: Annotated[str, typer.Option("--agent", help="Its claimant.")],
    reason: Annotated[Optional[str], typer.Option(help="Why (the requester reads it).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Give a claimed task back: it is open again for anyone it is addressed to."""
    result = call_daemon("task_release", correlation_id=correlation_id, agent=agent, reason=reason)
    emit(result, json_, f"Released: {correlation_id} is open again")


@task_app.command("reassign")
def task_reassign(
    correlation_id: Annotated[str, typer.Argument()],
    to_agent: Annotated[str, typer.Option("--to-agent", help="Who should do it now (or *).")],
    agent: Annotated[Optional[str], typer.Option("--agent", help="The requester (default: the task's).")] = None,
    json_: JsonOpt = False,
) -> None:
    """The requester hands a task to another agent: open again, addressed to them (it wakes them)."""
    result = call_daemon("task_reassign", correlation_id=correlation_id, to_agent=to_agent, agent=agent)
    emit(result, json_, f"Reassigned: {correlation_id} to {to_agent}")


COMMANDS: Final[dict[str, Callable[..., None]]] = {}
GROUPS: Final = {"task": task_app}
