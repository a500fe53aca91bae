"""palacectl's task commands: delegate work and follow its lifecycle.

Owns: the ``task`` group (create: a ``task.request`` with goal, branch, base commit and definition
of done — and the queue's blockers, priority and stall time — printed with its hand-off text;
show: one task's events, state, claims and blockers; list: tasks and their state; ready, claim,
release, reassign: the queue; launch: one task run by a headless harness) and the top-level
``worker`` (``palacectl.worker``: launch after launch, until stopped). Thin commands over
``common.call_daemon``. Registered on the root app by ``cli.root``; imports ``cli.common`` only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from palace_proto.errors import ValidationError
from palace_proto.stamps import parse_duration

from .. import loop, output
from ..output import emit, note, warn, write_stdout
from .common import JsonOpt, UsageProblem, call_daemon, current_home, text_or_file

__all__ = ["task_app", "worker"]

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
    blocked_by: Annotated[Optional[list[str]], typer.Option(
        "--blocked-by", help="A task (correlation id) that must be applied first; repeatable.")] = None,
    priority: Annotated[Optional[int], typer.Option(help="0 (urgent) to 3 (low); default 2.")] = None,
    stall_after: Annotated[Optional[str], typer.Option(
        "--stall-after", help="Stalled when its claimant says nothing this long (90s, 30m, 2h, 7d).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Delegate work: a task.request with goal, branch, base commit and definition of done."""
    goal_text = text_or_file(goal, goal_file, "goal")
    done_text = text_or_file(done, done_file, "done")
    result = call_daemon("task_create", project=project, from_agent=from_agent, to_agent=to_agent, goal=goal_text or "",
                         branch=branch, base_commit=base_commit, done=done_text or "", blocked_by=blocked_by or None,
                         priority=priority, stall_after=stall_after)
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
    for question in view.get("questions", []):
        state = (f"{question['answer']['by']}: {question['answer']['text']}" if question["answer"] else
                 ("waiting for approval" if question.get("approval") else "waiting for a person")
                 if question["status"] == "open" else "expired, unanswered")
        text = " ".join(str(question["question"] or "").split())[:100]
        lines.append(f"  question {question['question_id']} to {question['to']}: {text} ({state})")
    write_stdout("\n".join(lines) + "\n" + output.events_block(view["events"]))


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
    loop.task_ready(current_home(), {"agent": agent, "json": json_})


@task_app.command("claim")
def task_claim(
    correlation_id: Annotated[str, typer.Argument()],
    agent: Annotated[str, typer.Option("--agent", help="The agent taking the task.")],
    json_: JsonOpt = False,
) -> None:
    """Claim a task; refused if someone else holds it, it is blocked, or it is closed."""
    loop.task_claim(current_home(), {"correlation_id": correlation_id, "agent": agent, "json": json_})


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


