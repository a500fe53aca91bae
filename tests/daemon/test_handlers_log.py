"""The log's handlers (palaced/handlers/log.py) without a socket: a real store, bus and writer.

What the e2e tests check through palacectl, checked here at the handler: appends are readable
at once, a wait is woken by a later append and only by a matching one, a subscription registers
its watcher and releases it however it ends, reserved types and bad input are refused with
nothing written, an observer daemon writes nothing, and only an event's author (or the
operator) redacts it.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest
import trio
import trio.testing
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.errors import ApiError, NotFound, ValidationError
from palaced.handlers import Context, ReadOnly, log
from palaced.membership import create_palace
from palaced.store.aio import AsyncStore
from tests.daemon.handler_context import note, open_context


async def _count(ctx: Context) -> int:
    return (await log.list_events(ctx, {}))["count"]


async def test_an_append_is_listed_and_fetched_at_once(tmp_path):
    async with open_context(tmp_path) as ctx:
        event = await log.append(ctx, note(body="first", to_agent="bob"))
        assert event["seq"] == 1 and event["origin"] == ctx.store.origin_id and event["body"] == "first"
        listed = await log.list_events(ctx, {"to_agents": ["bob"]})
        assert listed["count"] == 1 and listed["events"][0]["id"] == event["id"]
        assert await log.get_event(ctx, {"event_id": event["id"]}) == listed["events"][0]
        with pytest.raises(NotFound):
            await log.get_event(ctx, {"event_id": "no-such-event"})


@pytest.mark.parametrize("reserved", sorted(log.RESERVED_TYPES))
async def test_reserved_types_are_refused_and_nothing_is_written(tmp_path, reserved):
    """Guards the rule that only the daemon's operations write the types the authority table
    reserves to them (it names what writes each)."""
    async with open_context(tmp_path) as ctx:
        with pytest.raises(ValidationError) as refused:
            await log.append(ctx, note(type=reserved))
        assert refused.value.field == "type" and "is reserved: it is written by" in refused.value.message
        assert ("palacectl" in refused.value.message) or ("palaced" in refused.value.message)
        assert await _count(ctx) == 0


@pytest.mark.parametrize("kind", ["task.approve", "room.join", "lease.steal", "usage.refund", "question.poll",
                                  "memory.forget", "agent.adopt", "palace.rename", "event.undo"])
async def test_a_type_in_palaces_namespaces_the_table_does_not_name_is_refused(tmp_path, kind):
    """Issue 43 §3: a new event type cannot be appended until the authority table names it."""
    async with open_context(tmp_path) as ctx:
        with pytest.raises(ValidationError) as refused:
            await log.append(ctx, note(type=kind))
        assert "its authority table does not name it" in refused.value.message
        assert await _count(ctx) == 0
        assert (await log.append(ctx, note(type="patch.applied")))["type"] == "patch.applied"  # outside: words


@pytest.mark.parametrize(("change", "field"), [
    ({"stream": ""}, "stream"),
    ({"from_agent": None}, "from_agent"),
    ({"replicated": -1}, "replicated"),
    ({"replicated": 1, "timeout_ms": "soon"}, "timeout_ms"),
    ({"reply": "full"}, "reply"),
    ({"reply": ["slim"]}, "reply"),
])
async def test_a_bad_append_names_its_field_and_writes_nothing(tmp_path, change, field):
    async with open_context(tmp_path) as ctx:
        with pytest.raises(ValidationError) as refused:
            await log.append(ctx, note(**change))
        assert refused.value.field == field
        assert await _count(ctx) == 0


async def test_an_ack_of_an_unknown_event_is_not_found_and_writes_nothing(tmp_path):
    async with open_context(tmp_path) as ctx:
        with pytest.raises(NotFound):
            await log.append(ctx, note(ack_of="no-such-event"))
        with pytest.raises(NotFound):
            await log.ack(ctx, {"event_id": "no-such-event", "from_agent": "bob", "status": "claimed"})
        assert await _count(ctx) == 0


async def test_an_ack_answers_its_target(tmp_path):
    async with open_context(tmp_path) as ctx:
        request = await log.append(ctx, note(to_agent="bob", topic="build"))
        ack = await log.ack(ctx, {"event_id": request["id"], "from_agent": "bob", "status": "claimed"})
        assert (ack["type"], ack["to_agent"], ack["ack_of"], ack["correlation_id"], ack["topic"]) == (
            "event.ack", "alice", request["id"], request["id"], "build")


async def test_an_observer_daemon_refuses_every_write(tmp_path):
    (tmp_path / "palace").mkdir()
    member = create_palace(tmp_path / "palace", Ed25519PrivateKey.generate(), "p", "d",
                           datetime.datetime.now(datetime.UTC))
    observer = dataclasses.replace(member, role="observer")
    async with open_context(tmp_path / "home", membership=observer) as ctx:
        with pytest.raises(ReadOnly) as refused:
            await log.append(ctx, note())
        assert refused.value.code == "read_only"
        with pytest.raises(ReadOnly):
            await log.ack(ctx, {"event_id": "x", "from_agent": "bob", "status": "claimed"})
        with pytest.raises(ReadOnly):
            await log.redact(ctx, {"event_id": "x", "from_agent": "bob"})
        assert await _count(ctx) == 0
        assert (await log.list_events(ctx, {}))["events"] == []  # reads still work


async def test_a_wait_is_woken_by_a_later_matching_append_only(tmp_path):
    async with open_context(tmp_path) as ctx:
        result: dict[str, Any] = {}

        async def waiter() -> None:
            result.update(await log.wait(ctx, {"to_agents": ["bob"], "timeout_ms": 600_000}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            await log.append(ctx, note(to_agent="carol", body="not for bob"))
            await trio.testing.wait_all_tasks_blocked()
            assert result == {}  # a non-matching event does not end the wait
            wanted = await log.append(ctx, note(to_agent="bob", body="for bob"))
        assert result["timed_out"] is False and [e["id"] for e in result["events"]] == [wanted["id"]]


async def test_a_wait_with_nothing_to_find_times_out(tmp_path):
    async with open_context(tmp_path) as ctx:
        await log.append(ctx, note(to_agent="carol"))
        assert await log.wait(ctx, {"to_agents": ["bob"], "timeout_ms": 0}) == {
            "timed_out": True, "events": [], "count": 0}
        with pytest.raises(ValidationError):
            await log.wait(ctx, {"timeout_ms": -1})


async def test_a_subscription_pushes_matches_and_releases_its_watcher(tmp_path):
    async with open_context(tmp_path) as ctx:
        send, receive = trio.open_memory_channel[dict[str, Any]](10)

        async def push(message: dict[str, Any]) -> None:
            await send.send(message)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.subscribe, ctx, {"agent": "bob", "to_agents": ["bob"]}, push, 7)
            started = await receive.receive()
            token = started.pop("watch_token")
            assert started == {"push": "started", "cursor": None, "start": "tip"} and len(token) == 32
            assert ctx.watchers[7].agent == "bob" and ctx.watcher_tuples()[0][0] == "bob"
            other = await log.append(ctx, note(to_agent="carol"))
            wanted = await log.append(ctx, note(to_agent="bob"))
            batch = await receive.receive()
            if batch["push"] == "cursor":  # progress over carol's event, when it was seen on its own
                assert batch["cursor"] == other["id"]
                batch = await receive.receive()
            assert batch["push"] == "batch" and [e["id"] for e in batch["events"]] == [wanted["id"]]
            assert batch["cursor"] == wanted["id"] and ctx.watchers[7].cursor == wanted["id"]
            nursery.cancel_scope.cancel(reason="the client went away")
        assert ctx.watchers == {}


async def test_only_the_worker_that_holds_a_watchs_token_changes_its_activity(tmp_path):
    """Guards watch_update: another client (which sees `who`, never the token) cannot change what
    a worker says it runs, a plain watch cannot become a worker, bad activity is refused."""
    activity = {"runner": "claude", "concurrency": 2, "project": None, "tasks": []}
    async with open_context(tmp_path) as ctx:
        send, receive = trio.open_memory_channel[dict[str, Any]](10)

        async def push(message: dict[str, Any]) -> None:
            await send.send(message)

        with pytest.raises(ValidationError, match="needs its agent"):
            await log.subscribe(ctx, {"worker": activity}, push, 1)
        with pytest.raises(ValidationError) as bad:
            await log.subscribe(ctx, {"agent": "bot", "worker": {**activity, "concurrency": 99}}, push, 1)
        assert bad.value.field == "worker.concurrency" and ctx.watchers == {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.subscribe, ctx, {"agent": "bot", "worker": activity}, push, 7)
            worker_token = (await receive.receive())["watch_token"]
            nursery.start_soon(log.subscribe, ctx, {"agent": "alice"}, push, 8)
            plain_token = (await receive.receive())["watch_token"]
            assert ctx.watchers[7].to_wire()["worker"] == activity and ctx.watchers[8].worker is None
            assert "token" not in ctx.watchers[7].to_wire()  # `who` never shows it
            running = {**activity, "tasks": ["task_x_1"]}
            assert (await log.watch_update(ctx, {"watch_token": worker_token, "worker": running}))["updated"]
            assert ctx.watchers[7].worker == running
            assert len(ctx.watcher_tuples()[0]) == 4  # presence carries the activity
            with pytest.raises(NotFound):
                await log.watch_update(ctx, {"watch_token": "0" * 32, "worker": activity})
            with pytest.raises(ValidationError, match="not a worker"):
                await log.watch_update(ctx, {"watch_token": plain_token, "worker": activity})
            for token in (None, "", "x" * 65, 5):
                with pytest.raises(ValidationError):
                    await log.watch_update(ctx, {"watch_token": token, "worker": activity})
            with pytest.raises(ValidationError):
                await log.watch_update(ctx, {"watch_token": worker_token, "worker": {"runner": "a b"}})
            assert ctx.watchers[7].worker == running and ctx.watchers[8].worker is None
            nursery.cancel_scope.cancel(reason="the test is over")
        with pytest.raises(NotFound):  # the watch ended: its token names nothing any more
            await log.watch_update(ctx, {"watch_token": worker_token, "worker": activity})


async def test_a_subscription_that_fails_releases_its_watcher(tmp_path):
    """Guards ``who``: a watch whose push raised must not stay listed."""
    async with open_context(tmp_path) as ctx:
        async def failing_push(message: dict[str, Any]) -> None:
            raise trio.BrokenResourceError("the client is gone")

        with pytest.raises(trio.BrokenResourceError):
            await log.subscribe(ctx, {"agent": "bob"}, failing_push, 1)
        assert ctx.watchers == {}
        with pytest.raises(ValidationError):
            await log.subscribe(ctx, {"start": "cursor"}, failing_push, 2)  # needs since_event_id
        assert ctx.watchers == {}


async def test_only_the_author_or_the_operator_redacts(tmp_path):
    async with open_context(tmp_path) as ctx:
        event = await log.append(ctx, note(body="a secret"))
        with pytest.raises(ApiError) as refused:
            await log.redact(ctx, {"event_id": event["id"], "from_agent": "mallory"})
        assert refused.value.code == "not_permitted"
        assert (await log.get_event(ctx, {"event_id": event["id"]}))["body"] == "a secret"
        redaction = await log.redact(ctx, {"event_id": event["id"], "from_agent": "alice", "reason": "oops"})
        assert redaction["type"] == "event.redact" and redaction["purge"] in ("done", "pending")
        assert redaction["also_redacted"] == []
        gone = await log.get_event(ctx, {"event_id": event["id"]})
        assert gone["body_redacted"] is True and gone["body"] == ""
        with pytest.raises(ValidationError):
            await log.redact(ctx, {"event_id": event["id"], "from_agent": "bob", "operator": True})
        other = await log.append(ctx, note(body="also secret"))
        assert (await log.redact(ctx, {"event_id": other["id"], "from_agent": "bob", "operator": True}))["type"] \
            == "event.redact"


async def test_the_digest_covers_every_event(tmp_path):
    async with open_context(tmp_path) as ctx:
        empty = await log.digest(ctx, {})
        for body in ("one", "two"):
            await log.append(ctx, note(body=body))
        digest = await log.digest(ctx, {})
        assert digest["events"] == 2 and [o["origin"] for o in digest["origins"]] == [ctx.store.origin_id]
        assert digest["origins"][0]["origin_seq"] == 2 and digest["digest"] != empty["digest"]


async def test_a_slim_append_replies_id_seq_origin_seq_and_created_at_of_the_event_stored(tmp_path):
    """Guards the opt-in slim reply (issue 45 §3): ``reply: "slim"`` answers only what the writer
    does not know (SLIM_REPLY_FIELDS), naming the very event stored, which readers and watchers
    see whole; the default reply is still the whole event."""
    from palace_proto.appends import SLIM_REPLY_FIELDS
    async with open_context(tmp_path) as ctx:
        full = await log.append(ctx, note(body="whole"))
        assert full["body"] == "whole" and full["type"] == "note"
        assert (await log.append(ctx, note(body="said as event", reply="event")))["body"] == "said as event"
        slim = await log.append(ctx, note(body="slim", to_agent="bob", reply="slim"))
        assert tuple(slim) == SLIM_REPLY_FIELDS
        stored = await log.get_event(ctx, {"event_id": slim["id"]})
        assert {k: stored[k] for k in SLIM_REPLY_FIELDS} == slim
        assert stored["body"] == "slim" and stored["to_agent"] == "bob" and slim["origin_seq"] == 3
        assert ctx.bus.events_after(slim["seq"] - 1, 10)[0]["body"] == "slim"  # a watcher reads it whole


async def test_a_slim_append_that_breaks_a_rule_is_refused_as_any_append(tmp_path):
    """The reply's shape changes nothing of what is judged: a refusal is the same, nothing written."""
    async with open_context(tmp_path) as ctx:
        with pytest.raises(NotFound):
            await log.append(ctx, note(ack_of="evt_nope", reply="slim"))
        with pytest.raises(ValidationError) as refused:
            await log.append(ctx, note(type="memory.drawer", reply="slim"))
        assert refused.value.field == "type"
        assert await _count(ctx) == 0


