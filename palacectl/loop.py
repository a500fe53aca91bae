"""The commands an agent loop runs on every step, with and without the command-line framework.

Owns: the bodies of ``list``, ``append``, ``ack``, ``wait``, ``inbox`` (and ``inbox
mark-read``) (one request to the daemon, rendered), the input helpers every command shares
(``UsageProblem``, ``text_or_file``, ``parse_metadata``, …), the mapping of failures to one line
and an exit code (``guarded``), and ``run_quick``: a parser for exactly those commands, and for
the ones features declare (``Feature.quick``), that skips typer.

Why (issue 26): an agent without MCP calls ``palacectl`` for every step of its loop, and typer
and every command module cost more at start-up (~45 ms) than the rest of the call. The typer
commands in ``palacectl.cli`` call the same bodies, so the output is one function's; the quick
parser takes only command lines it fully understands — known options, well-formed values — and
answers None for anything else (``--help``, a typo, a value that looks like an option), which
then goes through typer and gets its message. ``tests/e2e/test_cli_quick.py`` runs each command both
ways and compares stdout, stderr and exit code. Must not import typer, trio or palaced.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from palace_proto.bounds import MAX_LIST_LIMIT, MAX_WAIT_TIMEOUT_MS
from palace_proto.errors import ApiError, ProtocolError, ValidationError
from palace_proto.filters import FILTER_OPTIONS, filter_args

from . import output
from .client import Client, DaemonUnreachable, home_from
from .event_options import APPEND_FIELDS, ROUTING, dest, flag
from .output import EXIT_IDLE, EXIT_OK, EXIT_USAGE, CommandFailed, emit, fail, note, write_stdout

if TYPE_CHECKING:
    from .feature import Features

__all__ = [
    "UsageProblem", "call", "capped", "decode_utf8", "guarded", "open_client", "parse_metadata", "print_event",
    "print_events", "read_input", "run_quick", "text_or_file",
]


class UsageProblem(CommandFailed):
    """The command line is wrong (a flag missing, two that exclude each other): exit 64."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="usage", exit_code=EXIT_USAGE)


# -- input helpers (every command's) ----------------------------------------------------------


def open_client(home: Path) -> Client:
    """The client every command's request goes through (``call``); connected when its ``with``
    block starts. The seam the command line's unit tests put a fake client in (tests/ctl/test_cli.py)."""
    return Client(home)


def call(home: Path, op: str, **args: Any) -> Any:
    """One request to the daemon; arguments that are None are left out (its defaults apply)."""
    with open_client(home) as client:
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
    if text is None:
        return None
    from palace_proto.validation import parse_json_object  # only now: its import is a loop step's 20 %

    return parse_json_object(text, "--metadata")


def capped(value: int | None, cap: int) -> int | None:
    """Cap a large number client-side (the daemon caps too); values too big for msgpack must not crash."""
    return None if value is None else min(value, cap)


def print_event(event: dict[str, Any], as_json: bool, heading: str) -> None:
    """One event a command wrote: the JSON document, or ``heading:`` and its human line."""
    if not emit(event, as_json):
        write_stdout(f"{heading}:\n" + output.event_line(event) + "\n")


def print_events(result: dict[str, Any], as_json: bool) -> None:
    """A page of events: the JSON document, or a human block (a note on a terminal when empty)."""
    if emit(result, as_json):
        return
    if result["events"]:
        write_stdout(output.events_block(result["events"]))
    elif sys.stderr.isatty():
        note("No matching events.")


# -- the bodies ---------------------------------------------------------------------------------
# Each takes the home and the parsed options (None: not given) and returns the exit code.

def _filters(o: dict[str, Any]) -> dict[str, list[str]]:
    """The event filter options given (``--stream``, ``--to-agent``, …) as the request's filters."""
    return filter_args(**{name: o.get(name) for name in FILTER_OPTIONS})


def list_events(home: Path, o: dict[str, Any]) -> int:
    if o.get("text") is not None and o.get("order") is not None:
        raise UsageProblem("--text lists the best matches first; leave out --order")
    result = call(home, "list", **_filters(o), since_event_id=o.get("since_event_id"),
                  before_event_id=o.get("before_event_id"), since_created_at=o.get("since_created_at"),
                  order=o.get("order"), limit=capped(o.get("limit"), MAX_LIST_LIMIT), preview=bool(o.get("preview")),
                  text=o.get("text"))
    print_events(result, bool(o.get("json")))
    return EXIT_OK


