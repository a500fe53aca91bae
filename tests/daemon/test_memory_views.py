"""The memory views in the store: drawers (dedup, FTS5 search, verbatim), diaries (newest first,
totals), facts (add, invalidate, as_of), redaction (no trace left in the database files, what it
shared with other events derived again), rebuild, malformed events, fork evidence without bodies,
the schema-5 migration, and events that arrive from a peer."""

from __future__ import annotations

import logging
import random
import string
from importlib import resources
from pathlib import Path

import apsw
import msgpack
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.envelope import seal_event
from palace_proto.errors import ValidationError
from palace_proto.memory import FACT_FORMAT, DiaryEntry, Drawer, FactAdd, FactAdded, FactInvalidate
from palace_proto.peer import event_to_wire
from palace_proto.validation import AppendRequest, Limits
from palaced.features import STORE_PARTS
from palaced.store import Store, append_event, apply_remote, redact
from palaced.store import memory_views as views

LIMITS = Limits()


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "m.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    yield s
    s.close()


def write(store, wire):
    req = AppendRequest.from_wire(wire, LIMITS)
    ok, value = store.write_batch([lambda ctx: append_event(ctx, req)]).outcomes[0]
    assert ok, value
    return value


def file_drawer(store, content, wing="wing_p", room="decisions"):
    drawer = Drawer(wing=wing, room=room, content=content, added_by="mac-claude")
    write(store, drawer.event())
    return drawer


def search(store, query, **filters):
    return views.keyword_search(store.db.reader(), query, **filters)


def test_drawers_are_verbatim_deduplicated_and_searchable(store):
    text = "  We chose WAL mode.\r\nsynchronous=FULL, because acks must survive power loss.  \n"
    drawer = file_drawer(store, text)
    file_drawer(store, text)  # the same content again: the same drawer (the view keeps the first)
    file_drawer(store, text, room="other")  # another room: another drawer
    assert views.drawer(store, drawer.id)["content"] == text
    hits = search(store, "power loss")
    assert [h["drawer_id"] for h in hits][:1] == [drawer.id] and hits[0]["content"] == text
    assert search(store, "power", room="decisions")[0]["room"] == "decisions"
    assert search(store, "nothing-like-this") == [] and search(store, "!!!") == []
    assert store.counts()["drawers"] == 2


def test_diaries_read_newest_first_with_totals(store):
    for i in range(12):
        write(store, DiaryEntry(agent="mac-claude", entry=f"entry {i}", wing="wing_mac-claude").event("mac-claude"))
    page = views.diary_page(store.db.reader(), "wing_mac-claude", 10)
    assert page["total"] == 12 and page["showing"] == 10
    assert [e["content"] for e in page["entries"]][:3] == ["entry 11", "entry 10", "entry 9"]
    write(store, DiaryEntry(agent="mac-claude", entry="entry 11", wing="wing_mac-claude").event("mac-claude"))
    assert views.diary_page(store.db.reader(), "wing_mac-claude", 100)["total"] == 13  # entries never merge


def test_facts_change_by_invalidate_then_add_and_as_of_shows_history(store):
    write(store, FactAdd(FactAdded("palace", "uses", "sqlite", valid_from="2026-01-01"), "a").event())
    write(store, FactInvalidate("palace", "uses", "sqlite", "2026-06-01", "a").event())
    write(store, FactAdd(FactAdded("palace", "uses", "duckdb", valid_from="2026-06-01"), "a").event())

    def objects(as_of, state):
        return [f["object"] for f in views.facts_about(store.db.reader(), "palace", as_of)[f"{state}_facts"]]

    assert objects("2026-03-01", "active") == ["sqlite"] and objects("2026-03-01", "future") == ["duckdb"]
    assert objects("2026-07-01", "active") == ["duckdb"] and objects("2026-07-01", "historical") == ["sqlite"]
    assert objects("2025-12-31", "future") == ["sqlite", "duckdb"]
    incoming = views.facts_about(store.db.reader(), "DUCKDB", "2026-07-01", "incoming")  # case-insensitive
    assert [f["subject"] for f in incoming["facts"]] == ["palace"]


