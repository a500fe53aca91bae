"""The memory views: drawers, diary entries and knowledge-graph facts, derived from the log.

Owns: turning ``memory.*`` events into rows of the schema-0004/0005 tables (called by the store
in the same transaction that stores the event, whether appended here or arrived from a peer),
undoing that for a redacted event without leaving its words anywhere in the database (the keyword
index included: ``unmaterialise``), finding the other events that carry the same drawer or fact
(``related_memory_events``), rebuilding everything from the log (``rebuild``; at open when the
derivation changed: ``ensure_views``), and the read queries (a drawer, keyword search, facts as of a
date, diary pages, agents, tunnels; the drawers the vector index embeds, in ``MemoryReads``). ``PART``
declares the views to the store (parts.py).
Synchronous apsw, like the store: every function takes the connection it works on, except the two
steps of a handler's write job (``related_memory_events_in``, ``facts_ended_by``), which take the
job's ``WriteContext``.

An event that breaks the memory rules (from a peer: ``palace_proto.memory.read_memory_event``
says what is wrong) is left out of the views and logged once; it never fails the transaction
that stores it.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

import apsw

from palace_proto.envelope import SignedEvent
from palace_proto.errors import ValidationError
from palace_proto.memory import (
    DIARY_ROOM,
    MEMORY_TYPES,
    FactAdded,
    FactEnded,
    FiledText,
    diary_entry_id,
    diary_wing,
    drawer_id,
    fact_state,
    read_memory_event,
)
from palace_proto.text import printable

from .fetch import all_rows, one_row
from .parts import StorePart
from .queries import signed_event_at
from .reads import ReadSet, StoreRead

if TYPE_CHECKING:
    from .queries import Reads
    from .state import WriteContext

__all__ = ["PART", "VIEWS_VERSION", "MemoryReads", "ensure_views", "rebuild_views", "agents", "diary_page",
           "drawer_contents", "drawer_ids", "drawers_by_id",
           "drawers_fingerprint", "facts_about", "facts_ended_by", "keyword_search", "materialise", "passes", "rebuild",
           "related_memory_events", "related_memory_events_in", "tunnels", "unmaterialise"]

#: bump when the views' shape or derivation changes: the daemon then rebuilds them from the log.
#: 2: external-content keyword index with secure-delete, memory_keys, fact format 2, strict reading.
VIEWS_VERSION: Final = "2"
_LOGGER: Final = logging.getLogger("palaced.store.memory")
#: Loads signed events by (origin, origin_seq), in the order given (the store's reader of the log).
Loader = Callable[[Sequence[tuple[str, int]]], list[SignedEvent]]
# Why 1024: "logged once per event" needs memory of what was logged; a hostile member can send
# any number of malformed events, so the memory is bounded (an event beyond it may be logged again
# by a later rebuild, which is harmless).
MAX_REMEMBERED_SKIPS: Final = 1024
_skipped: OrderedDict[str, None] = OrderedDict()
#: the tokenizer drawers_fts is created with (schema 0005): the trace check splits text the same way
FTS_TOKENIZER: Final = ("porter", ["unicode61"])
_WORD_RE: Final = re.compile(r"\w+", re.UNICODE)
DRAWER_COLUMNS: Final = "d.id, d.kind, d.wing, d.room, d.topic, d.agent, d.content, d.source_file, d.added_by, d.filed_at"


def drawer_from_row(row: Sequence[Any]) -> dict[str, Any]:
    return {"drawer_id": row[0], "kind": row[1], "wing": row[2], "room": row[3], "topic": row[4], "agent": row[5],
            "content": row[6], "source_file": row[7], "added_by": row[8], "filed_at": row[9]}


def materialise(conn: apsw.Connection, event: SignedEvent) -> None:
    """Update the views for one stored event.

    Other types and redacted bodies change nothing; so does a memory event that breaks the rules
    (logged once): what a peer sent never fails the transaction that stores it.
    """
    if event.type not in MEMORY_TYPES or event.body is None:
        return  # not memory, or redacted (before it reached us, or since): nothing to show
    try:
        record = read_memory_event(event.type, event.body, event.metadata_json)
    except ValidationError as exc:
        _note_skipped(event, exc)
        return
    if isinstance(record, FiledText):
        # The id is recomputed, never trusted from metadata. A drawer is its content (filing it
        # again is the same drawer); a diary entry is its event (writing the same line on two days
        # is two entries).
        diary = record.kind == "diary"
        did = diary_entry_id(event.id) if diary else drawer_id(record.wing, record.room, record.content)
        inserted = conn.execute(
            "INSERT INTO drawers (id, event_id, kind, wing, room, topic, agent, content, source_file, added_by, "
            "filed_at) VALUES (?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(id) DO NOTHING RETURNING rowid",
            (did, event.id, record.kind, record.wing, record.room, record.topic, record.agent, record.content,
             record.source_file, event.from_agent, event.created_at)).fetchall()
        if inserted:
            # External content: the index keeps no copy of the text, only its terms.
            conn.execute("INSERT INTO drawers_fts (rowid, content) VALUES (?, ?)", (inserted[0][0], record.content))
        if not diary:  # a diary entry is never filed twice: nothing shares it
            _remember_key(conn, event.id, did)
    elif isinstance(record, FactAdded):
        conn.execute(
            "INSERT INTO kg_facts (id, subject, predicate, object, valid_from, valid_to, source_drawer_id, "
            "source_file, added_by, added_at, event_id) VALUES (?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(id) DO NOTHING",
            (record.id, record.subject, record.predicate, record.object, record.valid_from, record.valid_to,
             record.source_drawer_id, record.source_file, event.from_agent, event.created_at, event.id))
        _remember_key(conn, event.id, record.key)
    elif isinstance(record, FactEnded):
        # Ends every open fact with that subject, predicate and object (append-only: rows stay).
        conn.execute(
            "UPDATE kg_facts SET valid_to=?, ended_by=? WHERE subject=? AND predicate=? AND object=? "
            "AND (valid_to IS NULL OR valid_to > ?)",
            (record.ended, event.id, record.subject, record.predicate, record.object, record.ended))
        _remember_key(conn, event.id, record.key)


def _remember_key(conn: apsw.Connection, event_id: str, key: str) -> None:
    conn.execute("INSERT OR REPLACE INTO memory_keys (event_id, key) VALUES (?, ?)", (event_id, key))


def _note_skipped(event: SignedEvent, exc: ValidationError) -> None:
    if event.id in _skipped:
        return
    _skipped[event.id] = None
    if len(_skipped) > MAX_REMEMBERED_SKIPS:
        _skipped.popitem(last=False)
    # The event's id and what is wrong, never its content; everything made printable (a peer's
    # values may hold newlines or escapes, and the message quotes them).
    _LOGGER.warning("memory event %s (%s from %s) left out of the memory views: %s", printable(event.id),
                    printable(event.type), printable(event.origin), printable(str(exc), 200))


def related_memory_events(conn: apsw.Connection, event_id: str) -> list[str]:
    """The other memory events, not redacted, that carry what ``event_id`` carries, in log order.

    For a drawer: the other events that filed the same content in the same wing and room (two
    replicas filing it at once). For a fact (its ``memory.kg.add`` or a ``memory.kg.invalidate``):
    every other addition and invalidation of the same subject, predicate and object, compared
    case-insensitively, whatever the dates. Redacting a drawer or a fact removes its words only if
    these are redacted too. Empty for a diary entry, another type, or an unknown event.

    Call it before redacting ``event_id``: its redaction removes the link it has to the others.
    """
    rows = all_rows(conn.execute(
        "SELECT e.id FROM memory_keys mine JOIN memory_keys other ON other.key = mine.key "
        "JOIN events e ON e.id = other.event_id "
        "WHERE mine.event_id = ? AND other.event_id != mine.event_id AND e.body IS NOT NULL ORDER BY e.seq",
        (event_id,)))
    return [r[0] for r in rows]


def related_memory_events_in(ctx: WriteContext, event_id: str) -> list[str]:
    """``related_memory_events`` as a write job's transaction sees it (the redaction's own)."""
    return related_memory_events(ctx.conn, event_id)


def facts_ended_by(ctx: WriteContext, event_id: str) -> int:
    """How many facts the ``memory.kg.invalidate`` event ``event_id`` ended (in the write job that
    appended it)."""
    (ended,) = one_row(ctx.conn.execute("SELECT count(*) FROM kg_facts WHERE ended_by=?", (event_id,)))
    return ended


def unmaterialise(conn: apsw.Connection, event_id: str, load: Loader) -> None:
    """A redacted memory event leaves the views, and its words leave the keyword index.

    Call it once the event's body is gone from the log. What the event shared with others (the
    same drawer filed again, the same fact added again or invalidated) is derived again from those
    events, in log order, so the views stay what a rebuild from the log would make.
    """
    row = conn.execute("SELECT key FROM memory_keys WHERE event_id=?", (event_id,)).fetchone()
    group: list[tuple[str, int, str]] = []
    if row is not None:
        group = all_rows(conn.execute(
            "SELECT e.origin, e.origin_seq, e.id FROM memory_keys k JOIN events e ON e.id = k.event_id "
            "WHERE k.key = ? ORDER BY e.seq", (row[0],)))
    removed: list[str] = []
    for eid in {event_id, *(g[2] for g in group)}:
        removed += _drop_drawers_of(conn, eid)
        conn.execute("DELETE FROM kg_facts WHERE event_id=?", (eid,))
        conn.execute("DELETE FROM memory_keys WHERE event_id=?", (eid,))
    others = [(origin, seq) for origin, seq, eid in group if eid != event_id]
    if others:
        # An invalidation only ever ends facts of its own key, so re-applying the key's events
        # (the redacted one now has no body: skipped) restores every row it touched.
        for event in load(others):
            materialise(conn, event)
    purge_index_traces(conn, removed)


def _drop_drawers_of(conn: apsw.Connection, event_id: str) -> list[str]:
    contents = []
    for rowid, content in all_rows(conn.execute("SELECT rowid, content FROM drawers WHERE event_id=?", (event_id,))):
        # External content: FTS5 removes exactly the terms of the text it is given (the text indexed).
        conn.execute("INSERT INTO drawers_fts (drawers_fts, rowid, content) VALUES ('delete', ?, ?)", (rowid, content))
        conn.execute("DELETE FROM drawers WHERE rowid=?", (rowid,))
        contents.append(content)
    return contents


def purge_index_traces(conn: apsw.Connection, texts: Iterable[str]) -> str | None:
    """Make sure no trace of the terms of ``texts`` (just deleted) is left in the keyword index.

    FTS5's secure-delete removes a deleted document's entries and terms from the index pages. One
    trace survives it: the segment b-tree (``drawers_fts_idx``) keys each leaf page by a prefix of
    the page's first term, one character longer than what that term shares with the term before
    it. When the deleted term was first on its page, the key keeps its first characters (measured
    at 100k drawers: 3-5 characters, for ~2-6% of rare words deleted) until the segment is written
    again. Then 'optimize' merges every segment into a new one, its keys made from the terms left
    (~0.4 s at 100k drawers); 'rebuild' (~4-6 s there) only if that did not do it.

    Returns what was done: None (nothing left), "optimize" or "rebuild".
    """
    terms = _terms(conn, texts)
    if not terms or not _stale_separators(conn, terms):
        return None
    # 'optimize' leaves an index of one segment as it is: a scratch document (removed at once) makes
    # a second segment, so that the merge writes every page again.
    conn.execute("INSERT INTO drawers_fts (rowid, content) VALUES (?, ?)", (_SCRATCH_ROWID, _SCRATCH_TEXT))
    conn.execute("INSERT INTO drawers_fts (drawers_fts) VALUES ('optimize')")
    conn.execute("INSERT INTO drawers_fts (drawers_fts, rowid, content) VALUES ('delete', ?, ?)",
                 (_SCRATCH_ROWID, _SCRATCH_TEXT))
    if not _stale_separators(conn, terms):
        return "optimize"
    conn.execute("INSERT INTO drawers_fts (drawers_fts) VALUES ('rebuild')")
    return "rebuild"


# A rowid no drawer has (SQLite gives rowids from 1 up), and a word that is no secret.
_SCRATCH_ROWID: Final = -1
_SCRATCH_TEXT: Final = "palace"


def _terms(conn: apsw.Connection, texts: Iterable[str]) -> set[bytes]:
    tokenizer = conn.fts5_tokenizer(*FTS_TOKENIZER)
    terms: set[bytes] = set()
    for text in texts:
        for token in tokenizer(text.encode("utf-8"), apsw.FTS5_TOKENIZE_DOCUMENT, None, include_offsets=False,
                               include_colocated=False):
            # With offsets and colocated tokens off, a token is its text alone (apsw types every form).
            terms.add(cast(str, token).encode("utf-8"))
    return terms


def _stale_separators(conn: apsw.Connection, terms: set[bytes]) -> bool:
    """Whether a separator key of the index is a prefix of one of ``terms`` and of no term the
    index still holds (so it can only be a trace of a deleted one)."""
    # Keys are b"" (a segment's first page) or b"0" (the main index) followed by the term prefix.
    keys = {bytes(k) for (k,) in conn.execute("SELECT term FROM drawers_fts_idx")}
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.drawers_terms USING fts5vocab(main, drawers_fts, 'row')")
    for term in terms:
        for end in range(1, len(term) + 1):
            prefix = term[:end]
            if b"0" + prefix not in keys:
                continue
            # CAST: a byte prefix may end inside a character; compared as text, byte by byte.
            row = conn.execute("SELECT term FROM temp.drawers_terms WHERE term >= CAST(? AS TEXT) ORDER BY term "
                               "LIMIT 1", (prefix,)).fetchone()
            if row is None or not row[0].encode("utf-8").startswith(prefix):
                return True
    return False


def rebuild(conn: apsw.Connection, load: Loader, progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Throw the views away and derive them again from every memory event, in log order."""
    conn.execute("DELETE FROM drawers")
    # 'delete-all' empties the whole index (secure_delete zeroes its pages): no old segment, and
    # so no trace of an earlier redaction, survives a rebuild.
    conn.execute("INSERT INTO drawers_fts (drawers_fts) VALUES ('delete-all')")
    conn.execute("DELETE FROM kg_facts")
    conn.execute("DELETE FROM memory_keys")
    placeholders = ",".join("?" * len(MEMORY_TYPES))
    keys = all_rows(conn.execute(f"SELECT origin, origin_seq FROM events WHERE type IN ({placeholders}) ORDER BY seq",
                                 tuple(sorted(MEMORY_TYPES))))
    for start in range(0, len(keys), 500):
        for event in load(keys[start:start + 500]):
            materialise(conn, event)
        if progress is not None:
            progress(min(start + 500, len(keys)), len(keys))
    (drawers,) = one_row(conn.execute("SELECT count(*) FROM drawers"))
    (facts,) = one_row(conn.execute("SELECT count(*) FROM kg_facts"))
    return {"events": len(keys), "drawers": drawers, "facts": facts}


