"""A scripted model server: one provider dialect, one script, every request recorded.

``ModelServer`` serves HTTP/1.1 on a socket it is given (``Netns.listen``: the harness's own
loopback) from a thread of this process, so a script's steps can be Python functions of what the
run has returned so far. Generation requests that offer tools are the harness's main loop and are
answered by the script; generation requests without tools (titles, routing, summaries a harness
asks for on the side) get a short text; side endpoints get the dialect's fixed documents; anything
else is a 404, recorded, so a test can show what a harness asked that the rig did not know.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import urlsplit

from .dialects import Dialect, Reply
from .script import Script, Text, Turn

__all__ = ["Exchange", "ModelServer"]

@dataclass
class Exchange:
    """One request and what the server answered."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any
    at: float
    kind: str = "unknown"  # generate (main loop), side (a generation without tools), fixed, unknown
    offered: list[str] = field(default_factory=list)
    turn: Turn | None = None
    status: int = 0

    def __repr__(self) -> str:
        return f"<Exchange {self.method} {self.path} {self.kind} {self.status} tools={len(self.offered)} {self.turn!r}>"


class ModelServer:
    """Serves ``dialect`` on ``sock`` (closed with the server), answering generations from ``script``."""

    def __init__(self, dialect: Dialect, script: Script, sock: socket.socket) -> None:
        self.dialect = dialect
        self.script = script
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # http.server's name
                owner._serve(self)

            do_GET = do_HEAD = do_PUT = do_DELETE = do_POST

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(sock.getsockname(), Handler, bind_and_activate=False)
        self._http.socket.close()
        self._http.socket = sock
        self._http.daemon_threads = True
        self.port: int = sock.getsockname()[1]
        self._thread = threading.Thread(target=self._http.serve_forever, name=f"model-{dialect.name}", daemon=True)

    def __repr__(self) -> str:
        return f"<ModelServer {self.dialect.name} :{self.port} requests={len(self.exchanges)} {self.script!r}>"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()

    # -- what was asked -----------------------------------------------------------------------

    def requests(self, kind: str | None = None) -> list[Exchange]:
        with self._lock:
            return [e for e in self.exchanges if kind is None or e.kind == kind]

    def offered_tools(self) -> list[str]:
        """The tools of the main loop's first request (what the model was first offered)."""
        main = self.requests("generate")
        return main[0].offered if main else []

    def prompt_texts(self) -> list[str]:
        """The text of every main-loop request (system prompt, instructions, messages)."""
        return [self.dialect.prompt_text(e.body) for e in self.requests("generate")]

    def summary(self) -> str:
        """What happened, for an assertion message."""
        lines = [repr(self)] + [repr(e) for e in self.requests()]
        lines += [f"  step {o.index} {o.label} -> {o.name}: {o.error or 'ok'} ({o.seconds})" for o in self.script.outcomes]
        return "\n".join(lines)

    # -- serving ------------------------------------------------------------------------------

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        split = urlsplit(handler.path)
        exchange = Exchange(handler.command, split.path, split.query, dict(handler.headers.items()), None, time.monotonic())
        with self._lock:
            self.exchanges.append(exchange)
        try:
            exchange.body = self._read_body(handler)
            reply = self._answer(exchange)
        except Exception as exc:  # the rig's own failure: answered (a 500 the harness reports) and recorded
            exchange.kind = f"rig error: {type(exc).__name__}: {exc}"
            reply = Reply.json({"error": {"message": str(exc)}}, status=500)
        exchange.status = reply.status
        handler.send_response(reply.status)
        handler.send_header("Content-Type", reply.content_type)
        handler.send_header("Content-Length", str(len(reply.body)))
        if reply.content_type == "text/event-stream":
            handler.send_header("Cache-Control", "no-cache")
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(reply.body)
            handler.wfile.flush()

    def _answer(self, exchange: Exchange) -> Reply:
        route = self.dialect.route(exchange.method, exchange.path, exchange.body)
        if route is None:
            return Reply.json({"error": {"message": f"the rig does not know {exchange.method} {exchange.path}"}}, 404)
        if isinstance(route, Reply):
            exchange.kind = "fixed"
            return route
        body = exchange.body if isinstance(exchange.body, dict) else {}
        exchange.offered = self.dialect.tools(body)
        if exchange.offered:
            exchange.kind = "generate"
            exchange.turn = self.script.turn(exchange.offered, self.dialect.results(body), time.monotonic(),
                                             self.dialect.prompt_text(body))
        else:
            exchange.kind, exchange.turn = "side", Text(self.dialect.side_text(body))
        return self.dialect.render(exchange.turn, body, exchange.path)

    @staticmethod
    def _read_body(handler: BaseHTTPRequestHandler) -> Any:
        if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(handler.rfile.readline().split(b";")[0], 16)
                chunk = handler.rfile.read(size + 2)[:size]
                if size == 0:
                    break
                data += chunk
        else:
            data = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        encoding = handler.headers.get("Content-Encoding", "").lower()
        if encoding == "gzip":
            data = gzip.decompress(data)
        elif encoding == "deflate":
            data = zlib.decompress(data)
        elif encoding not in ("", "identity"):
            raise ValueError(f"a request body in {encoding}, which the rig cannot read")
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return data.decode(errors="replace")
