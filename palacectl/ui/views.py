"""What every dashboard page's answer is gathered with: the run's ``Views``, and the shape of a route.

Owns: ``Views`` — one dashboard run's daemon and person, the daemon's operations as the pages ask
them (``call``; ``optional`` for one an older daemon may not have), ``session`` (who this dashboard
is and whether it may write), and a place for what a page keeps between requests (``memo``);
``gather`` (a page's calls at once, bounded); ``positive`` (a whole-number query parameter); and
``Route``, what a feature's dashboard module (``Feature.ui``) lists in ``ROUTES``: a method, a
path pattern, and the handler that answers it — a JSON document (``json``: ``handler(views,
request, *groups)``), a person's write (``write``: ``handler(views, document)``, after the gate's
CSRF and Origin checks, never on an observer), or bytes as they are (``raw``: ``handler(views,
request, *groups)`` -> (body, content type, headers)). The pages themselves are the features';
this module names none.

Every read is a bounded daemon operation — a page of ``list`` through its cursors, the newest 500
tasks and the older unfinished ones, one agent's last event by its index — so a page costs the
same on a palace of a million events as on a new one; nothing a page does loads the whole log.

Error handling: the daemon's refusals (``ApiError``) become 400/404 with its message; a daemon
that is down is a 503 naming how to start it (``app`` maps both).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, Literal, NamedTuple

import trio

from palace_proto.errors import ApiError

from ..aclient import AsyncDaemon
from .http import HttpError, Request

__all__ = ["PAGE_CONCURRENCY", "Route", "Views", "gather", "positive"]

#: Why 8: concurrent daemon calls for one page (the daemon serves each on its own connection).
PAGE_CONCURRENCY: Final = 8


class Route(NamedTuple):
    """A route of a feature's dashboard module (see the module docstring)."""

    method: str
    #: the path, a regular expression anchored at both ends; its groups are the handler's arguments
    pattern: str
    handler: Callable[..., Awaitable[Any]]
    kind: Literal["json", "write", "raw"] = "json"
    #: a write's refusal on a read-only observer, after "this daemon is a read-only observer: "
    refusal: str = "it writes nothing"


async def gather(calls: Iterable[Callable[[], Awaitable[Any]]], *, limit: int = PAGE_CONCURRENCY) -> list[Any]:
    """Run ``calls`` concurrently (at most ``limit`` at once); their results in order. The first
    failure cancels the rest and propagates (a page is shown whole or not at all)."""
    jobs = list(calls)
    results: list[Any] = [None] * len(jobs)
    limiter = trio.CapacityLimiter(limit)

    async def one(index: int, job: Callable[[], Awaitable[Any]]) -> None:
        async with limiter:
            results[index] = await job()

    try:
        async with trio.open_nursery() as nursery:
            for index, job in enumerate(jobs):
                nursery.start_soon(one, index, job)
    except BaseExceptionGroup as group:
        # Strict groups: hand the first real failure to the caller (an ApiError, an unreachable daemon).
        first = group.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
    return results


def positive(request: Request, name: str, default: int, maximum: int) -> int:
    """The query parameter ``name``, a whole number from 1 to ``maximum`` (``default`` when absent)."""
    text = request.one(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or not 1 <= int(text) <= maximum:
        raise HttpError(400, f"{name} must be a whole number from 1 to {maximum}")
    return int(text)


class Views:
    """The pages of one dashboard run, over one daemon, as the person ``human``."""

    def __init__(self, daemon: AsyncDaemon, *, human: str) -> None:
        self.daemon = daemon
        self.human = human
        #: what a page keeps between requests, under its feature's name (a map it asks again for)
        self.memo: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<Views {self.daemon.path} as {self.human}>"

    async def call(self, op: str, **args: Any) -> Any:
        return await self.daemon.call(op, **{k: v for k, v in args.items() if v is not None})

    async def optional(self, op: str, **args: Any) -> Any:
        """An operation an older daemon may not have (None then)."""
        try:
            return await self.call(op, **args)
        except ApiError as exc:
            if exc.code == "unknown_op":
                return None
            raise

    async def session(self) -> dict[str, Any]:
        """Who this dashboard is: its person, its daemon, and whether it may write (not on an observer)."""
        status = await self.call("status")
        palace = status.get("palace") or {}
        role = palace.get("role")
        return {
            "human": self.human, "can_write": role != "observer",
            "daemon": {"name": palace.get("name"), "peer_id": palace.get("peer_id"), "role": role,
                       "palace_name": palace.get("palace_name"), "origin": status.get("origin"),
                       "version": status.get("version"), "home": status.get("home")},
        }
