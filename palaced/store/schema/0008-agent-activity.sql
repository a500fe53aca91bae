-- 0008: who wrote how much, kept as the log grows (issue 17: the dashboard's "Now" on a palace of
-- a million events).
--
-- agent_activity: per (from_agent, origin), how many events and when the first and last were
--   written. The agents roster and its impersonation checks read it (a few hundred rows) instead
--   of grouping the whole log, which took a second per call at a million events. A trigger keeps
--   it: every row inserted into events counts once, whichever path inserted it (a local append, a
--   peer's event, an import). Events are never deleted (a redaction purges a body, not its row),
--   so inserts are all there is to follow. Invariant: for every (from_agent, origin), events =
--   count(*), first_at = min(created_at), last_at = max(created_at) over those rows of events.
CREATE TABLE agent_activity (
    from_agent TEXT NOT NULL,
    origin     TEXT NOT NULL,
    events     INTEGER NOT NULL,
    first_at   TEXT NOT NULL,
    last_at    TEXT NOT NULL,
    PRIMARY KEY (from_agent, origin)
) STRICT, WITHOUT ROWID;

INSERT INTO agent_activity (from_agent, origin, events, first_at, last_at)
    SELECT from_agent, origin, count(*), min(created_at), max(created_at) FROM events GROUP BY from_agent, origin;

CREATE TRIGGER events_count_agent_activity AFTER INSERT ON events BEGIN
    INSERT INTO agent_activity (from_agent, origin, events, first_at, last_at)
        VALUES (NEW.from_agent, NEW.origin, 1, NEW.created_at, NEW.created_at)
        ON CONFLICT (from_agent, origin) DO UPDATE SET
            events = events + 1,
            first_at = min(first_at, excluded.first_at),
            last_at = max(last_at, excluded.last_at);
END;