# -- append_many (issue 13: bulk writers in one commit) -------------------------------------------


async def test_append_many_commits_every_event_in_order_with_a_slim_reply(tmp_path):
    async with open_context(tmp_path) as ctx:
        first = await log.append(ctx, note(body="before"))
        reply = await log.append_many(ctx, {"events": [note(body=f"bulk {i}", to_agent="bob") for i in range(5)]
                                            + [note(body="an ack", ack_of=first["id"])]})
        assert reply["count"] == 6 and reply["origin"] == ctx.store.origin_id
        assert [e["origin_seq"] for e in reply["events"]] == [2, 3, 4, 5, 6, 7]
        assert set(reply["events"][0]) == {"id", "seq", "origin_seq", "created_at"}  # no body sent back
        listed = (await log.list_events(ctx, {"order": "asc"}))["events"]
        assert [e["body"] for e in listed] == ["before", *(f"bulk {i}" for i in range(5)), "an ack"]
        assert [e["id"] for e in listed[1:]] == [e["id"] for e in reply["events"]]
        assert [{k: e[k] for k in ("id", "seq", "origin_seq", "created_at")} for e in listed[1:]] == reply["events"]
        assert ctx.store.writer.batches == 2, "the bulk request is one commit"


@pytest.mark.parametrize(("events", "field"), [
    (None, "events"),
    ([], "events"),
    ("not a list", "events"),
    ([{"type": "note"}], "events[0].stream"),
    ([{"stream": "s", "room": "r", "from_agent": "a", "type": "note"}, 7], "events[1]"),
    ([{"stream": "s", "room": "r", "from_agent": "a", "type": "memory.drawer"}], "events[0].type"),
    ([{"stream": "s", "room": "r", "from_agent": "a", "type": "note", "replicated": 1}], "events[0].replicated"),
])
async def test_a_bad_append_many_names_the_event_and_field_and_writes_nothing(tmp_path, events, field):
    async with open_context(tmp_path) as ctx:
        with pytest.raises(ValidationError) as refused:
            await log.append_many(ctx, {"events": events})
        assert refused.value.field == field
        assert await _count(ctx) == 0