def test_a_redacted_drawer_leaves_search_and_rebuild_agrees(store):
    keep = file_drawer(store, "keep this decision about replication")
    secret = Drawer(wing="wing_p", room="decisions", content="the api token is hunter2 replication", added_by="x")
    event = write(store, secret.event())
    store.write_batch([lambda ctx: redact(ctx, event["id"], "evt_redactor")])
    assert [h["drawer_id"] for h in search(store, "replication")] == [keep.id]
    assert views.drawer(store, secret.id) is None
    counts = store.write_batch([views.rebuild_views]).outcomes[0][1]
    assert counts["drawers"] == 1 and [h["drawer_id"] for h in search(store, "replication")] == [keep.id]


def test_events_from_a_peer_fill_the_views(tmp_path, store):
    other = Store(tmp_path / "o.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    try:
        drawer = file_drawer(other, "decided on a peer: rebuilds are derived from the log")
        write(other, FactAdd(FactAdded("log", "is", "truth"), "b").event())
        events = other.signed_events_of_origin(other.origin_id, 0, 10)
        key = other.public_key
        store.write_batch([lambda ctx: apply_remote(ctx, events, lambda o, s: key)])
        assert views.drawer(store, drawer.id)["content"] == "decided on a peer: rebuilds are derived from the log"
        assert views.facts_about(store.db.reader(), "log", "2026-11-30")["count"] == 1
    finally:
        other.close()


def test_agents_and_tunnels(store):
    file_drawer(store, "shared room a", wing="wing_one", room="design")
    file_drawer(store, "shared room b", wing="wing_two", room="design")
    file_drawer(store, "lonely", wing="wing_one", room="private")
    write(store, DiaryEntry(agent="reviewer", entry="PR#42|auth", wing="wing_reviewer").event("reviewer"))
    found = views.tunnels(store.db.reader(), "wing_one", "wing_two")
    assert found == [{"room": "design", "wings": ["wing_one", "wing_two"], "drawers": 2}]
    seen = views.agents(store.db.reader())
    assert seen["reviewer"]["diary_entries"] == 1 and seen["reviewer"]["wing"] == "wing_reviewer"
    assert "mac-claude" in seen


def test_keyword_search_narrowed_to_rare_words_ranks_like_the_full_query(store, monkeypatch):
    """Regression guard for the 100k-drawer keyword cost: narrowing a query whose words match too
    many drawers must not change what the best hits are nor their scores."""
    jobs = []
    for i in range(120):
        words = ["alpha", "filler"] + (["beta"] if i % 2 else []) + (["gamma"] if i in (5, 17, 18) else [])
        words += ["zeta"] if 60 <= i < 100 and i % 2 == 0 else []
        words += ["omega"] if i % 3 == 0 else []
        words += ["kappa"] if i < 40 and i % 2 == 0 else []  # never with zeta
        req = AppendRequest.from_wire(Drawer("wing_p", "r", f"note {i}: {' '.join(words)}", "a").event(), LIMITS)
        jobs.append(lambda ctx, req=req: append_event(ctx, req))
    assert all(ok for ok, _ in store.write_batch(jobs).outcomes)

    def ranking(query, budget, limit=5, **filters):
        monkeypatch.setattr(views, "MATCH_BUDGET", budget)
        return [(h["drawer_id"], round(h["score"], 9)) for h in search(store, query, limit=limit, **filters)]

    # a rare word among them: exactly the full query's best hits, with its scores
    for query in ("gamma beta alpha", "gamma omega", "zeta beta", "zeta omega alpha", "gamma"):
        assert ranking(query, 30) == ranking(query, 10**9), query
    # common words only: drawers holding all of them, scored as by the full query
    for query in ("alpha beta", "beta omega"):
        full = dict(ranking(query, 10**9, limit=120))
        narrowed = ranking(query, 30)
        assert len(narrowed) == 5 and all(full[d] == score for d, score in narrowed), query
        assert all(all(w in views.drawer(store, d)["content"] for w in query.split()) for d, _ in narrowed)
    # common words that never meet: the full ranking after all
    assert ranking("kappa zeta", 15) == ranking("kappa zeta", 10**9) and len(ranking("kappa zeta", 15)) == 5
    assert ranking("gamma alpha", 30, room="r") == ranking("gamma alpha", 10**9, room="r")
    assert ranking("gamma alpha", 30, room="elsewhere") == []


# -- redaction leaves no trace (issue 11, finding 4) ------------------------------------------------


def database_bytes(store):
    """Every byte of the store's files (database, WAL, shm), once the WAL is checkpointed."""
    assert store.wal.checkpoint_after_redaction()
    return b"".join(p.read_bytes() for p in store.path.parent.iterdir() if p.name.startswith(store.path.name))


def traces(data, secret):
    """Where a secret word could still be read: whole, lower-cased (FTS5 terms), or its tail
    (FTS5 stores a term after the prefix it shares with the term before it)."""
    word = secret.lower()
    return [form for form in (secret, word, word[-9:]) if form.encode() in data]


def filler(rng, count):
    """Drawers of ordinary-looking words, so that the index has many terms and pages."""
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 9))) for _ in range(3000)]
    return [" ".join(rng.choice(words) for _ in range(40)) for _ in range(count)]


