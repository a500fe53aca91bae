"""Property-based fuzzing of the peer codec and session (issue 11 §2, the pure half).

Whatever a peer sends, the codec answers with a message, None (an unknown type: skipped) or a
``ProtocolError`` — never another exception — and a session that got garbage goes to ERROR and
refuses further use, never a half-updated state. The live half (real daemons, real TLS) is
tests/e2e/test_peer_fuzz.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from palace_proto.errors import ProtocolError
from palace_proto.framing import NEED_DATA, encode_frame
from palace_proto.peer import PEER_PROTOCOL_VERSION, Hello, from_wire, to_wire
from palace_proto.session import ConnectionClosed, PeerSession, SessionState

TAGS = ["hello", "members", "vector", "want", "events", "goodbye", "have", "artifact_want", "artifact_chunk",
        "presence", "report", "neighbours", "enrol", "enrolled", "unknown-tag"]
FIELDS = ["version", "palace_id", "peer_id", "name", "role", "origin", "certificate", "origin_proof", "entries",
          "after_seq", "events", "code", "reason", "artifact_id", "offset", "size", "sha256", "kind", "created_by",
          "created_at", "metadata_json", "data", "serial", "watchers", "signature", "invite_id", "public_key",
          "proof", "palace_name", "ca_certificate", "origin_seq", "prev_hash", "event_hash", "body_sha256", "body",
          "artifact_ids", "type", "stream", "room", "from_agent", "report", "peer_ids"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1), st.floats(allow_nan=True),
    st.text(max_size=40), st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=3),
    st.binary(max_size=70), st.sampled_from(["ori_" + "a" * 26, "ori2_" + "b" * 26, "member", "observer"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.sampled_from(FIELDS), inner, max_size=6)), max_leaves=30)
messages = st.one_of(
    values,
    st.builds(lambda tag, body: {"t": tag, **body}, st.sampled_from(TAGS),
              st.dictionaries(st.sampled_from(FIELDS), values, max_size=10)),
)


@settings(max_examples=600, deadline=None)
@given(messages)
def test_the_codec_never_raises_anything_but_a_protocol_error(wire):
    try:
        message = from_wire(wire)
    except ProtocolError:
        return
    if message is not None:
        assert from_wire(to_wire(message)) == message  # whatever is accepted round-trips


def _session() -> PeerSession:
    hello = Hello(PEER_PROTOCOL_VERSION, "pal_1", "peer-a", "a", "member", origin="ori_" + "a" * 26,
                  origin_proof=b"n" * 16)
    return PeerSession(hello)


@settings(max_examples=250, deadline=None)
@given(st.lists(messages, max_size=6), st.binary(max_size=40))
def test_a_session_fed_anything_ends_in_a_message_a_close_or_error(wires, tail):
    session = _session()
    session.send(session.our_hello)
    data = b"".join(encode_frame(w, max_frame_bytes=1 << 30) for w in wires if _encodable(w)) + tail
    session.receive_data(data)
    session.receive_data(b"")
    for _ in range(len(wires) + 2):
        try:
            event = session.next_event()
        except ProtocolError:
            assert session.state is SessionState.ERROR
            return
        if event is NEED_DATA or isinstance(event, ConnectionClosed):
            return


def _encodable(wire) -> bool:
    try:
        encode_frame(wire, max_frame_bytes=1 << 30)
    except ProtocolError:
        return False
    return True
