-- 0005: what holding against a hostile member needs (issue 11).
--
-- Sections, in order: redaction traces (memory indexes, fork evidence), origin bindings with proofs,
-- redaction authority.

-- == redaction traces =========================================================================
-- The keyword index is rebuilt so that a redacted drawer leaves nothing in it:
-- * external content (content = 'drawers'): the index keeps no second copy of each drawer's text
--   (FTS5's own drawers_fts_content table, which kept one, is gone);
-- * secure-delete: deleting a drawer removes its terms from the index pages at once, instead of
--   writing a tombstone that leaves them in older segments until a merge (measured before this
--   change: a redacted drawer's rare words stayed readable in palace.sqlite3, prefix-compressed);
-- * dropping the old index zeroes its pages (the store runs with PRAGMA secure_delete), which
--   removes what redactions before this release left behind.
-- The views are then derived again from the log (memory_views.VIEWS_VERSION 2), which fills it.
-- Keep the tokenizer in step with memory_views.FTS_TOKENIZER.
DROP TABLE drawers_fts;
CREATE VIRTUAL TABLE drawers_fts USING fts5(content, content = 'drawers', content_rowid = 'rowid',
                                            tokenize = 'porter unicode61');
INSERT INTO drawers_fts (drawers_fts, rank) VALUES ('secure-delete', 1);

-- memory_keys: which memory events carry the same drawer (key: its drawer id) or the same fact
-- (key: palace_proto.memory.fact_key of its subject, predicate and object), so that redacting
-- one finds the others (memory_views.related_memory_events) and the views re-derive what they
-- shared. Derived like the views; a redacted event's row goes with it.
CREATE TABLE memory_keys (
    event_id TEXT PRIMARY KEY,
    key      TEXT NOT NULL
) STRICT;
CREATE INDEX memory_keys_key ON memory_keys(key);

-- == origin bindings ==========================================================================
-- bindings.proof: what shows the origin belongs to the certificate's key (palace_proto.bindings):
--   the 16-byte nonce of a key-derived origin (ori2_…), or the key's 64-byte signature for a legacy
--   origin (ori_…). NULL for bindings stored before this release: still trusted here (they were
--   accepted then), but never relayed without a proof. meta 'origin_nonce' (hex) is the nonce of
--   this replica's own (key-derived) origin.
ALTER TABLE bindings ADD COLUMN proof BLOB;

-- == redaction authority ======================================================================
-- redaction_claims: an event.redact from a peer whose target has not arrived yet. Who may redact
--   is judged when the target arrives: the target's own origin (redact_origin = its origin), or a
--   redaction signed by the palace CA (by_ca = 1). `redactions` holds only honoured redactions.
CREATE TABLE redaction_claims (
    target_id     TEXT NOT NULL,
    redact_event  TEXT NOT NULL,
    redact_origin TEXT NOT NULL,
    by_ca         INTEGER NOT NULL,
    PRIMARY KEY (target_id, redact_event)
) STRICT;
-- Redactions recorded before this release whose target never arrived were trusted blindly; they
-- become claims, judged by the rule above when (if) the target arrives.
INSERT OR IGNORE INTO redaction_claims (target_id, redact_event, redact_origin, by_ca)
    SELECT r.target_id, r.redact_event, e.origin, 0 FROM redactions r JOIN events e ON e.id = r.redact_event
    WHERE NOT EXISTS (SELECT 1 FROM events t WHERE t.id = r.target_id);
DELETE FROM redactions
    WHERE NOT EXISTS (SELECT 1 FROM events t WHERE t.id = redactions.target_id)
      AND EXISTS (SELECT 1 FROM events e WHERE e.id = redactions.redact_event);
