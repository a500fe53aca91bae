"""The sans-IO peer session: the order in which two replicas may exchange messages.

Theory of operation
-------------------
A session is one connection between two daemons, seen from one side. Bytes go in with
``receive_data`` (``b""`` means EOF) and come out as messages from ``next_event``; messages go out
through ``send``, which returns the bytes to write. The session never touches a socket or a clock:
time comes in as ``now`` and ``get_timer`` says when anti-entropy is due (aioquic style).

Rules (every transition lives in this file):

1. Each side's first message is ``Hello``. A hello for another palace or another protocol
   version is a ``RemoteProtocolError``/``VersionMismatch``; nothing else is accepted before it.
2. After the hellos, each side sends its ``Members`` (origin → certificate bindings) and its
   ``Vector``; the gossip (``Presence``, ``Report``) and ``Neighbours`` may follow at any time.
   ``Want``, ``Events``, ``Have`` and the artifact messages are legal, in either direction, only
   once that side has seen the other's vector (it cannot know what the other lacks before).
   Enrolment messages never belong to a session (they are a one-shot exchange on a connection
   without a client certificate).
3. Vectors may be sent again at any time (the anti-entropy timer); ``get_timer`` returns when
   the next one is due: ``ANTI_ENTROPY_S`` after the last vector we sent.
4. ``Goodbye`` (either way) or EOF closes the session. Message types we do not know are skipped.
5. Our own misuse raises ``LocalProtocolError`` and leaves the state unchanged; anything wrong
   from the peer raises ``RemoteProtocolError`` and puts the session in ``ERROR``, after which
   every call raises.

The session is role-agnostic: dialer and listener run the same machine.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Final, final

from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .framing import NEED_DATA, FrameBuffer, encode_frame
from .peer import (
    CONTROL_MESSAGES,
    MAX_VECTOR_ENTRIES,
    Addresses,
    ArtifactChunk,
    ArtifactWant,
    Enrol,
    Enrolled,
    EnrolmentMessage,
    Events,
    Goodbye,
    Have,
    Hello,
    Members,
    Neighbours,
    PeerMessage,
    Presence,
    Report,
    Seen,
    Vector,
    Want,
    from_wire,
    to_wire,
)

__all__ = ["ANTI_ENTROPY_S", "ConnectionClosed", "PeerSession", "SessionState"]

# Why 10 s: pull anti-entropy keeps running even when push looks healthy (silent push stalls are
# the classic failure, p2p-lessons complaint 4); 10 s bounds how long a stall can hide.
ANTI_ENTROPY_S: Final = 10.0
# Why 16 MiB: a batch of events is capped at 1 MiB by the sender; artifacts travel in chunks.
PEER_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024


#: messages that presuppose knowing what the other side holds
_AFTER_VECTORS: Final = (Want, Events, Have, ArtifactWant, ArtifactChunk)


class SessionState(enum.Enum):
    #: waiting for the peer's hello (and/or for us to send ours)
    HANDSHAKE = "handshake"
    #: hellos exchanged; vectors flowing; wants and events once both vectors are known
    SYNCING = "syncing"
    #: closed by a goodbye or EOF
    CLOSED = "closed"
    #: the peer broke the protocol
    ERROR = "error"


@final
@dataclasses.dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The peer closed the connection (EOF), with or without a goodbye first."""

    goodbye: Goodbye | None = None


