"""The peer protocol core: message codec, replication rules, and the session state machine."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from palace_proto.bindings import OriginBinding
from palace_proto.broadcast import Graft, IHave, Prune
from palace_proto.envelope import GENESIS_HASH, seal_event
from palace_proto.errors import LocalProtocolError, RemoteProtocolError, SignatureError, VersionMismatch
from palace_proto.framing import NEED_DATA, encode_frame
from palace_proto.ids import fingerprint
from palace_proto.overlay import Disconnect, ForwardJoin, Join, Neighbor, NeighborReply, Shuffle, ShuffleReply
from palace_proto.peer import (
    ARTIFACT_CHUNK_BYTES,
    MAX_BINDINGS_PER_MESSAGE,
    MAX_NEIGHBOURS,
    PEER_PROTOCOL_VERSION,
    ArtifactChunk,
    ArtifactWant,
    Enrol,
    Enrolled,
    Events,
    Goodbye,
    Have,
    Hello,
    Neighbours,
    Presence,
    Report,
    Vector,
    VectorEntry,
    Want,
    event_from_wire,
    event_to_wire,
    format_peer_address,
    from_wire,
    gossip_name,
    parse_peer_address,
    presence_signing_bytes,
    report_signing_bytes,
    to_wire,
)
from palace_proto.reports import MAX_REPORT_BYTES
from palace_proto.session import ANTI_ENTROPY_S, ConnectionClosed, PeerSession, SessionState
from palace_proto.sync import (
    OriginHead,
    Verdict,
    batch_events,
    classify,
    plan_wants,
    vector_forks,
    verify_batch,
    verify_incoming,
)
from palace_proto.workers import MAX_ACTIVITY_CHARS, encode_activity

KEY = Ed25519PrivateKey.generate()
PUB = KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
OA, OB = "ori_" + "a" * 26, "ori_" + "b" * 26


def chain(n, origin=OA, body="b"):
    events, prev = [], GENESIS_HASH
    for seq in range(1, n + 1):
        ev = seal_event(KEY, origin=origin, origin_seq=seq, prev_hash=prev, created_at="2026-11-30T01:02:03.000004Z",
                        type="note", stream="s", room="r", from_agent="a", body=f"{body}{seq}")
        events.append(ev)
        prev = ev.event_hash
    return events


def hello(peer="peer-a", palace="pal_1"):
    return Hello(version=PEER_PROTOCOL_VERSION, palace_id=palace, peer_id=peer, name=peer, role="member", origin=OA,
                 origin_proof=b"n" * 16)


# -- codec ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("message", [
    hello(),
    Vector((VectorEntry(OA, 3, b"\x01" * 32), VectorEntry(OB, 0, GENESIS_HASH))),
    Want(OA, 7),
    Events(tuple(chain(3))),
    Goodbye("bad_request", "bye"),
    Have(((OA, 3), (OB, 9))),
    ArtifactWant("art_" + "0" * 32, 1024),
    ArtifactChunk("art_" + "0" * 32, 0, 3, "ab" * 32, "file", "alice", "2026-11-30T01:02:03Z", "{}", b"abc"),
    ArtifactChunk("art_" + "0" * 32, 0, -1, "", "", "", "", "{}", b""),
    Presence("PEER", "laptop", 17, (("claude", "to_agents=claude", "2026-11-30T01:02:03Z"),), b"s" * 64),
    Report("PEER", "laptop", 17, b'{"v":1}', b"s" * 64),
    Report("PEER", "laptop", 2**62, b"x" * MAX_REPORT_BYTES, b"s" * 64),
    Enrol("inv", b"k" * 32, "laptop", b"p" * 32),
    Enrolled("home lab", b"-----CA-----", b"-----CERT-----"),
    Neighbours(()),
    Neighbours(("PEER-A", "PEER-B")),
])
def test_messages_round_trip(message):
    assert from_wire(to_wire(message)) == message


def test_events_travel_without_body_and_still_verify():
    """Redaction on the wire: the body can be stripped and the signature still holds."""
    (ev,) = chain(1)
    stripped = event_from_wire(event_to_wire(ev, with_body=False))
    assert stripped.body is None
    verify_incoming(stripped, PUB)


def test_unknown_message_types_are_skipped():
    assert from_wire({"t": "from-the-future", "x": 1}) is None


def test_other_protocol_version_is_a_version_mismatch():
    with pytest.raises(VersionMismatch):
        from_wire({**to_wire(hello()), "version": PEER_PROTOCOL_VERSION + 1})


@pytest.mark.parametrize("bad", [
    {"t": "want", "origin": "o", "after_seq": -1},
    {"t": "want", "origin": "o", "after_seq": True},
    {"t": "vector", "entries": [["o", 1, b"short"]]},
    {"t": "vector", "entries": [["o", 1, b"\0" * 32], ["o", 2, b"\0" * 32]]},
    {"t": "events", "events": [{"origin": "o"}]},
    {"t": "hello", "version": 1, "palace_id": "p", "peer_id": "x", "name": "n", "role": "admin"},
    {"t": 5},
    [1, 2],
    {"t": "have", "entries": [["o"]]},
    {"t": "artifact_chunk", "artifact_id": "a", "offset": 0, "size": -2, "sha256": "", "kind": "", "created_by": "",
     "created_at": "", "metadata_json": "{}", "data": b""},
    {"t": "artifact_chunk", "artifact_id": "a", "offset": 2, "size": 3, "sha256": "", "kind": "", "created_by": "",
     "created_at": "", "metadata_json": "{}", "data": b"xy"},
    {"t": "artifact_chunk", "artifact_id": "a", "offset": 0, "size": ARTIFACT_CHUNK_BYTES + 1, "sha256": "",
     "kind": "", "created_by": "", "created_at": "", "metadata_json": "{}", "data": b"x" * (ARTIFACT_CHUNK_BYTES + 1)},
    {"t": "presence", "peer_id": "p", "name": "n", "serial": 1, "watchers": [["a", "f"]], "signature": b"s" * 64},
    {"t": "report", "peer_id": "p", "name": "n", "serial": 1, "report": "{}", "signature": b"s" * 64},
    {"t": "enrol", "invite_id": "i", "public_key": b"short", "name": "n", "proof": b"p" * 32},
    {"t": "neighbours"},
    {"t": "neighbours", "peer_ids": "PEER"},
    {"t": "neighbours", "peer_ids": [5]},
    {"t": "neighbours", "peer_ids": [""]},
    {"t": "neighbours", "peer_ids": ["x" * 257]},
    {"t": "neighbours", "peer_ids": ["P"] * (MAX_NEIGHBOURS + 1)},
])
def test_malformed_known_messages_are_remote_errors(bad):
    with pytest.raises(RemoteProtocolError):
        from_wire(bad)


@pytest.mark.parametrize("bad", [
    {"t": "want", "origin": OA, "after_seq": 2**63},
    {"t": "want", "origin": OA, "after_seq": 2**64 - 1},
    {"t": "vector", "entries": [[OA, 2**63 - 1, b"\0" * 32]]},
    {"t": "have", "entries": [[OA, 2**62 + 1]]},
    {"t": "presence", "peer_id": "p", "name": "n", "serial": 2**64 - 1, "watchers": [], "signature": b"s" * 64},
    {"t": "report", "peer_id": "p", "name": "n", "serial": 2**62 + 1, "report": b"{}", "signature": b"s" * 64},
    {"t": "artifact_chunk", "artifact_id": "a", "offset": 2**63, "size": -1, "sha256": "", "kind": "",
     "created_by": "", "created_at": "", "metadata_json": "{}", "data": b""},
])
def test_integers_beyond_what_sqlite_holds_are_refused_at_the_codec(bad):
    """Regression (issue 11, finding 6): an out-of-range integer from a peer reached the store and
    raised OverflowError there; the codec now refuses anything above 2**62."""
    with pytest.raises(RemoteProtocolError, match="2\\*\\*62"):
        from_wire(bad)


def test_origin_ids_in_peer_statements_must_be_well_formed():
    for bad in ({"t": "want", "origin": "ori_a", "after_seq": 0},
                {"t": "have", "entries": [["junk", 1]]},
                {"t": "vector", "entries": [["x" * 300, 1, b"\0" * 32]]},
                {"t": "members", "entries": [["ori_a", b"cert", b"proof"]]}):
        with pytest.raises(RemoteProtocolError):
            from_wire(bad)


def test_members_entries_carry_a_proof_and_come_in_chunks():
    entry = [OA, b"-----CERT-----", b"\x01" * 16]
    message = from_wire({"t": "members", "entries": [entry] * MAX_BINDINGS_PER_MESSAGE})
    assert message.entries[0] == OriginBinding(OA, b"-----CERT-----", b"\x01" * 16)
    with pytest.raises(RemoteProtocolError):
        from_wire({"t": "members", "entries": [entry] * (MAX_BINDINGS_PER_MESSAGE + 1)})
    with pytest.raises(RemoteProtocolError):
        from_wire({"t": "members", "entries": [[OA, b"-----CERT-----"]]})  # protocol 1's two-element entries
    with pytest.raises(RemoteProtocolError):
        from_wire({"t": "members", "entries": [[OA, b"-----CERT-----", b"x" * 65]]})


def test_a_protocol_1_hello_is_a_version_mismatch_with_advice():
    with pytest.raises(VersionMismatch, match="upgrade both"):
        from_wire({**to_wire(hello()), "version": 1})


# -- replication rules ---------------------------------------------------------------------------


def test_plan_wants_asks_only_where_the_peer_is_ahead():
    local = {"a": OriginHead(5, b"x" * 32), "b": OriginHead(9, b"y" * 32)}
    remote = Vector((VectorEntry("a", 7, b"z" * 32), VectorEntry("b", 9, b"y" * 32), VectorEntry("c", 2, b"w" * 32)))
    assert plan_wants(local, remote) == [Want("a", 5), Want("c", 0)]


def test_vector_forks_compare_hashes_at_the_same_seq():
    events = chain(4)
    local = {OA: OriginHead(4, events[3].event_hash)}
    by_seq = {e.origin_seq: e.event_hash for e in events}
    same = Vector((VectorEntry(OA, 2, events[1].event_hash),))
    forked = Vector((VectorEntry(OA, 2, b"\x09" * 32),))
    ahead = Vector((VectorEntry(OA, 9, b"\x09" * 32),))
    hash_at = lambda origin, seq: by_seq.get(seq)  # noqa: E731
    assert vector_forks(local, same, hash_at) == []
    assert vector_forks(local, forked, hash_at) == [OA]
    assert vector_forks(local, ahead, hash_at) == []


def test_classify_apply_duplicate_gap_fork():
    events = chain(3)
    other = chain(3, body="other")  # same origin and seqs, different content: a fork
    head1 = OriginHead(1, events[0].event_hash)
    assert classify(events[0], None) is Verdict.APPLY
    assert classify(events[1], None) is Verdict.GAP
    assert classify(events[1], head1) is Verdict.APPLY
    assert classify(events[2], head1) is Verdict.GAP
    assert classify(events[0], head1, stored_hash=events[0].event_hash) is Verdict.DUPLICATE
    assert classify(other[0], head1, stored_hash=events[0].event_hash) is Verdict.FORK
    assert classify(other[1], head1) is Verdict.FORK  # next seq, but it chains to another history


def test_verify_incoming_reports_every_failure_as_signature_error():
    (ev,) = chain(1)
    with pytest.raises(SignatureError):
        verify_incoming(dataclasses.replace(ev, stream="tampered"), PUB)
    with pytest.raises(SignatureError):
        verify_incoming(ev, b"short key")
    other = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    with pytest.raises(SignatureError):
        verify_incoming(ev, other)


def test_batches_are_bounded_by_count_and_bytes():
    events = chain(10)
    assert [len(b) for b in batch_events(events, lambda e: 100, max_count=4, max_bytes=10_000)] == [4, 4, 2]
    assert [len(b) for b in batch_events(events, lambda e: 100, max_count=100, max_bytes=250)] == [2] * 5
    assert [len(b) for b in batch_events(events[:2], lambda e: 10_000, max_count=100, max_bytes=250)] == [1, 1]
    assert batch_events([], lambda e: 1) == []


# -- the session state machine -------------------------------------------------------------------


def pair():
    return PeerSession(hello("peer-a")), PeerSession(hello("peer-b"))


def deliver(src_bytes, dst):
    dst.receive_data(src_bytes)
    out = []
    while (ev := dst.next_event()) is not NEED_DATA:
        out.append(ev)
    return out


def test_handshake_vectors_then_wants_and_events_both_ways():
    a, b = pair()
    assert deliver(a.send(a.our_hello), b) == [a.our_hello]
    assert deliver(b.send(b.our_hello), a) == [b.our_hello]
    assert a.state is b.state is SessionState.SYNCING
    va = Vector((VectorEntry(OA, 3, b"\x01" * 32),))
    vb = Vector(())
    assert deliver(a.send(va, now=100.0), b) == [va]
    assert deliver(b.send(vb, now=100.0), a) == [vb]
    assert a.get_timer() == 100.0 + ANTI_ENTROPY_S
    want = Want(OA, 0)
    assert deliver(b.send(want), a) == [want]
    batch = Events(tuple(chain(3)))
    assert deliver(a.send(batch), b) == [batch]
    assert repr(a).startswith("<PeerSession peer-b SYNCING")


def test_frames_split_at_every_byte_still_decode():
    a, b = pair()
    data = a.send(a.our_hello)
    for byte in data:
        b.receive_data(bytes([byte]))
    assert b.next_event() == a.our_hello


def test_local_misuse_raises_and_leaves_state_unchanged():
    a, _ = pair()
    with pytest.raises(LocalProtocolError):
        a.send(Vector(()))  # before our hello
    assert a.state is SessionState.HANDSHAKE
    a.send(a.our_hello)
    with pytest.raises(LocalProtocolError):
        a.send(a.our_hello)
    with pytest.raises(LocalProtocolError):
        a.send(Want("o", 0))  # before the vectors
    assert a.state is SessionState.HANDSHAKE


@pytest.mark.parametrize("first", [Vector(()), Want("o", 0), Goodbye("x", "y")])
def test_anything_before_the_peer_hello_is_a_remote_error(first):
    _, b = pair()
    b.receive_data(encode_frame(to_wire(first)))
    with pytest.raises(RemoteProtocolError):
        b.next_event()
    assert b.state is SessionState.ERROR
    with pytest.raises(LocalProtocolError):
        b.send(b.our_hello)


def test_other_palace_and_self_connections_are_refused():
    a = PeerSession(hello("peer-a", palace="pal_1"))
    a.receive_data(encode_frame(to_wire(hello("peer-x", palace="pal_2"))))
    with pytest.raises(RemoteProtocolError, match="another palace"):
        a.next_event()
    a2 = PeerSession(hello("peer-a"))
    a2.receive_data(encode_frame(to_wire(hello("peer-a"))))
    with pytest.raises(RemoteProtocolError, match="ourselves"):
        a2.next_event()


def test_events_before_the_peer_vector_are_refused():
    a, b = pair()
    deliver(a.send(a.our_hello), b)
    deliver(b.send(b.our_hello), a)
    b.receive_data(encode_frame(to_wire(Events(tuple(chain(1))))))
    with pytest.raises(RemoteProtocolError, match="before the peer's vector"):
        b.next_event()


def test_goodbye_and_eof_close_the_session():
    a, b = pair()
    deliver(a.send(a.our_hello), b)
    bye = Goodbye("shutting_down", "palaced is stopping")
    deliver(a.send(bye), b)
    assert a.state is SessionState.CLOSED and b.state is SessionState.CLOSED
    b.receive_data(b"")
    assert b.next_event() == ConnectionClosed(bye)
    with pytest.raises(LocalProtocolError):
        a.send(Vector(()))


def test_unknown_messages_are_skipped_in_a_live_session():
    a, b = pair()
    deliver(a.send(a.our_hello), b)
    b.receive_data(encode_frame({"t": "something-new"}) + a.send(Vector(())))
    assert b.next_event() == Vector(())


def test_enrolment_messages_never_belong_to_a_session():
    a, b = pair()
    deliver(a.send(a.our_hello), b)
    b.receive_data(encode_frame(to_wire(Enrol("inv", b"k" * 32, "n", b"p" * 32))))
    with pytest.raises(RemoteProtocolError, match="enrolment"):
        b.next_event()


def test_receipts_and_artifact_messages_wait_for_the_vectors_presence_does_not():
    a, b = pair()
    deliver(a.send(a.our_hello), b)
    deliver(b.send(b.our_hello), a)
    presence = Presence("peer-a", "a", 1, (), b"s" * 64)
    assert deliver(a.send(presence), b) == [presence]
    with pytest.raises(LocalProtocolError):
        a.send(Have((("o", 1),)))
    b.receive_data(encode_frame(to_wire(ArtifactWant("art_x", 0))))
    with pytest.raises(RemoteProtocolError, match="before the peer's vector"):
        b.next_event()


def test_neighbours_may_be_sent_before_the_vectors_but_not_before_the_hello():
    """A daemon says whom it hears first-hand as soon as a link is up (like gossip, it presupposes
    nothing about what the other holds)."""
    a, b = pair()
    with pytest.raises(LocalProtocolError):
        a.send(Neighbours(()))
    deliver(a.send(a.our_hello), b)
    deliver(b.send(b.our_hello), a)
    assert deliver(a.send(Neighbours(("peer-c",))), b) == [Neighbours(("peer-c",))]


def test_a_presence_watcher_may_carry_a_workers_activity_and_newer_fields():
    """Three elements, a fourth for a worker's activity, up to eight for a newer peer; each bounded."""
    base = {"t": "presence", "peer_id": "p", "name": "n", "serial": 1, "signature": b"s" * 64}
    activity = encode_activity({"runner": "claude", "concurrency": 1, "project": None, "tasks": []})
    for watchers in ([["a", "f", "s"]], [["a", "f", "s", activity]], [["a", "f", "s", activity, "x", "", "", ""]]):
        assert from_wire({**base, "watchers": watchers}).watchers == tuple(tuple(w) for w in watchers)
    for bad in ([["a", "f", "s", "x" * (MAX_ACTIVITY_CHARS + 1)]], [["a", "f", "s", 4]],
                [["a", "f", "s", "", "", "", "", "", ""]]):
        with pytest.raises(RemoteProtocolError, match="presence watcher"):
            from_wire({**base, "watchers": bad})


