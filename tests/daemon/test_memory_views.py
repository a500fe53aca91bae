"""The memory views in the store: drawers (dedup, FTS5 search, verbatim), diaries (newest first,
totals), facts (add, invalidate, as_of), redaction, rebuild, and events that arrive from a peer."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.memory import DiaryEntry, Drawer, FactAdd, FactInvalidate
from palace_proto.validation import AppendRequest, Limits
from palaced.store import Store
from palaced.store import memory_views as views

LIMITS = Limits()


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "m.sqlite3", Ed25519PrivateKey.generate(), LIMITS)
    yield s
    s.close()


def write(store, wire):
    req = AppendRequest.from_wire(wire, LIMITS)
    ok, value = store.write_batch([lambda ctx: ctx.append(req)]).outcomes[0]
    assert ok, value
    return value


def file_drawer(store, content, wing="wing_p", room="decisions"):
    drawer = Drawer(wing=wing, room=room, content=content, added_by="mac-claude")
    write(store, drawer.event())
    return drawer


def search(store, query, **filters):
    return store.memory_read(views.keyword_search, query, **filters)


def test_drawers_are_verbatim_deduplicated_and_searchable(store):
    text = "  We chose WAL mode.\r\nsynchronous=FULL, because acks must survive power loss.  \n"
    drawer = file_drawer(store, text)
    file_drawer(store, text)  # the same content again: the same drawer (the view keeps the first)
    file_drawer(store, text, room="other")  # another room: another drawer
    assert store.drawer(drawer.id)["content"] == text
    hits = search(store, "power loss")
    assert [h["drawer_id"] for h in hits][:1] == [drawer.id] and hits[0]["content"] == text
    assert search(store, "power", room="decisions")[0]["room"] == "decisions"
    assert search(store, "nothing-like-this") == [] and search(store, "!!!") == []
    assert store.counts()["drawers"] == 2


def test_diaries_read_newest_first_with_totals(store):
    for i in range(12):
        write(store, DiaryEntry(agent="mac-claude", entry=f"entry {i}", wing="wing_mac-claude").event("mac-claude"))
    page = store.memory_read(views.diary_page, "wing_mac-claude", 10)
    assert page["total"] == 12 and page["showing"] == 10
    assert [e["content"] for e in page["entries"]][:3] == ["entry 11", "entry 10", "entry 9"]
    write(store, DiaryEntry(agent="mac-claude", entry="entry 11", wing="wing_mac-claude").event("mac-claude"))
    assert store.memory_read(views.diary_page, "wing_mac-claude", 100)["total"] == 13  # entries never merge


def test_facts_change_by_invalidate_then_add_and_as_of_shows_history(store):
    write(store, FactAdd("palace", "uses", "sqlite", "a", valid_from="2026-01-01").event())
    write(store, FactInvalidate("palace", "uses", "sqlite", "2026-06-01", "a").event())
    write(store, FactAdd("palace", "uses", "duckdb", "a", valid_from="2026-06-01").event())

    def objects(as_of, state):
        return [f["object"] for f in store.memory_read(views.facts_about, "palace", as_of)[f"{state}_facts"]]

    assert objects("2026-03-01", "active") == ["sqlite"] and objects("2026-03-01", "future") == ["duckdb"]
    assert objects("2026-07-01", "active") == ["duckdb"] and objects("2026-07-01", "historical") == ["sqlite"]
    assert objects("2025-12-31", "future") == ["sqlite", "duckdb"]
    incoming = store.memory_read(views.facts_about, "DUCKDB", "2026-07-01", "incoming")  # case-insensitive
    assert [f["subject"] for f in incoming["facts"]] == ["palace"]


def test_a_redacted_drawer_leaves_search_and_rebuild_agrees(store):
    keep = file_drawer(store, "keep this decision about replication")
    secret = Drawer(wing="wing_p", room="decisions", content="the api token is hunter2 replication", added_by="x")
    event = write(store, secret.event())
    store.write_batch([lambda ctx: ctx.redact(event["id"], "evt_redactor")])
    assert [h["drawer_id"] for h in search(store, "replication")] == [keep.id]
    assert store.drawer(secret.id) is None
    counts = store.write_batch([lambda ctx: store.rebuild_memory(ctx)]).outcomes[0][1]
    assert counts["drawers"] == 1 and [h["drawer_id"] for h in search(store, "replication")] == [keep.id]


def test_events_from_a_peer_fill_the_views(tmp_path, store):
    other = Store(tmp_path / "o.sqlite3", Ed25519PrivateKey.generate(), LIMITS)
    try:
        drawer = file_drawer(other, "decided on a peer: rebuilds are derived from the log")
        write(other, FactAdd("log", "is", "truth", "b").event())
        events = other.signed_events_of_origin(other.origin_id, 0, 10)
        key = other.public_key
        store.write_batch([lambda ctx: ctx.apply_remote(events, lambda o, s: key)])
        assert store.drawer(drawer.id)["content"] == "decided on a peer: rebuilds are derived from the log"
        assert store.memory_read(views.facts_about, "log", "2026-11-30")["count"] == 1
    finally:
        other.close()


def test_agents_and_tunnels(store):
    file_drawer(store, "shared room a", wing="wing_one", room="design")
    file_drawer(store, "shared room b", wing="wing_two", room="design")
    file_drawer(store, "lonely", wing="wing_one", room="private")
    write(store, DiaryEntry(agent="reviewer", entry="PR#42|auth", wing="wing_reviewer").event("reviewer"))
    found = store.memory_read(views.tunnels, "wing_one", "wing_two")
    assert found == [{"room": "design", "wings": ["wing_one", "wing_two"], "drawers": 2}]
    seen = store.memory_read(views.agents)
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
        jobs.append(lambda ctx, req=req: ctx.append(req))
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
        assert all(all(w in store.drawer(d)["content"] for w in query.split()) for d, _ in narrowed)
    # common words that never meet: the full ranking after all
    assert ranking("kappa zeta", 15) == ranking("kappa zeta", 10**9) and len(ranking("kappa zeta", 15)) == 5
    assert ranking("gamma alpha", 30, room="r") == ranking("gamma alpha", 10**9, room="r")
    assert ranking("gamma alpha", 30, room="elsewhere") == []
