"""The daemon's clock as the store stamps it: ``created_at`` of appends, artifacts, migrations and
fork evidence. Any thread may call it (the writer thread, the event loop, readers)."""

from __future__ import annotations

import time

from palace_proto.stamps import format_stamp_seconds

__all__ = ["utc_now"]

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