def test_a_redacted_drawer_leaves_no_byte_of_its_words_in_the_database_files(store):
    """Guards finding 4: a redacted drawer's words stayed in the FTS5 index (its tombstoned terms,
    prefix-compressed, and FTS5's own copy of the text) inside palace.sqlite3."""
    rng = random.Random(4)
    jobs = [lambda ctx, req=AppendRequest.from_wire(Drawer("wing_p", "r", text, "a").event(), LIMITS): append_event(ctx, req)
            for text in filler(rng, 300)]
    assert all(ok for ok, _ in store.write_batch(jobs).outcomes)
    secrets = ["Qzvrkplmwx" + "".join(rng.choice("bcdfghjk") for _ in range(8)) + "7" for _ in range(20)]
    events = [write(store, Drawer("wing_p", "r", f"the deploy token is {s} for now", "a").event()) for s in secrets]
    assert search(store, secrets[0])[0]["content"].startswith("the deploy token")
    assert all(traces(database_bytes(store), s) for s in secrets)  # the test can see them
    query = " ".join(filler(random.Random(4), 1)[0].split()[:10])
    before = {h["drawer_id"] for h in search(store, query, limit=500)}
    for event in events:
        assert store.write_batch([lambda ctx, e=event: redact(ctx, e["id"], "evt_redactor")]).outcomes[0][0]
    data = database_bytes(store)
    assert [s for s in secrets if traces(data, s)] == []
    assert search(store, secrets[0]) == [] and search(store, "deploy token") == []
    assert {h["drawer_id"] for h in search(store, query, limit=500)} == before != set()  # the rest, as before


def test_a_separator_key_left_by_secure_delete_is_purged(store, monkeypatch):
    """Guards the one trace FTS5's secure-delete leaves: the segment b-tree keys each leaf page by a
    prefix of its first term (drawers_fts_idx); when a deleted word was first on its page, that
    prefix stays. purge_index_traces finds such a key and writes the index anew."""
    rng = random.Random(9)
    secrets = ["".join(rng.choice("bcdfghjkmnpqrstvwxz") for _ in range(12)) + "7" for _ in range(150)]
    texts = [*filler(rng, 1500), *(f"{s} is a code" for s in secrets)]
    rng.shuffle(texts)
    events = {}
    for start in range(0, len(texts), 100):
        reqs = [AppendRequest.from_wire(Drawer("w", "r", t, "a").event(), LIMITS) for t in texts[start:start + 100]]
        outcomes = store.write_batch([lambda ctx, req=req: append_event(ctx, req) for req in reqs]).outcomes
        events.update({req.body.split()[0]: value["id"] for req, (_, value) in zip(reqs, outcomes, strict=True)})
    conn = store.db.writer  # the writer's connection: this test looks inside the index
    conn.execute("INSERT INTO drawers_fts (drawers_fts) VALUES ('optimize')")  # one segment, keys made afresh
    conn.execute("CREATE VIRTUAL TABLE temp.terms USING fts5vocab(main, drawers_fts, 'row')")
    terms = [t.encode() for (t,) in conn.execute("SELECT term FROM temp.terms")]
    keys = [bytes(k)[1:] for (k,) in conn.execute("SELECT term FROM drawers_fts_idx") if len(bytes(k)) > 1]
    exposed = [s for s in secrets if any(s.encode().startswith(k) and sum(t.startswith(k) for t in terms) == 1
                                         for k in keys)]
    assert exposed, "no secret was first on a page (change the seed)"
    secret = exposed[0]
    seen: list[bool] = []

    def secure_delete_alone(ctx):
        (rowid, content), = ctx.conn.execute("SELECT rowid, content FROM drawers WHERE event_id=?", (events[secret],))
        ctx.conn.execute("INSERT INTO drawers_fts (drawers_fts, rowid, content) VALUES ('delete', ?, ?)",
                         (rowid, content))
        seen.append(views._stale_separators(ctx.conn, {secret.encode()}))
        raise ValidationError("roll this job back")

    store.write_batch([secure_delete_alone])
    assert seen == [True]  # secure-delete alone leaves the key
    done = []
    real = views.purge_index_traces
    monkeypatch.setattr(views, "purge_index_traces", lambda conn, texts: done.append(real(conn, texts)) or done[-1])
    for s in exposed:
        assert store.write_batch([lambda ctx, s=s: redact(ctx, events[s], "evt_r")]).outcomes[0][0]
    assert "optimize" in done and "rebuild" not in done  # even an index of one segment is merged anew
    assert not views._stale_separators(conn, {s.encode() for s in exposed})
    data = database_bytes(store)
    assert [s for s in exposed if traces(data, s)] == []
    assert [h["drawer_id"] for h in search(store, secrets[-1])] or secrets[-1] in exposed  # the rest still found


