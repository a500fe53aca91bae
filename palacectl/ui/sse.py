"""``GET /logstream/stream``: the log as server-sent events, for the page and for other programs.

Owns: the query the stream takes (MemPalace's: ``stream, room, topic, type, to_agent,
from_agent, correlation_id, status, since_event_id``, each filter repeatable for OR; the
``Last-Event-ID`` header as the cursor when the query has none), its frames (``id: <event id>``
/ ``event: logstream`` / ``data: <the event as event_list gives it>``), the heartbeat comment
after ``HEARTBEAT_S`` without a frame, and the cap on streams open at once (503 with
``Retry-After`` beyond it, so a client falls back to ``event_wait``).

Pushed, not polled: each stream is a ``subscribe`` of its own on the local daemon, woken by the
daemon's commits. Where it starts: after the cursor if one is given (everything since is
replayed first), else at the tip at connect time. Bad filters or an unknown cursor are refused
(400) before the response starts, since the daemon checks the subscription before its first push.
When the daemon goes away (a restart), the response ends; a client reconnects with the last id
it saw (browsers' ``EventSource`` does it by itself, after the ``retry`` the stream announces).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import trio

from palace_proto.errors import ApiError
from palace_proto.filters import FILTER_OPTIONS

from ..aclient import AsyncDaemon
from ..client import DaemonUnreachable
from .http import HttpError, Receive, Send, start_headers

__all__ = ["FILTER_PARAMS", "HEARTBEAT_S", "PING", "StreamSlots", "event_frame", "serve_stream", "stream_args"]

#: query parameter -> the daemon's subscribe filter (proto/PROTOCOL.md §3.1): every filter a client
#: offers but the exclusion, which MemPalace's stream does not take
FILTER_PARAMS: Final = {name: wire for name, wire in FILTER_OPTIONS.items() if name != "exclude_from_agent"}
#: parameters that are not filters: the cursor, and the secret (the gate has used it)
OTHER_PARAMS: Final = frozenset({"since_event_id", "secret"})
#: Why 16: OR over more values than this is a different question (list them with event_list).
MAX_VALUES: Final = 16
#: Why 15 s: MemPalace's heartbeat; proxies and clients that time out idle streams see traffic.
HEARTBEAT_S: Final = 15.0
PING: Final = b": ping\n\n"
#: Why 2 s: how long a browser waits before reconnecting after the daemon restarted.
RETRY: Final = b"retry: 2000\n\n"
#: Why 500: the daemon's largest batch (a catch-up after a cursor arrives in batches of this).
BATCH_LIMIT: Final = 500
SSE_HEADERS: Final = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def stream_args(query: Mapping[str, list[str]], last_event_id: str | None) -> dict[str, Any]:
    """The daemon's ``subscribe`` arguments for a stream's query (pure).

    Raises:
        HttpError: 400 naming an unknown parameter or too many values.
    """
    args: dict[str, Any] = {"limit": BATCH_LIMIT}
    for name, values in query.items():
        if name in OTHER_PARAMS:
            continue
        target = FILTER_PARAMS.get(name)
        if target is None:
            known = ", ".join([*FILTER_PARAMS, "since_event_id"])
            raise HttpError(400, f"unknown query parameter {name!r}; the stream takes {known}")
        kept = [v for v in values if v.strip()]  # blanks mean "any", as in MemPalace
        if len(kept) > MAX_VALUES:
            raise HttpError(400, f"query parameter {name!r} has {len(kept)} values; at most {MAX_VALUES}")
        if kept:
            args[target] = kept
    cursors = [v for v in query.get("since_event_id", []) if v.strip()]
    if len(cursors) > 1:
        raise HttpError(400, "query parameter 'since_event_id' is given more than once")
    cursor = cursors[0] if cursors else (last_event_id or "").strip() or None
    if cursor is not None:
        args["start"], args["since_event_id"] = "cursor", cursor
    else:
        args["start"] = "tip"
    return args


def event_frame(event: Mapping[str, Any]) -> bytes:
    """One event's frame. JSON escapes every line break inside strings, so ``data`` is one line."""
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return f"id: {event['id']}\nevent: logstream\ndata: {data}\n\n".encode()


class StreamSlots:
    """How many streams are open, against the cap (one object per dashboard run)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.refused = 0
        self.served = 0

    def __repr__(self) -> str:
        return f"<StreamSlots {self.open}/{self.limit}>"

    def take(self) -> None:
        """Raises HttpError 503 (Retry-After) when every slot is in use."""
        if self.open >= self.limit:
            self.refused += 1
            raise HttpError(503, f"too many event streams open ({self.limit}); retry later, or use event_wait",
                            headers=[("retry-after", "5")])
        self.open += 1
        self.served += 1

    def give_back(self) -> None:
        self.open -= 1


async def _until_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel(reason="the stream's client went away")
            return


async def serve_stream(daemon: AsyncDaemon, args: dict[str, Any], slots: StreamSlots, receive: Receive,
                       send: Send, *, heartbeat_s: float = HEARTBEAT_S) -> None:
    """Answer one stream request, until its client or the daemon goes away.

    Raises:
        HttpError: before the response started (a bad filter or cursor: 400; the cap: 503; no
            daemon: 503).
    """
    slots.take()
    try:
        try:
            async with daemon.subscribe(**args) as subscription:
                await send(start_headers(200, "text/event-stream; charset=utf-8", SSE_HEADERS))
                await send({"type": "http.response.body", "body": RETRY, "more_body": True})
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_until_disconnect, receive, nursery.cancel_scope)
                    try:
                        await _pump(subscription, send, heartbeat_s)
                    except (DaemonUnreachable, ApiError):
                        pass  # the daemon went away or ended it: end the response; the client reconnects
                    nursery.cancel_scope.cancel(reason="the stream ended")
                with trio.move_on_after(1):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        except ApiError as exc:
            raise HttpError(400, exc.message) from None
        except DaemonUnreachable as exc:
            raise HttpError(503, str(exc), headers=[("retry-after", "5")]) from None
    finally:
        slots.give_back()


async def _pump(subscription: Any, send: Send, heartbeat_s: float) -> None:
    while True:
        with trio.move_on_after(heartbeat_s) as idle:
            push = await subscription.next_push()
        if idle.cancelled_caught:
            await send({"type": "http.response.body", "body": PING, "more_body": True})
            continue
        if push.get("push") != "batch":
            continue  # progress over events that do not match: nothing to say
        events = push.get("events") or []
        if events:
            frames = b"".join(event_frame(event) for event in events)
            await send({"type": "http.response.body", "body": frames, "more_body": True})
