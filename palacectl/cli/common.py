"""What every palacectl command module shares: the home in use, one request to the daemon, the
common options, reading a file or stdin byte-exactly, and printing a page of events.

Owns: the ``--home`` chosen by the root callback (``set_home`` / ``current_home``), ``call_daemon``
(one request; absent arguments left out), the ``--json`` option and the other ``Annotated``
aliases more than one group uses; ``UsageProblem`` (exit 64) and the input helpers
(``read_input``, ``decode_utf8``, ``text_or_file``, ``parse_metadata``) are ``palacectl.loop``'s,
named here for the command modules (the loop's quick path shares them without typer). Command modules import
this module and ``palacectl.output``; none imports another command module or ``cli.root`` (the
root imports them all, so an import back would be a cycle).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..client import home_from
from ..loop import (
    UsageProblem,
    call,
    capped,
    decode_utf8,
    parse_metadata,
    print_events,
    read_input,
    text_or_file,
)

__all__ = [
    "JsonOpt", "Multi", "UsageProblem", "call_daemon", "capped", "current_home", "decode_utf8", "parse_metadata",
    "print_events", "read_input", "set_home", "text_or_file",
]

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
# A repeatable option: each value is one more alternative (OR).
Multi = Optional[list[str]]

# The global --home of this invocation (None: $PALACE_HOME, else ~/.palace). main() runs once per
# process, or once per call in tests: the root callback sets it every time.
_state: dict[str, Path | None] = {"home": None}


def set_home(home: Path | None) -> None:
    """Record the global ``--home`` (the root callback's job)."""
    _state["home"] = home_from(home)


def current_home() -> Path:
    """The palace home this invocation works on."""
    return _state["home"] or home_from(None)


def call_daemon(op: str, **args: Any) -> Any:
    """One request to the daemon on the current home; arguments that are None are left out (the
    daemon applies its defaults). Its errors propagate to ``main``, which maps them to exit codes."""
    return call(current_home(), op, **args)
