"""Applying events from peers: verified, idempotent, gap-aware, fork-refusing, redaction-preserving."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from palace_proto.envelope import seal_event, verify_chain_link, verify_event
from palace_proto.sync import verify_batch
from palace_proto.validation import AppendRequest, Limits
from palaced.features import STORE_PARTS
from palaced.store import Store, append_event, apply_remote, import_history, put_artifact, redact

LIMITS = Limits()


@pytest.fixture
def pair(tmp_path):
    a = Store(tmp_path / "a.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    b = Store(tmp_path / "b.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    yield a, b
    a.close()
    b.close()


def append(store, **fields):
    req = AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": "a", **fields}, LIMITS)
    ok, value = store.write_batch([lambda ctx: append_event(ctx, req)]).outcomes[0]
    assert ok, value
    return value


def keys_of(*stores):
    table = {s.origin_id: s.public_key for s in stores}
    return lambda origin, origin_seq: table.get(origin)


def apply(store, events, key_for):
    result = store.write_batch([lambda ctx: apply_remote(ctx, events, key_for, source="test")])
    ok, report = result.outcomes[0]
    assert ok, report
    return report, result.events


def test_events_replicate_with_new_local_seq_and_verify(pair):
    a, b = pair
    append(b, body="b's own event first")
    for i in range(3):
        append(a, body=f"a{i}")
    events = a.signed_events_of_origin(a.origin_id, 0, 10)
    report, published = apply(b, events, keys_of(a))
    assert [e.signed.body for e in report.applied] == ["a0", "a1", "a2"]
    assert [e.seq for e in published] == [2, 3, 4]  # arrival order on b
    assert b.version_vector() == {a.origin_id: 3, b.origin_id: 1}
    assert b.heads()[a.origin_id].head_hash == events[-1].event_hash
    replicated = b.signed_events_of_origin(a.origin_id, 0, 10)
    previous = None
    for ev in replicated:
        verify_event(ev, a.public_key)
        verify_chain_link(previous, ev)
        previous = ev
    assert [e.id for e in replicated] == [e.id for e in events]  # ids are the same on every replica


def test_applying_twice_is_idempotent_and_gaps_wait(pair):
    a, b = pair
    for i in range(4):
        append(a, body=f"a{i}")
    events = a.signed_events_of_origin(a.origin_id, 0, 10)
    report, _ = apply(b, [events[0], events[2]], keys_of(a))
    assert len(report.applied) == 1 and report.gaps == [events[2]]
    report, _ = apply(b, events, keys_of(a))
    assert len(report.applied) == 3 and report.duplicates == [events[0]]
    assert b.counts()["events"] == 4


def test_a_fork_is_recorded_and_never_applied(pair, tmp_path):
    a, b = pair
    append(a, body="original")
    (original,) = a.signed_events_of_origin(a.origin_id, 0, 10)
    # The same origin and seq, different content, signed by the same key: a restored backup or a copied key.
    forged = seal_event(a.chain.key, origin=a.origin_id, origin_seq=1, prev_hash=original.prev_hash,
                        created_at=original.created_at, type="note", stream="s", room="r", from_agent="a",
                        body="alternative history")
    apply(b, [original], keys_of(a))
    report, _ = apply(b, [forged], keys_of(a))
    assert report.forks == [forged] and not report.applied
    assert b.get_event(original.id)["body"] == "original"
    (fork,) = b.forks()
    assert fork["origin"] == a.origin_id and fork["origin_seq"] == 1
    assert fork["rejected_hash"] == forged.event_hash.hex() and fork["source"] == "test"


def test_forged_unknown_and_own_origin_events_are_rejected(pair):
    a, b = pair
    append(a, body="x")
    append(b, body="mine")
    (event,) = a.signed_events_of_origin(a.origin_id, 0, 10)
    tampered = dataclasses.replace(event, from_agent="impostor")
    report, _ = apply(b, [tampered], keys_of(a))
    assert report.rejected == [tampered]
    report, _ = apply(b, [event], lambda origin, seq: None)
    assert report.rejected == [event]
    (own,) = b.signed_events_of_origin(b.origin_id, 0, 10)
    altered_echo = dataclasses.replace(own, body="echo with another body")
    report, _ = apply(b, [own, altered_echo], keys_of(a, b))
    # Both claim an event hash we already hold: duplicates, ignored without verifying (nothing is
    # stored, so the altered body goes nowhere).
    assert report.duplicates == [own, altered_echo] and report.rejected == []
    assert b.signed_events_of_origin(b.origin_id, 0, 10)[0].body == "mine"
    # An altered event we do not hold yet is refused (its body no longer matches its hash).
    fresh = append(a, body="y")
    (event_2,) = a.signed_events_of_origin(a.origin_id, 1, 10)
    assert event_2.id == fresh["id"]
    report, _ = apply(b, [event, dataclasses.replace(event_2, body="altered")], keys_of(a))
    assert report.rejected == [dataclasses.replace(event_2, body="altered")] and len(report.applied) == 1
    # A validly signed event of our own origin that we never wrote: our key runs elsewhere.
    copy = seal_event(b.chain.key, origin=b.origin_id, origin_seq=1, prev_hash=own.prev_hash, created_at=own.created_at,
                      type="note", stream="s", room="r", from_agent="a", body="written by a copied home")
    report, _ = apply(b, [copy], keys_of(a))
    assert report.forks == [copy] and b.forks()[0]["origin"] == b.origin_id
    assert b.counts()["events"] == 2  # its own, and alpha's genuine first event


def test_redaction_replicates_and_wins_over_a_late_original(pair, tmp_path):
    a, b = pair
    secret = append(a, body="token SECRET-0f9e8d")
    ok, _redaction = a.write_batch([lambda ctx: (e := append_event(ctx, AppendRequest.from_wire(
        {"type": "event.redact", "stream": "s", "room": "r", "from_agent": "a", "metadata": {"redacts": secret["id"]}},
        LIMITS)), redact(ctx, secret["id"], e["id"]))[0]]).outcomes[0]
    assert ok
    events = a.signed_events_of_origin(a.origin_id, 0, 10)
    assert events[0].body is None  # redacted at the source
    # b receives the (still body-carrying) original from a slower peer after the redaction:
    original_with_body = dataclasses.replace(events[0], body="token SECRET-0f9e8d")
    report, _ = apply(b, [original_with_body, events[1]], keys_of(a))
    assert len(report.applied) == 2
    assert b.get_event(secret["id"])["body_redacted"] is True
    b.wal.checkpoint_after_redaction()
    for path in tmp_path.glob("b.sqlite3*"):
        assert b"SECRET-0f9e8d" not in path.read_bytes()


def test_events_wait_for_their_artifacts(pair):
    a, b = pair
    _ok, artifact = a.write_batch([lambda ctx: put_artifact(ctx, kind="file", created_by="a", content=b"\x00bytes")]).outcomes[0]
    append(a, body="with artifact", artifact_ids=[artifact["id"]])
    events = a.signed_events_of_origin(a.origin_id, 0, 10)
    report, _ = apply(b, events, keys_of(a))
    assert report.missing_artifacts == events and not report.applied
    b.write_batch([lambda ctx: put_artifact(ctx, kind="file", created_by="a", content=b"\x00bytes")])
    report, _ = apply(b, events, keys_of(a))
    assert len(report.applied) == 1 and b.get_event(events[0].id)["artifact_ids"] == [artifact["id"]]


def test_an_origin_never_changes_keys(pair, tmp_path):
    """Guards against a member signing events under someone else's origin id."""
    a, b = pair
    append(a, body="a1")
    append(a, body="a2")
    first, second = a.signed_events_of_origin(a.origin_id, 0, 10)
    apply(b, [first], keys_of(a))
    intruder = Ed25519PrivateKey.generate()
    forged = seal_event(intruder, origin=a.origin_id, origin_seq=2, prev_hash=first.event_hash,
                        created_at=second.created_at, type="note", stream="s", room="r", from_agent="a", body="x")
    intruder_key = intruder.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    report, _ = apply(b, [forged], lambda origin, seq: intruder_key)
    assert report.rejected == [forged] and b.version_vector()[a.origin_id] == 1


