"""The room operations (palaced/handlers/rooms.py) on a real store: MemPalace's shapes and errors,
the read-position rules, a closed room refusing turns, a second close appending nothing, the
transcript filed as searchable drawers, the bounds, the late-turn filer and who a room event
wakes."""

from __future__ import annotations

import dataclasses
import datetime

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.errors import ApiError, NotFound, ValidationError
from palace_proto.rooms import MAX_ROOM_BODY_CHARS
from palaced.features import memory, rooms
from palaced.handlers import ReadOnly, log
from palaced.membership import create_palace
from palaced.store import append_event
from palaced.store import rooms as store_rooms
from tests.daemon.handler_context import note, open_context

COMPACT_KEYS = {"id", "type", "from_agent", "to_agent", "body", "created_at"}


async def _open(ctx, **args):
    return await rooms.room_open(ctx, {"project": "Shop", "from_agent": "alice", "name": "API v2",
                                       "agenda": "agree on the orders API", **args})


async def _say(ctx, room_id, agent, body, **args):
    return await rooms.room_say(ctx, {"room_id": room_id, "from_agent": agent, "body": body, **args})


async def _read(ctx, room_id, agent, **args):
    return await rooms.room_read(ctx, {"room_id": room_id, "agent": agent, **args})


async def test_open_say_read_close_have_mempalaces_shapes(tmp_path):
    async with open_context(tmp_path) as ctx:
        opened = await _open(ctx, members=["bob"])
        assert set(opened) == {"success", "room", "event", "handoff"} and opened["success"] is True
        room = opened["room"]
        room_id = room["room_id"]
        assert room_id.startswith("room_api-v2_") and len(room_id) == len("room_api-v2_") + 20
        assert (room["name"], room["project"], room["wing"], room["palace_room"], room["stream"]) == \
            ("api-v2", "shop", "shop", "api-v2", "project/shop")
        assert (room["opened_by"], room["agenda"], room["members"], room["closed"]) == \
            ("alice", "agree on the orders API", ["alice", "bob"], False)
        assert set(opened["event"]) == COMPACT_KEYS and opened["event"]["type"] == "room.open"
        assert opened["event"]["to_agent"] == "*" and room_id in opened["handoff"]
        stored = await log.get_event(ctx, {"event_id": opened["event"]["id"]})
        assert (stored["stream"], stored["room"], stored["correlation_id"], stored["status"]) == \
            ("project/shop", "rooms", room_id, None)

        said = await _say(ctx, room_id, "bob", "orders by id, please", to_agent="alice")
        assert set(said) == {"success", "event", "unread"} and said["success"] is True
        assert set(said["event"]) == COMPACT_KEYS and said["event"]["to_agent"] == "alice"
        assert said["unread"] == 1  # alice's opening, which bob has not read
        page = await _read(ctx, room_id, "bob")
        assert set(page) == {"room", "events", "more", "count"}
        assert [e["type"] for e in page["events"]] == ["room.open", "room.message"]  # first read: own turns too
        assert all(set(e) == COMPACT_KEYS for e in page["events"]) and (page["more"], page["count"]) == (False, 2)
        assert (await _say(ctx, room_id, "bob", "and by customer"))["unread"] == 0

        closed = await rooms.room_close(ctx, {"room_id": room_id, "from_agent": "alice", "outcome": "by id and customer"})
        assert set(closed) == {"success", "room", "event", "already_closed", "filed", "already_filed", "wing",
                               "palace_room"}
        assert (closed["success"], closed["already_closed"], closed["filed"], closed["already_filed"]) == \
            (True, False, 4, 0)
        assert (closed["wing"], closed["palace_room"], closed["event"]["type"]) == ("shop", "api-v2", "room.close")
        assert closed["room"]["closed"] and closed["room"]["closed_by"] == "alice"
        assert closed["room"]["outcome"] == "by id and customer"


async def test_read_positions_follow_mempalaces_rules(tmp_path):
    async with open_context(tmp_path) as ctx:
        room_id = (await _open(ctx))["room"]["room_id"]
        for i in range(3):
            await _say(ctx, room_id, "bob", f"bob {i}")
        first = await _read(ctx, room_id, "alice", limit=2)
        assert [e["body"] for e in first["events"]] == ["agree on the orders API", "bob 0"] and first["more"] is True
        second = await _read(ctx, room_id, "alice", limit=2)
        assert [e["body"] for e in second["events"]] == ["bob 1", "bob 2"] and second["more"] is True
        assert (await _read(ctx, room_id, "alice", limit=2))["events"] == []  # a full page said more; now none
        await _say(ctx, room_id, "alice", "mine")
        await _say(ctx, room_id, "bob", "yours")
        later = await _read(ctx, room_id, "alice")
        assert [e["body"] for e in later["events"]] == ["yours"]  # later reads leave one's own turns out
        assert later["more"] is False and later["room"]["members"] == ["alice", "bob"]

        positions = []
        for agent in ("alice", "bob"):
            positions.append(store_rooms.cursor_of(ctx.store.store.db.reader(), room_id, agent))
        assert positions[0] > 0 and positions[1] is None  # bob has never read here


