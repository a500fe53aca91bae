"""The dashboard's ASGI application: the gate in front of every route, the routes, the page's files.

Owns: the order a request is handled in — Host and secret first (``security.Gate``), before any
palace data is read; then the route; then the daemon's answer turned into JSON — and the mapping
of failures to HTTP: a daemon refusal to 400/403/404 with its message, a daemon that is down to
503 naming how to start it, and anything unexpected to a 500 for that request only (logged once
with its traceback, counted in ``/statusz``; the server and every other request go on).

The page is the core's frame (``static/``) and the features' pages: the nav lists every
feature's ``Page`` in ``Features.nav_order`` and the page loads every feature's script after the
frame's (both written into ``index.html`` here, from the features, never listed by hand); each
feature's dashboard module (``Feature.ui``) answers its own routes (``views.Route``). This module
names no feature.

Routes (all but ``/healthz`` behind the gate):

    GET  /                      the page (the secret in the URL sets the cookie, then 303 to /)
    GET  /static/NAME           its script, styles and icon; a feature's script is NAME.js
    GET  /healthz               {ok, daemon}: no secret, nothing of the palace
    GET  /statusz               the dashboard's own counters and the daemon's health
    GET  /logstream/stream      the log as server-sent events (``sse``)
    GET  /api/session           who this dashboard is, and whether it may write
    ...  /api/...               the features' routes: one JSON document per page or panel, a
                                download, or a person's write (POST: CSRF token and Origin
                                required; never on an observer)
"""

from __future__ import annotations

import collections
import html
import importlib.resources
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

from palace_proto.errors import ApiError

from ..aclient import AsyncDaemon
from ..client import DaemonUnreachable
from ..feature import Features, load
from .http import HttpError, Receive, Request, Scope, Send, send_bytes, send_json
from .security import Gate, Verdict
from .sse import StreamSlots, serve_stream, stream_args
from .views import Route, Views

__all__ = ["Dashboard"]

LOGGER: Final = logging.getLogger("palacectl.ui")
#: Why 64 KiB: a message is at most 16 KiB of text; JSON escaping can triple it.
MAX_BODY_BYTES: Final = 64 * 1024
#: Why 8: MemPalace's default cap on event streams (MEMPALACE_SSE_MAX_CLIENTS); a tab holds one.
DEFAULT_MAX_STREAMS: Final = 8
#: Why 32: requests being answered at once (streams apart): a page asks for one or two at a time,
#: and each may open up to ``views.PAGE_CONCURRENCY`` connections to the daemon; beyond this a
#: request is answered 503 at once instead of queueing on the daemon.
MAX_CONCURRENT_REQUESTS: Final = 32
#: Why 30 s: a page's data takes milliseconds (see ``palacectl bench ui``); a daemon that has not
#: answered by then is stuck, and the page says so instead of spinning.
REQUEST_TIMEOUT_S: Final = 30.0
#: Why 2 s: ``/healthz`` is what a monitor polls; it must answer promptly even about a stuck daemon.
HEALTH_TIMEOUT_S: Final = 2.0
_STATIC_NAME_RE: Final = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
#: a page's name: in the page's address (``#/name``) and the nav's ``data-page``
_PAGE_NAME_RE: Final = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
_CONTENT_TYPES: Final = {
    ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml", ".txt": "text/plain; charset=utf-8",
}
#: daemon error code -> HTTP status
_STATUS_OF_CODE: Final = {
    "not_found": 404, "invalid_argument": 400, "bad_request": 400, "read_only": 403, "not_permitted": 403,
    "agent_elsewhere": 409, "agent_retired": 409, "lease_conflict": 409, "shutting_down": 503, "disk_full": 507,
    "unknown_op": 501,
}
UNAUTHORIZED_TEXT: Final = "unauthorized: open the address `palacectl ui` printed (it carries this run's secret)"


def _load_static() -> dict[str, tuple[bytes, str]]:
    files: dict[str, tuple[bytes, str]] = {}
    folder = importlib.resources.files("palacectl.ui") / "static"
    for entry in folder.iterdir():
        name = entry.name
        suffix = name[name.rfind("."):] if "." in name else ""
        if entry.is_file() and _STATIC_NAME_RE.match(name) and suffix in _CONTENT_TYPES:
            files[name] = (entry.read_bytes(), _CONTENT_TYPES[suffix])
    return files


def _feature_scripts(features: Features, taken: set[str]) -> dict[str, tuple[bytes, str]]:
    """Each feature's page script (``Feature.script``), as the static file ``<feature>.js``.

    Raises:
        ValueError: a name that is not a static file's, or one the frame's files hold already.
    """
    scripts: dict[str, tuple[bytes, str]] = {}
    for feature in features:
        if feature.script is None:
            continue
        name = f"{feature.name}.js"
        if not _STATIC_NAME_RE.match(name) or name in taken:
            raise ValueError(f"feature {feature.name}: its script cannot be served as /static/{name}")
        package, _, file = feature.script.partition(":")
        scripts[name] = ((importlib.resources.files(package) / file).read_bytes(), _CONTENT_TYPES[".js"])
    return scripts


