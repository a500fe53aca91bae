"""Length-prefixed msgpack frames, with the size limit checked before any decoding.

Owns: the byte format shared by the local Unix-socket API (and, later, the peer protocol):

    frame = length:u32 big-endian ‖ payload:msgpack (exactly `length` bytes)

``FrameBuffer`` is a sans-IO receive buffer in the wsproto style: ``feed()`` only appends bytes,
``next_frame()`` returns one decoded message or ``NEED_DATA`` and never half-consumes a frame (the
header is read without consuming until the whole frame is present). A header announcing more than
``max_frame_bytes`` raises ``FrameTooLarge`` at once, before the payload arrives, so a hostile or
broken client cannot make the daemon buffer or decode an oversized message (Syncthing's
MaxMessageLen). Must not import trio, apsw or anything that does IO.
"""

from __future__ import annotations

import struct
from typing import Any, Final

import msgpack

from .errors import FrameTooLarge, LocalProtocolError, RemoteProtocolError

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "HEADER", "NEED_DATA", "FrameBuffer", "decode_payload", "encode_frame"]

HEADER: Final = struct.Struct(">I")

# Why 80 MiB: the largest legitimate local message is an artifact put at the default 64 MiB
# artifact limit plus its envelope; anything bigger is refused before it is buffered.
DEFAULT_MAX_FRAME_BYTES: Final = 80 * 1024 * 1024


class _NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


#: Sentinel returned by ``FrameBuffer.next_frame`` when the buffer holds no complete frame.
NEED_DATA: Final = _NeedData()


def encode_frame(message: Any, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """Encode one message as a frame.

    Raises:
        LocalProtocolError: the encoded message exceeds ``max_frame_bytes`` or is not encodable.
    """
    try:
        payload = msgpack.packb(message, use_bin_type=True, unicode_errors="surrogatepass")
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"message is not encodable as msgpack: {exc}") from exc
    if len(payload) > max_frame_bytes:
        raise LocalProtocolError(f"frame of {len(payload)} bytes exceeds the {max_frame_bytes}-byte limit")
    return HEADER.pack(len(payload)) + payload


def decode_payload(payload: bytes) -> Any:
    """Decode one frame payload; any malformed input becomes ``RemoteProtocolError``."""
    try:
        return msgpack.unpackb(payload, raw=False, unicode_errors="surrogatepass", strict_map_key=True)
    except Exception as exc:  # msgpack raises a zoo of types (ExtraData, FormatError, ValueError, ...)
        raise RemoteProtocolError(f"frame payload is not valid msgpack: {type(exc).__name__}") from exc


class FrameBuffer:
    """Receive buffer that splits a byte stream into decoded frames.

    Error handling: ``FrameTooLarge`` and ``RemoteProtocolError`` are raised by ``next_frame``;
    after either the stream is out of sync and the caller must close the connection.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._eof = False

    def __repr__(self) -> str:
        return f"<FrameBuffer buffered={len(self._buf)} eof={self._eof}>"

    def feed(self, data: bytes | bytearray) -> None:
        """Append received bytes; ``b""`` means the other side closed (EOF)."""
        if self._eof and data:
            raise LocalProtocolError("data fed after EOF")
        if not data:
            self._eof = True
            return
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def eof(self) -> bool:
        """True once ``feed(b"")`` reported that the other side closed."""
        return self._eof

    def next_frame(self) -> Any:
        """Return the next decoded message, or ``NEED_DATA``.

        Raises:
            FrameTooLarge: the next header announces more than ``max_frame_bytes``.
            RemoteProtocolError: the payload is not msgpack, or EOF arrived mid-frame.
        """
        if len(self._buf) < HEADER.size:
            if self._eof and self._buf:
                raise RemoteProtocolError("connection closed in the middle of a frame header")
            return NEED_DATA
        (length,) = HEADER.unpack_from(self._buf)
        if length > self.max_frame_bytes:
            raise FrameTooLarge(f"frame of {length} bytes exceeds the {self.max_frame_bytes}-byte limit")
        end = HEADER.size + length
        if len(self._buf) < end:
            if self._eof:
                raise RemoteProtocolError("connection closed in the middle of a frame")
            return NEED_DATA
        payload = bytes(self._buf[HEADER.size : end])
        del self._buf[:end]
        return decode_payload(payload)