# -- reading --------------------------------------------------------------------------------------


def _where(wing: str | None, room: str | None, since: str | None, before: str | None) -> tuple[str, list[Any]]:
    clauses, args = [], []
    for column, value in (("d.wing", wing), ("d.room", room)):
        if value:
            clauses.append(f"{column}=?")
            args.append(value)
    if since:
        clauses.append("d.filed_at>=?")
        args.append(since)
    if before:
        clauses.append("d.filed_at<?")
        args.append(before)
    return (" AND " + " AND ".join(clauses)) if clauses else "", args


def drawers_by_id(conn: apsw.Connection, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start:start + 500])
        placeholders = ",".join("?" * len(chunk))
        for row in conn.execute(f"SELECT {DRAWER_COLUMNS} FROM drawers d WHERE d.id IN ({placeholders})", chunk):
            out[row[0]] = drawer_from_row(row)
    return out


def drawers_fingerprint(conn: apsw.Connection) -> tuple[int, int]:
    """(how many drawers, the highest drawer rowid): changes whenever a drawer is filed or dropped."""
    return one_row(conn.execute("SELECT count(*), coalesce(max(rowid), 0) FROM drawers"))


def drawer_ids(conn: apsw.Connection) -> list[tuple[str, str]]:
    """(id, kind) of every drawer."""
    return all_rows(conn.execute("SELECT id, kind FROM drawers"))