REPORT_WIRE = {"t": "report", "peer_id": "P", "name": "laptop", "serial": 5, "report": b'{"v":1}',
               "signature": b"s" * 64}


@pytest.mark.parametrize(("change", "field"), [
    ({"report": b"x" * (MAX_REPORT_BYTES + 1)}, "'report'"),
    ({"report": "{}"}, "'report'"),
    ({"report": None}, "'report'"),
    ({"signature": b"s" * 63}, "'signature'"),
    ({"signature": "s" * 64}, "'signature'"),
    ({"serial": -1}, "'serial'"),
    ({"serial": True}, "'serial'"),
    ({"peer_id": 5}, "'peer_id'"),
    ({"peer_id": "p" * 257}, "'peer_id'"),
    ({"name": None}, "'name'"),
    ({"name": "n" * 257}, "'name'"),
])
def test_a_report_of_the_wrong_shape_is_refused(change, field):
    """Every field checked, the content's size before anything reads it (its content is read by
    palace_proto.reports only once its signature verified)."""
    assert from_wire(REPORT_WIRE) == Report("P", "laptop", 5, b'{"v":1}', b"s" * 64)
    with pytest.raises(RemoteProtocolError, match=field):
        from_wire({**REPORT_WIRE, **change})
    without = {k: v for k, v in REPORT_WIRE.items() if k not in change}
    with pytest.raises(RemoteProtocolError):
        from_wire(without)


