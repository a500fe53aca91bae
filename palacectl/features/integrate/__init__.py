"""Landing what the fleet delivered: the integrator, and a person's or agent's review of a patch.

This package's declaration (``FEATURE``) is all the core reads of it; the modules it names are
imported when what they do is used. Standard library only (``palacectl.feature``).
"""

from __future__ import annotations

from typing import Final

from ...feature import Feature, Page

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="integrate", builds_on=("tasks", "worker", "artifacts", "usage", "questions", "leases"),
    cli=f"{__name__}.cli",
    tools={"log": ("mempalace_task_review",)},
    tools_module=f"{__name__}.tools",
    ui=f"{__name__}.page",
    script=f"{__name__}:page.js",
    pages=(Page("merge", "Merge queue"),),
)