def append_event(home: Path, o: dict[str, Any]) -> dict[str, Any]:
    """Append one event (the options ``append`` takes without --ndjson); returns it, printed."""
    required = [flag(field) for field in APPEND_FIELDS if not field.optional]
    missing = [flag(field) for field in APPEND_FIELDS if not field.optional and o.get(field.option) is None]
    if missing:
        raise UsageProblem(f"Missing option '{missing[0]}' ({', '.join(required[:-1])} and {required[-1]} are "
                           "required, or give --ndjson FILE)")
    text = text_or_file(o.get("body"), o.get("body_file"), "body")
    routing = {k: o.get(k) for k in ROUTING}
    event: dict[str, Any] = call(home, "append", **routing, body=text, metadata=parse_metadata(o.get("metadata")),
                                 artifact_ids=o.get("artifact_id"), replicated=o.get("replicated"),
                                 timeout_ms=capped(o.get("timeout_ms"), 3_600_000))
    print_event(event, bool(o.get("json")), "Appended")
    return event


def ack_event(home: Path, o: dict[str, Any]) -> int:
    text = text_or_file(o.get("body"), o.get("body_file"), "body")
    event = call(home, "ack", event_id=o["event_id"], from_agent=o["from_agent"], status=o.get("status"),
                 topic=o.get("topic"), body=text)
    print_event(event, bool(o.get("json")), "Acknowledged")
    return EXIT_OK


def wait_events(home: Path, o: dict[str, Any]) -> int:
    """``wait`` for a matching event (not ``--replicated``): 0 on a match, 2 on a timeout."""
    result = call(home, "wait", **_filters(o), since_event_id=o.get("since_event_id"),
                  since_created_at=o.get("since_created_at"), limit=capped(o.get("limit"), MAX_LIST_LIMIT),
                  preview=bool(o.get("preview")), timeout_ms=capped(o.get("timeout_ms"), MAX_WAIT_TIMEOUT_MS))
    code = EXIT_IDLE if result["timed_out"] else EXIT_OK
    if emit(result, bool(o.get("json"))):
        return code
    if result["timed_out"]:
        note("Timed out; no matching events.")
        # A mistyped or made-up correlation id waits for something that will never come: say so
        # (issue 26: an example id copied from the docs timed out without a word).
        for cid in o.get("correlation_id") or ():
            if not call(home, "list", **filter_args(correlation_id=cid), limit=1)["count"]:
                note(f"No event carries correlation {cid} here: check the id (`palacectl task list` shows "
                     "tasks' ids; `task create` printed yours).")
    else:
        write_stdout(output.events_block(result["events"]))
    return code


def _shown_file(home: Path, agent: str) -> Path:
    """Where ``inbox`` notes the last event it showed ``agent`` ("" when it showed none): what
    ``inbox mark-read`` without ``--upto`` marks read."""
    from .watch import sanitise_agent

    return home / "inbox" / f"{sanitise_agent(agent)}.shown"


def inbox(home: Path, o: dict[str, Any]) -> int:
    agent = o.get("agent")
    if agent is None:
        raise UsageProblem("inbox needs --agent ID (whose inbox): palacectl inbox --agent ID")
    result = call(home, "inbox", agent=agent, limit=o.get("limit"), preview=o.get("preview") or None)
    from .files import write_atomically

    shown = result["events"][-1]["id"] if result["events"] else ""
    try:
        write_atomically(_shown_file(home, agent), shown.encode(), create_folder=True)
    except OSError as exc:  # the listing is what matters; mark-read will then ask for --upto
        note(f"could not note what was shown ({exc.strerror or exc}): mark read with --upto EVENT_ID")
    if emit(result, bool(o.get("json"))):
        return EXIT_OK
    print_events(result, False)
    if result["more"]:
        note(f"{result['unread']}{'+' if result['unread_capped'] else ''} unread in all; mark these read to see "
             f"the next: palacectl inbox mark-read --agent {agent} --upto {result['events'][-1]['id']}")
    elif not result["events"]:
        note(f"Nothing unread for {agent}.")
    return EXIT_OK


