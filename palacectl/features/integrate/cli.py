"""The integrate feature's commands: ``integrate`` (land delivered patches on a branch, until
stopped), ``review`` (approve a task's delivered patch, or ask for changes) and ``reviewer`` (an
agent reviewing delivered patches with a headless harness, until stopped).

Owns the options and their defaults from ``[integrate]`` in config.toml (``check``,
``check_timeout``, ``accept_from``, ``max_patch_bytes``, ``max_reworks``), each checked with a
one-line error naming the key; thin over ``integrator.Integrator`` and the daemon's ``append``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final, Optional

import typer

from palace_proto.errors import ValidationError
from palace_proto.stamps import parse_duration

from ... import output
from ...cli.common import JsonOpt, UsageProblem, call_daemon, current_home
from ...output import emit, note
from .review import NothingToReview, review_append

__all__ = ["COMMANDS", "integrate", "review", "reviewer"]

#: what ``[integrate]`` in config.toml may say, and its type
CONFIG_KEYS: Final = {"check": str, "check_timeout": str, "accept_from": list, "max_patch_bytes": int,
                      "max_reworks": int}


def _configured(home: Path) -> dict[str, Any]:
    """``[integrate]`` of the home's config.toml, checked (raises UsageProblem naming the key)."""
    from palace_proto.paths import CONFIG_FILENAME

    from ...files import ConfigUnreadable, read_config

    path = home / CONFIG_FILENAME
    try:
        section = read_config(home).get("integrate", {})
    except ConfigUnreadable as exc:
        raise UsageProblem(str(exc)) from None
    if not isinstance(section, dict):
        raise UsageProblem(f"{path}: [integrate] must be a table")
    for key, value in section.items():
        expected = CONFIG_KEYS.get(key)
        if expected is None:
            raise UsageProblem(f"{path}: unknown key integrate.{key} (known: {', '.join(CONFIG_KEYS)})")
        if not isinstance(value, expected) or isinstance(value, bool):
            raise UsageProblem(f"{path}: integrate.{key} must be {_kind(expected)}")
    return section


def _kind(expected: type) -> str:
    return {str: "a string", int: "an integer", list: "a list of strings"}[expected]


def _run_until_stopped(process: Any, refused: type[Exception]) -> None:
    """``process.check()`` (a refusal, before anything starts, is one line, exit 1), then
    ``process.run()`` until SIGINT or SIGTERM asks ``process.stop``. The handlers are installed only
    once the checks passed: a refused command leaves its caller's as they were."""
    import signal

    def on_signal(signum: int, frame: object) -> None:
        process.stop(f"stopped by {signal.Signals(signum).name}")

    try:
        process.check()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
        process.run()
    except refused as exc:
        output.fail(str(exc), code="refused")


def integrate(
    agent: Annotated[str, typer.Option("--agent", help="The integrator's agent id (the one tasks name as integrator).")],
    repo: Annotated[Path, typer.Option("--repo", help="The git repository on this machine.")],
    branch: Annotated[str, typer.Option("--branch", help="The integration branch it moves (checked out nowhere).")],
    project: Annotated[str, typer.Option("--project", help="The project whose tasks it lands.")],
    check: Annotated[Optional[str], typer.Option(
        "--check", help="The check each patch must pass, a shell command run in the new commit's worktree "
                        "(default: [integrate] check in config.toml).")] = None,
    check_timeout: Annotated[Optional[str], typer.Option(
        "--check-timeout", help="Stop a check that takes longer, and fail its task: 90s, 30m, 2h (default 30m).")] = None,
    accept_from: Annotated[Optional[list[str]], typer.Option(
        "--accept-from", help="Whose tasks it lands (repeat): local (the default), an agent id, human:NAME, "
                              "daemon:NAME, or * (anyone: unsafe).")] = None,
    max_patch_bytes: Annotated[Optional[int], typer.Option(
        "--max-patch-bytes", help="Refuse a larger patch (default 8 MiB).")] = None,
    max_reworks: Annotated[Optional[int], typer.Option(
        "--max-reworks", help="Send a patch that no longer applies back this many times, then ask a person "
                              "(default 3).")] = None,
) -> None:
    """Land delivered patches on a branch, each checked, one commit at a time; until stopped.

    Takes the ready tasks of --project that name this --agent as their integrator and --branch as
    their branch, reviewed where a review is required, from the requesters --accept-from names."""
    from ..worker.worker_policy import PolicyError, WorkerPolicy
    from .integrator import (
        DEFAULT_CHECK_TIMEOUT_S,
        DEFAULT_MAX_REWORKS,
        IntegrateOptions,
        Integrator,
        IntegratorRefused,
    )
    from .patch_check import DEFAULT_MAX_PATCH_BYTES

    home = current_home()
    config = _configured(home)
    command = check if check is not None else config.get("check")
    if not command or not str(command).strip():
        raise UsageProblem("give the check each patch must pass: --check 'COMMAND' (or [integrate] check in "
                           "config.toml), e.g. --check 'make test'")
    timeout_text = check_timeout if check_timeout is not None else config.get("check_timeout")
    try:
        timeout_s = (float(parse_duration(timeout_text, field="--check-timeout")) if timeout_text is not None
                     else float(DEFAULT_CHECK_TIMEOUT_S))
    except ValidationError as exc:
        raise UsageProblem(exc.message) from None
    limit = max_patch_bytes if max_patch_bytes is not None else config.get("max_patch_bytes", DEFAULT_MAX_PATCH_BYTES)
    rounds = max_reworks if max_reworks is not None else config.get("max_reworks", DEFAULT_MAX_REWORKS)
    if limit < 1:
        raise UsageProblem("--max-patch-bytes must be a positive number of bytes")
    if not 0 <= rounds <= 100:
        raise UsageProblem("--max-reworks must be from 0 to 100")
    if not agent.strip() or any(c.isspace() for c in agent.strip()) or agent.strip().startswith("human:"):
        raise UsageProblem("--agent must be an agent id (one word, not a person's human:NAME)")
    try:
        policy = WorkerPolicy.parse(accept_from if accept_from else config.get("accept_from", ["local"]))
    except PolicyError as exc:
        raise UsageProblem(str(exc)) from None
    integrator = Integrator(IntegrateOptions(home, agent.strip(), repo.resolve(), branch.strip(), project.strip(),
                                             str(command), timeout_s, policy, limit, rounds), say=note)
    _run_until_stopped(integrator, IntegratorRefused)