@task_app.command("launch")
def task_launch(
    correlation_id: Annotated[str, typer.Argument()],
    runner: Annotated[str, typer.Option("--runner", help="claude, codex, gemini, opencode, or [runners.NAME].")],
    workspace: Annotated[Path, typer.Option("--workspace", help="The git repository to work in.")],
    agent: Annotated[Optional[str], typer.Option("--agent", help="Who runs it (default: its addressee).")] = None,
    in_place: Annotated[bool, typer.Option("--in-place", help="Work in the workspace itself, on the task's branch "
                                                             "(default: a fresh worktree at the base commit).")] = False,
    timeout: Annotated[Optional[str], typer.Option("--timeout", help="Stop a run that takes longer: 90s, 30m, 2h.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Run a headless agent harness on a task: claim, run in its own worktree, deliver the patch or reply."""
    from ..launch import Launch, LaunchRefused

    timeout_s = _timeout_s(timeout)
    launch = Launch(current_home(), correlation_id, runner=runner, workspace=workspace.resolve(), agent=agent,
                    in_place=in_place, timeout_s=timeout_s, say=note)
    try:
        result = launch.run()
    except LaunchRefused as exc:
        output.fail(str(exc), code="refused")
    emit(result.to_wire(), json_, f"{result.outcome}: {correlation_id} — {result.reason}\n"
                                  f"  worktree {result.worktree}, log {result.log_artifact or '-'}"
                                  f"{', patch ' + result.patch_event if result.patch_event else ''}")
    if result.outcome != "delivered":
        raise typer.Exit(output.EXIT_FAILED)


def _timeout_s(timeout: str | None) -> float | None:
    """``--timeout`` (90s, 30m, 2h) in seconds; a bad one is a usage error."""
    if timeout is None:
        return None
    try:
        return float(parse_duration(timeout, field="--timeout"))
    except ValidationError as exc:
        raise UsageProblem(exc.message) from None


def worker(
    agent: Annotated[str, typer.Option("--agent", help="The agent whose tasks it works (addressed to it, or to *).")],
    runner: Annotated[str, typer.Option("--runner", help="claude, codex, gemini, opencode, or [runners.NAME].")],
    workspace: Annotated[Path, typer.Option("--workspace", help="The git repository the tasks are for.")],
    concurrency: Annotated[int, typer.Option("--concurrency", help="Tasks run at once, each in its own worktree "
                                                                  "(1-16).")] = 1,
    project: Annotated[Optional[str], typer.Option("--project", help="Only this project's tasks.")] = None,
    timeout: Annotated[Optional[str], typer.Option("--timeout", help="Stop a run that takes longer: 90s, 30m, 2h.")] = None,
    accept_from: Annotated[Optional[list[str]], typer.Option(
        "--accept-from", help="Whose tasks it runs (repeat): local (this daemon's agents and people, the default), "
                              "an agent id, human:NAME, daemon:NAME, or * (anyone: unsafe). "
                              "Default: [worker] accept_from in config.toml, else local.")] = None,
    skip_backlog: Annotated[bool, typer.Option("--skip-backlog", help="Leave the tasks that were ready before it "
                                                                      "started (until something happens on one); "
                                                                      "without it, it names them, then takes them.")] = False,
) -> None:
    """Work tasks by yourself: watch for ready tasks, launch the runner on each, report; until stopped.

    A worker runs each task's words as the prompt of a harness with your account: it takes tasks only
    from the requesters --accept-from names, and declines the others on the task."""
    import signal

    from palace_proto.workers import MAX_CONCURRENCY

    from ..worker import Worker, WorkerOptions, WorkerRefused
    from ..worker_policy import PolicyError, WorkerPolicy

    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise UsageProblem(f"--concurrency must be from 1 to {MAX_CONCURRENCY}")
    if not agent.strip():
        raise UsageProblem("--agent must not be empty")
    timeout_s = _timeout_s(timeout)
    home = current_home()
    try:
        policy = WorkerPolicy.parse(accept_from if accept_from else _configured_accept(home))
    except PolicyError as exc:
        raise UsageProblem(str(exc)) from None
    work = Worker(WorkerOptions(home, agent.strip(), runner, workspace.resolve(), concurrency, project,
                                timeout_s, policy, skip_backlog), say=note)

    def on_signal(signum: int, frame: object) -> None:
        work.stop(f"the worker was stopped by {signal.Signals(signum).name}")

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        work.run()
    except WorkerRefused as exc:
        output.fail(str(exc), code="refused")


def _configured_accept(home: Path) -> list[str]:
    """``[worker] accept_from`` in the home's config.toml, else the default (``local``).

    Raises:
        UsageProblem: the file cannot be read, or the key is not a list of strings.
    """
    from palace_proto.paths import CONFIG_FILENAME

    from ..files import ConfigUnreadable, read_config
    from ..worker_policy import DEFAULT_ACCEPT

    path = home / CONFIG_FILENAME
    try:
        config = read_config(home)
    except ConfigUnreadable as exc:
        raise UsageProblem(str(exc)) from None
    section = config.get("worker", {})
    value = section.get("accept_from") if isinstance(section, dict) else None
    if value is None:
        return list(DEFAULT_ACCEPT)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageProblem(f'{path}: [worker] accept_from must be a list of strings, e.g. ["local", "mac-claude"]')
    return value
