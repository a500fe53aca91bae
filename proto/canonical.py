"""Canonical JSON text, as stored and signed for event metadata.

Kept apart from envelope.py so that validation (which clients import) does not pull in the
signature library: palacectl must start fast.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["canonical_json"]


def canonical_json(value: Any) -> str:
    """Canonical JSON text: sorted keys, compact separators, non-ASCII kept, no NaN/Infinity."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
