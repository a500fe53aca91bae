"""Rendering for palacectl: JSON documents, NDJSON lines, human lines, and error reporting.

Owns: everything palacectl writes to stdout/stderr, the exit codes (the contract in README):
0 ok / a wait or watch hit, 1 operation failed, 2 timed out or idle (wait/watch only),
3 daemon not reachable, 64 usage error, 130 interrupted; and ``utc_now``, the one clock-to-text
helper for the UTC times palacectl writes itself (export headers, watch checkpoints, the
dashboard's ui.json, the name of the database a restore keeps aside), in the API's form
(``palace_proto.stamps.format_stamp_seconds``) unless a file name needs another.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import Any, Final, NoReturn

from palace_proto.text import printable

__all__ = [
    "EXIT_FAILED", "EXIT_IDLE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_UNREACHABLE", "EXIT_USAGE",
    "RFC3339_UTC", "STAMP_UTC", "CommandFailed", "ProgressBar", "emit", "emit_json", "event_line", "fail", "render_bar",
    "table_header", "utc_now", "warn",
]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_IDLE: Final = 2
EXIT_UNREACHABLE: Final = 3
EXIT_USAGE: Final = 64
EXIT_INTERRUPTED: Final = 130


# RFC3339 in UTC to the second, the form the daemon gives created_at (STYLE §24).
RFC3339_UTC: Final = "%Y-%m-%dT%H:%M:%SZ"
# The same instant without separators, for a file name (sorts by time, no ':' for other systems).
STAMP_UTC: Final = "%Y%m%dT%H%M%SZ"


def utc_now(form: str = RFC3339_UTC) -> str:
    """The current time in UTC: as the API reports times (``RFC3339_UTC``, the default:
    ``palace_proto.stamps.format_stamp_seconds``), or in another ``time.strftime`` form
    (``STAMP_UTC``, for a file name)."""
    now = time.time()
    if form == RFC3339_UTC:
        # Imported here: the loop's quick path never writes a time, and skips the module's cost.
        from palace_proto.stamps import format_stamp_seconds

        return format_stamp_seconds(now)
    return time.strftime(form, time.gmtime(now))


class CommandFailed(Exception):
    """Raised by commands to stop with an error line (or JSON error) and an exit code."""

    def __init__(self, message: str, *, code: str = "failed", exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.exit_code = exit_code


def fail(message: str, *, code: str = "failed", exit_code: int = EXIT_FAILED) -> NoReturn:
    raise CommandFailed(message, code=code, exit_code=exit_code)


def write_stdout(text: str) -> None:
    """Write and flush; a closed pipe propagates as BrokenPipeError (callers decide)."""
    sys.stdout.write(text)
    sys.stdout.flush()


def emit_json(value: Any, *, compact: bool = False) -> None:
    if compact:
        write_stdout(json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n")
    else:
        write_stdout(json.dumps(value, ensure_ascii=False, indent=2) + "\n")


def emit(document: Any, as_json: bool, line: str | None = None) -> bool:
    """The tail of a command that got its answer: with ``--json`` (``as_json``), ``document`` as
    one JSON document on stdout (STYLE §24), and True; otherwise ``line`` and a newline on stdout
    when one is given, and False. A command whose human answer takes more than a line of text
    renders it after ``if emit(result, json_): return``.
    """
    if as_json:
        emit_json(document)
        return True
    if line is not None:
        write_stdout(line + "\n")
    return False


def table_header(*columns: str) -> None:
    """Name a tab-separated table's columns, for a person at a terminal only: a script reading
    the pipe gets the rows alone, as before (gh's convention)."""
    if sys.stdout.isatty():
        write_stdout("\t".join(columns) + "\n")


def warn(message: str) -> None:
    sys.stderr.write(f"Warning: {message}\n")
    sys.stderr.flush()


def note(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def report_error(message: str, code: str, *, as_json: bool) -> None:
    if as_json:
        try:
            emit_json({"error": {"code": code, "message": message}})
        except BrokenPipeError:
            pass
    else:
        sys.stderr.write(f"palacectl: {message}\n")
        sys.stderr.flush()


def _one_line(text: str, width: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def agent_label(agent: str | None) -> str | None:
    """An agent id as people read it: a person's (``human:alice``) stands out as ``[human alice]``."""
    if isinstance(agent, str) and agent.startswith("human:"):
        return f"[human {agent[len('human:'):]}]"
    return agent


def event_line(event: Mapping[str, Any]) -> str:
    """MemPalace-style human line: id, time, type, stream/room, from->to, then the optional parts."""
    line = (f"  {event['id']}  {event['created_at']}  {event['type']}  {event['stream']}/{event['room']}  "
            f"{agent_label(event['from_agent'])}->{agent_label(event.get('to_agent')) or '*'}")
    if event.get("impersonation"):
        line += f" !! IMPERSONATION: {event['impersonation'].get('reason', '')}"
    if event.get("status"):
        line += f" [{event['status']}]"
    if event.get("topic"):
        line += f" topic={event['topic']}"
    if event.get("correlation_id"):
        line += f" corr={event['correlation_id']}"
    if event.get("artifact_ids"):
        # The ids themselves: the next step is `artifact get ID` (issue 26: only a count was shown).
        line += f" artifacts={','.join(printable(a, 80) for a in event['artifact_ids'])}"
    if event.get("body_redacted"):
        line += " :: [redacted]"
    elif event.get("body"):
        line += f" :: {_one_line(event['body'])}"
    return line


def events_block(events: list[Mapping[str, Any]]) -> str:
    if not events:
        return ""
    return f"{len(events)} event(s):\n" + "".join(event_line(e) + "\n" for e in events)


def render_bar(label: str, done: int, total: int, width: int = 30) -> str:
    """``label [#########.........]  42%  4,200/10,000`` (a total of 0 shows as complete)."""
    fraction = 1.0 if total <= 0 else min(1.0, max(0.0, done / total))
    filled = int(fraction * width)
    return f"{label} [{'#' * filled}{'.' * (width - filled)}] {fraction * 100:3.0f}%  {done:,}/{total:,}"


class ProgressBar:
    """Progress of a long operation, on stderr: on a terminal one line redrawn in place (at most
    ~10 times a second); otherwise a plain line every ``LINE_EVERY_S`` seconds once the operation
    has run that long (short runs print nothing, so scripts see no noise). ``enabled=False``
    silences it (``--json`` callers); ``enabled=True`` forces the terminal bar."""

    LINE_EVERY_S = 5.0

    def __init__(self, label: str, *, enabled: bool | None = None) -> None:
        self.label = label
        self.terminal = sys.stderr.isatty() if enabled is None else enabled
        self.lines = enabled is None and not self.terminal
        self._started = time.monotonic()
        self._drawn_at = 0.0
        self._line_at = self._started
        self._drawn = False

    @property
    def enabled(self) -> bool:
        """Drawn as a bar (on a terminal)."""
        return self.terminal

    @property
    def active(self) -> bool:
        """Shows anything at all (a bar, or plain lines)."""
        return self.terminal or self.lines

    def update(self, done: int, total: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if self.terminal:
            if not force and now - self._drawn_at < 0.1:
                return
            sys.stderr.write("\r\x1b[K" + render_bar(self.label, done, total))
            sys.stderr.flush()
            self._drawn_at = now
            self._drawn = True
        elif self.lines and now - self._line_at >= self.LINE_EVERY_S:
            percent = 100 if total <= 0 else min(100, done * 100 // total)
            sys.stderr.write(f"{self.label}: {done:,}/{total:,} ({percent}%)\n")
            sys.stderr.flush()
            self._line_at = now

    def close(self) -> None:
        if self._drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self._drawn = False
