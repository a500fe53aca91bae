-- 0004: the shared memory's materialised views (derived from memory.* events; see memory_views.py).
--
-- Everything here can be thrown away and rebuilt from the log (`palacectl memory rebuild`); the
-- log is the truth. drawers holds drawers and diary entries (kind), keyed by their content-derived
-- id: the first event that files a given content in a wing and room makes the drawer, later ones
-- are the same drawer. drawers_fts indexes drawer content for keyword search (rowid = drawers.rowid).
-- kg_facts holds knowledge-graph triples with their validity; invalidation sets valid_to.

CREATE TABLE drawers (
    id          TEXT PRIMARY KEY,
    event_id    TEXT NOT NULL,
    kind        TEXT NOT NULL,
    wing        TEXT NOT NULL,
    room        TEXT NOT NULL,
    topic       TEXT,
    agent       TEXT,
    content     TEXT NOT NULL,
    source_file TEXT,
    added_by    TEXT NOT NULL,
    filed_at    TEXT NOT NULL
) STRICT;
CREATE INDEX drawers_place ON drawers(wing, room, filed_at);
CREATE INDEX drawers_filed ON drawers(filed_at);
CREATE INDEX drawers_event ON drawers(event_id);

CREATE VIRTUAL TABLE drawers_fts USING fts5(content, tokenize = 'porter unicode61');

CREATE TABLE kg_facts (
    id               TEXT PRIMARY KEY,
    subject          TEXT NOT NULL COLLATE NOCASE,
    predicate        TEXT NOT NULL COLLATE NOCASE,
    object           TEXT NOT NULL COLLATE NOCASE,
    valid_from       TEXT,
    valid_to         TEXT,
    source_drawer_id TEXT,
    source_file      TEXT,
    added_by         TEXT NOT NULL,
    added_at         TEXT NOT NULL,
    event_id         TEXT NOT NULL,
    ended_by         TEXT
) STRICT;
CREATE INDEX kg_subject ON kg_facts(subject);
CREATE INDEX kg_object ON kg_facts(object);
CREATE INDEX kg_event ON kg_facts(event_id);