def _import(store, events, keys):
    ok, result = store.write_batch([lambda ctx: import_history(ctx, events, keys)]).outcomes[0]
    assert ok, result
    return result


def test_imported_history_stays_out_of_the_vector_and_joins_it_when_replication_reaches_it(pair):
    """Regression guard: events held as imported history must neither be offered to peers nor
    stall replication of the same origin later (a duplicate next in the chain moves the head)."""
    a, b = pair
    for i in range(4):
        append(a, body=f"a{i}")
    events = a.signed_events_of_origin(a.origin_id, 0, 10)
    result = _import(b, [events[1], events[2]], {a.origin_id: a.public_key})  # a gap: history may have them
    assert (result["imported"], result["refused"]) == (2, [])
    assert a.origin_id not in b.version_vector() and a.origin_id not in b.heads()
    assert _import(b, [events[1]], {a.origin_id: a.public_key})["duplicates"] == 1
    report, _ = apply(b, events, keys_of(a))
    assert [e.signed.body for e in report.applied] == ["a0", "a3"] and len(report.duplicates) == 2
    assert b.version_vector()[a.origin_id] == 4 and b.heads()[a.origin_id].head_hash == events[-1].event_hash


def test_import_refuses_own_origin_replicated_origins_wrong_keys_and_altered_events(pair):
    a, b = pair
    append(a, body="a0")
    append(b, body="b0")
    a_events = a.signed_events_of_origin(a.origin_id, 0, 10)
    b_events = b.signed_events_of_origin(b.origin_id, 0, 10)
    altered = dataclasses.replace(a_events[0], body="not what was signed")
    result = _import(b, [altered], {a.origin_id: a.public_key})
    assert result["imported"] == 0 and "does not verify" in result["refused"][0]["reason"]
    result = _import(b, [a_events[0]], {a.origin_id: b.public_key})
    assert "does not verify" in result["refused"][0]["reason"]
    assert _import(b, b_events, {b.origin_id: b.public_key})["duplicates"] == 1  # its own, already held
    append(a, body="a1")
    apply(b, a.signed_events_of_origin(a.origin_id, 0, 1), keys_of(a))  # a is now replicated on b
    result = _import(b, a.signed_events_of_origin(a.origin_id, 1, 10), {a.origin_id: a.public_key})
    assert "is replicated in this palace" in result["refused"][0]["reason"]