async def test_append_many_is_all_or_nothing_when_an_event_fails_in_the_writer(tmp_path):
    """An unknown ack_of or artifact is found only while writing: the whole request is refused,
    with the event's index, and none of it (not even the events before it) is committed."""
    async with open_context(tmp_path) as ctx:
        with pytest.raises(NotFound) as missing:
            await log.append_many(ctx, {"events": [note(body="ok"), note(body="bad", ack_of="evt_nope")]})
        assert "events[1]" in missing.value.message and "nothing was appended" in missing.value.message
        with pytest.raises(ValidationError) as unknown:
            await log.append_many(ctx, {"events": [note(body="ok"), note(artifact_ids=["art_" + "0" * 32])]})
        assert "events[1]" in unknown.value.message
        assert await _count(ctx) == 0
        assert (await log.append(ctx, note(body="next")))["origin_seq"] == 1  # no number was used up


async def test_append_many_refuses_more_than_its_limit(tmp_path):
    from palace_proto.appends import MAX_APPEND_MANY

    async with open_context(tmp_path) as ctx:
        with pytest.raises(ValidationError, match="1 to 1000") as refused:
            await log.append_many(ctx, {"events": [note()] * (MAX_APPEND_MANY + 1)})
        assert refused.value.field == "events"
        assert await _count(ctx) == 0


