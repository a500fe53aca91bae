"""The task queue: delegate work and follow its lifecycle.

This package's declaration (``FEATURE``) is all the core reads of it; the modules it names are
imported when what they do is used. Standard library only (``palacectl.feature``).
"""

from __future__ import annotations

from typing import Final

from ...feature import Feature, Page, Quick

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="tasks", builds_on=(),
    cli=f"{__name__}.cli",
    tools={"core": ("mempalace_task_create", "mempalace_task_ready", "mempalace_task_claim"),
           "log": ("mempalace_task_status", "mempalace_task_list", "mempalace_task_release",
                   "mempalace_task_reassign")},
    tools_module=f"{__name__}.tools",
    light=f"{__name__}.light",
    quick={
        ("task", "ready"): Quick({"--agent": ("agent", "str")}, (), ("agent",), f"{__name__}.quick:task_ready"),
        ("task", "claim"): Quick({"--agent": ("agent", "str")}, ("correlation_id",), ("agent",),
                                 f"{__name__}.quick:task_claim"),
    },
    ui=f"{__name__}.page",
    script=f"{__name__}:page.js",
    pages=(Page("tasks", "Tasks"),),
)
