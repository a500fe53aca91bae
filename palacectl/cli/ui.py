"""``palacectl ui``: the dashboard, served on 127.0.0.1 for the person at this machine.

Owns the command's options only; ``palacectl.ui`` is the dashboard (imported when the command
runs, so other commands never load hypercorn).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from palace_proto.errors import ValidationError

from .common import UsageProblem, current_home

__all__ = ["ui"]

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
    from ..ui.server import human_id, run_ui

    try:
        human = human_id(as_)
    except ValidationError as exc:
        raise UsageProblem(exc.message) from None
    return run_ui(current_home(), port=port, open_browser=not no_browser, human=human, max_streams=max_streams)
