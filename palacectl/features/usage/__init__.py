"""What runs cost: their usage reports summed, and this machine's budgets.

This package's declaration (``FEATURE``) is all the core reads of it; the modules it names are
imported when what they do is used. Standard library only (``palacectl.feature``).
"""

from __future__ import annotations

from typing import Final

from ...feature import Feature, Page

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="usage", builds_on=(),
    cli=f"{__name__}.cli",
    tools={"people": ("mempalace_usage",)},
    tools_module=f"{__name__}.tools",
    ui=f"{__name__}.page",
    script=f"{__name__}:page.js",
    pages=(Page("usage", "Usage"),),
)
