"""The shared memory: drawers, the knowledge graph, diaries, tunnels (MemPalace's surface).

This package's declaration (``FEATURE``) is all the core reads of it; the modules it names are
imported when what they do is used. Standard library only (``palacectl.feature``).
"""

from __future__ import annotations

from typing import Final

from ...feature import Feature, Page

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="memory", builds_on=(),
    cli=f"{__name__}.cli",
    tools={"core": ("mempalace_search", "mempalace_add_drawer"),
           "memory": ("mempalace_kg_query", "mempalace_kg_add", "mempalace_kg_invalidate", "mempalace_diary_write",
                      "mempalace_diary_read", "mempalace_list_agents", "mempalace_find_tunnels")},
    tools_module=f"{__name__}.tools",
    light=f"{__name__}.light",
    ui=f"{__name__}.page",
    script=f"{__name__}:page.js",
    pages=(Page("memory", "Memory"),),
)
