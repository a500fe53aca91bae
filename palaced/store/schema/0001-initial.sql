-- 0001: the event log, the version vector, artifacts.
--
-- Invariants (the store keeps them; a violation is a bug, never user error):
-- * events are never deleted. `seq` is the local arrival order (the rowid): it only grows on this
--   replica, and is the cursor behind since_event_id / before_event_id.
-- * (origin, origin_seq) is unique and, per origin, contiguous from 1: origin_seq N is stored only
--   after N-1. `prev_hash` of N is `event_hash` of N-1 (zero bytes for 1).
-- * origins.max_seq / head_hash equal the max origin_seq / its event_hash among the origin's rows,
--   and are updated in the same transaction as the rows (the version vector replication sends).
-- * `body` is NULL only for redacted events; `body_sha256` always holds the original hash, which
--   the signature covers, so a redacted event still verifies.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;

CREATE TABLE origins (
    origin     TEXT PRIMARY KEY,
    public_key BLOB NOT NULL,
    max_seq    INTEGER NOT NULL DEFAULT 0,
    head_hash  BLOB NOT NULL
) STRICT;

CREATE TABLE events (
    seq            INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    origin         TEXT NOT NULL REFERENCES origins(origin),
    origin_seq     INTEGER NOT NULL,
    prev_hash      BLOB NOT NULL,
    event_hash     BLOB NOT NULL,
    signature      BLOB NOT NULL,
    type           TEXT NOT NULL,
    stream         TEXT NOT NULL,
    room           TEXT NOT NULL,
    topic          TEXT,
    from_agent     TEXT NOT NULL,
    to_agent       TEXT,
    correlation_id TEXT,
    branch         TEXT,
    base_commit    TEXT,
    status         TEXT,
    ack_of         TEXT,
    artifact_ids   TEXT NOT NULL DEFAULT '[]',  -- JSON array, in the signed order
    body           TEXT,                        -- NULL once redacted
    body_sha256    BLOB NOT NULL,
    metadata       TEXT NOT NULL DEFAULT '{}',  -- canonical JSON, as signed
    created_at     TEXT NOT NULL,
    UNIQUE (origin, origin_seq)
) STRICT;

-- An index on (col) is an index on (col, rowid): these serve "filter, ordered by seq".
CREATE INDEX events_to_agent ON events(to_agent);
CREATE INDEX events_stream ON events(stream);
CREATE INDEX events_correlation ON events(correlation_id);
CREATE INDEX events_type ON events(type);
CREATE INDEX events_from_agent ON events(from_agent);
CREATE INDEX events_ack_of ON events(ack_of) WHERE ack_of IS NOT NULL;

-- Content-addressed: id and sha256 derive from the bytes, so identical bytes are stored once.
CREATE TABLE artifacts (
    id         TEXT PRIMARY KEY,
    sha256     TEXT NOT NULL UNIQUE,
    kind       TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    content    BLOB NOT NULL,
    created_by TEXT NOT NULL,
    created_at TEXT NOT NULL,
    metadata   TEXT NOT NULL DEFAULT '{}'
) STRICT;
