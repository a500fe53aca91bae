"""The few HTTP pieces the dashboard needs on top of ASGI, without a web framework.

Owns: ``Request`` (method, path, query, headers, cookies, a bounded body read), ``HttpError``
(a status and one line for whoever called), and the response senders (``send_json``,
``send_bytes``), which add the headers every answer carries: no caching, no sniffing, no
framing by other sites, no referrer (the printed URL holds the secret), and a content security
policy that lets the page run only its own files.

Why no framework: the dashboard has a dozen routes, one gate in front of all of them and one
streaming response; the ASGI messages are a handful of dicts, and keeping them in view keeps
the gate's order (Host, secret, CSRF, then the route) plain to read.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from http.cookies import CookieError, SimpleCookie
from typing import Any, Final

__all__ = [
    "HttpError", "Receive", "Request", "SECURITY_HEADERS", "Scope", "Send", "dumps", "send_bytes", "send_json",
    "start_headers",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: Why these: the page loads only its own scripts and styles and talks only to this server
#: (``connect-src 'self'`` covers the event stream); nothing may frame it; the secret in the
#: first URL never travels in a Referer; nothing is cached (the data is live and private).
SECURITY_HEADERS: Final = (
    ("content-security-policy",
     "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
     "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
)

#: Why 32: a query names a few filters; more keys than this is not a page of ours asking.
MAX_QUERY_KEYS: Final = 32
#: Why 4 KiB: the longest filter value the daemon takes is 256 characters, a text search 250.
MAX_QUERY_BYTES: Final = 4096


class HttpError(Exception):
    """A request we answer with ``status`` and ``{"error": message}`` (one line, for people)."""

    def __init__(self, status: int, message: str, *, headers: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = tuple(headers)


class Request:
    """One HTTP request as the routes read it."""

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.method: str = scope.get("method", "GET")
        self.path: str = scope.get("path", "/")
        #: the ASGI receive channel (a stream watches it for the client going away)
        self.receive = receive
        raw_query: bytes = scope.get("query_string", b"")
        if len(raw_query) > MAX_QUERY_BYTES:
            raise HttpError(414, f"the query string is over {MAX_QUERY_BYTES} bytes")
        try:
            pairs = urllib.parse.parse_qsl(raw_query.decode("utf-8"), keep_blank_values=True,
                                           max_num_fields=MAX_QUERY_KEYS, errors="strict")
        except (UnicodeDecodeError, ValueError):
            raise HttpError(400, f"the query string is not UTF-8 or has over {MAX_QUERY_KEYS} fields") from None
        self.query: dict[str, list[str]] = {}
        for key, value in pairs:
            self.query.setdefault(key, []).append(value)
        headers: dict[str, str] = {}
        for name, value in scope.get("headers", ()):
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1")
            # Repeated headers: joined as HTTP says lists are; Host and Origin twice is refused by
            # the gate, since no value then equals ours.
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        self.headers = headers
        self.cookies: dict[str, str] = {}
        if "cookie" in headers:
            jar = SimpleCookie()
            try:
                jar.load(headers["cookie"])
            except CookieError:
                pass  # a malformed cookie header counts as none
            self.cookies = {key: morsel.value for key, morsel in jar.items()}

    def __repr__(self) -> str:
        return f"<Request {self.method} {self.path}>"

    def one(self, name: str, default: str | None = None) -> str | None:
        """A query parameter given at most once (twice is a 400)."""
        values = self.query.get(name)
        if not values:
            return default
        if len(values) > 1:
            raise HttpError(400, f"query parameter {name!r} is given {len(values)} times; give it once")
        return values[0]

    async def body(self, limit: int) -> bytes:
        """The request body, at most ``limit`` bytes (413 beyond: nothing of it is used)."""
        length = self.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise HttpError(413, f"the request body is over {limit} bytes")
        chunks, size = [], 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise HttpError(400, "the client went away before its body arrived")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise HttpError(413, f"the request body is over {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    async def json_body(self, limit: int) -> dict[str, Any]:
        """The body as a JSON object (400 for anything else)."""
        if not self.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
            raise HttpError(415, "send the body as application/json")
        raw = await self.body(limit)
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, ValueError):
            raise HttpError(400, "the body is not valid JSON") from None
        if not isinstance(doc, dict):
            raise HttpError(400, "the body must be a JSON object")
        return doc


def _header_list(extra: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """The security headers, then ``extra``; a name in ``extra`` replaces the default's value."""
    merged: dict[str, str] = dict(SECURITY_HEADERS)
    repeated: list[tuple[str, str]] = []
    for name, value in extra:
        if name == "set-cookie":
            repeated.append((name, value))
        else:
            merged[name] = value
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (*merged.items(), *repeated)]


async def send_bytes(send: Send, status: int, body: bytes, content_type: str, *,
                     headers: Iterable[tuple[str, str]] = (), head_only: bool = False) -> None:
    """A whole response: status, the security headers, ``headers``, the body."""
    extra = [("content-type", content_type), ("content-length", str(len(body))), *headers]
    await send({"type": "http.response.start", "status": status, "headers": _header_list(extra)})
    await send({"type": "http.response.body", "body": b"" if head_only else body})


def dumps(doc: Any) -> bytes:
    """JSON as the dashboard sends it (UTF-8, no NaN, compact)."""
    return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_default).encode("utf-8")


def _default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return None  # bytes never go into JSON (artifact content has its own route)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


async def send_json(send: Send, status: int, doc: Any, *, headers: Iterable[tuple[str, str]] = (),
                    head_only: bool = False) -> None:
    await send_bytes(send, status, dumps(doc), "application/json; charset=utf-8", headers=headers,
                     head_only=head_only)


def start_headers(status: int, content_type: str, extra: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``http.response.start`` message of a streamed response (no content length)."""
    return {"type": "http.response.start", "status": status,
            "headers": _header_list([("content-type", content_type), *(extra or {}).items()])}