async def test_errors_are_mempalaces_words(tmp_path):
    async with open_context(tmp_path) as ctx:
        refusals = [
            (_open(ctx, name=" "), ValidationError, "room name must not be empty"),
            (_open(ctx, project=""), ValidationError, "room project must not be empty"),
            (_open(ctx, agenda="x" * (MAX_ROOM_BODY_CHARS + 1)), ValidationError,
             "room agenda is 99001 characters; a room turn holds at most 99000 so it can be filed as one drawer"),
            (_open(ctx, from_agent=""), ValidationError, "from_agent must be a non-empty string"),
            (_open(ctx, members=["*"]), ValidationError, "members '*' is not an agent id (everyone)"),
            (_say(ctx, "task_x", "bob", "hi"), ValidationError,
             "room_id='task_x' is not a room id (expected room_<name>_<hex>)"),
            (_say(ctx, "room_nope_00000000", "bob", "hi"), NotFound, "room 'room_nope_00000000' not found"),
            (_read(ctx, "room_nope_00000000", "bob"), NotFound, "room 'room_nope_00000000' not found"),
            (rooms.room_close(ctx, {"room_id": "room_nope_00000000", "from_agent": "a"}), NotFound,
             "room 'room_nope_00000000' not found"),
        ]
        for call, kind, message in refusals:
            with pytest.raises(kind) as refused:
                await call
            assert refused.value.message == message
        room_id = (await _open(ctx))["room"]["room_id"]
        for body, message in (("  ", "room message body must not be empty"),
                              ("x" * 99_001, "room message body is 99001 characters; a room turn holds at most 99000 "
                                             "so it can be filed as one drawer")):
            with pytest.raises(ValidationError) as refused:
                await _say(ctx, room_id, "bob", body)
            assert refused.value.message == message and refused.value.field == "body"
        for limit in (0, 501, "5", True):
            with pytest.raises(ValidationError) as refused:
                await _read(ctx, room_id, "bob", limit=limit)
            assert refused.value.field == "limit"
        # No read position is kept for a room that does not exist.
        assert ctx.store.store.db.reader().execute("SELECT count(*) FROM room_cursors").fetchone()[0] == 0
        with pytest.raises(ValidationError, match="reserved: it is written by room_say \\(palacectl room say\\)"):
            await log.append(ctx, note(type="room.message", correlation_id=room_id, room="rooms"))


async def test_a_closed_room_refuses_turns_and_a_second_close_appends_nothing(tmp_path):
    async with open_context(tmp_path) as ctx:
        room_id = (await _open(ctx))["room"]["room_id"]
        await _say(ctx, room_id, "bob", "one idea")
        first = await rooms.room_close(ctx, {"room_id": room_id, "from_agent": "bob", "outcome": "done"})
        events_before = (await ctx.store.counts())["events"]
        with pytest.raises(ApiError) as refused:
            await _say(ctx, room_id, "carol", "too late")
        assert refused.value.message == f"room {room_id!r} is closed" and refused.value.code == "conflict"
        again = await rooms.room_close(ctx, {"room_id": room_id, "from_agent": "alice", "outcome": "other"})
        assert again["already_closed"] is True and (again["filed"], again["already_filed"]) == (0, 3)
        assert again["event"]["id"] == first["event"]["id"] and again["room"]["outcome"] == "done"
        assert (await ctx.store.counts())["events"] == events_before  # nothing appended
        # Reading a closed room still works, and shows the whole discussion.
        assert [e["type"] for e in (await _read(ctx, room_id, "dave"))["events"]] == \
            ["room.open", "room.message", "room.close"]


