"""The task_threads table (schema 0009) and palaced/store/tasks.py, on real SQLite files:
the triggers keep one row per task whichever way its events came and unsettle a finished task
when anything happens on it, the migration's backfill builds the same rows, and what is derived
is the newest requests plus every unsettled task."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.validation import AppendRequest, Limits
from palaced.features import STORE_PARTS
from palaced.store import Store, append_event
from palaced.store.schema import migrate
from palaced.store.tasks import settle, tasks_to_derive
from tests.daemon.test_store_agents import sync

LIMITS = Limits()


@pytest.fixture
def stores(tmp_path):
    opened = [Store(tmp_path / f"{name}.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS) for name in "ab"]
    yield opened
    for store in opened:
        store.close()


def append(store, **fields):
    req = AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": "alice", **fields}, LIMITS)
    ok, value = store.write_batch([lambda w: append_event(w, req)]).outcomes[0]
    assert ok, value
    return value


def request(store, cid=None, **fields):
    extra = {"correlation_id": cid} if cid else {}
    return append(store, type="task.request", to_agent="bob", body="do it", **extra, **fields)


def reply(store, cid, status=None):
    return append(store, type="task.reply", from_agent="bob", to_agent="alice", correlation_id=cid,
                  body="on it", **({"status": status} if status else {}))


def rows(store):
    return sorted(store.db.reader().execute("SELECT correlation_id, request_seq, settled_seq FROM task_threads").fetchall())


def as_the_log_says(store):
    """(correlation_id, first request seq) of every task, computed from the events themselves."""
    return sorted(store.db.reader().execute("SELECT coalesce(correlation_id, id), min(seq) FROM events "
                                          "WHERE type='task.request' GROUP BY 1").fetchall())


def newest_seq(store, cid):
    (seq,) = store.db.reader().execute("SELECT max(seq) FROM events WHERE correlation_id=? OR id=?", (cid, cid)).fetchone()
    return seq


def test_the_trigger_follows_every_task_whichever_way_its_events_came(stores):
    a, b = stores
    request(a, "task_one")
    reply(a, "task_one")
    plain = request(a)  # no correlation id: the request's own id names the task
    append(a, type="task.reply", correlation_id=plain["id"], body="yes")
    append(a, correlation_id="not_a_task", body="a thread without a request: no row")
    reply(b, "task_two", "claimed")  # the reply reaches b before the request it answers
    request(a, "task_two")
    sync(a, b, a, b)
    for store in (a, b):
        assert [(c, f) for c, f, _ in rows(store)] == as_the_log_says(store)
    assert {r[0] for r in rows(b)} == {"task_one", "task_two", plain["id"]}
    (two,) = [r for r in rows(b) if r[0] == "task_two"]
    assert two[1] == newest_seq(b, "task_two")  # its request came last here, after the reply


def test_any_event_on_a_settled_task_unsettles_it_whichever_way_it_came(stores):
    a, b = stores
    plain = request(a)
    for cid in ("task_one", "task_two"):
        request(a, cid)
    sync(a, b, a, b)
    for store in (a, b):
        assert settled(store, [(cid, newest_seq(store, cid)) for cid in ("task_one", "task_two", plain["id"])]) == 3
    append(a, type="task.reply", correlation_id=plain["id"], body="again")
    reply(a, "task_one", "ready")
    append(a, type="task.request", to_agent="bob", correlation_id="task_two", body="a second request")
    sync(a, b, a, b)
    for store in (a, b):
        assert [settled_seq for _, _, settled_seq in rows(store)] == [None, None, None]


def test_the_migration_builds_the_rows_the_insert_path_keeps(stores):
    a, _ = stores
    for n in range(3):
        request(a, f"task_{n}")
        reply(a, f"task_{n}", "claimed")
    request(a)
    kept = rows(a)
    conn = a.db.writer  # as a home from before schema 0009 is opened
    conn.execute("DROP TABLE task_threads; DELETE FROM _migrations WHERE version >= 9")
    migrate(conn, a.path)
    assert rows(a) == kept == [(c, f, None) for c, f in as_the_log_says(a)]
    # 0009's triggers are gone again with 0010: store/follow.py keeps the rows (issue 27).
    assert conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall() == []


def test_no_trigger_runs_on_an_event_insert(stores):
    """Guards the append path (issue 27): any trigger on events cost every insert a trigger
    sub-program (42 us an insert against 11 us without), whether or not it concerned the event."""
    for store in stores:
        assert store.db.writer.execute("SELECT name FROM sqlite_master WHERE type='trigger' AND "
                                   "tbl_name='events'").fetchall() == []


def test_the_newest_requests_come_first_then_every_unsettled_older_task(stores):
    a, _ = stores
    for n in range(6):
        request(a, f"task_{n}")
    settled(a, [("task_1", newest_seq(a, "task_1")), ("task_2", newest_seq(a, "task_2"))])
    threads, capped = tasks_to_derive(a, 2, 10)
    assert [t.correlation_id for t in threads] == ["task_5", "task_4", "task_3", "task_0"] and not capped
    assert all(t.events and not t.settled for t in threads)
    threads, capped = tasks_to_derive(a, 2, 1)
    assert [t.correlation_id for t in threads] == ["task_5", "task_4", "task_3"] and capped


def test_an_event_on_a_settled_task_unsettles_it_and_a_stale_settle_moves_nothing(stores):
    a, _ = stores
    request(a, "task_old")
    request(a, "task_new")
    last = newest_seq(a, "task_old")
    assert settled(a, [("task_old", last)]) == 1
    assert [t.correlation_id for t in tasks_to_derive(a, 1, 10)[0]] == ["task_new"]
    reply(a, "task_old", "ready")  # reopened after it was seen finished
    assert [t.correlation_id for t in tasks_to_derive(a, 1, 10)[0]] == ["task_new", "task_old"]
    assert settled(a, [("task_old", last)]) == 0  # derived before the reply: still unsettled
    assert [(t.correlation_id, t.settled) for t in tasks_to_derive(a, 5, 10)[0]] == [("task_new", False),
                                                                                    ("task_old", False)]


def settled(store, finished):
    ok, moved = store.write_batch([lambda w: settle(w, finished)]).outcomes[0]
    assert ok, moved
    return moved


def test_an_agent_registered_elsewhere_after_a_partition_unsettles_the_tasks_it_wrote_on(stores):
    """The verdicts on an agent's events can change when its registration arrives late, and with
    them a task's state (its 'applied' may be an impersonation): the task is derived again."""
    a, b = stores
    for store in stores:
        store.agents.enforcing = True  # as when the daemons belong to a palace
    append(a, from_agent="bob", body="bob lives on a")  # registers bob to a
    request(b, "task_x")  # b, cut off from a, does not know that
    reply(b, "task_x", "applied")  # written on b as bob: an impersonation once a's registration is known
    other = request(b, "task_y", from_agent="carol")
    settled(b, [(cid, newest_seq(b, cid)) for cid in ("task_x", "task_y")])
    assert all(t.settled for t in tasks_to_derive(b, 5, 5)[0])
    sync(a, b, a, b)
    unsettled = {t.correlation_id for t in tasks_to_derive(b, 5, 5)[0] if not t.settled}
    assert unsettled == {"task_x"}, other  # bob wrote on task_x only
    flagged = b.agents.annotate(b.events_by_correlation("task_x"))
    assert [e.get("impersonation") is not None for e in flagged if e["type"] == "task.reply"] == [True]


def test_a_registry_derived_anew_unsettles_the_tasks_of_the_agents_whose_record_changed(stores):
    a, _ = stores
    a.agents.enforcing = True
    request(a, "task_x")
    reply(a, "task_x", "applied")  # bob's first write: registers bob
    request(a, "task_y", from_agent="carol")
    settled(a, [(cid, newest_seq(a, cid)) for cid in ("task_x", "task_y")])
    a.agents.records = {k: v for k, v in a.agents.records.items() if k != "bob"}  # as if derived without bob's
    ok, value = a.write_batch([a.agents.reload_ca]).outcomes[0]
    assert ok, value
    assert {t.correlation_id: t.settled for t in tasks_to_derive(a, 5, 5)[0]} == {"task_x": False, "task_y": True}
