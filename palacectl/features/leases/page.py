"""The leases feature's dashboard part: the Leases page's data (``page.js`` draws it).

Owns the route ``GET /api/leases``: active leases, the lost and forced ones, the ended (the newest
100), over the daemon's ``lease_list`` (``palacectl.ui.views.Route``).
"""

from __future__ import annotations

from typing import Any, Final

from ...ui.http import Request
from ...ui.views import Route, Views

__all__ = ["ROUTES", "leases"]


async def leases(views: Views, request: Request) -> dict[str, Any]:
    listing = await views.call("lease_list", all=True)
    held = listing.get("leases", [])
    return {"active": [lease for lease in held if lease.get("state") == "active"],
            "conflicts": [lease for lease in held if lease.get("state") in ("lost", "forced")],
            "ended": [lease for lease in held if lease.get("state") not in ("active", "lost", "forced")][:100],
            "now": listing.get("now")}


ROUTES: Final = (Route("GET", r"^/api/leases$", leases),)
