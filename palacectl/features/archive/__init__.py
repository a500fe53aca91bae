"""The palace's data out and back in: backup and restore (the database), export and import (the log as NDJSON).

This package's declaration (``FEATURE``) is all the core reads of it; the modules it names are
imported when what they do is used. Standard library only (``palacectl.feature``).
"""

from __future__ import annotations

from typing import Final

from ...feature import Feature

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="archive", builds_on=("artifacts",),
    cli=f"{__name__}.cli",
)
