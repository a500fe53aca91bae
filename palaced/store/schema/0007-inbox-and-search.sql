-- 0007: each agent's inbox cursor, kept by the daemon, and full-text search over event bodies
-- (issue 16).
--
-- inbox_cursors: per agent id, how far its inbox was handled (read_seq, read_event_id: everything
--   addressed to the agent or to '*', from someone else, up to that local seq) and how far it was
--   listed (listed_seq: `mark-read` never moves the cursor past what the inbox has shown). Local
--   seqs, never timestamps: an event that replicates late arrives with a new, higher seq, after
--   the cursor, so it is never skipped. Local to this replica (not an event, never replicated):
--   the agent's own daemon keeps its cursor. Invariant: read_seq <= listed_seq, and neither
--   ever decreases.
CREATE TABLE inbox_cursors (
    agent         TEXT PRIMARY KEY,
    read_seq      INTEGER NOT NULL DEFAULT 0,
    read_event_id TEXT,
    listed_seq    INTEGER NOT NULL DEFAULT 0,
    updated_at    TEXT NOT NULL
) STRICT;

-- And full-text search over event bodies (`palacectl list --text`).
--
-- events_fts: the words of each event's body, keyed by the event's local seq (rowid). External
--   content (content = 'events'): the index keeps no second copy of any body. A redaction
--   deletes its event's row with the body as it was indexed (event_search.forget, before the
--   body is purged), and secure-delete makes that deletion erase the words from the index pages
--   at once instead of leaving them until a merge (the guarantee of the drawers' index, schema
--   0005; a contentless table with contentless_delete would only mark the row deleted and keep
--   its words). Filled in the background, off the append path (event_search.py: meta
--   'events_fts_seq' is the newest seq it has indexed); a text search first indexes what is
--   missing, so it never misses a committed event. Keep the tokenizer in step with
--   memory_views.FTS_TOKENIZER.
CREATE VIRTUAL TABLE events_fts USING fts5(body, content = 'events', content_rowid = 'seq',
                                           tokenize = 'porter unicode61');
INSERT INTO events_fts (events_fts, rank) VALUES ('secure-delete', 1);
