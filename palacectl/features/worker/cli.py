"""The worker feature's commands: a run of a headless harness on a task, and a worker that runs them.

Owns ``task launch`` (added to the tasks feature's ``task`` group: one task run by a headless
harness, ``launch``) and the top-level ``worker`` (``worker``: launch after launch, until
stopped). Thin commands over the runs; the root registers what ``COMMANDS`` and ``SUBCOMMANDS``
name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final, Optional

import typer

from palace_proto.errors import ValidationError
from palace_proto.stamps import parse_duration

from ... import output
from ...cli.common import JsonOpt, UsageProblem, current_home
from ...output import emit, note

__all__ = ["COMMANDS", "SUBCOMMANDS", "task_launch", "worker"]


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
    from .launch import Launch, LaunchRefused

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

    from .worker import Worker, WorkerOptions, WorkerRefused
    from .worker_policy import PolicyError, WorkerPolicy

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

    from ...files import ConfigUnreadable, read_config
    from .worker_policy import DEFAULT_ACCEPT

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


COMMANDS: Final = {"worker": worker}
GROUPS: Final[dict[str, typer.Typer]] = {}
SUBCOMMANDS: Final = {"task": {"launch": task_launch}}