def test_a_report_may_be_sent_before_the_vectors_as_presence():
    a, b = pair()
    deliver(a.send(a.our_hello), b)
    deliver(b.send(b.our_hello), a)
    report = Report("peer-a", "a", 1, b"{}", b"s" * 64)
    assert deliver(a.send(report), b) == [report]


def test_report_signing_bytes_are_stable_and_cover_every_field():
    """The signed bytes are part of the protocol: a change here breaks every mixed-release palace."""
    assert report_signing_bytes("P", "n", 1, b"{}") == b"palace/report/v1\n" + bytes.fromhex("94a150a16e01c4027b7d")
    base = report_signing_bytes("P", "laptop", 5, b'{"v":1}')
    assert base != report_signing_bytes("P", "laptop", 6, b'{"v":1}')
    assert base != report_signing_bytes("P", "desk", 5, b'{"v":1}')
    assert base != report_signing_bytes("P", "laptop", 5, b'{"v":2}')
    assert base != report_signing_bytes("Q", "laptop", 5, b'{"v":1}')
    # Not a presence signature, whatever the fields: a signature of one kind never passes as the other.
    assert not base.startswith(b"palace/presence/")


def test_presence_signature_covers_every_field():
    watchers = (("claude", "to_agents=claude", "2026-11-30T01:02:03Z"),)
    base = presence_signing_bytes("P", "laptop", 5, watchers)
    assert base != presence_signing_bytes("P", "laptop", 6, watchers)
    assert base != presence_signing_bytes("P", "desk", 5, watchers)
    assert base != presence_signing_bytes("P", "laptop", 5, ())
    assert base != presence_signing_bytes("Q", "laptop", 5, watchers)