def _page(frame: bytes, features: Features, scripts: list[str], csrf_token: str) -> bytes:
    """The frame's ``index.html`` with the features' nav entries and scripts written in.

    Raises:
        ValueError: a page's name that cannot be an address.
    """
    links = []
    for _, page in features.pages():
        if not _PAGE_NAME_RE.match(page.name):
            raise ValueError(f"page {page.name!r}: a page's name is lower-case letters, digits, '_' and '-'")
        links.append(f'<a href="#/{page.name}" data-page="{page.name}">{html.escape(page.title)}</a>')
    tags = [f'<script src="/static/{html.escape(name)}" defer></script>' for name in scripts]
    return (frame.replace(b"{{CSRF_TOKEN}}", csrf_token.encode("ascii"))
            .replace(b"{{NAV}}", "\n    ".join(links).encode("utf-8"))
            .replace(b"{{PAGES}}", "\n".join(tags).encode("utf-8")))


class Dashboard:
    """The ASGI application of one ``palacectl ui`` run, with ``features``' pages (by default
    palacectl's, ``palacectl.features``)."""

    def __init__(self, daemon: AsyncDaemon, gate: Gate, *, human: str, max_streams: int = DEFAULT_MAX_STREAMS,
                 features: Features | None = None) -> None:
        if features is None:
            from ..features import features as registry

            features = registry()
        self.daemon = daemon
        self.gate = gate
        self.features = features
        self.views = Views(daemon, human=human)
        self.streams = StreamSlots(max_streams)
        self.busy = trio.CapacityLimiter(MAX_CONCURRENT_REQUESTS)
        self.started = time.monotonic()
        self.counters: collections.Counter[str] = collections.Counter()
        self._failed_places: set[str] = set()
        self.static = _load_static()
        scripts = _feature_scripts(features, set(self.static))
        self.static.update(scripts)
        self.page = _page(self.static.get("index.html", (b"", ""))[0], features, list(scripts), gate.csrf_token)
        self.routes: list[tuple[str, re.Pattern[str], Callable[..., Awaitable[None]]]] = [
            ("GET", re.compile(r"^/api/session$"), self._json(lambda r: self.views.session())),
            *((route.method, re.compile(route.pattern), self._handler(route))
              for feature in features if feature.ui is not None for route in load(feature.ui).ROUTES),
            ("GET", re.compile(r"^/logstream/stream$"), self._stream),
            ("GET", re.compile(r"^/statusz$"), self._json(lambda r: self.statusz())),
            ("GET", re.compile(r"^/static/([^/]{1,64})$"), self._static),
            ("GET", re.compile(r"^/$"), self._index),
        ]

    def __repr__(self) -> str:
        return f"<Dashboard port={self.gate.port} streams={self.streams.open}>"

    # -- ASGI ----------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets here: hypercorn closes what we do not accept
        started = False

        async def tracked_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        self.counters["requests"] += 1
        try:
            await self._handle(scope, receive, tracked_send)
        except HttpError as exc:
            self.counters[f"status_{exc.status}"] += 1
            if not started:
                await send_json(send, exc.status, {"error": exc.message}, headers=exc.headers)
        except DaemonUnreachable as exc:
            self.counters["status_503"] += 1
            if not started:
                await send_json(send, 503, {"error": str(exc)}, headers=[("retry-after", "5")])
        except ApiError as exc:
            status = _STATUS_OF_CODE.get(exc.code, 502)
            self.counters[f"status_{status}"] += 1
            if not started:
                await send_json(send, status, {"error": exc.message, "code": exc.code})
        except Exception as exc:
            # A bug of ours while serving this request: it ends with a 500, nothing else does.
            self.counters["failed"] += 1
            place = f"{type(exc).__name__}@{scope.get('path')}"
            if place not in self._failed_places and len(self._failed_places) < 256:
                self._failed_places.add(place)
                LOGGER.exception("request %s %s failed", scope.get("method"), scope.get("path"))
            if not started:
                await send_json(send, 500, {"error": "internal error in the dashboard; see its output"})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope.get("method", "GET"), scope.get("path", "/")
        if path == "/healthz" and method in ("GET", "HEAD"):
            await self._healthz(send, head_only=method == "HEAD")
            return
        request = Request(scope, receive)
        verdict = self.gate.check(host=request.headers.get("host"), headers=request.headers, cookies=request.cookies,
                                  url_secret=request.one("secret"), url_code=request.one("code"))
        if verdict is Verdict.BAD_HOST:
            raise HttpError(421, f"this dashboard answers only as {sorted(self.gate.hosts)[0]}")
        if verdict is Verdict.UNAUTHORIZED:
            self.counters["unauthorized"] += 1
            raise HttpError(401, UNAUTHORIZED_TEXT, headers=[("www-authenticate", 'Bearer realm="palace"')])
        if verdict is Verdict.ALLOW_FROM_URL and path == "/" and method == "GET":
            # Into the cookie, and out of the address bar (and of the browser's history).
            await send_bytes(send, 303, b"", "text/plain; charset=utf-8",
                             headers=[("location", "/"), ("set-cookie", self.gate.cookie_header())])
            return
        allowed = sorted({m for m, pattern, _ in self.routes if pattern.match(path)})
        for route_method, pattern, handler in self.routes:
            match = pattern.match(path)
            if match and route_method == method:
                if method != "GET" and self.gate.check_write(request.headers) is not Verdict.ALLOW:
                    raise HttpError(403, "a write needs this page's CSRF token and Origin; reload the dashboard")
                await handler(request, send, *match.groups())
                return
        if allowed:
            raise HttpError(405, f"{path} takes {', '.join(allowed)}", headers=[("allow", ", ".join(allowed))])
        raise HttpError(404, f"no such page: {path}")

    # -- routes --------------------------------------------------------------------------------

    def _handler(self, route: Route) -> Callable[..., Awaitable[None]]:
        """What answers a feature's route: its handler given this run's ``Views`` (``views.Route``)."""
        if route.kind == "json":
            return self._json(lambda request, *groups: route.handler(self.views, request, *groups))
        if route.kind == "raw":
            async def raw(request: Request, send: Send, *groups: str) -> None:
                body, content_type, headers = await self._bounded(route.handler(self.views, request, *groups))
                await send_bytes(send, 200, body, content_type, headers=headers)
            return raw

        async def write(request: Request, send: Send) -> None:
            await self._persons_write(request, send, lambda doc: route.handler(self.views, doc), route.refusal)
        return write

    def _json(self, produce: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[None]]:
        async def handler(request: Request, send: Send, *groups: str) -> None:
            await send_json(send, 200, await self._bounded(produce(request, *groups)))
        return handler

    async def _bounded(self, work: Awaitable[Any]) -> Any:
        """Run ``work`` within the cap on requests answered at once (503 beyond it)."""
        try:
            self.busy.acquire_nowait()
        except trio.WouldBlock:
            if hasattr(work, "close"):
                work.close()  # never awaited: say so to Python, not as a warning
            raise HttpError(503, f"the dashboard is answering {MAX_CONCURRENT_REQUESTS} requests already; retry "
                                 "in a moment", headers=[("retry-after", "1")]) from None
        try:
            with trio.fail_after(REQUEST_TIMEOUT_S):
                return await work
        except trio.TooSlowError:
            raise HttpError(504, f"palaced did not answer within {REQUEST_TIMEOUT_S:.0f} s; see `palacectl status` "
                                 "and its log") from None
        finally:
            self.busy.release()

    async def _healthz(self, send: Send, *, head_only: bool) -> None:
        daemon = "down"
        with trio.move_on_after(HEALTH_TIMEOUT_S):
            try:
                await self.daemon.call("ping")
                daemon = "up"
            except (DaemonUnreachable, ApiError):
                pass
        await send_json(send, 200, {"ok": True, "daemon": daemon}, head_only=head_only)

    async def statusz(self) -> dict[str, Any]:
        try:
            status = await self.daemon.call("status")
            daemon: dict[str, Any] = {"reachable": True, "version": status.get("version"),
                                      "events": status.get("events"), "health": status.get("health"),
                                      "writer": status.get("writer"), "uptime_s": status.get("uptime_s")}
        except (DaemonUnreachable, ApiError) as exc:
            daemon = {"reachable": False, "error": str(exc)}
        return {
            "uptime_s": round(time.monotonic() - self.started, 1),
            "requests": dict(self.counters),
            "streams": {"open": self.streams.open, "limit": self.streams.limit, "served": self.streams.served,
                        "refused": self.streams.refused},
            "human": self.views.human, "daemon": daemon,
        }

    async def _index(self, request: Request, send: Send) -> None:
        await send_bytes(send, 200, self.page, "text/html; charset=utf-8")

    async def _static(self, request: Request, send: Send, name: str) -> None:
        found = self.static.get(name)
        if found is None or name == "index.html":
            raise HttpError(404, f"no such file: {name}")
        body, content_type = found
        await send_bytes(send, 200, body, content_type)

    async def _stream(self, request: Request, send: Send) -> None:
        args = stream_args(request.query, request.headers.get("last-event-id"))
        await serve_stream(self.daemon, args, self.streams, request.receive, send)

    async def _persons_write(self, request: Request, send: Send,
                             write: Callable[[Any], Awaitable[dict[str, Any]]], refusal: str) -> None:
        """One of the person's writes (CSRF and Origin were checked by ``_handle``): never on an observer."""
        session = await self.views.session()
        if not session["can_write"]:
            raise HttpError(403, f"this daemon is a read-only observer: {refusal}")
        doc = await request.json_body(MAX_BODY_BYTES)
        await send_json(send, 200, await self._bounded(write(doc)))
