"""Unit tests of the synchronous store on real SQLite files (tmp_path)."""

from __future__ import annotations

import apsw
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.envelope import GENESIS_HASH, seal_event, verify_chain_link, verify_event
from palace_proto.errors import NotFound, ValidationError
from palace_proto.ids import origin_id_for_key, origin_id_from_random
from palace_proto.validation import AppendRequest, Limits, ListQuery
from palaced.features import STORE_PARTS
from palaced.store import Store, StoreError, append_event, put_artifact, redact

LIMITS = Limits()


def req(**fields):
    base = {"type": "note", "stream": "s", "room": "r", "from_agent": "a"}
    return AppendRequest.from_wire({**base, **fields}, LIMITS)


@pytest.fixture
def key():
    return Ed25519PrivateKey.generate()


@pytest.fixture
def store(tmp_path, key):
    s = Store(tmp_path / "p.sqlite3", key, LIMITS, parts=STORE_PARTS)
    yield s
    s.close()


def append(store, **fields):
    result = store.write_batch([lambda ctx: append_event(ctx, req(**fields))])
    ok, value = result.outcomes[0]
    assert ok, value
    return value


def test_new_database_mints_an_origin_and_reopening_keeps_it(tmp_path, key):
    s = Store(tmp_path / "p.sqlite3", key, LIMITS, parts=STORE_PARTS)
    origin = s.origin_id
    assert s.minted_origin and origin.startswith("ori2_")  # key-derived (palace_proto.bindings)
    (nonce,) = [n for o, n in s.own_origins() if o == origin]
    assert origin_id_for_key(s.public_key, nonce) == origin
    s.close()
    again = Store(tmp_path / "p.sqlite3", key, LIMITS, parts=STORE_PARTS)
    assert again.origin_id == origin and not again.minted_origin
    again.close()


def test_a_legacy_origin_is_retired_on_upgrade_and_keeps_its_history(tmp_path, key):
    """A home made before protocol 2 writes a random (legacy) origin that another member could
    claim at a replica that never saw it: the first start of this release retires it and writes
    under a key-derived origin from then on; the legacy events stay, signed, as they were."""
    s = Store(tmp_path / "p.sqlite3", key, LIMITS, parts=STORE_PARTS)
    derived = s.origin_id
    s.close()
    legacy = origin_id_from_random(b"\x05" * 16)
    old = seal_event(key, origin=legacy, origin_seq=1, prev_hash=GENESIS_HASH, created_at="2026-01-02T03:04:05.000006Z",
                     type="note", stream="s", room="r", from_agent="a", body="written under the legacy origin")
    conn = apsw.Connection(str(tmp_path / "p.sqlite3"))
    with conn:  # what an older release left: a random origin of this key with an event, and no nonce
        conn.execute("UPDATE origins SET origin=?, max_seq=1, head_hash=? WHERE origin=?", (legacy, old.event_hash,
                                                                                           derived))
        conn.execute("UPDATE meta SET value=? WHERE key='origin'", (legacy,))
        conn.execute("DELETE FROM meta WHERE key LIKE 'origin_nonce/%'")
        conn.execute("INSERT INTO events (id, origin, origin_seq, prev_hash, event_hash, signature, type, stream, room, "
                     "from_agent, body, body_sha256, metadata, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                     (old.id, legacy, 1, old.prev_hash, old.event_hash, old.signature, "note", "s", "r", "a", old.body,
                      old.body_sha256, "{}", old.created_at))
    conn.close()
    upgraded = Store(tmp_path / "p.sqlite3", key, LIMITS, parts=STORE_PARTS)
    try:
        assert upgraded.minted_origin and upgraded.origin_id.startswith("ori2_") and upgraded.origin_id != legacy
        after = append(upgraded, body="written after the upgrade")
        assert after["origin"] == upgraded.origin_id and after["origin_seq"] == 1
        assert upgraded.version_vector() == {legacy: 1, upgraded.origin_id: 1}
        assert upgraded.get_event(old.id)["body"] == "written under the legacy origin"
        verify_event(upgraded.signed_events_of_origin(legacy, 0, 10)[0], upgraded.public_key)
        nonces = dict(upgraded.own_origins())
        assert nonces[legacy] is None and origin_id_for_key(upgraded.public_key, nonces[upgraded.origin_id]) == after[
            "origin"]
    finally:
        upgraded.close()


def test_recreated_database_never_reuses_an_origin(tmp_path, key):
    """Guards the SSB fork failure: a wiped database must not reissue (origin, seq) pairs."""
    first = Store(tmp_path / "a.sqlite3", key, LIMITS, parts=STORE_PARTS)
    second = Store(tmp_path / "b.sqlite3", key, LIMITS, parts=STORE_PARTS)
    assert first.origin_id != second.origin_id
    first.close()
    second.close()


