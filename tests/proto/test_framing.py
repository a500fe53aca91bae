"""Tests for palace_proto.framing: length-prefixed msgpack frames and the sans-IO FrameBuffer."""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palace_proto.errors import FrameTooLarge, LocalProtocolError, RemoteProtocolError
from palace_proto.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    HEADER,
    NEED_DATA,
    FrameBuffer,
    decode_payload,
    encode_frame,
)

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

MESSAGES = [
    {"id": 1, "op": "hello", "args": {"version": 1}},
    {"id": 2, "ok": True, "result": None},
    {"id": 3, "ok": False, "error": {"code": "not_found", "message": "no such event"}},
    {"id": 4, "push": "batch", "events": [{"body": "héllo wörld ✓", "blob": b"\x00\xff"}]},
    [],
    "",
    0,
]


def drain(buf: FrameBuffer) -> list:
    """Every message the buffer can produce right now."""
    out = []
    while (msg := buf.next_frame()) is not NEED_DATA:
        out.append(msg)
    return out


# Msgpack values that survive a round trip unchanged: lists (not tuples), str keys (strict_map_key).
msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=50)
    | st.binary(max_size=50),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=20,
)


def test_need_data_repr_is_readable():
    assert repr(NEED_DATA) == "NEED_DATA"


def test_frame_is_big_endian_length_then_msgpack_payload():
    frame = encode_frame({"a": 1})
    payload = msgpack.packb({"a": 1}, use_bin_type=True)
    assert frame == struct.pack(">I", len(payload)) + payload
    assert HEADER.size == 4


@pytest.mark.parametrize("message", MESSAGES)
def test_single_frame_round_trips(message):
    buf = FrameBuffer()
    buf.feed(encode_frame(message))
    assert buf.next_frame() == message
    assert buf.next_frame() is NEED_DATA
    assert buf.buffered == 0


def test_bytes_and_str_stay_distinct_through_a_frame():
    """Guards use_bin_type: bytes must not come back as str (artifact payloads are bytes)."""
    buf = FrameBuffer()
    buf.feed(encode_frame({"data": b"abc", "text": "abc"}))
    msg = buf.next_frame()
    assert type(msg["data"]) is bytes
    assert type(msg["text"]) is str


def test_lone_surrogates_survive_a_round_trip():
    """Guards surrogatepass: a body with a lone surrogate must not kill the connection."""
    buf = FrameBuffer()
    buf.feed(encode_frame({"body": "a\ud800b"}))
    assert buf.next_frame() == {"body": "a\ud800b"}


def test_several_frames_in_one_feed_come_out_in_order():
    buf = FrameBuffer()
    buf.feed(b"".join(encode_frame(m) for m in MESSAGES))
    assert drain(buf) == MESSAGES


def test_stream_split_at_every_byte_boundary_yields_same_messages():
    """Guards the never-half-consume rule: any split point of a stream gives the same messages."""
    stream = b"".join(encode_frame(m) for m in MESSAGES)
    for cut in range(len(stream) + 1):
        buf = FrameBuffer()
        got = []
        for part in (stream[:cut], stream[cut:]):
            if part:  # b"" would mean EOF
                buf.feed(part)
            got += drain(buf)
        buf.feed(b"")
        got += drain(buf)
        assert got == MESSAGES, f"split at byte {cut}"
        assert buf.buffered == 0


def test_stream_fed_one_byte_at_a_time_yields_same_messages():
    stream = b"".join(encode_frame(m) for m in MESSAGES)
    buf = FrameBuffer()
    got = []
    for i in range(len(stream)):
        buf.feed(stream[i : i + 1])
        got += drain(buf)
    assert got == MESSAGES


@FUZZ
@given(messages=st.lists(msgpack_values, max_size=6), data=st.data())
def test_random_messages_with_random_chunking_round_trip(messages, data):
    stream = b"".join(encode_frame(m) for m in messages)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    buf = FrameBuffer()
    got = []
    start = 0
    for end in [*cuts, len(stream)]:
        if end > start:
            buf.feed(stream[start:end])
            start = end
        got += drain(buf)
    buf.feed(b"")
    got += drain(buf)
    assert got == messages
    assert buf.buffered == 0


@FUZZ
@given(
    chunks=st.lists(
        st.one_of(
            st.binary(max_size=64),
            # A plausible header followed by arbitrary payload bytes, so decoding is exercised too.
            st.binary(max_size=40).map(lambda p: HEADER.pack(len(p)) + p),
            st.binary(max_size=40).map(lambda p: HEADER.pack(len(p) + 3) + p),
        ),
        max_size=8,
    ),
    max_frame_bytes=st.sampled_from([0, 8, 64, DEFAULT_MAX_FRAME_BYTES]),
    eof=st.booleans(),
)
def test_arbitrary_bytes_only_yield_messages_need_data_or_protocol_errors(chunks, max_frame_bytes, eof):
    """Guards the receive path: garbage from a peer never raises anything but our protocol errors,
    and a stream that ends is judged at its end: nothing left over is NEED_DATA, half a frame is
    an error (never silently dropped)."""
    buf = FrameBuffer(max_frame_bytes)
    try:
        for chunk in chunks:
            if chunk:
                buf.feed(chunk)
            drain(buf)
    except (FrameTooLarge, RemoteProtocolError):
        return  # the stream is out of sync: the caller closes the connection (what the daemon does)
    assert buf.next_frame() is NEED_DATA  # drained: a complete frame would have come out
    if not eof:
        return
    buf.feed(b"")
    if buf.buffered:
        with pytest.raises(RemoteProtocolError, match="in the middle of a frame"):
            buf.next_frame()
    else:
        assert buf.next_frame() is NEED_DATA


