"""A stand-in for palaced on a real Unix socket that sends what it is told to, for tests of how
palacectl's clients read: one connection, its hello answered as palaced answers it, then the
frames a script gives for the next request (what a real daemon never sends, among them).

Blocking, on a thread of its own, so the blocking client and the trio client can both be tried
against it. The connection stays open until the client closes it: what a client makes of a
frame never depends on an EOF that follows it.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from palace_proto.apiconn import NEED_DATA, HelloRequest, ServerConnection
from palace_proto.control import Request
from palace_proto.framing import HEADER, encode_frame
from palace_proto.paths import socket_path

__all__ = ["NOT_A_MAP", "UNDECODABLE", "push", "reply", "scripted_daemon"]

# Why 10 s: far longer than a local connect takes; a test that goes wrong fails instead of hanging.
IO_TIMEOUT_S: Final = 10.0

#: a frame that decodes, but to a list: not a message map
NOT_A_MAP: Final = encode_frame(["not", "a", "map"])
#: a frame whose payload is not msgpack (0xc1 is the one byte msgpack never uses)
UNDECODABLE: Final = HEADER.pack(3) + b"\xc1\xc1\xc1"


def reply(rid: int, result: Any) -> bytes:
    return encode_frame({"id": rid, "ok": True, "result": result})


def push(rid: int, kind: str, **fields: Any) -> bytes:
    return encode_frame({"id": rid, "push": kind, **fields})


def _serve(listener: socket.socket, script: Callable[[Request], list[bytes]], seen: list[Request]) -> None:
    conn, _ = listener.accept()
    conn.settimeout(IO_TIMEOUT_S)
    with conn:
        server = ServerConnection()
        while True:
            event = server.next_event()
            if event is NEED_DATA:
                data = conn.recv(65536)
                if not data:
                    return
                server.receive_data(data)
            elif isinstance(event, HelloRequest):
                assert server.accept_hello(event) is None
                conn.sendall(server.reply(event.id, {"version": 1, "limits": {"max_frame_bytes": 1 << 20}}))
            elif isinstance(event, Request):
                seen.append(event)
                conn.sendall(b"".join(script(event)))
            else:
                return  # the client went away


@contextmanager
def scripted_daemon(home: Path, script: Callable[[Request], list[bytes]]) -> Iterator[list[Request]]:
    """Serve one connection on ``home``'s socket for the block: ``script(request)`` gives the
    frames that answer each request after the hello. Yields the requests as they arrive."""
    home.mkdir(parents=True, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.settimeout(IO_TIMEOUT_S)
    listener.bind(str(socket_path(home)))
    listener.listen(1)
    seen: list[Request] = []
    thread = threading.Thread(target=_serve, args=(listener, script, seen), name="scripted palaced", daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        listener.close()
        thread.join(IO_TIMEOUT_S)