def drawer_contents(conn: apsw.Connection, ids: Sequence[str]) -> dict[str, str]:
    """{id: content} of those of the drawers ``ids`` that exist."""
    placeholders = ",".join("?" * len(ids))
    return dict(all_rows(conn.execute(f"SELECT id, content FROM drawers WHERE id IN ({placeholders})", ids)))


def passes(drawer: dict[str, Any], *, wing: str | None = None, room: str | None = None, since: str | None = None,
           before: str | None = None) -> bool:
    """The search filters, applied to a drawer found by its vector."""
    return ((not wing or drawer["wing"] == wing) and (not room or drawer["room"] == room)
            and (not since or drawer["filed_at"] >= since) and (not before or drawer["filed_at"] < before))


# Why: the keyword half should rank by the words that carry meaning; "how", "the", "is" match
# nearly every drawer and drown the signal when ORed (questions are mostly such words).
STOPWORDS: Final = frozenset(
    "a an and are as at be but by can could did do does for from had has have how i if in into is it its me "
    "my no not of on or our should so that the their them then there these they this to was we were what when "
    "where which who whom why will with would you your".split())


# Why 20,000: ranking that many matches costs ~10 ms here. A query whose words together match
# more drawers is narrowed to its rarer words first (Lucene's "common terms" approach): words that
# appear in a large share of drawers add little to bm25 and cost the most to score.
MATCH_BUDGET: Final = 20_000


