"""What every palacectl command module shares: the home in use, one request to the daemon, the
common options, reading a file or stdin byte-exactly, and printing a page of events.

Owns: the ``--home`` chosen by the root callback (``set_home`` / ``current_home``), ``call_daemon``
(one request; absent arguments left out), the ``--json`` option and the other ``Annotated``
aliases more than one group uses, ``UsageProblem`` (exit 64), and the input helpers
(``read_input``, ``decode_utf8``, ``text_or_file``, ``parse_metadata``). Command modules import
this module and ``palacectl.output``; none imports another command module or ``cli.root`` (the
root imports them all, so an import back would be a cycle).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from palace_proto.validation import parse_json_object

from .. import output
from ..client import Client, home_from
from ..output import EXIT_USAGE, CommandFailed, emit_json, fail, note, write_stdout

__all__ = [
    "JsonOpt", "Multi", "UsageProblem", "call_daemon", "capped", "current_home", "decode_utf8", "event_filters",
    "parse_metadata", "print_events", "read_input", "set_home", "text_or_file",
]

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
# A repeatable option: each value is one more alternative (OR).
Multi = Optional[list[str]]

# The global --home of this invocation (None: $PALACE_HOME, else ~/.palace). main() runs once per
# process, or once per call in tests: the root callback sets it every time.
_state: dict[str, Path | None] = {"home": None}


class UsageProblem(CommandFailed):
    """The command line is wrong (a flag missing, two that exclude each other): exit 64."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="usage", exit_code=EXIT_USAGE)


def set_home(home: Path | None) -> None:
    """Record the global ``--home`` (the root callback's job)."""
    _state["home"] = home_from(home)


def current_home() -> Path:
    """The palace home this invocation works on."""
    return _state["home"] or home_from(None)


def call_daemon(op: str, **args: Any) -> Any:
    """One request to the daemon on the current home; arguments that are None are left out (the
    daemon applies its defaults). Its errors propagate to ``main``, which maps them to exit codes."""
    with Client(current_home()) as client:
        return client.call(op, **{k: v for k, v in args.items() if v is not None})


def read_input(path: str, what: str) -> bytes:
    """Read a file or stdin ('-') as bytes: no newline translation, so CRLF and sha256 survive."""
    if path == "-":
        if sys.stdin.isatty():
            note("Reading standard input from the terminal; end with Ctrl-D (or pass a file instead).")
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        fail(f"cannot read {what} {path}: {exc.strerror or exc}", code="invalid_argument")


def decode_utf8(data: bytes, what: str) -> str:
    """``data`` as text, or one error line saying which input is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"{what} is not valid UTF-8 (byte {exc.start}): store binary content as an artifact instead",
             code="invalid_argument")


def text_or_file(text: str | None, file: str | None, flag: str) -> str | None:
    """The value of ``--FLAG TEXT`` or ``--FLAG-file PATH|-`` (at most one of them)."""
    if text is not None and file is not None:
        raise UsageProblem(f"pass inline text or a file, not both (--{flag} or --{flag}-file)")
    if file is not None:
        return decode_utf8(read_input(file, f"--{flag}-file"), f"--{flag}-file {file}")
    return text


def parse_metadata(text: str | None) -> dict[str, Any] | None:
    """``--metadata``: a JSON object, checked here so a typo is a usage error before any request."""
    return None if text is None else parse_json_object(text, "--metadata")


def capped(value: int | None, cap: int) -> int | None:
    """Cap a large number client-side (the daemon caps too); values too big for msgpack must not crash."""
    return None if value is None else min(value, cap)


def event_filters(**values: Multi) -> dict[str, list[str]]:
    """The filters given (name → values), leaving out the options not used."""
    return {name: list(v) for name, v in values.items() if v}


def print_events(result: dict[str, Any], as_json: bool) -> None:
    """A page of events: the JSON document, or a human block (a note on a terminal when empty)."""
    if as_json:
        emit_json(result)
    elif result["events"]:
        write_stdout(output.events_block(result["events"]))
    elif sys.stderr.isatty():
        note("No matching events.")