class PeerSession:
    def __init__(self, hello: Hello, *, max_frame_bytes: int = PEER_MAX_FRAME_BYTES) -> None:
        self.our_hello = hello
        self.their_hello: Hello | None = None
        self.state = SessionState.HANDSHAKE
        self._buffer = FrameBuffer(max_frame_bytes)
        self._max_frame_bytes = max_frame_bytes
        self._sent_hello = False
        self._sent_vector = False
        self._their_vector: Vector | None = None
        self._last_vector_at: float | None = None
        self._goodbye: Goodbye | None = None
        self.messages_in = 0
        self.messages_out = 0

    def __repr__(self) -> str:
        peer = self.their_hello.peer_id[:7] if self.their_hello else "?"
        return f"<PeerSession {peer} {self.state.name} in={self.messages_in} out={self.messages_out}>"

    @property
    def their_vector(self) -> Vector | None:
        return self._their_vector

    # -- sending -------------------------------------------------------------------------------

    def send(self, message: PeerMessage, *, now: float = 0.0) -> bytes:
        """Return the bytes for ``message``; raises LocalProtocolError if it is not legal now."""
        self._check_usable()
        if isinstance(message, Hello):
            if self._sent_hello:
                raise LocalProtocolError("hello already sent")
        elif not self._sent_hello:
            raise LocalProtocolError("the first message must be our hello")
        elif isinstance(message, (Vector, Members, Presence, Report, Addresses, Seen, Neighbours, *CONTROL_MESSAGES)):
            pass
        elif isinstance(message, _AFTER_VECTORS):
            if self._their_vector is None or not self._sent_vector:
                raise LocalProtocolError(f"{type(message).__name__} before the vectors were exchanged")
        elif not isinstance(message, Goodbye):
            raise LocalProtocolError(f"not a peer message: {message!r}")
        data = encode_frame(to_wire(message), max_frame_bytes=self._max_frame_bytes)
        # Commit the transition only once encoding succeeded (state unchanged on error).
        if isinstance(message, Hello):
            self._sent_hello = True
        elif isinstance(message, Vector):
            self._sent_vector = True
            self._last_vector_at = now
        elif isinstance(message, Goodbye):
            self.state = SessionState.CLOSED
        self._maybe_syncing()
        self.messages_out += 1
        return data

    def get_timer(self) -> float | None:
        """When the next anti-entropy vector is due (None until the first one was sent)."""
        if self.state is not SessionState.SYNCING or self._last_vector_at is None:
            return None
        return self._last_vector_at + ANTI_ENTROPY_S

    # -- receiving -----------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray) -> None:
        self._check_usable(allow_closed=True)
        self._buffer.feed(data)

    def next_event(self) -> PeerMessage | ConnectionClosed | Any:
        """The next message from the peer, ``ConnectionClosed``, or ``NEED_DATA``.

        Raises:
            RemoteProtocolError: the peer broke a rule (the session is now ``ERROR``).
        """
        self._check_usable(allow_closed=True)
        while True:
            try:
                raw = self._buffer.next_frame()
            except ProtocolError as exc:
                self.state = SessionState.ERROR
                raise RemoteProtocolError(exc.message) from exc
            if raw is NEED_DATA:
                if self._buffer_at_eof():
                    self.state = SessionState.CLOSED
                    return ConnectionClosed(self._goodbye)
                return NEED_DATA
            try:
                message = from_wire(raw)
                if message is None:
                    continue  # an unknown message type from a newer peer: skip it
                message = self._accept(message)
            except ProtocolError:
                self.state = SessionState.ERROR
                raise
            self.messages_in += 1
            return message

    def _accept(self, message: PeerMessage | EnrolmentMessage) -> PeerMessage | EnrolmentMessage:
        """Check ``message`` against the session's order; returns what to hand on (a delta vector
        comes out merged into the whole vector it updates)."""
        if self.state is SessionState.CLOSED:
            raise RemoteProtocolError("message after goodbye")
        if self.their_hello is None:
            if not isinstance(message, Hello):
                raise RemoteProtocolError(f"expected hello, got {type(message).__name__}")
            if message.palace_id != self.our_hello.palace_id:
                raise RemoteProtocolError("peer belongs to another palace")
            if message.peer_id == self.our_hello.peer_id:
                raise RemoteProtocolError("connected to ourselves")
            self.their_hello = message
            self._maybe_syncing()
            return message
        if isinstance(message, Hello):
            raise RemoteProtocolError("second hello")
        if isinstance(message, Vector):
            if message.delta:
                message = self._merged(message)
            self._their_vector = message
        elif isinstance(message, (Enrol, Enrolled)):
            raise RemoteProtocolError("enrolment messages are not part of a replication session")
        elif isinstance(message, _AFTER_VECTORS):
            if self._their_vector is None:
                raise RemoteProtocolError(f"{type(message).__name__} before the peer's vector")
        elif isinstance(message, Goodbye):
            self._goodbye = message
            self.state = SessionState.CLOSED
        return message

    def _merged(self, delta: Vector) -> Vector:
        """The peer's whole vector once ``delta`` is applied to the one it updates."""
        if self._their_vector is None:
            raise RemoteProtocolError("a delta vector before the whole one it updates")
        entries = {e.origin: e for e in self._their_vector.entries}
        entries.update((e.origin, e) for e in delta.entries)
        if len(entries) > MAX_VECTOR_ENTRIES:
            raise RemoteProtocolError(f"the peer's vector, deltas merged, names more than {MAX_VECTOR_ENTRIES} origins")
        return Vector(tuple(entries.values()))

    # -- helpers -------------------------------------------------------------------------------

    def _maybe_syncing(self) -> None:
        if self.state is SessionState.HANDSHAKE and self._sent_hello and self.their_hello is not None:
            self.state = SessionState.SYNCING

    def _buffer_at_eof(self) -> bool:
        return self._buffer.eof and self._buffer.buffered == 0

    def _check_usable(self, *, allow_closed: bool = False) -> None:
        if self.state is SessionState.ERROR:
            raise LocalProtocolError("the session failed; open a new one")
        if self.state is SessionState.CLOSED and not allow_closed:
            raise LocalProtocolError("the session is closed")
