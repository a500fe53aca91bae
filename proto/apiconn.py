"""The sans-IO local-API connection: the order in which a client and palaced may exchange messages.

Owns: both ends of one local-API connection as pure state machines (proto/PROTOCOL.md, "Local
API", sections 1 and 2): ``ServerConnection`` for palaced/api.py, ``ClientConnection`` for
palacectl/client.py and palacectl/aclient.py. They wrap ``FrameBuffer``/``encode_frame``
(framing.py) and the message shapes of control.py. Must not import trio, sockets, a clock or
anything that does IO: bytes go in with ``receive_data`` (``b""`` means EOF), events come out of
``next_event`` (or ``NEED_DATA``), and the frames to write come back as ``bytes`` (h11 style).

Theory of operation
-------------------
Server side (one ``ServerConnection`` per accepted connection):

1. Until a hello has succeeded, no frame may be larger than ``PRE_HELLO_MAX_FRAME_BYTES``; a
   larger header is a fatal ``ProtocolViolation`` (``frame_too_large``, "before hello"). Once a
   hello succeeds the limit rises to the daemon's full ``max_frame_bytes``.
2. The first request must be ``hello``: it comes out as a ``HelloRequest``, and ``accept_hello``
   judges it (version, then the token when the connection needs one) and, if it succeeded, greets
   the connection. Any other request before that is a non-fatal ``ProtocolViolation``
   (``bad_request``). The caller must judge a hello before asking for the next event, so the
   frames behind it are held to the right limit.
3. A frame that is not a well-formed request map is a non-fatal ``ProtocolViolation``
   (``bad_request``, with the request's id when it had an integer one); the connection stays
   usable. An undecodable or oversized frame is fatal: the stream is out of sync, the violation
   carries the error frame to send, and the machine is then ``ERROR`` (every call raises).
4. While a subscription streams (``start_stream`` .. ``end_stream``), the connection belongs to
   it: every request is a non-fatal ``ProtocolViolation`` (``bad_request``) and ``push`` is legal.
5. A hello with a wrong token is answered ``unauthorized`` and the machine is ``CLOSED``: the
   caller sends that error and closes. EOF is ``ConnectionClosed`` (mid-frame or not).
6. Our own misuse (a push outside a stream, a second stream) raises ``LocalProtocolError`` and
   leaves the state unchanged.

Client side (one ``ClientConnection`` per connection): ``hello`` must be the first request sent
(``LocalProtocolError`` otherwise); request ids count up from 1; each incoming map is a ``Push``
(it has a ``push`` key: subscriptions only) or a ``Reply``, paired with the op it answers. The
hello's reply raises the receive limit to the daemon's announced ``max_frame_bytes`` + 1 MiB
(replies carry whole artifacts). A frame that is not a map raises ``MalformedReply`` (consumed:
the stream stays in sync); an undecodable or oversized frame raises ``RemoteProtocolError`` and
the machine is ``ERROR``. ``result_of`` turns a reply into its result or raises its ``ApiError``.

The hot path (a greeted connection's requests and replies) is kept to a few attribute checks per
message: events are plain slotted classes, and the checks run in the order the common case needs.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final, NamedTuple, final

from .control import (
    PRE_HELLO_MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    Request,
    api_error_from_wire,
    check_hello,
    parse_request,
    token_matches,
)
from .errors import (
    ApiError,
    FrameTooLarge,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    VersionMismatch,
)
from .framing import DEFAULT_MAX_FRAME_BYTES, NEED_DATA, FrameBuffer, encode_frame

__all__ = [
    "NEED_DATA",
    "ApiState",
    "ClientConnection",
    "ConnectionClosed",
    "HelloRequest",
    "MalformedReply",
    "ProtocolViolation",
    "Push",
    "Reply",
    "Request",
    "ServerConnection",
    "error_frame",
    "result_of",
]

# Why 1 TiB: the daemon does not limit its own replies (an artifact reply is as large as the
# artifact limit allows) nor a client its requests; the receiver's limit is what protects it.
_UNLIMITED: Final = 1 << 40
# Why 1 MiB: a reply wraps an artifact of up to the daemon's frame limit in a small envelope.
REPLY_ENVELOPE_BYTES: Final = 1 << 20

#: the message a request gets before the connection's hello has succeeded
NOT_GREETED: Final = "the first request on a connection must be 'hello' with the protocol version"
#: the message a request gets while its connection streams a subscription
STREAMING: Final = "this connection is streaming a subscription; open another connection for requests"
#: the message a hello without the right token gets (TCP API)
UNAUTHORIZED: Final = ("this palaced's TCP API needs the token from its home's api.json (palacectl reads it "
                       "by itself: is --home right?)")


class ApiState(enum.Enum):
    #: accepted, no hello has succeeded yet (4 KiB frames)
    AWAITING_HELLO = "awaiting_hello"
    #: greeted: requests are served (full frame limit)
    OPEN = "open"
    #: a subscription owns the connection: pushes out, requests refused
    STREAMING = "streaming"
    #: EOF, or a hello refused for its token: nothing more is served
    CLOSED = "closed"
    #: the other side broke the framing; the stream is out of sync
    ERROR = "error"


# -- events ------------------------------------------------------------------------------------
# Named tuples, not dataclasses: importing dataclasses brings inspect, ~8 ms of every palacectl
# start, and a client's loop step is only a few times that (issue 26).


@final
class HelloRequest(NamedTuple):
    """A ``hello`` request: judge it with ``ServerConnection.accept_hello``."""

    id: int
    args: dict[str, Any]


@final
class ProtocolViolation(NamedTuple):
    """Something the client sent that the protocol refuses.

    ``error`` is what to answer (with ``id``, ``None`` when the request had no usable one). A
    ``fatal`` violation means the stream is out of sync: send the error, then close. ``limit``
    names the pre-hello kind a fatal violation before hello counts as (``pre_hello_frame_bytes``,
    ``pre_hello_garbage``), else ``None``; ``reason`` is the framing error's own words, for the log.
    """

    id: int | None
    error: ApiError
    fatal: bool = False
    limit: str | None = None
    reason: str = ""


@final
class ConnectionClosed(NamedTuple):
    """The other side closed its end (EOF); ``truncated`` if it did so in the middle of a frame."""

    truncated: bool = False


@final
class Reply:
    """A reply (``ok`` true or false) from the daemon. ``op`` is the op of the request it answers,
    ``None`` when no request of ours is waiting for ``id`` (``id`` null: a connection-level error
    such as a refusal)."""

    __slots__ = ("id", "message", "op")

    def __init__(self, id: Any, op: str | None, message: Mapping[str, Any]) -> None:
        self.id, self.op, self.message = id, op, message

    def __repr__(self) -> str:
        return f"<Reply #{self.id} {self.op} ok={bool(self.message.get('ok'))}>"

    def result(self) -> Any:
        """The result; raises the reply's ``ApiError`` if it is an error reply."""
        return result_of(self.message)