def apply_verified(store, events, key_for, **kwargs):
    """As replication applies a batch: signatures checked first (verify_batch), by position."""
    verified = verify_batch(events, key_for)
    result = store.write_batch([lambda ctx: apply_remote(ctx, events, key_for, source="test", verified_keys=verified,
                                                             **kwargs)])
    ok, report = result.outcomes[0]
    assert ok, report
    return report


def test_a_forged_event_cannot_borrow_a_genuine_events_verification(pair):
    """Regression (issue 11, finding 1): a member sent, in one batch, a genuine event E of origin X
    and a forged E' of origin X claiming E's event_hash and signature (its own content, the next
    origin_seq, X's head as prev_hash). Verification was looked up by the claimed hash, so E' was
    stored, published and relayed, and X's real next event then looked like a fork."""
    a, b = pair
    append(a, body="a1")
    append(a, body="a2")
    first, second = a.signed_events_of_origin(a.origin_id, 0, 10)
    forged = dataclasses.replace(second, origin_seq=3, prev_hash=second.event_hash, body="forged by mallory",
                                 body_sha256=hashlib.sha256(b"forged by mallory").digest(), from_agent="mallory",
                                 created_at="2031-01-01T00:00:00.000000Z")  # another id, so it is not a duplicate
    report = apply_verified(b, [first, second, forged], keys_of(a))
    assert [e.signed.body for e in report.applied] == ["a1", "a2"] and report.rejected == [forged]
    assert b.version_vector()[a.origin_id] == 2
    # The genuine third event then applies as the next one, not as a fork.
    append(a, body="a3")
    third = a.signed_events_of_origin(a.origin_id, 2, 10)
    report = apply_verified(b, third, keys_of(a))
    assert [e.signed.body for e in report.applied] == ["a3"] and not report.forks and b.forks() == []
    # Verification handed in for the wrong objects is never trusted: hashes are recomputed here.
    report = apply_verified(b, [forged], keys_of(a))
    assert report.rejected == [forged] or report.duplicates == [forged]
    swapped = b.write_batch([lambda ctx: apply_remote(ctx, [forged], keys_of(a), verified_keys=[a.public_key])])
    ok, swapped_report = swapped.outcomes[0]
    assert ok and swapped_report.rejected == [forged] and not swapped_report.applied


def test_an_authentic_event_that_breaks_a_rule_is_refused_alone_and_not_asked_for_again(pair):
    """Regression (issue 11, finding 9): events from peers skipped the rules local appends obey."""
    a, b = pair
    append(a, body="fine")
    (good,) = a.signed_events_of_origin(a.origin_id, 0, 10)
    bad = seal_event(a.chain.key, origin=a.origin_id, origin_seq=2, prev_hash=good.event_hash, created_at="last tuesday",
                     type="NOT A TYPE", stream="s", room="r", from_agent="a", body="x")
    report = apply_verified(b, [good, bad], keys_of(a))
    assert [e.signed.body for e in report.applied] == ["fine"]
    assert [(e, "type" in reason) for e, reason in report.refused] == [(bad, True)]
    assert b.refusals.next[a.origin_id][0] == 2
    assert b.counts()["events"] == 1