def test_redacting_a_fact_and_the_events_related_to_it_removes_it_entirely(store):
    """Guards finding 4 for facts: memory.kg.add metadata kept the fact (signed, so redaction could
    not remove it); now the fact is in the body only, and related_memory_events finds the other
    events that carry the same words (duplicates, invalidations) for the redact operation."""
    secret = "Vault-Passphrase-Xq7Zt"
    first = write(store, FactAdd(FactAdded("deploy", "uses passphrase", secret, valid_from="2026-01-01"), "a").event())
    # the same fact, in another case:
    again = write(store, FactAdd(FactAdded("Deploy", "USES passphrase", secret.lower()), "b").event())
    ended = write(store, FactInvalidate("deploy", "uses passphrase", secret, "2026-06-01", "a").event())
    other = write(store, FactAdd(FactAdded("deploy", "uses", "sqlite"), "a").event())
    diary = write(store, DiaryEntry(agent="a", entry="a diary line", wing="wing_a").event("a"))
    for event in (first, again, ended):
        assert event["metadata"] == {"format": FACT_FORMAT} and secret.lower() in event["body"].lower()
    assert views.facts_about(store.db.reader(), "deploy", "2026-03-01")["count"] == 3

    def related(event_id):
        return views.related_memory_events(store.db.reader(), event_id)

    assert related(first["id"]) == [again["id"], ended["id"]] and related(ended["id"]) == [first["id"], again["id"]]
    assert related(other["id"]) == [] and related(diary["id"]) == [] and related("evt_unknown") == []
    for event in (first, again, ended):
        assert store.write_batch([lambda ctx, e=event: redact(ctx, e["id"], "evt_r")]).outcomes[0][0]
    facts = views.facts_about(store.db.reader(), "deploy", "2026-03-01")
    assert [f["object"] for f in facts["facts"]] == ["sqlite"]
    assert not traces(database_bytes(store), secret) and not traces(database_bytes(store), secret.lower())
    assert related(other["id"]) == []
    assert store.write_batch([views.rebuild_views]).outcomes[0][1]["facts"] == 1