async def test_excluded_types_never_match_a_list_or_a_wait(tmp_path):
    """``exclude_types`` (what ``watch --agent`` sleeps through: status) in the store's query and
    in the bus's matching alike."""
    async with open_context(tmp_path) as ctx:
        await log.append(ctx, note(type="status", body="bob watches", to_agent="*"))
        kept = await log.append(ctx, note(body="for you", to_agent="*"))
        listed = await log.list_events(ctx, {"exclude_types": ["status"], "to_agents": ["alice"]})
        assert [e["id"] for e in listed["events"]] == [kept["id"]]
        waited = await log.wait(ctx, {"exclude_types": ["status", "note"], "since_event_id": kept["id"],
                                      "timeout_ms": 0})
        assert waited["timed_out"] is True
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                got: list[dict] = []

                async def waiter() -> None:
                    got.append(await log.wait(ctx, {"exclude_types": ["status"], "since_event_id": kept["id"],
                                                    "timeout_ms": 5000}))

                nursery.start_soon(waiter)
                await trio.testing.wait_all_tasks_blocked()  # the waiter waits on the bus
                await log.append(ctx, note(type="status", body="another announce", to_agent="*"))
                last = await log.append(ctx, note(body="wake", to_agent="*"))
        assert [e["id"] for e in got[0]["events"]] == [last["id"]]


