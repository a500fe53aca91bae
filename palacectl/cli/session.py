"""palacectl's inbox and session commands: ``inbox`` (with ``mark-read``) and ``session start``.

Owns: how an agent reads what the daemon keeps for it — its inbox after its cursor (the daemon
keeps the cursor: nothing to remember across a context compaction) and the one block a session
starts with (``palacectl.session_text``: short enough to paste into a context window, which is
what the harness hooks do). Thin commands over ``common.call_daemon``. Registered on the root app by
``cli.root``; imports ``cli.common`` only.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from palace_proto.errors import ApiError

from .. import loop
from ..client import DaemonUnreachable
from ..output import emit, write_stdout
from ..session_text import render_session
from .common import JsonOpt, UsageProblem, call_daemon, current_home

__all__ = ["inbox_app", "session_app"]

inbox_app = typer.Typer(invoke_without_command=True, help="Your inbox, kept by the daemon: what is addressed to "
                        "you (or to *) after your read cursor.")
session_app = typer.Typer(no_args_is_help=True, help="Start a session with everything you need.")

AgentOpt = Annotated[str, typer.Option("--agent", help="Your agent id.")]


@inbox_app.callback()
def inbox(
    ctx: typer.Context,
    agent: Annotated[Optional[str], typer.Option("--agent", help="Your agent id.")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="At most this many events (1-500; default 20).")] = None,
    preview: Annotated[bool, typer.Option("--preview", help="Bodies cut to 200 characters.")] = False,
    json_: JsonOpt = False,
) -> None:
    """List your inbox: events for you (or *), not from you, after your read cursor, oldest first."""
    if ctx.invoked_subcommand is not None:
        return
    loop.inbox(current_home(), {"agent": agent, "limit": limit, "preview": preview, "json": json_})


@inbox_app.command("mark-read")
def mark_read(
    agent: AgentOpt,
    upto: Annotated[Optional[str], typer.Option(
        "--upto", help="The last event you handled (default: the last one `inbox` showed you).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Move your read cursor to an event your inbox listed (never backwards); without --upto, to
    the last one `palacectl inbox` showed you (what arrived since stays unread)."""
    loop.mark_read(current_home(), {"agent": agent, "upto": upto, "json": json_})


@session_app.command("start")
def start(
    agent: AgentOpt,
    hook: Annotated[Optional[str], typer.Option(
        "--hook", help="Print it as a harness hook's context (claude, codex, gemini); what `palacectl rules "
                       "--hooks` installs.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Everything to start (or resume) a session: inbox, open loops, leases, diary, who watches, next step."""
    if hook is not None:
        from ..hooks import HOOK_HARNESSES, hook_output

        if hook not in HOOK_HARNESSES:
            raise UsageProblem(f"--hook must be one of: {', '.join(sorted(HOOK_HARNESSES))}")
        try:
            text = render_session(call_daemon("session_start", agent=agent))
        except (ApiError, DaemonUnreachable) as exc:
            # A hook must not stop the session from starting: the agent hears why palace is silent.
            message = exc.message if isinstance(exc, ApiError) else str(exc)
            text = f"palace: `palacectl session start --agent {agent}` failed: {message}"
        write_stdout(hook_output(hook, text) + "\n")
        return
    result = call_daemon("session_start", agent=agent)
    if emit(result, json_):
        return
    write_stdout(render_session(result))

