-- 0006: fewer B-trees written per append (issue 13).
--
-- Every append writes one page of every index it enters, and the commit writes (and fsyncs) each
-- such page to the WAL. Many events have no recipient or no correlation id; their NULLs were
-- indexed for nothing: no query looks events up by a missing recipient or correlation. These two
-- indexes now hold only the rows that have one (`to_agent = ?` and `correlation_id = ?` imply
-- IS NOT NULL, so SQLite still uses them for every query it used them for).
DROP INDEX events_to_agent;
CREATE INDEX events_to_agent ON events(to_agent) WHERE to_agent IS NOT NULL;
DROP INDEX events_correlation;
CREATE INDEX events_correlation ON events(correlation_id) WHERE correlation_id IS NOT NULL;