async def test_an_append_acking_an_unknown_event_is_refused_in_the_writer_and_uses_no_number(tmp_path):
    """Guards issue 27's move of the ack_of check into the writing transaction: still refused with
    the same words, nothing written, no sequence number used up; a known target is taken."""
    async with open_context(tmp_path) as ctx:
        with pytest.raises(NotFound) as missing:
            await log.append(ctx, note(body="ack", ack_of="evt_nope"))
        assert missing.value.message == "event 'evt_nope' not found"
        assert await _count(ctx) == 0
        target = await log.append(ctx, note(body="target"))
        acked = await log.append(ctx, note(body="ack", ack_of=target["id"]))
        assert (target["origin_seq"], acked["origin_seq"], acked["ack_of"]) == (1, 2, target["id"])


async def test_a_text_search_indexes_every_event_before_it_across_many_index_chunks(tmp_path):
    """The text index fills a short chunk at a time (event_search.INDEX_CHUNK, committed without
    waiting for its fsync): a search right after a burst still finds the first, a middle and
    the last event of it, and its position in the index is where the burst ended."""
    from palaced.store import event_search

    async with open_context(tmp_path) as ctx:
        count = event_search.INDEX_CHUNK * 3 + 7
        for k in range(count):
            await log.append(ctx, note(body=f"burst word{k} common"))
        for k in (0, count // 2, count - 1):
            found = await log.list_events(ctx, {"text": f"word{k}"})
            assert [e["body"] for e in found["events"]] == [f"burst word{k} common"]
        assert (await log.list_events(ctx, {"text": "common", "limit": 500}))["count"] == count
        assert event_search.indexed_seq(ctx.store.store.db.writer) == ctx.bus.latest_seq


async def _indexed_after(ctx, seconds):
    from palaced.store import event_search

    await trio.sleep(seconds)
    return event_search.indexed_seq(ctx.store.store.db.writer)


async def test_the_text_indexer_catches_up_once_the_writer_is_idle(tmp_path):
    async with open_context(tmp_path) as ctx, trio.open_nursery() as nursery:
        nursery.start_soon(log.LogFollower(ctx).run)
        for k in range(3):
            await log.append(ctx, note(body=f"idle word{k}"))
        with trio.fail_after(10):
            while await _indexed_after(ctx, 0.05) < ctx.bus.latest_seq:
                pass
        nursery.cancel_scope.cancel()


async def test_the_text_indexer_waits_out_a_busy_writer_until_its_backlog_is_full(tmp_path, monkeypatch):
    """Guards issue 27's wake p99: between the appends of a busy moment the indexer's chunks
    would hold appends up, so it waits for an idle writer, or for BACKLOG events. That it waited
    is shown by its looks (each reads how long the writer has been idle), not by a pause: a look
    that decides to index is its last until the next commit, so a second look after the appends
    proves the first one left them unindexed."""
    monkeypatch.setattr(log.LogFollower, "IDLE_S", 3600.0)  # the writer is never idle long enough
    monkeypatch.setattr(log.LogFollower, "BACKLOG", 20)
    looks = 0
    idle_s = AsyncStore.idle_s

    def counted(astore: AsyncStore) -> float:
        nonlocal looks
        looks += 1
        return idle_s.fget(astore)

    monkeypatch.setattr(AsyncStore, "idle_s", property(counted))
    async with open_context(tmp_path) as ctx, trio.open_nursery() as nursery:
        nursery.start_soon(log.LogFollower(ctx).run)
        for k in range(10):
            await log.append(ctx, note(body=f"busy word{k}"))
        after_appends = looks
        with trio.fail_after(10):  # (an indexer that did not wait ends the loop at once, and the assert says so)
            while looks < after_appends + 2 and await _indexed_after(ctx, log.LogFollower.SETTLE_S) == 0:
                pass
        assert await _indexed_after(ctx, 0) == 0
        for k in range(10, 25):
            await log.append(ctx, note(body=f"busy word{k}"))
        with trio.fail_after(10):
            while await _indexed_after(ctx, 0.05) < 20:
                pass
        nursery.cancel_scope.cancel()
