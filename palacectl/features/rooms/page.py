"""The rooms feature's dashboard part: the Rooms page's data and one room's (``page.js`` draws them).

Owns the routes ``GET /api/rooms`` (rooms, newest first, open and closed) and ``GET /api/room/ID``
(one room and a page of its events in the agreed order; nobody's read position moves), answered
over the daemon's ``room_list`` and ``room_show`` (``palacectl.ui.views.Route``).
"""

from __future__ import annotations

from typing import Any, Final

from palace_proto.rooms import check_room_id

from ...ui.http import HttpError, Request
from ...ui.views import Route, Views

__all__ = ["MAX_ROOMS_SHOWN", "MAX_ROOM_PAGE", "ROUTES", "room", "rooms"]

#: Why 100: the rooms the Rooms page lists (the newest; the daemon's listing takes up to 200).
MAX_ROOMS_SHOWN: Final = 100
#: Why 200: the turns of a room one fetch shows; the next page comes through ``offset``.
MAX_ROOM_PAGE: Final = 200


async def rooms(views: Views, request: Request) -> dict[str, Any]:
    """Rooms, newest first, open and closed (or one ``status``; one ``project``'s)."""
    status = request.one("status")
    listing = await views.optional("room_list", project=(request.one("project") or "").strip() or None,
                                   status=status if status in ("open", "closed") else None, limit=MAX_ROOMS_SHOWN)
    if listing is None:  # a daemon from before rooms
        return {"rooms": [], "count": 0, "supported": False}
    return {"rooms": listing.get("rooms", []), "count": listing.get("count", 0), "supported": True}


async def room(views: Views, request: Request, room_id: str) -> dict[str, Any]:
    """One room: its state and a page of its events in the order every replica agrees on (from
    ``offset``), each marked as a turn of the transcript or not; nobody's read position moves."""
    raw = request.one("offset") or "0"
    if not raw.isdigit() or len(raw) > 9:
        raise HttpError(400, "offset must be a whole number")
    return await views.call("room_show", room_id=check_room_id(room_id), offset=int(raw), limit=MAX_ROOM_PAGE)


ROUTES: Final = (
    Route("GET", r"^/api/rooms$", rooms),
    Route("GET", r"^/api/room/([^/]{1,120})$", room),
)
