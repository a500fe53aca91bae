"""The dashboard's own pages and command: ``palacectl ui``, what needs the person now, the timeline, a person's words.

This package's declaration (``FEATURE``) is all the core reads of it; the modules it names are
imported when what they do is used. Standard library only (``palacectl.feature``).
"""

from __future__ import annotations

from typing import Final

from ...feature import Feature, Page

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="dashboard", builds_on=("agents", "questions", "tasks", "leases", "usage", "fleet", "artifacts"),
    cli=f"{__name__}.cli",
    ui=f"{__name__}.page",
    script=f"{__name__}:page.js",
    pages=(Page("now", "Now"), Page("timeline", "Timeline")),
)