def test_redacting_one_copy_derives_again_what_the_others_still_carry(store, tmp_path):
    """A drawer filed on two replicas at once, or a fact ended by an invalidation that is then
    redacted: the views after a redaction are what a rebuild from the log makes."""
    other = Store(tmp_path / "o.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    try:
        drawer = Drawer("wing_p", "r", "filed on both replicas at once", "a")
        mine = write(store, drawer.event())
        theirs = write(other, drawer.event())
        key = other.public_key
        events = other.signed_events_of_origin(other.origin_id, 0, 10)
        assert store.write_batch([lambda ctx: apply_remote(ctx, events, lambda o, s: key)]).outcomes[0][0]
    finally:
        other.close()
    assert views.related_memory_events(store.db.reader(), mine["id"]) == [theirs["id"]]
    assert store.write_batch([lambda ctx: redact(ctx, mine["id"], "evt_r")]).outcomes[0][0]
    assert views.drawer(store, drawer.id)["content"] == drawer.content  # still in the log, in their event
    assert [h["drawer_id"] for h in search(store, "replicas")] == [drawer.id]

    added = write(store, FactAdd(FactAdded("palace", "uses", "sqlite", valid_from="2026-01-01"), "a").event())
    ended = write(store, FactInvalidate("palace", "uses", "sqlite", "2026-06-01", "a").event())
    assert views.facts_about(store.db.reader(), "palace", "2026-07-01")["historical_facts"]
    assert store.write_batch([lambda ctx: redact(ctx, ended["id"], "evt_r")]).outcomes[0][0]
    now = views.facts_about(store.db.reader(), "palace", "2026-07-01")
    assert [f["object"] for f in now["active_facts"]] == ["sqlite"] and now["facts"][0]["valid_to"] is None
    assert views.related_memory_events(store.db.reader(), added["id"]) == []
    rebuilt = store.write_batch([views.rebuild_views]).outcomes[0][1]
    assert rebuilt == {"events": 4, "drawers": 1, "facts": 1}
    assert views.facts_about(store.db.reader(), "palace", "2026-07-01") == now


LEGACY_FACT = {"triple_id": "kg_0", "subject": "palace", "predicate": "stores", "object": "legacy facts"}


def test_facts_written_before_schema_5_are_still_read_and_a_redacted_one_stays_out(store):
    """Format 1 (the fact in the metadata) is read; once redacted, a rebuild must not bring it back
    from its metadata (it did: materialise read the metadata whatever the body)."""
    legacy = write(store, {"type": "memory.kg.add", "stream": "memory", "room": "knowledge", "from_agent": "a",
                           "body": "palace → stores → legacy facts", "metadata": LEGACY_FACT})
    write(store, {"type": "memory.kg.invalidate", "stream": "memory", "room": "knowledge", "from_agent": "a",
                  "body": "ended 2026-02-01: palace → stores → legacy facts",
                  "metadata": {"subject": "palace", "predicate": "stores", "object": "legacy facts",
                               "ended": "2026-02-01"}})
    facts = views.facts_about(store.db.reader(), "palace", "2026-03-01")
    assert [(f["object"], f["state"], f["valid_to"]) for f in facts["facts"]] == [("legacy facts", "historical",
                                                                                   "2026-02-01")]
    assert store.write_batch([lambda ctx: redact(ctx, legacy["id"], "evt_r")]).outcomes[0][0]
    assert views.facts_about(store.db.reader(), "palace", "2026-03-01")["count"] == 0
    store.write_batch([views.rebuild_views])
    assert views.facts_about(store.db.reader(), "palace", "2026-03-01")["count"] == 0


MALFORMED = [
    ("memory.drawer", "text", {"room": "r"}),                                  # no wing
    ("memory.drawer", "text", {"wing": 7, "room": "r"}),                       # ill-typed
    ("memory.drawer", "   ", {"wing": "w", "room": "r"}),                      # blank content
    ("memory.diary", "entry", {"agent": "a", "wing": "w", "room": "notes", "topic": "t"}),
    ("memory.kg.add", "not json", {"format": FACT_FORMAT}),
    ("memory.kg.add", '["a","b","c"]', {"format": FACT_FORMAT}),
    ("memory.kg.add", '{"object":"c","predicate":"b"}', {"format": FACT_FORMAT}),
    ("memory.kg.add", '{"object":"c","predicate":"b","subject":"\\ud800"}', {"format": FACT_FORMAT}),
    ("memory.kg.add", "x", {"subject": ["a"], "predicate": "b", "object": "c"}),
    ("memory.kg.add", "x", {"format": "fact/9"}),
    ("memory.kg.invalidate", '{"object":"c","predicate":"b","subject":"a"}', {"format": FACT_FORMAT}),
    ("memory.kg.invalidate", "x", {"subject": "a", "predicate": "b", "object": "c", "ended": "someday"}),
]


def test_malformed_memory_events_are_left_out_of_the_views_and_logged_once(store, caplog):
    """Guards finding 4/9: materialise raised (KeyError, TypeError, a lone surrogate at the insert)
    on a memory event a peer made up, failing the whole transaction that stored it."""
    caplog.set_level(logging.WARNING, logger="palaced.store.memory")
    good = file_drawer(store, "a sound drawer among bad ones")
    ids = [write(store, {"type": t, "stream": "memory", "room": "r", "from_agent": "peer", "body": body,
                         "metadata": meta})["id"] for t, body, meta in MALFORMED]
    rebuilt = store.write_batch([views.rebuild_views]).outcomes[0][1]
    assert rebuilt == {"events": len(MALFORMED) + 1, "drawers": 1, "facts": 0}
    assert views.drawer(store, good.id) is not None
    logged = [r.getMessage() for r in caplog.records if "left out of the memory views" in r.getMessage()]
    assert sorted(m.split()[2] for m in logged) == sorted(ids)  # once each, though materialised twice


def test_fork_evidence_keeps_no_body(store):
    """Guards finding 4: the forks table kept the full body of every rejected event."""
    secret = "fork-secret-Zq81x"
    forged = seal_event(store.chain.key, origin=store.origin_id, origin_seq=1, prev_hash=b"\0" * 32,
                        created_at="2026-01-01T00:00:00.000000Z", type="note", stream="s", room="r",
                        from_agent="a", body=f"the body says {secret}", metadata_json="{}")
    write(store, {"type": "note", "stream": "s", "room": "r", "from_agent": "a", "body": "the real first event"})
    report = store.write_batch([lambda ctx: apply_remote(ctx, [forged], lambda o, s: None, "peer")]).outcomes[0][1]
    assert report.forks == [forged]
    (blob,) = store.db.writer.execute("SELECT rejected FROM forks").fetchone()
    evidence = msgpack.unpackb(bytes(blob), raw=False)
    assert evidence["body"] is None and evidence["body_sha256"] == forged.body_sha256
    assert not traces(database_bytes(store), secret)


def legacy_schema_4(path: Path) -> apsw.Connection:
    """A database as the release before schema 5 left it (scripts 0001-0004, no daemon data)."""
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL").fetchall()
    conn.execute("CREATE TABLE _migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                 "applied_at TEXT NOT NULL) STRICT")
    folder = resources.files("palaced.store") / "schema"
    for name in sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))[:4]:
        conn.execute((folder / name).read_text(encoding="utf-8"))
        conn.execute("INSERT INTO _migrations VALUES (?, ?, '2026-01-01T00:00:00Z')", (int(name[:4]), name))
    return conn


