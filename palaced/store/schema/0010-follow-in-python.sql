-- 0010: what every stored event updates besides its own row (agent_activity, task_threads) is
-- written by the store's one insert path (store/follow.py), no longer by triggers on events.
--
-- Why: any AFTER INSERT trigger on events made every insert run a trigger sub-program, whatever
-- its WHEN clause said: measured here (issue 27), an insert took 42 us with the four triggers and
-- 11 us without them, most of it for triggers that did nothing (a note is neither a task event
-- nor a registry event). follow.py issues the same statements, and only for the events they
-- concern (every event counts in agent_activity; task events and registry events move
-- task_threads), in the same transaction as the insert, whichever path stored the event (a local
-- append, a peer's event, an import).
DROP TRIGGER IF EXISTS events_count_agent_activity;
DROP TRIGGER IF EXISTS events_follow_task_requests;
DROP TRIGGER IF EXISTS events_follow_task_threads;
DROP TRIGGER IF EXISTS events_unsettle_agent_tasks;
