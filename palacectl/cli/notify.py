"""palacectl's notify commands: check that palace can reach a person.

Owns: the ``notify`` group — ``notify test [--person human:NAME]`` asks the daemon (``notify_test``,
palaced/handlers/notify.py) to send a test notification through every channel configured in its
``[notify]`` and prints one line per channel (``ok`` or ``error`` and why); exit 0 when every
channel took it, 1 otherwise. Registered on the root app by ``cli.root``; imports ``cli.common``.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from palace_proto.text import printable

from ..output import EXIT_FAILED, EXIT_OK, emit, write_stdout
from .common import JsonOpt, call_daemon

__all__ = ["notify_app"]

notify_app = typer.Typer(no_args_is_help=True, help="Notifications to people: desktop, webhooks, mail ([notify]).")


def _line(result: dict[str, Any]) -> str:
    where = f"{printable(result['channel'])} ({printable(result['kind'])}: {printable(result.get('target') or '-')})"
    held = "" if result.get("held", True) else "  [not held here: another daemon tells this person]"
    tail = "" if result["ok"] else f": {printable(result.get('error') or 'failed', 300)}"
    return f"{'ok' if result['ok'] else 'error'}\t{printable(result['person'])}\t{where}{tail}{held}"


@notify_app.command("test")
def test(
    person: Annotated[Optional[str], typer.Option("--person", help="Only this person's channels (human:NAME).")] = None,
    json_: JsonOpt = False,
) -> int:
    """Send a test notification through every configured channel; one line per channel, exit 1 if any failed."""
    result = call_daemon("notify_test", person=person)
    code = EXIT_OK if result["ok"] else EXIT_FAILED
    if not emit(result, json_):
        for row in result["results"]:
            write_stdout(_line(row) + "\n")
    return code