def test_a_redaction_is_honoured_only_from_the_targets_origin(pair, tmp_path):
    """Regression (issue 11, finding 5): an event.redact from any member purged any event."""
    a, b = pair
    c = Store(tmp_path / "c.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    try:
        secret = append(a, body="a's words")
        append(c, type="event.redact", metadata={"redacts": secret["id"]}, body="c tries")
        report = apply_verified(b, a.signed_events_of_origin(a.origin_id, 0, 10), keys_of(a, c))
        assert len(report.applied) == 1
        report = apply_verified(b, c.signed_events_of_origin(c.origin_id, 0, 10), keys_of(a, c))
        assert len(report.applied) == 1 and [t for _, t in report.redactions_refused] == [secret["id"]]
        assert b.get_event(secret["id"])["body"] == "a's words"
        # Before its target arrives, a foreign redaction is only a claim, judged on arrival.
        late = append(a, body="more of a's words")
        append(c, type="event.redact", metadata={"redacts": late["id"]}, body="c again")
        apply_verified(b, c.signed_events_of_origin(c.origin_id, 1, 10), keys_of(a, c))
        apply_verified(b, a.signed_events_of_origin(a.origin_id, 1, 10), keys_of(a, c))
        assert b.get_event(late["id"])["body"] == "more of a's words"
        # The author's own redaction is honoured, whichever arrives first.
        own = append(a, body="a's secret")
        append(a, type="event.redact", metadata={"redacts": own["id"]}, body="a redacts")
        redaction, target = a.signed_events_of_origin(a.origin_id, 3, 10)[0], a.signed_events_of_origin(
            a.origin_id, 2, 1)[0]
        apply_verified(b, [target, redaction], keys_of(a, c))
        assert b.get_event(own["id"])["body_redacted"] is True
    finally:
        c.close()


def test_history_joins_the_chain_only_when_the_stored_event_links(pair):
    """An arriving event only *claims* the hash of what we hold as history: the head moves over
    the stored event only if that event itself is the next link of the chain."""
    a, b = pair
    append(a, body="a0")
    append(a, body="a1")
    first, second = a.signed_events_of_origin(a.origin_id, 0, 10)
    # History for a's origin, signed by a's key, that does not follow a's first event (a fork
    # someone exported): held as history, never the next link of the replicated chain.
    stray = seal_event(a.chain.key, origin=a.origin_id, origin_seq=2, prev_hash=b"\x07" * 32,
                       created_at=second.created_at, type="note", stream="s", room="r", from_agent="a", body="stray")
    assert _import(b, [stray], {a.origin_id: a.public_key})["imported"] == 1
    apply_verified(b, [first], keys_of(a))
    claims = dataclasses.replace(second, event_hash=stray.event_hash)  # claims the history's hash
    report = apply_verified(b, [claims], keys_of(a))
    assert report.duplicates == [claims] and b.version_vector()[a.origin_id] == 1  # the head did not move


def heads_on_disk(store):
    """The version vector as the database file holds it, read by a connection of its own: the
    origins rows, and our own origin's head as its chain stands (its row is caught up only when
    the store opens: schema 0015)."""
    import apsw

    from palaced.store.origins import chain_tip, read_heads

    conn = apsw.Connection(str(store.path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        own = chain_tip(conn, store.origin_id)
        return read_heads(conn) | ({store.origin_id: own} if own is not None else {})
    finally:
        conn.close()


def test_the_heads_kept_in_memory_are_the_committed_ones(pair):
    """Guards issue 27's in-memory version vector: replication reads ``heads()`` without the
    database, so it must say what is committed — not what a rolled-back job or a failed batch
    applied — and the same again after the store is opened anew."""
    a, b = pair
    for i in range(3):
        append(a, body=f"a{i}")
    events = a.signed_events_of_origin(a.origin_id, 0, 10)

    def applies_then_fails(ctx):
        apply_remote(ctx, events, keys_of(a), source="test")
        raise ValueError("rolled back after applying")

    append(b, body="b1")
    outcomes = b.write_batch([applies_then_fails, lambda ctx: apply_remote(ctx, events[:1], keys_of(a),
                                                                               source="test")]).outcomes
    assert [ok for ok, _ in outcomes] == [False, True]
    assert b.heads() == heads_on_disk(b) and b.heads()[a.origin_id].max_seq == 1
    b.db.writer.set_commit_hook(lambda: True)  # the commit fails: nothing of the batch exists
    try:
        with pytest.raises(Exception, match="could not commit"):
            b.write_batch([lambda ctx: apply_remote(ctx, events[1:], keys_of(a), source="test")])
    finally:
        b.db.writer.set_commit_hook(None)
    assert b.heads() == heads_on_disk(b) and b.heads()[a.origin_id].max_seq == 1
    apply(b, events[1:], keys_of(a))
    append(b, body="b2")
    assert b.heads() == heads_on_disk(b)
    assert {o: h.max_seq for o, h in b.heads().items()} == {a.origin_id: 3, b.origin_id: 2} == b.version_vector()
    path, key = b.path, b.chain.key
    b.close()
    again = Store(path, key, LIMITS, parts=STORE_PARTS)
    try:
        assert again.heads() == heads_on_disk(again) == heads_on_disk(a) | {again.origin_id: again.heads()[again.origin_id]}
    finally:
        again.close()