def test_changed_identity_key_starts_a_new_origin_and_keeps_history(tmp_path, key):
    s = Store(tmp_path / "p.sqlite3", key, LIMITS, parts=STORE_PARTS)
    old_origin = s.origin_id
    append(s, body="before")
    s.close()
    s2 = Store(tmp_path / "p.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    assert s2.origin_id != old_origin
    event = append(s2, body="after")
    assert event["origin"] == s2.origin_id and event["origin_seq"] == 1
    assert s2.version_vector() == {old_origin: 1, s2.origin_id: 1}
    s2.close()


def _origins_row(path, origin):
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        max_seq, head_hash = conn.execute("SELECT max_seq, head_hash FROM origins WHERE origin=?", (origin,)).fetchone()
        return max_seq, bytes(head_hash)
    finally:
        conn.close()


def test_an_append_writes_no_origins_row_and_the_store_reads_its_head_from_the_chain_when_it_opens(tmp_path, key):
    """Guards schema 0015 (issue 45 §3): our appends leave our origin's row alone (a page less in
    every commit), and a store opening the file, after a clean close or a crash alike, takes the
    head from the last event of the chain: the next append neither reuses a number nor leaves a
    gap, and the vector names the true head."""
    path = tmp_path / "p.sqlite3"
    s = Store(path, key, LIMITS, parts=STORE_PARTS)
    origin = s.origin_id
    events = [append(s, body=f"e{i}") for i in range(3)]
    assert _origins_row(path, origin) == (0, GENESIS_HASH)  # not written by the appends
    # Schema 0015 recorded: an older palace refuses the file rather than take this row for the head.
    assert 15 in {v for (v,) in s.db.writer.execute("SELECT version FROM _migrations")}
    last = s.signed_events_of_origin(origin, 2, 1)[0]
    assert (s.chain.seq, s.chain.head_hash) == (3, last.event_hash) == (s.heads()[origin].max_seq,
                                                                         s.heads()[origin].head_hash)
    s.close()  # what a crash leaves too: closing writes nothing more
    again = Store(path, key, LIMITS, parts=STORE_PARTS)
    try:
        assert again.origin_id == origin and _origins_row(path, origin) == (3, last.event_hash)
        assert again.version_vector() == {origin: 3} and again.heads()[origin].head_hash == last.event_hash
        fourth = append(again, body="after reopening")
        assert fourth["origin_seq"] == 4 and fourth["id"] not in {e["id"] for e in events}
        verify_chain_link(last, again.signed_events_of_origin(origin, 3, 1)[0])
    finally:
        again.close()


def test_a_changed_key_retires_the_origin_with_the_head_of_its_chain(tmp_path, key):
    """Guards the origin a new key retires (schema 0015): its row is caught up from its chain
    before the new origin is minted, so the retired chain is offered to peers whole."""
    path = tmp_path / "p.sqlite3"
    s = Store(path, key, LIMITS, parts=STORE_PARTS)
    old_origin = s.origin_id
    for i in range(2):
        append(s, body=f"before {i}")
    s.close()
    s2 = Store(path, Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    try:
        assert s2.origin_id != old_origin and s2.version_vector() == {old_origin: 2}
        assert _origins_row(path, old_origin)[0] == 2
        append(s2, body="after")
        assert s2.version_vector() == {old_origin: 2, s2.origin_id: 1}
    finally:
        s2.close()


def test_the_registry_reloaded_while_running_counts_our_registrations_the_row_does_not_name(store):
    """Guards the registry's load (identity.py) under schema 0015: reloaded while the daemon runs
    (a palace founded or joined), it counts every registration of our chain, which our origin's
    row, not written by our appends, does not cover."""
    store.agents.enforcing = True  # as when the daemon belongs to a palace: a new agent is registered first
    append(store, from_agent="newcomer", body="registers newcomer here first")
    assert store.agents.holds("newcomer")
    ok, value = store.write_batch([store.agents.reload_ca]).outcomes[0]
    assert ok, value
    assert store.agents.holds("newcomer")


def test_database_from_a_newer_release_is_refused(tmp_path, key):
    s = Store(tmp_path / "p.sqlite3", key, LIMITS, parts=STORE_PARTS)
    s.db.writer.execute("INSERT INTO _migrations VALUES (9999, 'future.sql', 'x')")
    s.close()
    with pytest.raises(StoreError, match="newer palace"):
        Store(tmp_path / "p.sqlite3", key, LIMITS, parts=STORE_PARTS)


def test_batch_rolls_back_only_the_failing_job(store):
    result = store.write_batch([
        lambda ctx: append_event(ctx, req(body="one")),
        lambda ctx: append_event(ctx, req(body="bad", artifact_ids=["art_" + "0" * 32])),
        lambda ctx: append_event(ctx, req(body="three")),
    ])
    oks = [ok for ok, _ in result.outcomes]
    assert oks == [True, False, True]
    assert isinstance(result.outcomes[1][1], ValidationError)
    assert "references unknown artifact" in result.outcomes[1][1].message
    assert [e.signed.origin_seq for e in result.events] == [1, 2]
    assert store.version_vector() == {store.origin_id: 2}


def test_signed_events_verify_and_chain(store, key):
    for i in range(5):
        append(store, body=f"event {i}")
    events = store.signed_events_of_origin(store.origin_id, 0, 100)
    assert [e.origin_seq for e in events] == [1, 2, 3, 4, 5]
    previous = None
    for event in events:
        verify_event(event, store.public_key)
        verify_chain_link(previous, event)
        previous = event
    # the public id is the id derived from the signed hash
    assert store.get_event(events[2].id)["origin_seq"] == 3


def test_list_filters_and_cursors(store):
    ids = [append(store, to_agent=to, stream=st)["id"] for to, st in
           [("bob", "s1"), ("*", "s1"), ("carol", "s2"), (None, "s1"), ("bob", "s2")]]
    q = ListQuery.from_wire({"to_agents": ["bob"]})
    assert [e["id"] for e in store.list_events(q)] == [ids[0], ids[1], ids[4]]
    q = ListQuery.from_wire({"to_agents": ["bob"], "order": "desc", "limit": 2})
    assert [e["id"] for e in store.list_events(q)] == [ids[4], ids[1]]
    q = ListQuery.from_wire({"streams": ["s1"], "since_event_id": ids[0], "before_event_id": ids[3]})
    assert [e["id"] for e in store.list_events(q)] == [ids[1]]
    with pytest.raises(NotFound, match="since_event_id 'evt_nope' not found"):
        store.list_events(ListQuery.from_wire({"since_event_id": "evt_nope"}))


def test_artifacts_are_content_addressed(store):
    def put(content, kind="file", by="a"):
        result = store.write_batch([lambda ctx: put_artifact(ctx, kind=kind, created_by=by, content=content)])
        return result.outcomes[0][1]

    first = put(b"\x00\xffbytes")
    second = put(b"\x00\xffbytes", kind="log", by="b")
    assert first == second and store.counts()["artifacts"] == 1
    assert store.get_artifact(first["sha256"])["content"] == b"\x00\xffbytes"
    with pytest.raises(NotFound):
        store.get_artifact("art_" + "f" * 32)


def test_redaction_drops_body_bytes_but_keeps_the_signature_valid(tmp_path, store):
    secret = "SECRET-5d0c3b7a9e"
    event = append(store, body=f"token {secret}")
    store.write_batch([lambda ctx: redact(ctx, event["id"], "evt_test_redaction")])
    assert store.wal.checkpoint_after_redaction()
    shown = store.get_event(event["id"])
    assert shown["body"] == "" and shown["body_redacted"] is True and len(shown["body_sha256"]) == 64
    (signed,) = store.signed_events_of_origin(store.origin_id, 0, 10)
    assert signed.body is None
    verify_event(signed, store.public_key)
    for path in tmp_path.glob("p.sqlite3*"):
        assert secret.encode() not in path.read_bytes(), path


def test_created_at_stamps_are_utc_microseconds_and_follow_the_clock(tmp_path, key, monkeypatch):
    """``utc_now`` reuses the formatted second (issue 13): it must still be exactly the daemon's
    format, and change with the second."""
    import re
    import time as time_module

    from palace_proto.stamps import format_stamp
    from palaced.store import store as store_module

    stamp = store_module.utc_now()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z", stamp)
    for ns, expected in [(1_780_000_000_123_456_789, "2026-05-28T20:26:40.123456Z"),
                         (1_780_000_000_999_999_000, "2026-05-28T20:26:40.999999Z"),
                         (1_780_000_001_000_001_000, "2026-05-28T20:26:41.000001Z"),
                         (1_780_000_000_000_000_000, "2026-05-28T20:26:40.000000Z")]:
        monkeypatch.setattr(time_module, "time_ns", lambda ns=ns: ns)
        assert store_module.utc_now() == expected == format_stamp(ns // 1000 / 1_000_000)  # stamps' one format


def test_no_commit_checkpoints_and_a_copy_back_lets_the_wal_start_over(tmp_path, key):
    """Guards appends against paying for a checkpoint (issue 13): SQLite's automatic checkpoint
    ran inside the commit that crossed 1,000 (later 10,000) pages, tens of ms for that append.
    Commits now only count the WAL's pages; ``copy_back`` (a connection of its own, while the
    writer goes on) copies them, and the next commit starts the WAL over."""
    s = Store(tmp_path / "p.sqlite3", key, LIMITS, parts=STORE_PARTS)
    try:
        pages = []
        for k in range(300):
            s.write_batch([lambda ctx, k=k: append_event(ctx, req(body=f"{k} " + "x" * 8_000))])
            pages.append(s.wal.pages)
        assert pages[-1] > 1_000  # past SQLite's default threshold: nothing checkpointed on the way
        assert pages == sorted(pages)  # the WAL only grew: no commit started it over
        assert s.wal.copy_back() is True
        append(s, body="after the copy")
        assert 0 < s.wal.pages < 50  # the WAL started over from its beginning
        assert s.db.writer.execute("SELECT count(*) FROM events").fetchone() == (301,)
    finally:
        s.close()
