"""One group commit, many jobs: a job that fails (a database error included) fails alone and the
others commit; a batch whose transaction SQLite rolled back fails every job and leaves the local
chain exactly at what is committed. Real apsw databases; a full database is made real with
``PRAGMA max_page_count`` (SQLite answers SQLITE_FULL, as on a full disk)."""

from __future__ import annotations

import apsw
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.envelope import GENESIS_HASH
from palace_proto.errors import ApiError, DiskFull
from palace_proto.validation import AppendRequest, Limits
from palaced.bus import EventBus
from palaced.features import STORE_PARTS
from palaced.store import Store, StoreError, append_event, import_history, put_artifact, redact
from palaced.store.origins import chain_tip

LIMITS = Limits()


def req(body: str) -> AppendRequest:
    return AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": "a", "body": body}, LIMITS)


def append(body: str):
    return lambda ctx: append_event(ctx, req(body))


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "p.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    yield store
    store.close()


def committed_chain(store: Store) -> list[tuple[int, str, bytes, bytes]]:
    """(origin_seq, body, prev_hash, event_hash) of our origin, read from the file by a new connection."""
    conn = apsw.Connection(str(store.path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [(s, b, bytes(p), bytes(h)) for s, b, p, h in conn.execute(
            "SELECT origin_seq, body, prev_hash, event_hash FROM events WHERE origin=? ORDER BY origin_seq",
            (store.origin_id,))]
    finally:
        conn.close()


def assert_chain_consistent(store: Store, bodies: list[str]) -> None:
    """The committed chain holds ``bodies`` at 1..n, each linked to the one before, and the
    writer's in-memory head and the head a store opening the file would read (its chain's last
    event: schema 0015) both say n and the last hash."""
    chain = committed_chain(store)
    assert [(s, b) for s, b, _, _ in chain] == list(enumerate(bodies, start=1))
    prev = GENESIS_HASH
    for _, _, prev_hash, event_hash in chain:
        assert prev_hash == prev
        prev = event_hash
    conn = apsw.Connection(str(store.path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        tip = chain_tip(conn, store.origin_id)
    finally:
        conn.close()
    assert (tip.max_seq, tip.head_hash) == (len(bodies), prev) if bodies else tip is None
    assert (store.chain.seq, store.chain.head_hash) == (len(bodies), prev)
    # The version vector kept in memory (issue 27) says the same as the file, rolled-back jobs and
    # failed commits left out.
    assert store.version_vector() == ({store.origin_id: len(bodies)} if bodies else {})
    assert not bodies or store.heads()[store.origin_id].head_hash == prev


def test_a_job_whose_database_error_leaves_the_transaction_usable_fails_alone(store):
    """Guards finding 7 of issue 11 (one bad write aborted the whole group commit): a job that
    appends and then breaks a constraint (an apsw error) is rolled back alone, with its event and
    its place in the chain; the jobs before and after it commit, chained to each other."""

    def append_then_break_a_constraint(ctx):
        append_event(ctx, req("rolled back"))
        ctx.conn.execute("INSERT INTO events (id) VALUES (NULL)")  # NOT NULL: apsw.ConstraintError

    result = store.write_batch([append("one"), append_then_break_a_constraint, append("two")])
    (ok1, first), (ok2, failure), (ok3, third) = result.outcomes
    assert ok1 and ok3 and not ok2
    assert isinstance(failure, ApiError) and failure.code == "internal"
    assert [e.public["id"] for e in result.events] == [first["id"], third["id"]]
    assert (first["origin_seq"], third["origin_seq"]) == (1, 2)
    assert_chain_consistent(store, ["one", "two"])


def test_sqlite_full_while_one_job_writes_fails_that_job_alone_as_disk_full(store):
    """Guards finding 7 of issue 11: SQLITE_FULL while one job writes its rows (here a big
    artifact that does not fit) fails that job with ``disk_full`` naming the database, not
    ``internal`` and not the whole batch; the small appends around it commit."""
    (pages,) = store.db.writer.execute("PRAGMA page_count").fetchone()
    store.db.writer.execute(f"PRAGMA max_page_count={pages + 64}")  # room for small rows, not for 1 MiB
    result = store.write_batch([append("before"),
                                lambda ctx: put_artifact(ctx, kind="file", created_by="a", content=b"x" * (1 << 20)),
                                append("after")])
    (ok1, _), (ok2, failure), (ok3, _) = result.outcomes
    assert ok1 and ok3 and not ok2
    assert isinstance(failure, DiskFull) and failure.code == "disk_full"
    assert str(store.path) in failure.message and "nothing was written" in failure.message
    assert_chain_consistent(store, ["before", "after"])


def test_a_job_after_which_sqlite_rolled_everything_back_fails_alone_and_the_others_run_again(store):
    """Guards finding 7 of issue 11: after some errors (SQLITE_FULL while spilling pages, an I/O
    error) SQLite rolls the whole transaction back by itself, taking the jobs before the failing one
    with it. The batch runs again without that job: it alone fails (``disk_full`` here), the others
    commit once, and the chain has neither a gap nor a number used twice."""
    assert store.write_batch([append("kept")]).outcomes[0][0]

    def full_disk_mid_statement(ctx):
        append_event(ctx, req("lost with the transaction"))
        ctx.conn.execute("ROLLBACK")  # what SQLite does itself after SQLITE_FULL mid-statement
        raise apsw.FullError("database or disk is full")

    def swallows_the_error(ctx):
        ctx.conn.execute("ROLLBACK")
        return "looked fine"

    result = store.write_batch([append("one"), full_disk_mid_statement, append("two"), swallows_the_error,
                                append("three")])
    oks = [ok for ok, _ in result.outcomes]
    assert oks == [True, False, True, False, True]
    assert isinstance(result.outcomes[1][1], DiskFull) and str(store.path) in result.outcomes[1][1].message
    assert result.outcomes[3][1].code == "internal"
    assert [e.signed.origin_seq for e in result.events] == [2, 3, 4]
    assert_chain_consistent(store, ["kept", "one", "two", "three"])


def test_a_failed_commit_fails_every_job_and_keeps_the_chain_at_what_is_committed(store):
    """Guards finding 7 of issue 11: when the COMMIT itself fails (on a full disk: SQLITE_FULL
    writing the WAL; here a commit hook refuses it) nothing of the batch exists, so every job
    fails (none acknowledged) and the next append takes the next committed number."""
    assert store.write_batch([append("kept")]).outcomes[0][0]
    store.db.writer.set_commit_hook(lambda: True)  # True: turn this commit into a rollback
    try:
        with pytest.raises(StoreError, match="could not commit"):
            store.write_batch([append("lost 1"), append("lost 2")])
    finally:
        store.db.writer.set_commit_hook(None)
    assert not store.db.writer.in_transaction
    assert_chain_consistent(store, ["kept"])
    assert store.write_batch([append("next")]).outcomes[0][1]["origin_seq"] == 2
    assert_chain_consistent(store, ["kept", "next"])


def test_a_failed_commit_leaves_no_transaction_open_for_the_next_batch(store):
    """Guards finding 7 of issue 11: a COMMIT that fails (SQLITE_FULL writing the WAL) leaves
    SQLite's transaction open; the next batch must not begin inside it (it would commit the
    failed batch's rows with its own, unacknowledged and out of the chain)."""
    store.db.writer.execute("BEGIN")
    store.db.writer.execute("INSERT INTO meta VALUES ('left-over', 'from a failed commit')")
    assert store.db.writer.in_transaction  # as a failed commit leaves it
    assert store.write_batch([append("fresh")]).outcomes[0][0]
    assert store.db.writer.execute("SELECT value FROM meta WHERE key='left-over'").fetchone() is None
    assert_chain_consistent(store, ["fresh"])


# -- what a batch committed, as records on the bus (issue 13, issue 27) ---------------------------


def _published(store, jobs, bus):
    """Run ``jobs`` as the daemon's writer does: a commit, then the bus (scrubbed, then published)."""
    result = store.write_batch(jobs)
    if result.purged:
        bus.scrub(result.purged)
    if result.events:
        bus.publish(result.events)
    return result


def test_committed_events_reach_the_bus_as_signed_exactly_as_stored(store):
    """Guards the push path that skips the read: what the bus hands replication is what the
    database holds, in chain order, and only what is committed."""
    bus = EventBus()
    result = _published(store, [append("one"), append("two"), append("three")], bus)
    kept = bus.signed_after(store.origin_id, 0, 10)
    assert kept == store.signed_events_of_origin(store.origin_id, 0, 10)
    assert [e.body for e in kept] == ["one", "two", "three"]
    assert [e.body for e in bus.signed_after(store.origin_id, 1, 1)] == ["two"]
    assert bus.signed_after(store.origin_id, 3, 10) is None
    assert bus.signed_after("ori2_" + "a" * 26, 0, 10) is None
    # One record per event: the writer's reply, the bus and the push share it.
    assert [r.public for r in result.events] == bus.events_after(0, 10)
    assert [o[1] for o in result.outcomes] == [r.public for r in result.events]
    assert all(o[1] is r.public for o, r in zip(result.outcomes, result.events, strict=True))


def test_a_job_that_fails_publishes_nothing_and_a_batch_that_fails_neither(store):
    """A job rolled back alone, or a whole batch that cannot commit, must never be pushed to a
    peer: it is not in the database."""
    bus = EventBus()

    def appends_then_fails(ctx):
        append_event(ctx, req("rolled back"))
        raise ApiError("no", code="bad_request")

    _published(store, [append("kept"), appends_then_fails], bus)
    assert [e.body for e in bus.signed_after(store.origin_id, 0, 10)] == ["kept"]
    store.db.writer.set_commit_hook(lambda: True)  # True: turn this commit into a rollback
    try:
        with pytest.raises(StoreError, match="could not commit"):
            _published(store, [append(f"lost {i}") for i in range(3)], bus)
    finally:
        store.db.writer.set_commit_hook(None)
    assert [e.body for e in bus.signed_after(store.origin_id, 0, 10)] == ["kept"]
    _published(store, [append("next")], bus)
    assert bus.signed_after(store.origin_id, 0, 10) == store.signed_events_of_origin(store.origin_id, 0, 10)
    assert [e.body for e in bus.signed_after(store.origin_id, 0, 10)] == ["kept", "next"]


def _redact(target_id):
    def job(ctx):
        event = append_event(ctx, AppendRequest.from_wire({"type": "event.redact", "stream": "s", "room": "r",
                                                    "from_agent": "a", "ack_of": target_id}, LIMITS))
        redact(ctx, target_id, event["id"])
    return job


def test_a_purged_body_leaves_the_one_record_everywhere(store):
    """Guards redaction: no body a redaction purged may be served from memory afterwards, not to
    a peer, not to a watcher, not through a view handed out before."""
    bus = EventBus()
    [(_, handed_out)] = _published(store, [append("secret")], bus).outcomes
    _published(store, [_redact(handed_out["id"])], bus)
    [secret, _] = bus.signed_after(store.origin_id, 0, 10)
    assert secret.body is None
    assert bus.signed_after(store.origin_id, 0, 10) == store.signed_events_of_origin(store.origin_id, 0, 10)
    [view, _] = bus.events_after(0, 10)
    assert view == store.get_event(handed_out["id"]) and view["body_redacted"] is True
    assert handed_out["body"] == ""


def test_a_body_purged_in_the_batch_that_stored_it_is_never_published(store):
    bus = EventBus()
    secret = {}

    def append_secret(ctx):
        secret.update(append_event(ctx, req("secret in the same batch")))

    _published(store, [append_secret, lambda ctx: _redact(secret["id"])(ctx)], bus)
    assert [e.body for e in bus.signed_after(store.origin_id, 0, 10)] == [None, ""]
    assert bus.events_after(0, 10)[0] == store.get_event(secret["id"])


def test_the_bus_keeps_a_bounded_ring_of_records(store):
    bus = EventBus(ring_size=5)
    _published(store, [append(str(i)) for i in range(11)], bus)
    assert bus.signed_after(store.origin_id, 0, 10) is None  # 1..6 are no longer kept
    assert [e.body for e in bus.signed_after(store.origin_id, 6, 10)] == ["6", "7", "8", "9", "10"]
    assert len(bus._by_position) == 5


def test_imported_history_is_never_offered_from_the_bus(store, tmp_path):
    """Guards the push path (issue 13): history is never offered to peers, so none of it may be
    handed to replication from memory either (watchers see it, as they do from the store)."""
    other = Store(tmp_path / "other.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    try:
        other.write_batch([append("theirs")])
        [theirs] = other.signed_events_of_origin(other.origin_id, 0, 1)
    finally:
        other.close()
    bus = EventBus()
    result = _published(store, [lambda ctx: import_history(ctx, [theirs], {theirs.origin: other.public_key})], bus)
    assert result.outcomes[0][1]["imported"] == 1
    assert bus.signed_after(theirs.origin, 0, 1) is None
    assert [e["body"] for e in bus.events_after(0, 10)] == ["theirs"]