@pytest.mark.parametrize(("text", "expected"), [
    ("192.168.1.20:7437", ("192.168.1.20", 7437)),
    ("[fd00::1]:7", ("fd00::1", 7)),
    ("laptop.local:0", ("laptop.local", 0)),
])
def test_peer_addresses_parse_and_format(text, expected):
    assert parse_peer_address(text) == expected
    assert format_peer_address(*expected) == text


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty"), ("host", "no port"), ("host:x", "port must be"), ("host:70000", "port must be"),
    ("fd00::1:7", "brackets"), (":7437", "no host"), ("[fd00::1", "not an address"),
])
def test_bad_peer_addresses_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        parse_peer_address(text)


# -- batch verification (one signature per chained run) -------------------------------------------


def keys(origin=OA):
    return lambda o, seq: PUB if o == origin else None


def test_a_chained_run_is_authenticated_by_its_last_signature():
    events = chain(6)
    unsigned_middle = [dataclasses.replace(e, signature=bytes(64)) if 0 < i < 5 else e for i, e in enumerate(events)]
    # Only the head's signature is checked: the hash chain vouches for the rest.
    assert verify_batch(unsigned_middle, keys()) == [PUB] * 6


def test_a_bad_head_signature_falls_back_to_checking_each_event():
    events = chain(4)
    events[-1] = dataclasses.replace(events[-1], signature=bytes(64))
    assert verify_batch(events, keys()) == [PUB, PUB, PUB, None]


