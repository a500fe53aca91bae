"""Event timestamps and durations as palace writes them: the one place that parses and moves them.

Owns: the log's timestamp format (``YYYY-MM-DDTHH:MM:SS.ffffffZ``, UTC; ``STAMP_RE`` also admits
whole seconds), writing a Unix time in it (``format_stamp``) or to the second as the API reports
times (``format_stamp_seconds``: ``YYYY-MM-DDTHH:MM:SSZ``), moving one by seconds
(``add_seconds``) and measuring between two (``seconds_between``), and the human durations every
command takes (``90s``, ``30m``, ``2h``, ``7d``: ``parse_duration``, ``check_duration``,
``format_duration``) with their one range. Leases (TTL), tasks (stall time), config and ``task
launch --timeout`` use these; palaced writes its API times with ``format_stamp_seconds``, and
``store/clock.py`` its append stamps in ``format_stamp``'s format. Pure: stdlib only, no clock of
its own: the caller passes the time.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any, Final

from .errors import ValidationError

__all__ = ["MAX_DURATION_S", "MIN_DURATION_S", "STAMP_RE", "add_seconds", "check_duration", "duration_seconds",
           "format_duration", "format_stamp", "format_stamp_seconds", "parse_duration", "seconds_between"]

#: an event timestamp (what ``created_at`` holds), with or without microseconds
STAMP_RE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")
_STAMP_FORMAT: Final = "%Y-%m-%dT%H:%M:%S.%fZ"
_SECONDS_FORMAT: Final = "%Y-%m-%dT%H:%M:%SZ"
# Why 10 s .. 30 d: shorter cannot outlive the gossip that carries a lease or a stall notice; a lease
# nobody renews for a month is forgotten, and the lease derivation only looks that far back.
MIN_DURATION_S: Final = 10
MAX_DURATION_S: Final = 30 * 86400
_DURATION_RE: Final = re.compile(r"^\s*(\d{1,9})\s*([smhd]?)\s*$")
_UNIT_S: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _parse(stamp: str) -> datetime.datetime:
    return datetime.datetime.strptime(stamp if "." in stamp else stamp[:-1] + ".0Z", _STAMP_FORMAT)


def format_stamp(epoch: float) -> str:
    """The Unix time ``epoch`` as the log writes it: ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (UTC, to the
    nearest microsecond)."""
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime(_STAMP_FORMAT)


def format_stamp_seconds(epoch: float) -> str:
    """The Unix time ``epoch`` to the whole second (the fraction dropped), as the API reports times
    (RFC 3339 UTC): ``YYYY-MM-DDTHH:MM:SSZ``."""
    return datetime.datetime.fromtimestamp(math.floor(epoch), datetime.UTC).strftime(_SECONDS_FORMAT)


def add_seconds(stamp: str, seconds: float) -> str:
    """An event timestamp plus ``seconds``, in the log's format (microseconds, ``Z``)."""
    return (_parse(stamp) + datetime.timedelta(seconds=seconds)).strftime(_STAMP_FORMAT)


def seconds_between(earlier: str, later: str) -> float:
    """Seconds from one event timestamp to another (negative if ``later`` is earlier)."""
    return (_parse(later) - _parse(earlier)).total_seconds()


def duration_seconds(text: str, *, field: str) -> int:
    """``90s``, ``30m``, ``2h``, ``7d`` (or plain seconds) → seconds, whatever the range (the
    caller checks its own; ``parse_duration`` checks the one most durations share).

    Raises:
        ValidationError: not a duration (naming ``field``).
    """
    match = _DURATION_RE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValidationError(f"{field} {str(text)[:40]!r} is not a duration: write a number and a unit, "
                              "e.g. 90s, 30m, 2h or 7d", field=field)
    return int(match.group(1)) * _UNIT_S[match.group(2) or "s"]


def parse_duration(text: str, *, field: str) -> int:
    """``90s``, ``30m``, ``2h``, ``7d`` (or plain seconds) → seconds, within the one range.

    Raises:
        ValidationError: not a duration, or out of range (naming ``field``).
    """
    return check_duration(duration_seconds(text, field=field), field=field)


def check_duration(seconds: Any, *, field: str) -> int:
    """``seconds`` if it is an integer within MIN_DURATION_S..MAX_DURATION_S.

    Raises:
        ValidationError: naming ``field`` and the range.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not MIN_DURATION_S <= seconds <= MAX_DURATION_S:
        raise ValidationError(f"{field} must be between {format_duration(MIN_DURATION_S)} and "
                              f"{format_duration(MAX_DURATION_S)}", field=field)
    return seconds


def format_duration(seconds: int) -> str:
    """The largest whole unit: 90 → ``90s``, 1800 → ``30m``, 7200 → ``2h``, 86400 → ``1d``."""
    for unit in ("d", "h", "m"):
        if seconds and seconds % _UNIT_S[unit] == 0:
            return f"{seconds // _UNIT_S[unit]}{unit}"
    return f"{seconds}s"
