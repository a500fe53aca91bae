"""Git hooks that refuse commits under other agents' leases.

This package's declaration (``FEATURE``) is all the core reads of it; the modules it names are
imported when what they do is used. Standard library only (``palacectl.feature``).
"""

from __future__ import annotations

from typing import Final

from ...feature import Feature

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="guard", builds_on=("leases",),
    cli=f"{__name__}.cli",
)
