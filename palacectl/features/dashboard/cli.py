"""``palacectl ui``: the dashboard, served on 127.0.0.1 for the person at this machine.

Owns the command's options and choosing who the dashboard writes as (``human_id``:
``human:<name>``); ``palacectl.ui`` serves it (imported when the command runs, so other commands
never load hypercorn). The root registers what ``COMMANDS`` names.
"""

from __future__ import annotations

import os
from typing import Annotated, Final, Optional

import typer

from palace_proto.errors import ValidationError

from ...cli.common import UsageProblem, current_home

__all__ = ["COMMANDS", "GROUPS", "human_id", "ui"]

#: Why 64: each open tab holds one event stream; more than this many is not people looking.
MAX_STREAMS_LIMIT = 64


def ui(
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (default: any free one).")] = 0,
    no_browser: Annotated[bool, typer.Option("--no-browser", help="Print the address; do not open a browser.")] = False,
    as_: Annotated[Optional[str], typer.Option(
        "--as", help="Who your messages are from: human:<name> (default: your login name).")] = None,
    max_streams: Annotated[int, typer.Option(
        "--max-streams", help="Event streams open at once (tabs and programs); more get 503.")] = 8,
) -> int:
    """A live web dashboard of agents, tasks, peers and memory, on 127.0.0.1 behind a per-run secret."""
    if not 0 <= port <= 65535:
        raise UsageProblem(f"--port {port} is not a port; give 1-65535, or leave it out for any free one")
    if not 1 <= max_streams <= MAX_STREAMS_LIMIT:
        raise UsageProblem(f"--max-streams must be from 1 to {MAX_STREAMS_LIMIT}")
    from ...ui.server import run_ui

    try:
        human = human_id(as_)
    except ValidationError as exc:
        raise UsageProblem(exc.message) from None
    return run_ui(current_home(), port=port, open_browser=not no_browser, human=human, max_streams=max_streams)


def human_id(name: str | None, environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """The ``human:<name>`` the dashboard writes as: ``--as`` (with or without the prefix), else
    the login name with what an id may not hold replaced.

    Raises:
        ValidationError: a ``--as`` that is not a person's id.
    """
    # Only now: the other commands start without palace_proto.identity.
    from palace_proto.identity import HUMAN_PREFIX, check_agent_id

    if name:
        text = name.strip()
        return check_agent_id(text if text.startswith(HUMAN_PREFIX) else HUMAN_PREFIX + text, field="--as")
    login = environ.get("USER") or environ.get("USERNAME") or environ.get("LOGNAME") or "operator"
    cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in login)[:64].strip("-.") or "operator"
    return check_agent_id(HUMAN_PREFIX + cleaned, field="login name")


COMMANDS: Final = {"ui": ui}
GROUPS: Final[dict[str, typer.Typer]] = {}
