"""Questions to people: ask (and wait), answer, the list.

This package's declaration (``FEATURE``) is all the core reads of it; the modules it names are
imported when what they do is used. Standard library only (``palacectl.feature``).
"""

from __future__ import annotations

from typing import Final

from ...feature import Feature

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="questions", builds_on=("agents",),
    cli=f"{__name__}.cli",
    tools={"people": ("mempalace_ask_human", "mempalace_questions")},
    tools_module=f"{__name__}.tools",
    watch_also=f"{__name__}.cli:addressees",
    mcp_services={"elicitation": f"{__name__}.elicit:serve_elicitation"},
)
