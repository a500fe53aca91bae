-- 0009: every task the palace holds, so one that is still open is found however old it is.
--
-- task_threads: one row per task (a correlation with a task.request; the request's own id when it
--   names no correlation), with request_seq, the local seq of its first request here. settled_seq
--   is written by the daemon (store/task_threads.py), never by this script: the newest local seq
--   on the task when the daemon derived it finished (applied, failed, blocked, superseded), and
--   only if no newer event was on it by then. A task is *unsettled* while settled_seq is NULL:
--   the task list, the ready queue and the reconciler read the newest requests and every
--   unsettled task, instead of only the newest 500 requests (an open task behind 500 newer ones
--   dropped out of `task ready` before). The state itself stays derived in Python
--   (palace_proto.tasks): SQL only notices that a finished task changed. Triggers keep the rows,
--   whichever path inserted the event (a local append, a peer's event, an import):
--   - a request adds its task, or unsettles it (a second request on one correlation);
--   - any other event on a settled task unsettles it (a reply can reopen a finished task). On an
--     unsettled task the trigger only looks the row up: the append path writes nothing more.
--   - A task's state also depends on which of its events are impersonations (palace_proto.agents),
--     a verdict that an agent's registry events can change after the fact (a registration learnt
--     after a partition): a registry event unsettles every task its agent wrote on.
--   Invariant: a task is settled only if, as of its settled_seq and ever since, its events derive
--   it finished.
CREATE TABLE task_threads (
    correlation_id TEXT PRIMARY KEY,
    request_seq    INTEGER NOT NULL,
    settled_seq    INTEGER
) STRICT, WITHOUT ROWID;

INSERT INTO task_threads (correlation_id, request_seq)
    SELECT coalesce(correlation_id, id), min(seq) FROM events WHERE type = 'task.request'
    GROUP BY coalesce(correlation_id, id);

CREATE INDEX task_threads_newest ON task_threads(request_seq);
CREATE INDEX task_threads_unsettled ON task_threads(request_seq) WHERE settled_seq IS NULL;

CREATE TRIGGER events_follow_task_requests AFTER INSERT ON events WHEN NEW.type = 'task.request' BEGIN
    INSERT INTO task_threads (correlation_id, request_seq) VALUES (coalesce(NEW.correlation_id, NEW.id), NEW.seq)
        ON CONFLICT (correlation_id) DO UPDATE SET settled_seq = NULL WHERE settled_seq IS NOT NULL;
END;

CREATE TRIGGER events_follow_task_threads AFTER INSERT ON events
        WHEN NEW.correlation_id IS NOT NULL AND NEW.type != 'task.request' BEGIN
    UPDATE task_threads SET settled_seq = NULL WHERE correlation_id = NEW.correlation_id AND settled_seq IS NOT NULL;
END;

CREATE TRIGGER events_unsettle_agent_tasks AFTER INSERT ON events
        WHEN NEW.type IN ('agent.register', 'agent.transfer', 'agent.retire') AND json_valid(NEW.metadata) BEGIN
    UPDATE task_threads SET settled_seq = NULL WHERE settled_seq IS NOT NULL AND correlation_id IN (
        SELECT correlation_id FROM events
        WHERE from_agent = json_extract(NEW.metadata, '$.agent') AND correlation_id IS NOT NULL);
END;
