"""The memory's handlers (palaced/handlers/memory.py) without a socket: drawers filed once and
found by keywords (embedding is off here), facts that are added and ended, diaries, and agents
seen in the log or watching now."""

from __future__ import annotations

import pytest

from palace_proto.errors import ApiError, NotFound, ValidationError
from palaced.features import memory
from palaced.features.memory import MemoryState
from palaced.handlers import log
from tests.daemon.handler_context import open_context

DRAWER = {"wing": "palace", "room": "decisions", "content": "We chose SQLite for the replica.", "added_by": "alice"}


async def test_a_drawer_is_filed_once_and_found_by_its_words(tmp_path):
    async with open_context(tmp_path) as ctx:
        filed = await memory.memory_add(ctx, DRAWER)
        assert filed["duplicate"] is False and filed["event_id"]
        again = await memory.memory_add(ctx, DRAWER)
        assert again["duplicate"] is True and again["drawer_id"] == filed["drawer_id"]
        assert (await log.list_events(ctx, {}))["count"] == 1
        found = await memory.search(ctx, {"query": "sqlite replica"})
        assert found["mode"] == "keyword" and [h["drawer_id"] for h in found["results"]] == [filed["drawer_id"]]
        assert (await memory.drawer_get(ctx, {"drawer_id": filed["drawer_id"]}))["content"] == DRAWER["content"]
        with pytest.raises(NotFound):
            await memory.drawer_get(ctx, {"drawer_id": "nope"})


async def test_search_refuses_bad_queries_and_vectors_it_does_not_have(tmp_path):
    async with open_context(tmp_path) as ctx:
        for args, field in (({"query": "  "}, "query"), ({"query": "x" * 251}, "query"),
                            ({"query": "x", "mode": "fuzzy"}, "mode"), ({"query": "x", "limit": 0}, "limit")):
            with pytest.raises(ValidationError) as refused:
                await memory.search(ctx, args)
            assert refused.value.field == field
        with pytest.raises(ApiError, match="vector search is not available"):
            await memory.search(ctx, {"query": "x", "mode": "vector"})


async def test_a_fact_is_added_queried_and_ended(tmp_path):
    async with open_context(tmp_path) as ctx:
        fact = {"subject": "alice", "predicate": "works_on", "object": "palace", "added_by": "bob"}
        added = await memory.kg_add(ctx, fact)
        assert added["triple_id"] and added["event_id"]
        assert (await memory.kg_query(ctx, {"entity": "alice"}))["count"] == 1
        ended = await memory.kg_invalidate(ctx, {**fact, "ended": "2020-01-01"})
        assert ended["facts_ended"] == 1
        with pytest.raises(ValidationError):
            await memory.kg_query(ctx, {"entity": "alice", "direction": "sideways"})


async def test_a_diary_is_written_and_read_back(tmp_path):
    async with open_context(tmp_path) as ctx:
        written = await memory.diary_write(ctx, {"agent_name": "Bob", "entry": "first day"})
        assert written["agent"] == "bob" and written["entry_id"]
        page = await memory.diary_read(ctx, {"agent_name": "bob"})
        assert [e["content"] for e in page["entries"]] == ["first day"] and page["agent"] == "bob"


async def test_a_rebuild_derives_the_views_again(tmp_path):
    async with open_context(tmp_path) as ctx:
        filed = await memory.memory_add(ctx, DRAWER)
        rebuilt = await memory.memory_rebuild(ctx, {})
        assert rebuilt["vectors_reset"] is False and ctx.state(MemoryState).rebuild_progress is None
        assert (await memory.drawer_get(ctx, {"drawer_id": filed["drawer_id"]}))["wing"] == "palace"
        with pytest.raises(ValidationError):
            await memory.memory_rebuild(ctx, {"vectors": "yes"})


async def test_memory_writes_carry_their_own_seq_and_wake_a_wait(tmp_path):
    """Regression guard (issue 26: memory writes were never pushed): the seq of a memory event was
    the rowid of the memory view row the same insert wrote (drawer 1, fact 1...), so the bus never
    moved past it: no link pushed it (peers got it from the 10 s repair round) and a local wait
    never woke on it."""
    import trio
    import trio.testing

    async with open_context(tmp_path) as ctx:
        for i in range(3):
            await log.append(ctx, {"type": "note", "stream": "s", "room": "r", "from_agent": "alice", "body": f"n{i}"})
        writes = [
            ("memory.drawer", lambda: memory.memory_add(ctx, {"wing": "w", "room": "r", "content": "the build uses uv",
                                                                "added_by": "alice"})),
            ("memory.kg.add", lambda: memory.kg_add(ctx, {"subject": "build", "predicate": "uses", "object": "uv",
                                                          "added_by": "alice"})),
            ("memory.diary", lambda: memory.diary_write(ctx, {"agent_name": "alice", "entry": "did it", "topic": "t"})),
        ]
        for kind, write in writes:
            tip = (await log.list_events(ctx, {"order": "desc", "limit": 1}))["events"][0]
            woke: list[dict] = []

            async def waiter() -> None:
                woke.append(await log.wait(ctx, {"since_event_id": tip["id"], "types": [kind], "timeout_ms": 10_000}))

            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(waiter)
                    await trio.testing.wait_all_tasks_blocked()  # the waiter waits on the bus
                    await write()
            (event,) = woke[0]["events"]
            stored = (await log.list_events(ctx, {"types": [kind], "order": "desc", "limit": 1}))["events"][0]
            assert event["id"] == stored["id"] and event["seq"] == stored["seq"] > tip["seq"], kind
            assert ctx.bus.latest_seq == stored["seq"], kind