async def test_the_transcript_is_filed_verbatim_and_found_by_search(tmp_path):
    async with open_context(tmp_path) as ctx:
        opened = await _open(ctx, wing="design", room="orders-api", agenda="")  # an empty agenda files nothing
        room_id = opened["room"]["room_id"]
        body = "  Let us page with opaque cursors.\r\n\tNot offsets.  "
        said = await _say(ctx, room_id, "bob", body, to_agent="alice")
        closed = await rooms.room_close(ctx, {"room_id": room_id, "from_agent": "alice", "outcome": "cursors win"})
        assert (closed["filed"], closed["wing"], closed["palace_room"]) == (2, "design", "orders-api")
        found = await memory.search(ctx, {"query": "opaque", "wing": "design", "room": "orders-api"})
        assert found["count"] == 1
        hit = found["results"][0]
        event = said["event"]
        assert hit["content"] == f"[room.message {event['id']} from=bob to=alice at={event['created_at']}]\n{body}"
        assert (hit["source_file"], hit["added_by"]) == (room_id, "alice")
        outcome = (await memory.search(ctx, {"query": "cursors win", "room": "orders-api"}))["results"][0]
        assert outcome["content"].startswith(f"[room.close {closed['event']['id']} from=alice at=")


async def test_list_and_show(tmp_path):
    async with open_context(tmp_path) as ctx:
        shop = (await _open(ctx))["room"]["room_id"]
        other = (await _open(ctx, project="Billing", name="invoices", from_agent="zed", agenda="y" * 1000))["room"][
            "room_id"]
        await _say(ctx, shop, "bob", "hello")
        await _read(ctx, other, "carol")
        await rooms.room_close(ctx, {"room_id": shop, "from_agent": "alice"})
        listing = await rooms.room_list(ctx, {})
        assert [r["room_id"] for r in listing["rooms"]] == [other, shop] and listing["count"] == 2
        by_id = {r["room_id"]: r for r in listing["rooms"]}
        assert (by_id[shop]["messages"], by_id[shop]["closed"], by_id[shop]["members"]) == (1, True, ["alice", "bob"])
        assert by_id[other]["members"] == ["zed", "carol"] and len(by_id[other]["agenda"]) == 301
        assert [r["room_id"] for r in (await rooms.room_list(ctx, {"project": "shop"}))["rooms"]] == [shop]
        assert [r["room_id"] for r in (await rooms.room_list(ctx, {"status": "open"}))["rooms"]] == [other]
        assert [r["room_id"] for r in (await rooms.room_list(ctx, {"status": "closed"}))["rooms"]] == [shop]
        assert [r["room_id"] for r in (await rooms.room_list(ctx, {"agent": "carol"}))["rooms"]] == [other]
        assert (await rooms.room_list(ctx, {"agent": "nobody"}))["rooms"] == []
        with pytest.raises(ValidationError):
            await rooms.room_list(ctx, {"status": "ajar"})
        shown = await rooms.room_show(ctx, {"room_id": shop, "limit": 2})
        assert [e["type"] for e in shown["events"]] == ["room.open", "room.message"]
        assert (shown["total"], shown["more"], shown["events"][0]["turn"]) == (3, True, True)
        rest = await rooms.room_show(ctx, {"room_id": shop, "offset": 2})
        assert [e["type"] for e in rest["events"]] == ["room.close"] and rest["more"] is False
        # Showing moves nobody's read position.
        assert [e["body"] for e in (await _read(ctx, shop, "bob"))["events"]][-1] == ""


async def test_an_observer_reads_and_keeps_its_own_positions_but_writes_nothing(tmp_path):
    (tmp_path / "palace").mkdir()
    member = create_palace(tmp_path / "palace", Ed25519PrivateKey.generate(), "p", "d",
                           datetime.datetime.now(datetime.UTC))
    async with open_context(tmp_path / "home") as ctx:
        room_id = (await _open(ctx))["room"]["room_id"]
        ctx.membership = dataclasses.replace(member, role="observer")
        for write in (_open(ctx), _say(ctx, room_id, "bob", "hi"),
                      rooms.room_close(ctx, {"room_id": room_id, "from_agent": "bob"})):
            with pytest.raises(ReadOnly):
                await write
        assert (await _read(ctx, room_id, "watcher"))["count"] == 1
        assert (await _read(ctx, room_id, "watcher"))["count"] == 0
        assert (await rooms.room_list(ctx, {}))["count"] == 1


async def test_the_bounds_hold(tmp_path, monkeypatch):
    """Guards the tables and rooms fed from outside: read positions and turns are bounded."""
    monkeypatch.setattr(store_rooms, "MAX_ROOM_CURSORS", 2)
    monkeypatch.setattr(rooms, "MAX_ROOM_TURNS", 2)
    async with open_context(tmp_path) as ctx:
        room_id = (await _open(ctx))["room"]["room_id"]
        await _read(ctx, room_id, "a")
        await _read(ctx, room_id, "b")
        with pytest.raises(ApiError) as full:
            await _read(ctx, room_id, "c")
        assert full.value.code == "limit_reached"
        await _read(ctx, room_id, "a")  # the positions it keeps go on
        await _say(ctx, room_id, "a", "1")
        await _say(ctx, room_id, "a", "2")
        with pytest.raises(ApiError) as crowded:
            await _say(ctx, room_id, "a", "3")
        assert crowded.value.code == "limit_reached" and "close it and open another" in crowded.value.message
        with pytest.raises(ValidationError):
            await _open(ctx, members=[f"m{i}" for i in range(33)])


