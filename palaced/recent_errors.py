"""The daemon's memory of its newest logged error, which ``status`` reports under ``health``.

Owns: ``RECENT_ERRORS``, a logging handler that ``__main__`` installs on the "palaced" logger and
``handlers/maintenance.py`` reads. (The local API's maintenance operations live in
``palaced/handlers/maintenance.py``.)
"""

from __future__ import annotations

import logging
from typing import Any, Final

from palace_proto.stamps import format_stamp_seconds

from .clock import unix_now

__all__ = ["RECENT_ERRORS", "RecentErrors"]

# Why 15 min: an error older than that has been seen (or has healed); `palaced` logs keep it.
RECENT_ERROR_S: Final = 15 * 60


class RecentErrors(logging.Handler):
    """Remembers the newest ERROR record of the daemon's log, for ``status`` (no history kept)."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.last: tuple[float, str] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.last = (record.created, f"{record.name}: {record.getMessage()}")
        except Exception:  # a bad log call must not break logging
            self.handleError(record)

    def recent(self, within_s: float = RECENT_ERROR_S) -> dict[str, Any] | None:
        if self.last is None or unix_now() - self.last[0] > within_s:
            return None
        return {"at": format_stamp_seconds(self.last[0]), "message": self.last[1]}


#: installed on the "palaced" logger by the app; module-level so every part of the daemon shares it
RECENT_ERRORS = RecentErrors()
