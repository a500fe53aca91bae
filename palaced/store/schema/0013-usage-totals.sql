-- 0013: usage totals kept at commit (issue 43 §1, findings 3 and 4): which usage reports count,
-- and their running sums per UTC day, so a `usage` call (and a worker's budget check before each
-- look at the queue) reads groups, not every report, and never counts a report the authority
-- table does not let count (palace_proto.authority, rule usage.report).
--
-- usage_reports: one row per usage.report event this replica holds, whoever wrote it, with what
--   judging and summing it needs: the task it is on (its correlation id; NULL: on none), the task
--   its metadata names (named_task; NULL: none, or not text), its writer and origin, created_at
--   with six fraction digits (the order every replica agrees on: palace_proto.agents.order_key)
--   and its UTC day, and its figures (NULL when its metadata does not check: valid = 0). counts = 1
--   exactly when palace_proto.tasks.derive_task, run on the task's events, lists the report among
--   the task's usage_reports and its metadata checks. Written by palaced/store/usage.py only, in
--   the transaction that stores an event: a report gets its row (counts 0) when stored, and every
--   task whose verdicts a batch may have moved (a report, a request, a status, a release or a
--   reassign on it; a registry event of an agent that wrote on it) is judged again before the batch
--   commits. Invariant: the counts flags are derive_task's verdict on the events committed.
-- usage_totals: per (by, UTC day, key), for by in task, agent, machine, model and day (key: the
--   task id, agent, machine, model — '' when not reported — or the day itself), the sums of the
--   reports that count: runs, tokens, the known costs in micro-dollars and the runs of unknown
--   cost. Invariant: every row equals the sums over usage_reports WHERE counts = 1 of its group;
--   a group with no run has no row. A question about usage reads these rows: per day, so `since` a
--   date reads whole days (a `since` with a time of day reads the counted reports of its first day).
-- meta usage_reports_held: how many rows usage_reports has (flagged = held - counted).
--
-- This script only creates the tables: which reports count takes the agent registry, which is not
-- loaded while migrations run. The store fills them from the log when it opens a database whose
-- meta usage_version is not the derivation's (store/usage.py ensure_judged: every usage.report
-- of the log, then every task holding one judged), as it does the memory views.
CREATE TABLE IF NOT EXISTS usage_reports (
    event_id           TEXT PRIMARY KEY,
    task               TEXT,
    named_task         TEXT,
    agent              TEXT NOT NULL,
    origin             TEXT NOT NULL,
    created_at         TEXT NOT NULL,
    day                TEXT NOT NULL,
    machine            TEXT,
    model              TEXT,
    tokens_in          INTEGER,
    tokens_out         INTEGER,
    cache_read_tokens  INTEGER,
    cache_write_tokens INTEGER,
    cost_micros        INTEGER,
    valid              INTEGER NOT NULL,
    counts             INTEGER NOT NULL DEFAULT 0
) STRICT, WITHOUT ROWID;

-- A task's reports by writer, in order (judging one task reads its claimants' reports only).
CREATE INDEX IF NOT EXISTS usage_reports_task ON usage_reports(task, agent, created_at, event_id);
-- The reports of a task that count now (what a new judgement is compared with).
CREATE INDEX IF NOT EXISTS usage_reports_counted ON usage_reports(task) WHERE counts = 1;
-- The reports that count, by time (the first day of a `since` with a time of day).
CREATE INDEX IF NOT EXISTS usage_reports_counted_at ON usage_reports(created_at) WHERE counts = 1;

CREATE TABLE IF NOT EXISTS usage_totals (
    by                 TEXT NOT NULL,
    day                TEXT NOT NULL,
    key                TEXT NOT NULL,
    runs               INTEGER NOT NULL,
    tokens_in          INTEGER NOT NULL,
    tokens_out         INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cost_micros        INTEGER NOT NULL,
    unpriced_runs      INTEGER NOT NULL,
    PRIMARY KEY (by, day, key)
) STRICT, WITHOUT ROWID;

INSERT INTO meta (key, value) VALUES ('usage_reports_held', '0') ON CONFLICT (key) DO NOTHING;