async def test_the_filer_files_what_the_close_did_not(tmp_path, monkeypatch):
    """Guards the late-turn filer: a closed room of this daemon's whose turns lack drawers (here,
    a close that filed nothing) gets them, once, as its closer."""
    async with open_context(tmp_path) as ctx:
        room_id = (await _open(ctx))["room"]["room_id"]
        await _say(ctx, room_id, "bob", "filed later")
        real_file = rooms._file
        monkeypatch.setattr(rooms, "_file", lambda *a: (0, 0, []))
        await rooms.room_close(ctx, {"room_id": room_id, "from_agent": "bob"})
        monkeypatch.setattr(rooms, "_file", real_file)
        assert (await memory.search(ctx, {"query": "filed later"}))["count"] == 0
        filer = rooms.RoomFiler(ctx)
        assert await filer.catch_up() == 2  # the agenda and bob's turn (the close has no outcome)
        hit = (await memory.search(ctx, {"query": "filed later"}))["results"][0]
        assert hit["added_by"] == "bob"
        assert await filer.catch_up() == 0 and repr(filer).endswith("filed=2>")
        assert await rooms.RoomFiler(ctx).catch_up() == 0  # a restart looks again, and finds nothing missing


async def test_a_room_event_wakes_only_its_members(tmp_path):
    async with open_context(tmp_path) as ctx:
        room_id = (await _open(ctx, members=["bob"]))["room"]["room_id"]
        said = await log.get_event(ctx, {"event_id": (await _say(ctx, room_id, "alice", "hi all"))["event"]["id"]})
        to_zoe = await log.get_event(ctx, {"event_id": (await _say(ctx, room_id, "alice", "zoe?",
                                                                   to_agent="zoe"))["event"]["id"]})
        verdicts = {agent: await rooms.RoomWake(ctx, agent).wakes(said) for agent in ("bob", "carol", "dave", "zoe")}
        assert verdicts == {"bob": True, "carol": False, "dave": False, "zoe": False}
        assert await rooms.RoomWake(ctx, "zoe").wakes(to_zoe)  # addressed to it: wakes like any message
        await _read(ctx, room_id, "dave")
        await _say(ctx, room_id, "carol", "me too")
        assert await rooms.RoomWake(ctx, "dave").wakes(said) and await rooms.RoomWake(ctx, "carol").wakes(said)
        other = await log.append(ctx, note())
        assert await rooms.RoomWake(ctx, "carol").wakes(other)  # not a room's: none of this


async def test_what_a_broken_peer_wrote_is_read_defensively(tmp_path):
    """Guards the listing, reads and filing against room events no room command writes (here
    appended below the handlers, as a broken or hostile peer's would arrive): an opening with no
    usable id is not listed, a second opening and hostile metadata change nothing."""
    from palace_proto.validation import AppendRequest

    async with open_context(tmp_path) as ctx:
        room_id = (await _open(ctx))["room"]["room_id"]

        async def raw(**fields):
            request = AppendRequest.from_wire({"stream": "project/shop", "room": "rooms", "from_agent": "mallory",
                                               "to_agent": "*", **fields}, ctx.limits)
            return await ctx.store.write(lambda w: append_event(w, request))

        await raw(type="room.open", correlation_id="not a room id", body="x")
        await raw(type="room.open", body="no correlation at all")
        await raw(type="room.open", correlation_id=room_id, body="hijack",
                  metadata={"wing": ["x"], "members": "everyone", "palace_room": "evil\u0007"})
        listing = await rooms.room_list(ctx, {})
        assert [r["room_id"] for r in listing["rooms"]] == [room_id]
        room = listing["rooms"][0]
        assert (room["opened_by"], room["agenda"], room["wing"], room["members"]) == \
            ("alice", "agree on the orders API", "shop", ["alice"])
        shown = await rooms.room_show(ctx, {"room_id": room_id})
        assert [(e["body"], e["turn"]) for e in shown["events"]] == [("agree on the orders API", True), ("hijack", False)]
        closed = await rooms.room_close(ctx, {"room_id": room_id, "from_agent": "alice"})
        assert closed["filed"] == 1  # the agenda; the second opening is not a turn
