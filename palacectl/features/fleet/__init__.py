"""The palace's membership and its daemons: init, invite, join, revoke, peers, who, doctor.

This package's declaration (``FEATURE``) is all the core reads of it; the modules it names are
imported when what they do is used. Standard library only (``palacectl.feature``).
"""

from __future__ import annotations

from typing import Final

from ...feature import Feature, Page

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="fleet", builds_on=(),
    cli=f"{__name__}.cli",
    tools={"log": ("mempalace_who", "mempalace_peers")},
    tools_module=f"{__name__}.tools",
    light=f"{__name__}.light",
    ui=f"{__name__}.page",
    script=f"{__name__}:page.js",
    pages=(Page("fleet", "Fleet"),),
)