@final
class Push:
    """A message the daemon pushes on a subscription (``kind``: started, batch, cursor)."""

    __slots__ = ("id", "kind", "message")

    def __init__(self, id: Any, kind: Any, message: Mapping[str, Any]) -> None:
        self.id, self.kind, self.message = id, kind, message

    def __repr__(self) -> str:
        return f"<Push #{self.id} {self.kind}>"


class MalformedReply(RemoteProtocolError):
    """The daemon sent a frame that decodes but is not a message map. The frame is consumed, so
    the stream stays in sync: the caller decides whether to skip it or give up."""


# -- helpers -----------------------------------------------------------------------------------


def error_frame(rid: int | None, error: ApiError) -> bytes:
    """One error reply as a frame (also for refusals sent before a connection has a machine)."""
    return encode_frame({"id": rid, "ok": False, "error": error.to_wire()}, max_frame_bytes=_UNLIMITED)


def result_of(message: Mapping[str, Any]) -> Any:
    """A reply's result.

    Raises:
        ApiError: the reply is an error reply (its code, message and detail, word for word).
    """
    if message.get("ok"):
        return message.get("result")
    raise api_error_from_wire(message.get("error"))


# -- the daemon's side -------------------------------------------------------------------------


class ServerConnection:
    """palaced's side of one local-API connection (rules 1-6 of the module docstring).

    Args:
        max_frame_bytes: the frame limit once a hello has succeeded (before it, at most
            ``PRE_HELLO_MAX_FRAME_BYTES``).
        token: what a hello's ``token`` must equal (the TCP API); ``None`` on a Unix socket.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, *, token: str | None = None) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._token = token
        # Before hello a frame is a hello, or garbage: the limit rises once a hello succeeds.
        self._buffer = FrameBuffer(min(PRE_HELLO_MAX_FRAME_BYTES, max_frame_bytes))
        # Plain flags rather than one state field: the hot path reads two booleans per request.
        self.greeted = False
        self.streaming = False
        self._eof = False
        self._closed = False
        self._error = False

    def __repr__(self) -> str:
        return f"<ServerConnection {self.state.name} buffered={self._buffer.buffered}>"

    @property
    def state(self) -> ApiState:
        if self._error:
            return ApiState.ERROR
        if self._closed or self._eof:
            return ApiState.CLOSED
        if self.streaming:
            return ApiState.STREAMING
        return ApiState.OPEN if self.greeted else ApiState.AWAITING_HELLO

    @property
    def frame_limit(self) -> int:
        """The largest frame accepted now."""
        return self._buffer.max_frame_bytes

    # -- receiving -----------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray) -> None:
        """Feed received bytes; ``b""`` means the client closed its end."""
        if self._error:
            raise LocalProtocolError("the connection broke the protocol; close it")
        if not data:
            self._eof = True
        self._buffer.feed(data)

    def next_event(self) -> Request | HelloRequest | ProtocolViolation | ConnectionClosed | Any:
        """The next event, or ``NEED_DATA``: a greeted connection's ``Request`` (any op but hello;
        unknown ops are the caller's to refuse), a ``HelloRequest``, a ``ProtocolViolation``, or
        ``ConnectionClosed``.

        Raises:
            LocalProtocolError: called again after a fatal violation.
        """
        if self._error:
            raise LocalProtocolError("the connection broke the protocol; close it")
        if self._closed:
            return ConnectionClosed()
        try:
            message = self._buffer.next_frame()
        except FrameTooLarge as exc:
            return self._fatal_frame(exc)
        except ProtocolError as exc:
            if self._eof:  # EOF in the middle of a frame: nobody is left to answer
                self._closed = True
                return ConnectionClosed(truncated=True)
            self._error = True
            return ProtocolViolation(None, ApiError(exc.message, code="bad_request"), fatal=True,
                                     limit=None if self.greeted else "pre_hello_garbage", reason=exc.message)
        if message is NEED_DATA:
            if self._eof:
                self._closed = True
                return ConnectionClosed()
            return NEED_DATA
        try:
            request = parse_request(message)
        except ProtocolError as exc:
            rid = message.get("id") if isinstance(message, dict) else None
            return ProtocolViolation(rid if type(rid) is int else None, ApiError(exc.message, code="bad_request"))
        if self.streaming:
            return ProtocolViolation(request.id, ApiError(STREAMING, code="bad_request"))
        if request.op == "hello":
            return HelloRequest(request.id, request.args)
        if not self.greeted:
            return ProtocolViolation(request.id, ApiError(NOT_GREETED, code="bad_request"))
        return request

    def _fatal_frame(self, exc: FrameTooLarge) -> ProtocolViolation:
        self._error = True
        if self.greeted:
            return ProtocolViolation(None, ApiError(exc.message, code=exc.code), fatal=True, reason=exc.message)
        return ProtocolViolation(None, ApiError(
            f"{exc.message} before hello: until a hello succeeds a frame may be at most {PRE_HELLO_MAX_FRAME_BYTES} "
            "bytes; send hello first and wait for its reply", code=exc.code),
            fatal=True, limit="pre_hello_frame_bytes", reason=exc.message)

    def accept_hello(self, hello: HelloRequest) -> ApiError | None:
        """Judge a hello: ``None`` if it succeeded (the connection is greeted from now on, and its
        frame limit is the full one), else the error to answer it with. A wrong version leaves the
        state as it was; a missing or wrong token (when one is needed) returns ``unauthorized``
        and closes the machine: send the error, then close the connection."""
        try:
            check_hello(hello.args)
        except VersionMismatch as exc:
            return ApiError(exc.message, code=exc.code)
        if self._token is not None and not token_matches(hello.args.get("token"), self._token):
            self._closed = True
            return ApiError(UNAUTHORIZED, code="unauthorized")
        if not self.greeted:
            self.greeted = True
            self._buffer.max_frame_bytes = self.max_frame_bytes
        return None

    # -- the subscription ----------------------------------------------------------------------

    def start_stream(self) -> None:
        """A subscription now owns the connection (requests are refused until ``end_stream``)."""
        if not self.greeted or self.streaming:
            raise LocalProtocolError(f"cannot start a subscription on a connection in state {self.state.name}")
        self.streaming = True

    def end_stream(self) -> None:
        self.streaming = False

    # -- sending -------------------------------------------------------------------------------

    def reply(self, rid: int, result: Any) -> bytes:
        """A successful reply as a frame.

        Raises:
            LocalProtocolError: ``result`` is not encodable as msgpack (a bug in a handler).
        """
        return encode_frame({"id": rid, "ok": True, "result": result}, max_frame_bytes=_UNLIMITED)

    def error(self, rid: int | None, error: ApiError) -> bytes:
        """An error reply as a frame (``rid`` ``None`` for a connection-level error)."""
        return error_frame(rid, error)

    def push(self, rid: int, message: Mapping[str, Any]) -> bytes:
        """A subscription push (``message`` holds ``push`` and its fields) as a frame.

        Raises:
            LocalProtocolError: no subscription is streaming, or the message is not encodable.
        """
        if not self.streaming:
            raise LocalProtocolError("a push is legal only while a subscription streams")
        return encode_frame({"id": rid, **message}, max_frame_bytes=_UNLIMITED)


# -- the client's side -------------------------------------------------------------------------


class ClientConnection:
    """A client's side of one local-API connection: request frames out, replies and pushes in.

    Args:
        max_frame_bytes: the receive limit until the hello's reply announces the daemon's.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._buffer = FrameBuffer(max_frame_bytes)
        self._next_id = 1
        #: requests sent and not yet answered: id -> op (a subscription's stays until its error)
        self._pending: dict[int, str] = {}
        self._hello_sent = False
        self._error: RemoteProtocolError | None = None
        #: the result of a successful hello (versions, origin, limits), else None
        self.hello_result: Mapping[str, Any] | None = None

    def __repr__(self) -> str:
        state = "ERROR" if self._error else "OPEN" if self.hello_result is not None else "AWAITING_HELLO"
        return f"<ClientConnection {state} pending={len(self._pending)}>"

    @property
    def frame_limit(self) -> int:
        return self._buffer.max_frame_bytes

    def hello(self, *, client: str, pid: int, token: str | None = None) -> tuple[int, bytes]:
        """The hello (always the first request): its id and frame.

        Raises:
            LocalProtocolError: a hello was sent already on this connection.
        """
        if self._hello_sent:
            raise LocalProtocolError("hello already sent on this connection")
        self._hello_sent = True
        args: dict[str, Any] = {"version": PROTOCOL_VERSION, "client": client, "pid": pid}
        if token:
            args["token"] = token
        return self._request("hello", args)

    def send_request(self, op: str, args: dict[str, Any]) -> tuple[int, bytes]:
        """A request after the hello (which may still be unanswered: requests pipeline).

        Raises:
            LocalProtocolError: no hello sent yet, or ``args`` is not encodable as msgpack.
        """
        if not self._hello_sent:
            raise LocalProtocolError("the first request on a connection must be 'hello': send hello() first")
        return self._request(op, args)

    def _request(self, op: str, args: dict[str, Any]) -> tuple[int, bytes]:
        rid = self._next_id
        data = encode_frame({"id": rid, "op": op, "args": args}, max_frame_bytes=_UNLIMITED)
        self._next_id = rid + 1
        self._pending[rid] = op
        return rid, data

    def receive_data(self, data: bytes | bytearray) -> None:
        """Feed received bytes (``b""``: the daemon closed its end)."""
        self._buffer.feed(data)

    def next_event(self) -> Reply | Push | Any:
        """The next ``Reply`` or ``Push``, or ``NEED_DATA``.

        Raises:
            MalformedReply: a frame that is not a map (consumed; the stream stays in sync).
            RemoteProtocolError: an undecodable or oversized frame, or EOF inside one; the
                connection is then unusable and every later call raises the same error.
        """
        if self._error is not None:
            raise self._error
        try:
            message = self._buffer.next_frame()
        except RemoteProtocolError as exc:
            self._error = exc
            raise
        if message is NEED_DATA:
            return NEED_DATA
        if type(message) is not dict and not isinstance(message, Mapping):  # (the ABC check is slow)
            raise MalformedReply("a frame from the daemon is not a message map")
        rid = message.get("id")
        kind = message.get("push")
        if kind is not None:
            return Push(rid, kind, message)
        op = self._pending.pop(rid, None) if type(rid) is int else None
        if op == "hello" and message.get("ok"):
            self._greeted(message.get("result"))
        return Reply(rid, op, message)

    def _greeted(self, result: Any) -> None:
        self.hello_result = result if isinstance(result, Mapping) else {}
        limits = self.hello_result.get("limits")
        limit = limits.get("max_frame_bytes") if isinstance(limits, Mapping) else None
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            # Replies can carry an artifact of up to the daemon's limit.
            self._buffer.max_frame_bytes = limit + REPLY_ENVELOPE_BYTES
