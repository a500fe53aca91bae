-- 0012: each agent's read position in each agent room (issue 29, docs/rooms.md), kept by the
-- daemon the agent reads through, like the inbox cursor (0007).
--
-- room_cursors: per (room id, agent id), how far the agent has read the room: read_seq is the
--   local seq of the last room event a read returned to it (0: it has read, and nothing was
--   returned yet). The row's presence means "has read before": a first read returns the agent's
--   own turns too, later reads leave them out. Local seqs, never timestamps: a turn that
--   replicates late (the other side of a partition) arrives with a new, higher seq, after the
--   position, so it is never skipped. Local to this replica (not an event, never replicated),
--   so a read-only observer keeps positions too. Invariant: read_seq never decreases. Bounded by
--   store/rooms.py (MAX_ROOM_CURSORS rows).
CREATE TABLE IF NOT EXISTS room_cursors (
    room_id    TEXT NOT NULL,
    agent      TEXT NOT NULL,
    read_seq   INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (room_id, agent)
) STRICT, WITHOUT ROWID;
