"""Messages of the local control API (Unix socket), shared by palaced and its clients.

Owns: the request/reply/stream message shapes, the operation names and the hello handshake
(proto/PROTOCOL.md, "Local API"). Every message is a msgpack map inside one frame (framing.py):

    request  {"id": int, "op": str, "args": map}
    reply    {"id": int, "ok": true,  "result": any}
           | {"id": int, "ok": false, "error": {"code": str, "message": str, "detail"?: any}}
    push     {"id": int, "push": "batch" | "cursor", ...}   (only on a subscription)

Pure: no trio, no sockets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .errors import ApiError, RemoteProtocolError, VersionMismatch

__all__ = [
    "CORE_OPS",
    "HELLO_TIMEOUT_S",
    "PRE_HELLO_MAX_FRAME_BYTES",
    "PROTOCOL_VERSION",
    "Request",
    "check_hello",
    "error_reply",
    "ok_reply",
    "parse_request",
    "request",
    "token_matches",
]

#: Version of the local API; the hello must name it exactly (there is only one so far).
PROTOCOL_VERSION: Final = 1

#: Until a connection's hello has succeeded, no frame may be larger than this (the daemon answers
#: ``frame_too_large`` and closes). Why 4 KiB: a hello is a version, a client name, a pid and, over
#: TCP, a 43-character token (under 200 bytes); before it nothing bigger has a reason to arrive, and
#: over TCP the sender may be another user of the machine.
PRE_HELLO_MAX_FRAME_BYTES: Final = 4096

#: A connection whose hello has not succeeded this many seconds after it was accepted is closed
#: (``hello_timeout``). Why 10 s: palacectl says hello in its first round trip (milliseconds); a
#: client that has not done so by then is stuck, or holding a connection slot on purpose.
HELLO_TIMEOUT_S: Final = 10.0

#: The operations of the core itself: the handshake, the log, the inbox and session start, the
#: daemon's own state and files. Every feature declares its own (``palace_proto.features.OPS``: all
#: of them; a request naming another gets ``unknown_op``).
CORE_OPS: Final = frozenset({
    "hello", "ping", "status", "append", "append_many", "list", "wait", "subscribe", "ack", "redact", "get_event",
    "digest", "watch_update", "backup", "export_page", "import_events", "inbox", "inbox_mark_read", "session_start",
    "notify_test",
})


class Request:
    """A parsed request: ``id``, ``op``, ``args``."""

    __slots__ = ("args", "id", "op")

    def __init__(self, id: int, op: str, args: dict[str, Any]) -> None:
        self.id, self.op, self.args = id, op, args

    def __repr__(self) -> str:
        return f"<Request #{self.id} {self.op}>"


def request(id: int, op: str, **args: Any) -> dict[str, Any]:
    return {"id": id, "op": op, "args": args}


def ok_reply(id: int | None, result: Any) -> dict[str, Any]:
    return {"id": id, "ok": True, "result": result}


def error_reply(id: int | None, error: ApiError) -> dict[str, Any]:
    return {"id": id, "ok": False, "error": error.to_wire()}


def parse_request(message: Any) -> Request:
    """Check a decoded frame is a request.

    Raises:
        RemoteProtocolError: wrong shape or field types (reported as ``bad_request``).
    """
    if type(message) is not dict and not isinstance(message, Mapping):  # (the ABC check is slow)
        raise RemoteProtocolError("a request must be a map with 'id', 'op' and 'args'")
    rid, op, args = message.get("id"), message.get("op"), message.get("args", {})
    if isinstance(rid, bool) or not isinstance(rid, int):
        raise RemoteProtocolError("request 'id' must be an integer")
    if not isinstance(op, str):
        raise RemoteProtocolError("request 'op' must be a string")
    if args is None:
        args = {}
    if not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args):
        raise RemoteProtocolError("request 'args' must be a map with string keys")
    return Request(rid, op, dict(args))


def check_hello(args: Mapping[str, Any]) -> None:
    """Raises VersionMismatch unless the client speaks ``PROTOCOL_VERSION``."""
    version = args.get("version")
    # Exactly the integer: True == 1 and 1.0 == 1 in Python, but neither names a version.
    if isinstance(version, bool) or not isinstance(version, int) or version != PROTOCOL_VERSION:
        raise VersionMismatch(
            f"client speaks protocol version {version!r}, this daemon speaks {PROTOCOL_VERSION}; "
            "upgrade palacectl and palaced to the same release"
        )


def token_matches(offered: object, expected: str) -> bool:
    """Whether a hello's ``token`` is the daemon's, compared in constant time.

    Never raises, whatever the client sent: a non-string is simply wrong (the token in ``api.json``
    is a string, so ``bin`` does not match either), and a string with a lone surrogate (the framing
    decodes strings with ``surrogatepass``) is compared as the bytes it arrived as.
    """
    if not isinstance(offered, str):
        return False
    import hmac  # here, not at the top: its _hashlib (OpenSSL) costs every client ~4 ms at start-up

    return hmac.compare_digest(offered.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


def api_error_from_wire(error: Any) -> ApiError:
    """Rebuild an ApiError from a reply's error map (clients use this)."""
    if not isinstance(error, Mapping):
        return ApiError("daemon sent a malformed error reply", code="internal")
    return ApiError(str(error.get("message", "")), code=str(error.get("code", "internal")), detail=error.get("detail"))