def test_oversized_header_raises_before_the_payload_arrives():
    """Guards MaxMessageLen: the limit is checked on the header alone, nothing is buffered first."""
    buf = FrameBuffer(max_frame_bytes=100)
    buf.feed(HEADER.pack(101))
    with pytest.raises(FrameTooLarge, match="101 bytes exceeds the 100-byte limit") as info:
        buf.next_frame()
    assert info.value.code == "frame_too_large"
    assert isinstance(info.value, RemoteProtocolError)


def test_default_limit_refuses_a_header_just_above_it():
    buf = FrameBuffer()
    buf.feed(HEADER.pack(DEFAULT_MAX_FRAME_BYTES + 1))
    with pytest.raises(FrameTooLarge):
        buf.next_frame()


def test_frame_exactly_at_the_limit_is_accepted():
    message = "x" * 10
    frame = encode_frame(message)
    limit = len(frame) - HEADER.size
    buf = FrameBuffer(max_frame_bytes=limit)
    buf.feed(frame)
    assert buf.next_frame() == message
    buf = FrameBuffer(max_frame_bytes=limit - 1)
    buf.feed(frame)
    with pytest.raises(FrameTooLarge):
        buf.next_frame()


@pytest.mark.parametrize("partial", [b"\x00", b"\x00\x00", b"\x00\x00\x00"])
def test_eof_mid_header_raises_remote_protocol_error(partial):
    buf = FrameBuffer()
    buf.feed(partial)
    assert buf.next_frame() is NEED_DATA
    buf.feed(b"")
    with pytest.raises(RemoteProtocolError, match="middle of a frame header"):
        buf.next_frame()


def test_eof_mid_payload_raises_remote_protocol_error():
    frame = encode_frame({"body": "hello"})
    buf = FrameBuffer()
    buf.feed(frame[:-1])
    assert buf.next_frame() is NEED_DATA
    buf.feed(b"")
    with pytest.raises(RemoteProtocolError, match=r"middle of a frame$"):
        buf.next_frame()


def test_eof_after_complete_frames_is_clean():
    buf = FrameBuffer()
    buf.feed(encode_frame(1) + encode_frame(2))
    buf.feed(b"")
    assert drain(buf) == [1, 2]
    assert buf.next_frame() is NEED_DATA


def test_eof_on_empty_buffer_is_need_data():
    buf = FrameBuffer()
    buf.feed(b"")
    assert buf.next_frame() is NEED_DATA


def test_data_after_eof_is_a_local_protocol_error():
    buf = FrameBuffer()
    buf.feed(b"")
    buf.feed(b"")  # a second EOF is harmless
    with pytest.raises(LocalProtocolError, match="after EOF"):
        buf.feed(b"\x00")


def test_garbage_payload_raises_remote_protocol_error_and_consumes_the_frame():
    buf = FrameBuffer()
    buf.feed(HEADER.pack(1) + b"\xc1" + encode_frame("next"))  # 0xc1 is never valid msgpack
    with pytest.raises(RemoteProtocolError, match="not valid msgpack"):
        buf.next_frame()
    assert buf.next_frame() == "next"


@pytest.mark.parametrize(
    "payload",
    [
        b"",  # empty frame: no value at all
        b"\x01\x02",  # two values in one frame
        b"\x81\x01\x02",  # map with an int key (strict_map_key)
        b"\xdd\xff\xff\xff\xff",  # array of 4G entries announced in 5 bytes
        b"\x91" * 2000 + b"\x90",  # nesting deeper than the unpacker's stack
    ],
)
def test_decode_payload_maps_every_msgpack_failure_to_remote_protocol_error(payload):
    with pytest.raises(RemoteProtocolError):
        decode_payload(payload)


def test_repr_shows_buffered_bytes_and_eof():
    buf = FrameBuffer()
    buf.feed(b"abc")
    assert repr(buf) == "<FrameBuffer buffered=3 eof=False>"
    buf.feed(b"")
    assert repr(buf) == "<FrameBuffer buffered=3 eof=True>"


def test_encode_frame_refuses_an_oversized_message():
    with pytest.raises(LocalProtocolError, match="exceeds the 10-byte limit"):
        encode_frame("x" * 20, max_frame_bytes=10)


def test_encode_frame_accepts_a_message_exactly_at_the_limit():
    size = len(msgpack.packb("x" * 20))
    assert len(encode_frame("x" * 20, max_frame_bytes=size)) == HEADER.size + size


@pytest.mark.parametrize(
    "message",
    [object(), {"when": 1.5j}, 2**64, -(2**63) - 1, {"set": {1, 2}}],
    ids=["object", "complex", "too-big-int", "too-small-int", "set"],
)
def test_encode_frame_refuses_unencodable_messages_with_local_protocol_error(message):
    with pytest.raises(LocalProtocolError, match="not encodable"):
        encode_frame(message)


def test_encode_frame_refuses_nesting_deeper_than_msgpack_allows():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(LocalProtocolError, match="not encodable"):
        encode_frame(deep)