def query_words(text: str) -> list[str]:
    """The words of ``text`` that carry meaning, once each (a query of stopwords only keeps them)."""
    words = _WORD_RE.findall(text)
    meaningful = [w for w in words if w.lower() not in STOPWORDS] or words
    return list({w.lower(): w for w in meaningful}.values())


def _any_of(words: Sequence[str]) -> str:
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


def _all_of(words: Sequence[str]) -> str:
    return " AND ".join('"' + w.replace('"', '""') + '"' for w in words)


def keyword_search(conn: apsw.Connection, query: str, *, wing: str | None = None, room: str | None = None,
                   since: str | None = None, before: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """Drawers matching any of the query's words, best first (score = -bm25, higher is better).

    Scores are always the bm25 of the whole query. In a large palace, when the words together
    match more than ``MATCH_BUDGET`` drawers, the candidates are narrowed: drawers holding one of
    the rarer words (exactly the best ``limit`` of them), then drawers holding all the common words.
    Drawers holding only some of the common words, and none of the rare ones, are left out.
    """
    words = query_words(query)
    if not words:
        return []
    where, args = _where(wing, room, since, before)

    def ranked(match: str) -> list[dict[str, Any]]:
        rows = all_rows(conn.execute(
            f"SELECT {DRAWER_COLUMNS}, bm25(drawers_fts) FROM drawers_fts JOIN drawers d "
            f"ON d.rowid = drawers_fts.rowid WHERE drawers_fts MATCH ?{where} ORDER BY bm25(drawers_fts) LIMIT ?",
            (match, *args, limit)))
        return [{**drawer_from_row(r), "score": -float(r[10])} for r in rows]

    (size,) = one_row(conn.execute("SELECT coalesce(max(rowid), 0) FROM drawers"))
    if size <= MATCH_BUDGET or len(words) == 1:
        return ranked(_any_of(words))
    matches = {w: one_row(conn.execute("SELECT count(*) FROM drawers_fts WHERE drawers_fts MATCH ?",
                                       (_any_of([w]),)))[0] for w in words}
    present = [w for w in words if matches[w]]
    if sum(matches.values()) <= MATCH_BUDGET or len(present) <= 1:
        return ranked(_any_of(present or words))
    rare: list[str] = []
    budget = MATCH_BUDGET
    for word in sorted(present, key=matches.__getitem__):
        if matches[word] > budget:
            break
        rare.append(word)
        budget -= matches[word]
    common = [w for w in present if w not in rare]
    hits: dict[str, dict[str, Any]] = {}
    if rare:
        # With a common word too: its exact whole-query score. Only rare words: the rare words'
        # score is the whole score (bm25 adds nothing for absent words).
        for hit in [*ranked(f"({_any_of(rare)}) AND ({_any_of(common)})"), *ranked(_any_of(rare))]:
            hits.setdefault(hit["drawer_id"], hit)
    if len(hits) < limit:
        for hit in ranked(_all_of(common)):
            hits.setdefault(hit["drawer_id"], hit)
    if not rare and len(hits) < limit:
        return ranked(_any_of(present))  # common words that seldom meet: the full (slower) ranking
    return sorted(hits.values(), key=lambda h: -h["score"])[:limit]


def facts_about(conn: apsw.Connection, entity: str, as_of: str, direction: str = "both") -> dict[str, Any]:
    """MemPalace kg_query: the facts touching ``entity``, split by their state ``as_of``."""
    sides = {"outgoing": ["subject"], "incoming": ["object"], "both": ["subject", "object"]}[direction]
    rows: list[Sequence[Any]] = []
    for side in sides:
        rows += conn.execute(
            f"SELECT id, subject, predicate, object, valid_from, valid_to, added_by, added_at, source_drawer_id "
            f"FROM kg_facts WHERE {side}=? ORDER BY added_at, id", (entity,)).fetchall()
    seen, facts = set(), []
    for r in rows:
        if r[0] in seen:
            continue
        seen.add(r[0])
        state = fact_state(r[4], r[5], as_of)
        facts.append({"triple_id": r[0], "subject": r[1], "predicate": r[2], "object": r[3], "valid_from": r[4],
                      "valid_to": r[5], "added_by": r[6], "added_at": r[7], "source_drawer_id": r[8],
                      "state": state, "fact": f"{r[1]} → {r[2]} → {r[3]}",
                      "direction": "outgoing" if r[1].lower() == entity.lower() else "incoming"})
    return {"entity": entity, "as_of": as_of,
            "active_facts": [f for f in facts if f["state"] == "active"],
            "historical_facts": [f for f in facts if f["state"] == "historical"],
            "future_facts": [f for f in facts if f["state"] == "future"],
            "facts": facts, "count": len(facts)}


def known_entities(conn: apsw.Connection, like: str, limit: int = 10) -> list[str]:
    pattern = f"%{like}%"
    rows = all_rows(conn.execute("SELECT subject FROM kg_facts WHERE subject LIKE ? UNION SELECT object FROM kg_facts "
                                 "WHERE object LIKE ? LIMIT ?", (pattern, pattern, limit)))
    return sorted({r[0] for r in rows})


def diary_page(conn: apsw.Connection, wing: str, last_n: int) -> dict[str, Any]:
    (total,) = one_row(conn.execute("SELECT count(*) FROM drawers WHERE wing=? AND room=?", (wing, DIARY_ROOM)))
    rows = all_rows(conn.execute(
        "SELECT filed_at, topic, content, id FROM drawers WHERE wing=? AND room=? ORDER BY filed_at DESC, rowid DESC "
        "LIMIT ?", (wing, DIARY_ROOM, last_n)))
    entries = [{"date": r[0][:10], "timestamp": r[0], "topic": r[1], "content": r[2], "entry_id": r[3]} for r in rows]
    return {"wing": wing, "entries": entries, "total": total, "showing": len(entries)}


def diaries(conn: apsw.Connection) -> dict[str, dict[str, Any]]:
    """Every diary: its agent (or its wing's name), wing, entries and newest entry's time."""
    out: dict[str, dict[str, Any]] = {}
    for agent, wing, count, last in conn.execute(
            "SELECT agent, wing, count(*), max(filed_at) FROM drawers WHERE kind='diary' GROUP BY wing"):
        name = agent or wing.removeprefix("wing_")
        out[name] = {"agent": name, "wing": wing, "last_activity": last, "diary_entries": count}
    return out


def agents(conn: apsw.Connection) -> dict[str, dict[str, Any]]:
    """Every agent the log has seen: authors of events and owners of diaries, with last activity."""
    seen: dict[str, dict[str, Any]] = {}
    for author, last in conn.execute("SELECT from_agent, max(created_at) FROM events GROUP BY from_agent"):
        seen[author] = {"agent": author, "wing": diary_wing(author), "last_activity": last, "diary_entries": 0}
    for name, diary in diaries(conn).items():
        entry = seen.setdefault(name, dict(diary))
        entry["diary_entries"] = diary["diary_entries"]
        if diary["last_activity"] and (entry["last_activity"] or "") < diary["last_activity"]:
            entry["last_activity"] = diary["last_activity"]
    return seen


def tunnels(conn: apsw.Connection, wing_a: str | None, wing_b: str | None) -> list[dict[str, Any]]:
    """Rooms that bridge wings: both given wings, or any two wings when one or none is given."""
    rows = all_rows(conn.execute("SELECT room, wing, count(*) FROM drawers GROUP BY room, wing ORDER BY room, wing"))
    by_room: dict[str, dict[str, int]] = {}
    for room, wing, count in rows:
        by_room.setdefault(room, {})[wing] = count
    out = []
    for room, wings in sorted(by_room.items()):
        wanted = [w for w in (wing_a, wing_b) if w]
        if wanted and not all(w in wings for w in wanted):
            continue
        if len(wings) < 2:
            continue
        out.append({"room": room, "wings": sorted(wings), "drawers": sum(wings.values())})
    return out


def drawer(reads: Reads, drawer_id: str) -> dict[str, Any] | None:
    """The drawer ``drawer_id`` as the views hold it, or None."""
    row = reads.db.reader().execute(f"SELECT {DRAWER_COLUMNS} FROM drawers d WHERE d.id=?", (drawer_id,)).fetchone()
    return drawer_from_row(row) if row else None


# -- the views' part of the store (parts.py) -------------------------------------------------------


def _loader(conn: apsw.Connection) -> Loader:
    def load(keys: Sequence[tuple[str, int]]) -> list[SignedEvent]:
        return [signed_event_at(conn, origin, seq) for origin, seq in keys]
    return load


def rebuild_views(ctx: WriteContext, progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """A write job: derive the views again from the log (and record this derivation's version)."""
    conn = ctx.conn
    counts = rebuild(conn, _loader(conn), progress)
    conn.execute("INSERT INTO meta VALUES ('memory_views', ?) ON CONFLICT(key) DO UPDATE SET "
                 "value=excluded.value", (VIEWS_VERSION,))
    return counts


def ensure_views(ctx: WriteContext) -> None:
    """A write job run at open: rebuild the views when they were made by another derivation."""
    row = ctx.conn.execute("SELECT value FROM meta WHERE key='memory_views'").fetchone()
    if row is not None and row[0] == VIEWS_VERSION:
        return
    counts = rebuild_views(ctx)
    _LOGGER.info("memory views built from the log: %d drawers, %d facts", counts["drawers"], counts["facts"])


def _stored(ctx: WriteContext, event: SignedEvent, seq: int) -> None:
    materialise(ctx.conn, event)


def _redacted(ctx: WriteContext, event_id: str) -> None:
    # After the body is gone: the views derive again what the event shared with others (the same
    # drawer or fact) from the log, which must no longer show this event's body.
    unmaterialise(ctx.conn, event_id, _loader(ctx.conn))


#: the memory views' part of the store
PART: Final = StorePart("memory", stored=_stored, redacted=_redacted, opened=ensure_views)


class MemoryReads(ReadSet):
    """The memory's reads on the async store (``store.reads(MemoryReads)``), each on a reader thread."""

    drawer = StoreRead(drawer)
    drawers_by_id = StoreRead(drawers_by_id, connection=True)
    drawers_fingerprint = StoreRead(drawers_fingerprint, connection=True)
    drawer_ids = StoreRead(drawer_ids, connection=True)
    drawer_contents = StoreRead(drawer_contents, connection=True)
    keyword_search = StoreRead(keyword_search, connection=True)
    facts_about = StoreRead(facts_about, connection=True)
    known_entities = StoreRead(known_entities, connection=True)
    diary_page = StoreRead(diary_page, connection=True)
    diaries = StoreRead(diaries, connection=True)
    tunnels = StoreRead(tunnels, connection=True)