def mark_read(home: Path, o: dict[str, Any]) -> int:
    """Move the read cursor to ``--upto``, or without it to the last event ``inbox`` showed this
    agent here (never what arrived since: that stays unread)."""
    agent = o["agent"]
    upto = o.get("upto")
    if upto is None:
        try:
            upto = _shown_file(home, agent).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise UsageProblem(f"nothing shown to mark read yet: list your inbox first (palacectl inbox --agent "
                               f"{agent}), or give --upto EVENT_ID") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageProblem(f"cannot read what inbox showed ({exc}); give --upto EVENT_ID") from None
        if not upto:
            if o.get("json"):
                emit({"moved": False, "shown": None, "agent": agent}, True)
            else:
                note(f"{agent}: your inbox showed nothing unread; nothing to mark")
            return EXIT_OK
    result = call(home, "inbox_mark_read", agent=agent, upto_event_id=upto)
    if emit(result, bool(o.get("json"))):
        return EXIT_OK
    unread = f"{result['unread']}{'+' if result['unread_capped'] else ''}"
    if result["moved"]:
        note(f"{agent}: read up to {result['cursor']['read_event_id']}; {unread} unread")
    else:
        note(f"{agent}: already read up to {result['cursor']['read_event_id']} (a cursor never moves back); "
             f"{unread} unread")
    return EXIT_OK


# -- failures → one line and an exit code -------------------------------------------------------


def guarded(run: Callable[[], int], *, as_json: bool) -> int:
    """Run a command; every expected failure becomes one line (or a JSON error) and its exit code
    (``palacectl.output``'s contract), never a traceback."""
    try:
        return run()
    except CommandFailed as exc:
        output.report_error(exc.message, exc.code, as_json=as_json)
        return exc.exit_code
    except ProtocolError as exc:
        output.report_error(f"cannot send this request: {exc.message}", "invalid_argument", as_json=as_json)
        return output.EXIT_FAILED
    except (ValidationError, ApiError) as exc:
        output.report_error(exc.message, exc.code, as_json=as_json)
        return output.EXIT_FAILED
    except DaemonUnreachable as exc:
        output.report_error(str(exc), "unreachable", as_json=as_json)
        return output.EXIT_UNREACHABLE
    except KeyboardInterrupt:
        sys.stderr.write("Stopped.\n")
        return output.EXIT_INTERRUPTED
    except BrokenPipeError:
        # Our reader went away; stay quiet (like `head`) and point stdout at devnull for the exit flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return output.EXIT_FAILED


# -- the quick parser ---------------------------------------------------------------------------
# An option's kind: "str" (one value, the last given wins), "int", "multi" (repeatable), "flag".

_EVENT_FILTERS: Final = {f"--{name.replace('_', '-')}": (name, "multi") for name in FILTER_OPTIONS}
_COMMON: Final = {"--json": ("json", "flag")}


def _append_body(home: Path, o: dict[str, Any]) -> int:
    append_event(home, o)
    return EXIT_OK


#: ``append``'s options: the event's fields (``palacectl.event_options``) and ``--body-file``
_APPEND: Final = {**_COMMON, **{flag(f): (dest(f), "multi" if f.wire == "ids" else "str") for f in APPEND_FIELDS},
                  "--body-file": ("body_file", "str")}

#: a quick command: (options, positional names, options that must be given, body)
_Entry = tuple[dict[str, tuple[str, str]], tuple[str, ...], tuple[str, ...], Callable[[Path, dict[str, Any]], int]]

# command words → its entry. Left to typer:
# ``append --ndjson/--replicated`` and ``wait --replicated/--event-id`` (not in these tables).
_COMMANDS: Final[dict[tuple[str, ...], _Entry]] = {
    ("list",): ({**_EVENT_FILTERS, **_COMMON, "--since-event-id": ("since_event_id", "str"),
                 "--before-event-id": ("before_event_id", "str"), "--since-created-at": ("since_created_at", "str"),
                 "--order": ("order", "str"), "--limit": ("limit", "int"), "--preview": ("preview", "flag"),
                 "--text": ("text", "str")}, (), (), list_events),
    ("wait",): ({**_EVENT_FILTERS, **_COMMON, "--since-event-id": ("since_event_id", "str"),
                 "--since-created-at": ("since_created_at", "str"), "--limit": ("limit", "int"),
                 "--preview": ("preview", "flag"), "--timeout-ms": ("timeout_ms", "int")}, (), (), wait_events),
    ("append",): (_APPEND, (), (), _append_body),
    ("ack",): ({**_COMMON, "--from-agent": ("from_agent", "str"), "--status": ("status", "str"),
                "--topic": ("topic", "str"), "--body": ("body", "str"), "--body-file": ("body_file", "str")},
               ("event_id",), ("from_agent",), ack_event),
    ("inbox",): ({**_COMMON, "--agent": ("agent", "str"), "--limit": ("limit", "int"),
                  "--preview": ("preview", "flag")}, (), (), inbox),
    ("inbox", "mark-read"): ({**_COMMON, "--agent": ("agent", "str"), "--upto": ("upto", "str")}, (),
                             ("agent",), mark_read),
}


