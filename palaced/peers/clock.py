"""The time as the peer network writes it down: a UTC stamp for records, errors and stored rows.

Owns: ``_utc``, moved here unchanged from the old ``palaced/network.py`` so every module of the
package writes the same stamp (``palace_proto.stamps`` may take its place later). Imports nothing
of the daemon.
"""

from __future__ import annotations

import datetime
import time

__all__ = ["_utc"]


def _utc(epoch: float | None = None) -> str:
    return datetime.datetime.fromtimestamp(time.time() if epoch is None else epoch, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
