"""Notifications out: ``notify_test``.

Owns: the operation that sends a test notification through every channel configured for a person
(or for every person of this daemon's ``[notify]``) and answers per channel whether it went out.
The notifier itself is ``palaced.notify``; app.py runs it and sets ``ctx.notifier``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from palace_proto.errors import ApiError
from palace_proto.identity import HUMAN_PREFIX
from palace_proto.validation import clean_optional

from .context import Context

__all__ = ["OPS"]


async def notify_test(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """``{results: [{person, held, channel, kind, target, ok, error}], count, ok}``; ``person``
    (``human:NAME`` or NAME) limits it to one person."""
    person = clean_optional("person", args.get("person"))
    if person is not None and not person.startswith(HUMAN_PREFIX):
        person = HUMAN_PREFIX + person
    if ctx.notifier is None:
        raise ApiError(f"no notifications are configured: add people and channels to [notify] in "
                       f"{ctx.config.home / 'config.toml'} (docs/notifications.md) and restart palaced",
                       code="invalid_argument", detail={"field": "notify"})
    results = await ctx.notifier.probe(person)
    return {"results": results, "count": len(results), "ok": bool(results) and all(r["ok"] for r in results)}


OPS: Final = {"notify_test": notify_test}
