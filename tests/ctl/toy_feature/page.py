"""The toy feature's dashboard part: ``GET /api/toys`` (``page.js`` draws it)."""

from __future__ import annotations

from typing import Any, Final

from palacectl.ui.http import Request
from palacectl.ui.views import Route, Views


async def toys(views: Views, request: Request) -> dict[str, Any]:
    return await views.call("toy_count", box=request.one("box") or "all")


ROUTES: Final = (Route("GET", r"^/api/toys$", toys),)