def test_upgrading_to_schema_5_removes_traces_left_by_earlier_releases(tmp_path):
    """Guards the upgrade: redactions before this release left words in old FTS5 segments, and fork
    evidence with bodies; opening the home with this release removes both."""
    path = tmp_path / "legacy.sqlite3"
    conn = legacy_schema_4(path)
    secret = "Zorblaxquint7"
    rng = random.Random(1)
    with conn:
        for i, text in enumerate([*filler(rng, 50), f"old drawer with {secret} inside"], start=1):
            conn.execute("INSERT INTO drawers VALUES (?, ?, 'drawer', 'w', 'r', NULL, NULL, ?, NULL, 'a', "
                         "'2026-01-01T00:00:00.000000Z')", (f"drw_{i}", f"evt_{i}", text))
            conn.execute("INSERT INTO drawers_fts (rowid, content) VALUES (?, ?)", (i, text))
    with conn:  # redacted the old way: a tombstone, the terms stay in the older segment
        conn.execute("DELETE FROM drawers_fts WHERE rowid=51")
        conn.execute("DELETE FROM drawers WHERE rowid=51")
    forged = seal_event(Ed25519PrivateKey.generate(), origin="ori_" + "a" * 26, origin_seq=1, prev_hash=b"\0" * 32,
                        created_at="2026-01-01T00:00:00.000000Z", type="note", stream="s", room="r",
                        from_agent="a", body=f"fork body {secret}", metadata_json="{}")
    with conn:
        conn.execute("INSERT INTO forks VALUES (?, 1, NULL, ?, ?, '2026-01-01T00:00:00Z', 'peer')",
                     (forged.origin, forged.event_hash, msgpack.packb(event_to_wire(forged), use_bin_type=True)))
        conn.execute("INSERT INTO forks VALUES ('ori_bbbbbbbbbbbbbbbbbbbbbbbbbb', 1, NULL, ?, ?, "
                     "'2026-01-01T00:00:00Z', 'peer')", (b"\1" * 32, f"garbage {secret}".encode()))
    conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
    conn.close()
    assert traces(path.read_bytes(), secret)  # the traces this upgrade must remove
    store = Store(path, Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    try:
        assert not traces(database_bytes(store), secret)
        evidence = [msgpack.unpackb(bytes(b), raw=False) for (b,) in store.db.writer.execute("SELECT rejected FROM forks")]
        assert sorted(e.get("body", "absent") or "none" for e in evidence) == ["absent", "none"]
        assert [f["rejected_hash"] for f in store.forks() if f["origin"] == forged.origin] == [forged.event_hash.hex()]
        assert store.counts()["drawers"] == 0  # the views are the log's (which holds no drawer here)
    finally:
        store.close()
