"""The time as the peer network writes it down: a UTC stamp for records, errors and stored rows.

Owns: ``_utc``, the one clock read of the package, formatted as ``palace_proto.stamps`` formats
every stamp (whole seconds, ``Z``). Imports nothing of the daemon.
"""

from __future__ import annotations

import time

from palace_proto.stamps import format_stamp_seconds

__all__ = ["_utc"]


def _utc(epoch: float | None = None) -> str:
    return format_stamp_seconds(time.time() if epoch is None else epoch)
