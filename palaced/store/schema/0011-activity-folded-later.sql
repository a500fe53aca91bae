-- 0011: agent_activity is folded from the log a little after the commits (store/follow.py,
-- ``fold_activity``), no longer inside every event's own transaction; a read adds the events not
-- folded yet (queries.agent_activity), so what it returns is unchanged.
--
-- Why: the upsert cost each commit a statement and a B-tree page of its own (a WAL frame to write
-- and to sync): measured here (issue 27), about 25 us of a lone append's 450 us commit, and of a
-- peer's event on the replica that applies it.
--
-- Every event stored so far was counted as it was inserted: the fold starts after the last one.
INSERT INTO meta (key, value) SELECT 'agent_activity_seq', CAST(coalesce(max(seq), 0) AS TEXT) FROM events
WHERE true ON CONFLICT (key) DO UPDATE SET value = excluded.value;