def reviewer(
    agent: Annotated[str, typer.Option("--agent", help="The reviewing agent (never the patches' author).")],
    runner: Annotated[str, typer.Option("--runner", help="claude, codex, gemini, opencode, or [runners.NAME].")],
    workspace: Annotated[Path, typer.Option("--workspace", help="A clone of the project (patches are applied on "
                                                                 "their base commit in a worktree of their own).")],
    timeout: Annotated[Optional[str], typer.Option(
        "--timeout", help="Stop a review run that takes longer: 90s, 30m, 2h (default 20m).")] = None,
    accept_from: Annotated[Optional[list[str]], typer.Option(
        "--accept-from", help="Whose tasks it reviews (repeat): local (the default), an agent id, human:NAME, "
                              "daemon:NAME, or * (anyone: unsafe).")] = None,
) -> None:
    """Review delivered patches with a headless harness: approve or request changes; until stopped.

    Takes the tasks whose review asks for --agent or any-other-agent; the run ends its answer with
    VERDICT: approve or VERDICT: changes_requested, and a run without one approves nothing."""
    from ..worker.worker_policy import PolicyError, WorkerPolicy
    from .reviewer import DEFAULT_REVIEW_TIMEOUT_S, Reviewer, ReviewerOptions, ReviewerRefused

    if not agent.strip() or any(c.isspace() for c in agent.strip()) or agent.strip().startswith("human:"):
        raise UsageProblem("--agent must be an agent id (one word; a person reviews with palacectl review)")
    try:
        timeout_s = float(parse_duration(timeout, field="--timeout")) if timeout else float(DEFAULT_REVIEW_TIMEOUT_S)
        policy = WorkerPolicy.parse(accept_from or ["local"])
    except (ValidationError, PolicyError) as exc:
        raise UsageProblem(getattr(exc, "message", None) or str(exc)) from None
    run = Reviewer(ReviewerOptions(current_home(), agent.strip(), runner, workspace.resolve(), timeout_s, policy),
                   say=note)
    _run_until_stopped(run, ReviewerRefused)


def review(
    correlation_id: Annotated[str, typer.Argument(help="The task whose delivered patch you review.")],
    approve: Annotated[bool, typer.Option("--approve", help="The patch may land.")] = False,
    request_changes: Annotated[bool, typer.Option(
        "--request-changes", help="Send it back to its author with your message.")] = False,
    message: Annotated[Optional[str], typer.Option("--message", "-m", help="What you say with it.")] = None,
    as_: Annotated[Optional[str], typer.Option(
        "--as", help="Who reviews: human:NAME, or an agent id of this daemon (never the patch's author).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Approve a task's delivered patch, or request changes (it goes back to its author)."""
    if approve == request_changes:
        raise UsageProblem("say --approve or --request-changes (one of them)")
    if not as_:
        raise UsageProblem("say who reviews: --as human:NAME (you), or --as AGENT")
    if request_changes and not (message and message.strip()):
        raise UsageProblem("--request-changes needs -m 'what to change': its author redoes the work from it")
    view = call_daemon("task_show", correlation_id=correlation_id)
    verdict = "approve" if approve else "changes_requested"
    try:
        args = review_append(view, as_, verdict, message.strip() if message else ("approved" if approve else ""))
    except NothingToReview as exc:
        output.fail(str(exc), code="refused")
    event = call_daemon("append", **args)
    emit(event, json_, f"{'approved' if approve else 'changes requested on'} {correlation_id} "
                       f"({args['to_agent']}'s patch {args['ack_of']}) as {as_}: {event['id']}")


COMMANDS: Final = {"integrate": integrate, "review": review, "reviewer": reviewer}
GROUPS: Final[dict[str, typer.Typer]] = {}
