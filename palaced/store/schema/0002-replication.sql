-- 0002: what replication needs beyond the log itself.
--
-- forks: a second, different event at an (origin, origin_seq) we already hold — or one whose
--   chain does not link to ours. The first event stays; the rejected one is kept here (as its
--   wire form) as evidence, and is reported by status/peers. Never applied.
-- redactions: every event id whose body has been redacted, by which event.redact. An original
--   that arrives later from a slower peer is stored without its body.

CREATE TABLE forks (
    origin        TEXT NOT NULL,
    origin_seq    INTEGER NOT NULL,
    kept_hash     BLOB,
    rejected_hash BLOB NOT NULL,
    rejected      BLOB NOT NULL,
    detected_at   TEXT NOT NULL,
    source        TEXT,
    PRIMARY KEY (origin, origin_seq, rejected_hash)
) STRICT;

CREATE TABLE redactions (
    target_id    TEXT PRIMARY KEY,
    redact_event TEXT NOT NULL
) STRICT;
