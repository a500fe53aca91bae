"""The memory feature's dashboard part: the Memory page's data (``page.js`` draws it).

Owns the routes ``GET /api/memory/search`` (drawers by meaning and words), ``GET
/api/memory/drawer/ID``, ``GET /api/memory/entity`` (an entity's facts as of a date) and ``GET
/api/memory/diary`` (the agents with diaries, or one agent's), over the daemon's memory
operations (``palacectl.ui.views.Route``).
"""

from __future__ import annotations

from typing import Any, Final

from ...ui.http import HttpError, Request
from ...ui.views import Route, Views, positive

__all__ = ["ROUTES", "diary", "drawer", "entity", "search"]


async def search(views: Views, request: Request) -> dict[str, Any]:
    query = (request.one("q") or "").strip()
    if not query:
        raise HttpError(400, "give a search query (q)")
    mode = request.one("mode") or "hybrid"
    if mode not in ("hybrid", "keyword", "vector"):
        raise HttpError(400, "mode must be hybrid, keyword or vector")
    return await views.call("search", query=query, mode=mode, limit=positive(request, "limit", 20, 100),
                            wing=(request.one("wing") or "").strip() or None,
                            room=(request.one("room") or "").strip() or None)


async def drawer(views: Views, request: Request, drawer_id: str) -> dict[str, Any]:
    return await views.call("drawer_get", drawer_id=drawer_id)


async def entity(views: Views, request: Request) -> dict[str, Any]:
    name = (request.one("entity") or "").strip()
    if not name:
        raise HttpError(400, "give an entity")
    return await views.call("kg_query", entity=name, as_of=(request.one("as_of") or "").strip() or None,
                            direction="both")


async def diary(views: Views, request: Request) -> dict[str, Any]:
    agent = (request.one("agent") or "").strip()
    if not agent:
        agents = await views.call("agents")
        return {"agents": [{"agent": a["agent"], "entries": a.get("diary_entries", 0), "wing": a.get("wing")}
                           for a in agents.get("agents", [])]}
    return await views.call("diary_read", agent_name=agent, last_n=positive(request, "last_n", 20, 100))


ROUTES: Final = (
    Route("GET", r"^/api/memory/search$", search),
    Route("GET", r"^/api/memory/drawer/([^/]{1,120})$", drawer),
    Route("GET", r"^/api/memory/entity$", entity),
    Route("GET", r"^/api/memory/diary$", diary),
)
