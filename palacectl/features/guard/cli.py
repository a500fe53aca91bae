"""palacectl's git guard commands: hooks that keep commits off other agents' leased paths.

Owns: the ``guard`` group (install, uninstall, and ``run``, what the installed hooks call) over
``githooks``. The root registers what ``COMMANDS`` and ``GROUPS`` name.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Final, Optional

import typer

from ...cli.common import JsonOpt, current_home
from ...client import Client
from ...output import emit, fail, note, write_stdout
from . import githooks

__all__ = ["COMMANDS", "GROUPS", "guard_app"]

guard_app = typer.Typer(no_args_is_help=True, help="Git hooks that refuse commits under other agents' leases.")

RepoOpt = Annotated[Path, typer.Option("--repo", help="The git repository (default: the current directory).")]


@guard_app.command("install")
def install(
    agent: Annotated[str, typer.Option("--agent", help="The agent committing in this repository.")],
    repo: RepoOpt = Path("."),
    project: Annotated[Optional[str], typer.Option("--project", help="Check only this project's leases.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Install pre-commit and pre-push hooks (an existing hook is kept and run first)."""
    try:
        done = githooks.install(repo, agent=agent, project=project, home=current_home().resolve())
    except githooks.GuardError as exc:
        fail(str(exc), code="invalid_argument")
    if emit({"hooks_dir": str(done.hooks_dir), "installed": done.hooks, "chained": done.chained}, json_):
        return
    write_stdout(f"Guard installed in {done.hooks_dir} ({', '.join(done.hooks)}) for {agent}"
                 f"{' in project ' + project if project else ''}.\n")
    for hook in done.chained:
        note(f"Your existing {hook} hook still runs first (kept as {hook}{githooks.CHAINED_SUFFIX}).")


@guard_app.command("uninstall")
def uninstall(repo: RepoOpt = Path("."), json_: JsonOpt = False) -> None:
    """Remove palace's hooks (only those) and put back the hooks they chained."""
    try:
        done = githooks.uninstall(repo)
    except githooks.GuardError as exc:
        fail(str(exc), code="invalid_argument")
    emit({"hooks_dir": str(done.hooks_dir), "removed": done.hooks, "restored": done.chained}, json_,
         f"Removed {', '.join(done.hooks) or 'nothing (no palace hook here)'} from {done.hooks_dir}.")


@guard_app.command("run", hidden=True)
def run(
    hook: Annotated[str, typer.Argument(help="pre-commit or pre-push")],
    hook_args: Annotated[Optional[list[str]], typer.Argument(help="What git passed the hook.")] = None,
    agent: Annotated[str, typer.Option("--agent")] = "",
    project: Annotated[Optional[str], typer.Option("--project")] = None,
) -> None:
    """What the installed hooks run (not for people): check the paths, refuse or pass."""
    if hook not in githooks.HOOKS:
        fail(f"unknown hook {hook!r}: expected one of {', '.join(githooks.HOOKS)}", code="usage", exit_code=64)
    stdin = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    home = current_home()

    def check(paths: list[str]) -> dict[str, Any]:
        return _bounded(lambda: _lease_check(home, paths, agent, project), githooks.CHECK_TIMEOUT_S)

    code = githooks.run_hook(hook, Path("."), stdin, check, mode=githooks.guard_mode(), say=note)
    raise typer.Exit(code)


def _lease_check(home: Path, paths: list[str], agent: str, project: str | None) -> dict[str, Any]:
    with Client(home, client_name="palacectl-guard") as client:
        args: dict[str, Any] = {"paths": paths, "agent": agent}
        if project:
            args["project"] = project
        return client.call("lease_check", **args)


def _bounded(work: Any, timeout_s: float) -> Any:
    """``work()`` on a daemon thread, or TimeoutError after ``timeout_s`` (git is waiting)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name="palace-guard-check")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"palaced did not answer within {timeout_s:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


COMMANDS: Final[dict[str, Callable[..., None]]] = {}
GROUPS: Final = {"guard": guard_app}