def test_a_substituted_event_breaks_the_run_and_is_refused():
    events = chain(5)
    intruder = Ed25519PrivateKey.generate()
    forged = seal_event(intruder, origin=OA, origin_seq=3, prev_hash=events[1].event_hash,
                        created_at=events[2].created_at, type="note", stream="s", room="r", from_agent="a", body="evil")
    batch = [*events[:2], forged, *events[3:]]
    # The run breaks at the intruder (its signature fails, each event is then checked alone); the
    # genuine events 4-5 name the real event 3 and form a run of their own.
    assert verify_batch(batch, keys()) == [PUB, PUB, None, PUB, PUB]


def test_altered_events_unknown_origins_and_stripped_bodies():
    events = chain(3)
    altered = dataclasses.replace(events[1], from_agent="impostor")  # its hash no longer matches
    assert verify_batch([events[0], altered, events[2]], keys()) == [PUB, None, PUB]
    assert verify_batch(chain(2, origin=OB), keys()) == [None, None]
    stripped = [dataclasses.replace(e, body=None) for e in events]
    assert verify_batch(stripped, keys()) == [PUB] * 3
    wrong_body = [events[0], dataclasses.replace(events[1], body="not the signed body"), events[2]]
    assert verify_batch(wrong_body, keys())[1] is None


