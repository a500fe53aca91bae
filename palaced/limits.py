"""Hitting a bound, said once: the log line and the counter behind every limit on outside input.

Owns: ``LimitLog``, which the network, discovery and API layers call whenever one of their
bounds refuses something (a connection over the cap, an mDNS sighting over the table size, a
binding over the per-key cap). The first hit of each limit is logged at warning level, later
hits at most once per ``LOG_INTERVAL_S`` with the count since — so a flood that a bound stops
does not flood the log instead — and every hit is counted for ``palacectl status``.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

__all__ = ["LOG_INTERVAL_S", "LimitLog"]

# Why 10 minutes: often enough that an operator tailing the log sees a flood is still going on,
# rarely enough that the flood cannot fill the log.
LOG_INTERVAL_S: Final = 600.0


class LimitLog:
    """Counts hits per limit name and logs them sparingly."""

    def __init__(self, logger: logging.Logger | logging.LoggerAdapter[Any]) -> None:
        self._logger = logger
        self._hits: dict[str, int] = {}
        self._logged: dict[str, tuple[float, int]] = {}  # name -> (when last logged, hits then)

    def __repr__(self) -> str:
        return f"<LimitLog {self._hits}>"

    def hit(self, name: str, message: str, *args: Any) -> None:
        """Record one refusal by limit ``name``; ``message % args`` says what was refused and why."""
        count = self._hits[name] = self._hits.get(name, 0) + 1
        now = time.monotonic()
        last = self._logged.get(name)
        if last is None:
            self._logger.warning(message + " (logged once; `palacectl status` counts further hits)", *args)
        elif now - last[0] >= LOG_INTERVAL_S:
            self._logger.warning(message + " (%d more since the last report)", *args, count - last[1])
        else:
            return
        self._logged[name] = (now, count)

    def statistics(self) -> dict[str, int]:
        """Hits per limit since the daemon started."""
        return dict(self._hits)