def _parse(words: list[str], options: dict[str, tuple[str, str]], positionals: tuple[str, ...],
           required: tuple[str, ...]) -> dict[str, Any] | None:
    """The options of one command line, or None when it is not one this parser fully understands."""
    parsed: dict[str, Any] = {}
    given: list[str] = []
    words = list(words)
    while words:
        word = words.pop(0)
        if not word.startswith("--"):
            if word.startswith("-") or len(given) == len(positionals):
                return None
            given.append(word)
            continue
        name, eq, value = word.partition("=")
        spec = options.get(name)
        if spec is None:
            return None
        dest, kind = spec
        if kind == "flag":
            if eq:
                return None
            parsed[dest] = True
            continue
        if not eq:
            if not words or words[0].startswith("-"):
                return None  # typer says what is missing (or reads the dash-word as the value)
            value = words.pop(0)
        if kind == "int":
            if not value.isascii() or not value.lstrip("-").isdigit():
                return None
            parsed[dest] = int(value)
        elif kind == "multi":
            parsed.setdefault(dest, []).append(value)
        else:
            parsed[dest] = value
    if len(given) != len(positionals) or any(parsed.get(r) is None for r in required):
        return None
    parsed.update(zip(positionals, given, strict=True))
    return parsed


def _feature_command(words: list[str], features: Features | None) -> tuple[int, _Entry] | None:
    """The features' quick command ``words`` start with (their words' length, and its entry); the
    registry is read only now, so the core's quick commands start without it."""
    if features is None:
        from .features import features as registry

        features = registry()
    table: dict[tuple[str, ...], _Entry] = features.memo("quick", _quick_table)
    for length in (2, 1):
        entry = table.get(tuple(words[:length]))
        if entry is not None:
            return length, entry
    return None


def _quick_table(features: Features) -> dict[tuple[str, ...], _Entry]:
    """Every feature's quick commands as the parser's entries (a core command's words are refused)."""
    from .feature import load

    table: dict[tuple[str, ...], _Entry] = {}
    for feature in features:
        for words, quick in feature.quick.items():
            if words in _COMMANDS:
                raise ValueError(f"feature {feature.name} declares the quick command {' '.join(words)!r}: the core's")

            def body(home: Path, o: dict[str, Any], run: str = quick.run) -> int:
                return int(load(run)(home, o))

            table[words] = ({**_COMMON, **quick.options}, quick.positionals, quick.required, body)
    return table


def run_quick(argv: list[str], features: Features | None = None) -> int | None:
    """Run ``argv`` (after ``palacectl``) if it is one of the loop's command lines, fully
    understood; None means: give it to the full command line. ``features``: whose quick commands
    count besides the core's (by default palacectl's, ``palacectl.features``, read only when the
    words are none of the core's)."""
    words = list(argv)
    home: str | None = None
    if words and (words[0] == "--home" or words[0].startswith("--home=")):
        head = words.pop(0)
        if "=" in head:
            home = head.partition("=")[2]
        elif words and not words[0].startswith("-"):
            home = words.pop(0)
        else:
            return None
    for length in (2, 1):
        entry = _COMMANDS.get(tuple(words[:length]))
        if entry is not None:
            break
    else:
        found = _feature_command(words, features)
        if found is None:
            return None
        length, entry = found
    options, positionals, required, body = entry
    parsed = _parse(words[length:], options, positionals, required)
    if parsed is None:
        return None
    path = home_from(Path(home) if home is not None else None)
    return guarded(lambda: body(path, parsed), as_json=bool(parsed.get("json")))