def test_a_borrowed_hash_and_signature_authenticate_nothing():
    """Regression (issue 11, finding 1): an event claiming a genuine event's ``event_hash`` and
    ``signature`` but carrying other content is not verified by the genuine one's verification,
    however the two are placed in one batch."""
    genuine = chain(2)
    forged = dataclasses.replace(genuine[1], origin_seq=3, prev_hash=genuine[1].event_hash, body="forged",
                                 body_sha256=hashlib.sha256(b"forged").digest(), from_agent="mallory",
                                 created_at="2031-01-01T00:00:00.000000Z")
    for batch in ([*genuine, forged], [forged, *genuine], [genuine[0], forged, genuine[1]]):
        keys_by_position = verify_batch(batch, keys())
        assert keys_by_position[batch.index(forged)] is None
        assert [k for e, k in zip(batch, keys_by_position, strict=True) if e is not forged] == [PUB, PUB]
    with pytest.raises(SignatureError):
        verify_incoming(forged, PUB)


def test_events_with_unencodable_strings_fail_verification_cleanly():
    """A lone surrogate (which the msgpack decoder lets through) cannot be canonically encoded:
    verification says so with SignatureError, never UnicodeEncodeError."""
    (ev,) = chain(1)
    for field in ("stream", "body", "metadata_json"):
        bad = dataclasses.replace(ev, **{field: "x\ud800y"})
        with pytest.raises(SignatureError):
            verify_incoming(bad, PUB)
        assert verify_batch([bad], keys()) == [None]


