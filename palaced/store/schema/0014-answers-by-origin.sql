-- 0014: a question's answers by the daemon origin that wrote them, in the order every replica
-- settles them (issue 43, finding 5).
--
-- A question is settled from each origin's first answers written as a person's id
-- (palace_proto.authority.MAX_ANSWERS_PER_ORIGIN of them, by created_at then id): found here by
-- index seeks, whatever else one origin wrote. Before, answers were read first-10,000-in-local-order,
-- counting or not, so 10,000 junk answers from one member hid the person's real one. Only answers
-- written as a person's id can count, so only they are in the index: the filter comes before any
-- bound, and junk written as agents costs nothing to skip.
CREATE INDEX IF NOT EXISTS events_person_answers ON events(ack_of, origin, created_at, id)
    WHERE type = 'question.answer' AND from_agent >= 'human:' AND from_agent < 'human;';
