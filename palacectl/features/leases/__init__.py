"""Advisory leases on paths and resources, palace-wide.

This package's declaration (``FEATURE``) is all the core reads of it; the modules it names are
imported when what they do is used. Standard library only (``palacectl.feature``).
"""

from __future__ import annotations

from typing import Final

from ...feature import Feature, Page

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="leases", builds_on=(),
    cli=f"{__name__}.cli",
    tools={"leases": ("mempalace_lease_acquire", "mempalace_lease_renew", "mempalace_lease_release",
                      "mempalace_lease_list", "mempalace_lease_check")},
    tools_module=f"{__name__}.tools",
    ui=f"{__name__}.page",
    script=f"{__name__}:page.js",
    pages=(Page("leases", "Leases"),),
)
