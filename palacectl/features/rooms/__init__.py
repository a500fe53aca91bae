"""Agent rooms: a discussion among agents, with a read position kept for each (docs/rooms.md).

This package's declaration (``FEATURE``) is all the core reads of it; the modules it names are
imported when what they do is used. Standard library only (``palacectl.feature``).
"""

from __future__ import annotations

from typing import Final

from ...feature import Feature, Page

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="rooms", builds_on=(),
    cli=f"{__name__}.cli",
    # a discussion with a read position kept for you (MemPalace RFC 006; docs/rooms.md)
    tools={"rooms": ("mempalace_room_open", "mempalace_room_read", "mempalace_room_say", "mempalace_room_close",
                     "mempalace_room_list")},
    tools_module=f"{__name__}.tools",
    light=f"{__name__}.light",
    ui=f"{__name__}.page",
    script=f"{__name__}:page.js",
    pages=(Page("rooms", "Rooms"),),
)