def test_a_delta_vector_says_so_on_the_wire_and_a_whole_one_is_unchanged():
    entry = VectorEntry("ori_" + "a" * 26, 3, b"\x01" * 32)
    assert to_wire(Vector((entry,))) == {"t": "vector", "entries": [[entry.origin, 3, entry.head_hash]]}
    assert from_wire(to_wire(Vector((entry,), delta=True))) == Vector((entry,), delta=True)
    with pytest.raises(RemoteProtocolError, match="'delta' must be true or false"):
        from_wire({"t": "vector", "entries": [], "delta": 1})


FINGERPRINT = fingerprint(b"k" * 32)
CONTROL = [Join(), ForwardJoin("peer-a", 6), Neighbor(True), NeighborReply(False), Disconnect(),
           Shuffle("peer-b", 5, ("peer-b", "peer-c")), ShuffleReply(("peer-d",)), IHave((("ori_" + "a" * 26, 3),)),
           Graft("ori_" + "b" * 26, 1), Prune(), Prune(gossip=True), Graft(gossip_name("p", FINGERPRINT), 7),
           IHave(((gossip_name("a", FINGERPRINT), 2),))]



@pytest.mark.parametrize("message", CONTROL, ids=lambda m: type(m).__name__)
def test_the_views_and_the_trees_messages_round_trip(message):
    assert from_wire(to_wire(message)) == message


@pytest.mark.parametrize(("wire", "error"), [
    ({"t": "forward_join", "peer": "p", "ttl": 1 << 40}, "'ttl' must be an integer from 0 to 255"),
    ({"t": "forward_join", "peer": 7, "ttl": 1}, "peer"),
    ({"t": "neighbor", "high": 1}, "'high' must be true or false"),
    ({"t": "neighbor_reply"}, "'accepted' must be true or false"),
    ({"t": "shuffle", "origin": "o", "ttl": 2, "peers": ["p"] * 9}, "at most 8 peer ids"),
    ({"t": "shuffle_reply", "peers": [""]}, "at most 8 peer ids"),
    ({"t": "ihave", "keys": [["ori_" + "a" * 26, 1]] * 257}, "at most 256"),
    ({"t": "ihave", "keys": [["not an origin", 1]]}, "origin"),
    ({"t": "ihave", "keys": [["p:not a peer id", 1]]}, "gossip record"),
    ({"t": "ihave", "keys": [["p:" + "A" * 17, 1]]}, "gossip record"),
    ({"t": "graft", "origin": "r:bogus", "seq": 1}, "gossip record"),
    ({"t": "prune", "gossip": "yes"}, "'gossip' must be true or false"),
    ({"t": "ihave", "keys": [["ori_" + "a" * 26, 0]]}, "at least 1"),
    ({"t": "graft", "origin": "ori_" + "a" * 26, "seq": -1}, "seq"),
])
def test_malformed_view_and_tree_messages_are_protocol_errors(wire, error):
    with pytest.raises(RemoteProtocolError, match=error):
        from_wire(wire)
