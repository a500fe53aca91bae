"""The artifacts feature's dashboard part: an artifact, shown or downloaded, verified here.

Owns the routes ``GET /api/artifact/ID`` (its record and, when it is text of at most
``MAX_SHOWN_ARTIFACT_BYTES``, its text, for the page) and ``GET /api/artifact/ID/raw`` (its bytes
as a download, refused when they do not match its sha256), over the daemon's ``artifact_get``; the
sha256 is checked here over the bytes that arrived, so "verified" on the page is the dashboard's
word, not only the daemon's (``palacectl.ui.views.Route``). The widgets that show one are the
frame's (``ui/static/app.js``: a task's patches and an event's artifacts both use them).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final

from ...ui.http import HttpError, Request
from ...ui.views import Route, Views

__all__ = ["MAX_SHOWN_ARTIFACT_BYTES", "ROUTES", "artifact", "artifact_raw", "artifact_view"]

#: Why 4 MiB: above this an artifact is offered for download, not shown in the page.
MAX_SHOWN_ARTIFACT_BYTES: Final = 4 * 1024 * 1024
_ARTIFACT_ID_RE: Final = re.compile(r"^(art_[0-9a-f]{32}|[0-9a-f]{64})$")


async def artifact(views: Views, artifact_id: str) -> tuple[dict[str, Any], bytes]:
    """An artifact's record and bytes, its sha256 checked here over what arrived."""
    if not _ARTIFACT_ID_RE.match(artifact_id or ""):
        raise HttpError(400, f"{artifact_id!r} is not an artifact id (art_… or a sha256)")
    record = await views.call("artifact_get", artifact_id=artifact_id)
    content = record.pop("content", b"") or b""
    if isinstance(content, str):
        content = content.encode("utf-8")
    computed = hashlib.sha256(content).hexdigest()
    record["sha256_computed"] = computed
    record["sha256_verified"] = computed == record.get("sha256")
    return record, content


async def artifact_view(views: Views, request: Request, artifact_id: str) -> dict[str, Any]:
    record, content = await artifact(views, artifact_id)
    text = None
    if len(content) <= MAX_SHOWN_ARTIFACT_BYTES:
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    return {**record, "text": text, "shown": text is not None}


async def artifact_raw(views: Views, request: Request, artifact_id: str) -> tuple[bytes, str, list[tuple[str, str]]]:
    """An artifact's bytes as a download, only when they match its sha256."""
    record, content = await artifact(views, artifact_id)
    if not record["sha256_verified"]:
        raise HttpError(502, f"artifact {artifact_id}: its bytes do not match its sha256 "
                             f"({record['sha256_computed']}); not served")
    extension = {"patch": "patch", "log": "log"}.get(str(record.get("kind")), "bin")
    name = f"{record.get('id', 'artifact')}.{extension}"
    return content, "application/octet-stream", [("content-disposition", f'attachment; filename="{name}"'),
                                                 ("x-palace-sha256", str(record.get("sha256")))]


ROUTES: Final = (
    Route("GET", r"^/api/artifact/([^/]{1,80})$", artifact_view),
    Route("GET", r"^/api/artifact/([^/]{1,80})/raw$", artifact_raw, "raw"),
)
