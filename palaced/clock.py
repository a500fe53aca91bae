"""The daemon's clock: the one place palaced reads the time of day.

Owns: every reading of the wall clock the daemon makes — ``utc_now`` (an event's ``created_at``:
``palace_proto.stamps``'s format, microseconds), ``utc_now_seconds`` (a record's stamp, whole
seconds), ``utc_today`` (a date), ``utc_datetime`` (for certificates and invites), ``unix_now``
(seconds since the epoch, for expiries and skews). Intervals and timeouts are not the time of day:
those use trio's clock or ``time.monotonic`` where they are measured. Any thread may call these
(the writer thread, the event loop, readers). Imports nothing of the daemon.
"""

from __future__ import annotations

import datetime
import time

from palace_proto.stamps import format_stamp_seconds

__all__ = ["unix_now", "unix_now_us", "utc_datetime", "utc_now", "utc_now_seconds", "utc_today"]

_second: tuple[int, str] = (-1, "")


def utc_now() -> str:
    """Current UTC time as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (the daemon's clock, not the client's):
    ``palace_proto.stamps.format_stamp`` of now, the microseconds truncated.

    Every append stamps one, so the formatted second (``format_stamp_seconds`` without its ``Z``)
    is reused until it changes (a fifth of the cost of ``datetime.strftime``); the tuple is
    replaced whole, so any thread may call this."""
    global _second
    second, micro = divmod(time.time_ns() // 1000, 1_000_000)
    if _second[0] != second:
        _second = (second, format_stamp_seconds(second)[:-1])
    return f"{_second[1]}.{micro:06d}Z"


def utc_now_seconds(epoch: float | None = None) -> str:
    """Now (or ``epoch``) as ``YYYY-MM-DDTHH:MM:SSZ``: a record's stamp."""
    return format_stamp_seconds(time.time() if epoch is None else epoch)


def utc_today() -> str:
    """Today's UTC date, ``YYYY-MM-DD``."""
    return utc_now()[:10]


def utc_datetime() -> datetime.datetime:
    """Now as an aware UTC datetime (certificates' validity, invites)."""
    return datetime.datetime.now(datetime.UTC)


def unix_now() -> float:
    """Seconds since the epoch (an expiry, a peer's clock skew)."""
    return time.time()


def unix_now_us() -> int:
    """Microseconds since the epoch: a signed record's serial that a restart never sets back."""
    return time.time_ns() // 1000
