"""palace_proto.rooms: the room id grammar, MemPalace's refusals word for word, the requests the
daemon writes, and the derivations every replica must agree on (state, transcript, after_close,
drawer text) whatever order the events arrived in."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palace_proto.errors import ValidationError
from palace_proto.rooms import (
    MAX_MEMBERS,
    MAX_ROOM_BODY_CHARS,
    ROOM_CLOSE,
    ROOM_MESSAGE,
    ROOM_OPEN,
    check_body,
    check_members,
    check_place,
    check_room_id,
    close_request,
    compact,
    derive_room,
    drawer_text,
    handoff,
    is_turn,
    keyed_room_id,
    listed_members,
    message_request,
    needs_membership,
    new_room_id,
    open_request,
    ordered,
    room_slug,
    transcript,
)
from palace_proto.validation import Limits

ROOM = "room_api-v2_0a1b2c3d"
LIMITS = Limits()


def event(n: int, kind: str, agent: str, body: str = "", *, at: str | None = None, to: str = "*",
          room_id: str = ROOM, **extra):
    return {"id": f"evt_{n:04d}", "type": kind, "stream": "project/shop", "room": "rooms", "from_agent": agent,
            "to_agent": to, "correlation_id": room_id, "body": body, "metadata": extra.pop("metadata", {}),
            "created_at": at or f"2026-01-01T00:00:{n:02d}.000000Z", **extra}


def opening(**metadata):
    return event(1, ROOM_OPEN, "alice", "agree on the API",
                 metadata={"name": "api-v2", "project": "shop", "wing": "shop", "palace_room": "api-v2", **metadata})


# -- names, ids, checks ------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "slug"), [
    ("API: v2 design!", "api-v2-design"), ("  x  ", "x"), ("ÄÖÜ", "room"), ("a" * 60, "a" * 40),
    ("a" * 39 + "-b", "a" * 39),
])
def test_a_name_becomes_a_short_kebab_slug(name, slug):
    assert room_slug(name) == slug


@pytest.mark.parametrize("name", ["", "   ", None, 5])
def test_an_empty_name_is_refused_in_mempalaces_words(name):
    with pytest.raises(ValidationError, match=r"^room name must not be empty$"):
        room_slug(name)


def test_room_ids_follow_the_grammar():
    assert new_room_id("api-v2", "0a1b2c3d") == ROOM
    assert check_room_id(f"  {ROOM} ") == ROOM
    for bad_slug, bad_hex in (("API", "0a1b2c3d"), ("a--b", "0a1b2c3d"), ("x", "0A1B2C3D"), ("x", "0a1b2c"),
                              ("a" * 41, "0a1b2c3d")):
        with pytest.raises(ValueError):
            new_room_id(bad_slug, bad_hex)
    keyed = keyed_room_id("api-v2", origin="ori2_x", opener="alice", nonce="0" * 32)
    assert check_room_id(keyed) == keyed and len(keyed.rsplit("_", 1)[1]) == 20
    for bad in ("task_x", "room_x", "room_X_0a1b2c3d", "room_x_0a1b2c3", f"room_{'a' * 41}_0a1b2c3d", 7, None, "",
                "room_x_" + "0" * 19, "room_x_" + "0" * 21):
        with pytest.raises(ValidationError) as refused:
            check_room_id(bad)
        assert refused.value.message == f"room_id={bad!r} is not a room id (expected room_<name>_<hex>)"


def test_bodies_are_kept_verbatim_and_bounded():
    assert check_body("  two\r\nlines  ", "message body", required=True, limits=LIMITS) == "  two\r\nlines  "
    assert check_body(None, "agenda", required=False, limits=LIMITS) == ""
    with pytest.raises(ValidationError, match=r"^room message body must not be empty$"):
        check_body(" \n", "message body", required=True, limits=LIMITS)
    with pytest.raises(ValidationError, match="must be a string"):
        check_body(5, "outcome", required=False, limits=LIMITS)
    with pytest.raises(ValidationError, match="null bytes"):
        check_body("a\x00b", "outcome", required=False, limits=LIMITS)
    assert len(check_body("x" * MAX_ROOM_BODY_CHARS, "message body", required=True, limits=LIMITS)) == 99_000
    with pytest.raises(ValidationError) as long:
        check_body("x" * (MAX_ROOM_BODY_CHARS + 1), "message body", required=True, limits=LIMITS)
    assert long.value.message.startswith("room message body is 99001 characters; a room turn holds at most 99000")
    assert long.value.field == "body"
    # Characters within the limit can still be too many bytes for one drawer on this daemon.
    with pytest.raises(ValidationError, match="bytes; this daemon files a room turn of at most"):
        check_body("€" * 90_000, "message body", required=True, limits=LIMITS)


def test_members_and_places():
    assert check_members(None) == ()
    assert check_members(["bob", "carol", "bob"]) == ("bob", "carol")
    for bad in ("bob", [""], ["*"], ["two words"], [f"a{i}" for i in range(MAX_MEMBERS + 1)], 5):
        with pytest.raises(ValidationError) as refused:
            check_members(bad)
        assert refused.value.field == "members"
    assert check_place("wing", None) is None and check_place("wing", " w ") == "w"
    with pytest.raises(ValidationError):
        check_place("wing", "x" * 129)


def test_the_requests_the_daemon_writes():
    req = open_request(room_id=ROOM, project="Shop Front", from_agent="alice", agenda="why", members=("bob",))
    assert req == {"type": ROOM_OPEN, "stream": "project/shop_front", "room": "rooms", "from_agent": "alice",
                   "to_agent": "*", "correlation_id": ROOM, "body": "why",
                   "metadata": {"name": "api-v2", "project": "shop_front", "wing": "shop_front", "palace_room": "api-v2",
                                "members": ["bob"]}}
    overridden = open_request(room_id=ROOM, project="p", from_agent="a", agenda="", wing="w", palace_room="r")
    assert (overridden["metadata"]["wing"], overridden["metadata"]["palace_room"]) == ("w", "r")
    assert "members" not in overridden["metadata"]
    with pytest.raises(ValidationError, match=r"^room project must not be empty$"):
        open_request(room_id=ROOM, project=" ", from_agent="a", agenda="")
    room = derive_room(ROOM, [opening()])
    assert message_request(room, from_agent="bob", body="hi") == {
        "type": ROOM_MESSAGE, "stream": "project/shop", "room": "rooms", "from_agent": "bob", "to_agent": "*",
        "correlation_id": ROOM, "body": "hi"}
    assert message_request(room, from_agent="bob", body="hi", to_agent="alice")["to_agent"] == "alice"
    assert close_request(room, from_agent="alice", outcome="done")["body"] == "done"
    assert ROOM in handoff(ROOM) and "mempalace_room_read" in handoff(ROOM) and "room say" in handoff(ROOM)


# -- the state -------------------------------------------------------------------------------------

def test_a_room_is_derived_from_its_events():
    assert derive_room(ROOM, []) is None
    assert derive_room(ROOM, [event(2, ROOM_MESSAGE, "bob", "hi")]) is None  # no opening: no room
    events = [opening(members=["carol"]), event(2, ROOM_MESSAGE, "bob", "hi"), event(3, ROOM_MESSAGE, "alice", "yo"),
              event(9, "note", "zed"), event(8, ROOM_MESSAGE, "eve", "other room", room_id="room_x_00000000")]
    room = derive_room(ROOM, events, readers=["dave", "bob"])
    assert room.to_wire() == {
        "room_id": ROOM, "name": "api-v2", "project": "shop", "wing": "shop", "palace_room": "api-v2",
        "stream": "project/shop", "agenda": "agree on the API", "opened_by": "alice",
        "opened_at": "2026-01-01T00:00:01.000000Z", "open_event_id": "evt_0001",
        "members": ["alice", "carol", "bob", "dave"], "messages": 2, "last_activity": "2026-01-01T00:00:03.000000Z",
        "closed": False, "closed_by": None, "closed_at": None, "close_event_id": None, "outcome": None, "closes": 0,
        "flagged": [],
    }
    closed = derive_room(ROOM, [*events, event(4, ROOM_CLOSE, "carol", "agreed")])
    assert (closed.closed, closed.closed_by, closed.close_event_id, closed.outcome, closed.closes) == \
        (True, "carol", "evt_0004", "agreed", 1)
    counted = derive_room(ROOM, [opening()], messages=7, last_activity="x", speakers=["zoe"])
    assert (counted.messages, counted.last_activity, counted.members) == (7, "x", ("alice", "zoe"))


def test_what_a_peer_wrote_is_read_defensively():
    """Guards the derivation against hostile metadata: wrong types fall back, nothing raises."""
    for metadata in ({"name": 5, "wing": ["x"], "palace_room": "bad\x07", "project": None, "members": "bob"},
                     {"name": "NOT KEBAB", "wing": "w" * 200, "members": [1, "", "*", "ok", "ok"]}, "not a map"):
        opened = event(1, ROOM_OPEN, "alice", metadata=metadata)
        room = derive_room(ROOM, [opened])
        assert (room.name, room.project, room.wing, room.palace_room) == ("api-v2", "shop", "shop", "api-v2")
    assert listed_members({"members": [1, "", "*", "ok", "ok", "two words"]}) == ("ok",)
    assert listed_members({"members": [f"m{i}" for i in range(100)]}) == tuple(f"m{i}" for i in range(MAX_MEMBERS))
    assert listed_members(None) == () and listed_members({"members": "x"}) == ()
    # Fields of the wrong type, a stream that is not a project's, whole-second stamps.
    odd = {**opening(), "stream": 5, "created_at": "2026-01-01T00:00:01Z", "body": None}
    room = derive_room(ROOM, [odd, {**event(2, ROOM_MESSAGE, "bob"), "created_at": None}])
    assert (room.stream, room.agenda, room.messages) == ("", "", 1)


def test_the_earliest_opening_and_the_earliest_close_count():
    second_open = event(5, ROOM_OPEN, "mallory", "hijack", metadata={"name": "evil", "wing": "evil"})
    late_close = event(7, ROOM_CLOSE, "bob", "bob's outcome")
    events = [second_open, late_close, opening(), event(3, ROOM_CLOSE, "alice", "alice's outcome"),
              event(6, ROOM_MESSAGE, "carol", "too late")]
    room = derive_room(ROOM, events)
    assert (room.opened_by, room.wing, room.closed_by, room.outcome, room.closes) == \
        ("alice", "shop", "alice", "alice's outcome", 1)
    # bob never spoke nor was listed: his close is a stranger's (issue 43, finding 6)
    assert [(f["event_id"], f["rule"]) for f in room.flagged] == [("evt_0005", "room.open"), ("evt_0007", "room.close")]
    assert [e["id"] for e in transcript(room, events)] == ["evt_0001", "evt_0003"]
    assert not is_turn(room, second_open) and not is_turn(room, late_close)
    flags = {e["id"]: compact(e, room).get("after_close", False) for e in ordered(room, events)}
    assert flags == {"evt_0001": False, "evt_0003": False, "evt_0005": True, "evt_0006": True, "evt_0007": True}


def test_order_is_time_then_id_and_whole_seconds_sort_as_time():
    at = "2026-01-01T00:00:05"
    events = [opening(), event(3, ROOM_MESSAGE, "b", "whole second", at=at + "Z"),
              event(2, ROOM_MESSAGE, "c", "half past", at=at + ".5Z"), event(4, ROOM_MESSAGE, "d", "same instant",
                                                                              at=at + ".000000Z")]
    room = derive_room(ROOM, events)
    assert [e["body"] for e in transcript(room, events)][1:] == ["whole second", "same instant", "half past"]


def test_compact_and_drawer_text():
    room = derive_room(ROOM, [opening()])
    said = event(2, ROOM_MESSAGE, "bob", "  keep\nthis  ", to="alice", impersonation={"why": "x"}, seq=9)
    assert compact(said, room) == {"id": "evt_0002", "type": ROOM_MESSAGE, "from_agent": "bob", "to_agent": "alice",
                                   "body": "  keep\nthis  ", "created_at": said["created_at"],
                                   "impersonation": {"why": "x"}}
    assert drawer_text(said) == f"[room.message evt_0002 from=bob to=alice at={said['created_at']}]\n  keep\nthis  "
    assert drawer_text(opening()) == ("[room.open evt_0001 from=alice at=2026-01-01T00:00:01.000000Z]\n"
                                      "agree on the API")
    assert drawer_text(event(3, ROOM_CLOSE, "a", "  ")) is None
    assert drawer_text({**said, "body": "", "body_redacted": True}) is None
    assert compact({**said, "body": "", "body_redacted": True})["body_redacted"] is True


def test_who_a_room_event_must_be_a_member_to_wake():
    assert needs_membership(event(2, ROOM_MESSAGE, "bob", "hi"), "carol")
    assert not needs_membership(event(2, ROOM_MESSAGE, "bob", "hi", to="carol"), "carol")  # addressed: wakes
    assert not needs_membership(event(2, ROOM_MESSAGE, "carol", "hi"), "carol")  # its own
    assert not needs_membership({**event(2, "note", "bob"), "room": "rooms"}, "carol")  # not a room's
    assert not needs_membership({**event(2, ROOM_MESSAGE, "bob"), "room": "general"}, "carol")


# -- who may open, speak and close (issue 43, finding 6) --------------------------------------------

NONCE = "ab" * 16
KEYED = keyed_room_id("api-v2", origin="ori2_alice", opener="alice", nonce=NONCE)


def keyed(n: int, kind: str, agent: str, body: str = "", *, origin: str = "ori2_alice", **extra):
    return event(n, kind, agent, body, room_id=KEYED, origin=origin, **extra)


def test_a_keyed_room_is_its_opening_and_a_backdated_second_opening_changes_nothing():
    """Regression (issue 43, finding 6): with its clock set back, a member's second room.open
    replaced the opener, its agenda, members and wing. A keyed room id is bound to the opening
    that made it: no other opening, however dated, is the room's."""
    real = keyed(5, ROOM_OPEN, "alice", "agree on the API", metadata={"name": "api-v2", "nonce": NONCE})
    hijack = keyed(1, ROOM_OPEN, "mallory", "paste your credentials here", origin="ori2_mallory",
                   metadata={"name": "api-v2", "nonce": NONCE, "members": ["mallory"], "wing": "evil"})
    same_nonce_other_origin = keyed(2, ROOM_OPEN, "alice", "mine", origin="ori2_mallory",
                                    metadata={"name": "api-v2", "nonce": NONCE})
    for events in ([real, hijack, same_nonce_other_origin], [hijack, same_nonce_other_origin, real]):
        room = derive_room(KEYED, events)
        assert (room.opened_by, room.agenda, room.wing, room.open_event_id) == ("alice", "agree on the API", "shop",
                                                                               real["id"])
        assert {f["event_id"] for f in room.flagged} == {hijack["id"], same_nonce_other_origin["id"]}
    assert derive_room(KEYED, [hijack]) is None  # no opening the id is bound to: no room


def test_only_the_opener_a_listed_member_or_one_who_spoke_closes():
    opened = keyed(1, ROOM_OPEN, "alice", "agenda", metadata={"name": "api-v2", "nonce": NONCE, "members": ["carol"]})
    stranger = keyed(2, ROOM_CLOSE, "mallory", "closed by a stranger", origin="ori2_mallory")
    assert derive_room(KEYED, [opened, stranger]).closed is False
    assert derive_room(KEYED, [opened, stranger]).flagged[0]["why"].startswith("room.close is for the room's opener")
    assert derive_room(KEYED, [opened, stranger, keyed(3, ROOM_CLOSE, "carol", "done")]).closed_by == "carol"
    spoke = [opened, keyed(3, ROOM_MESSAGE, "bob", "I think"), keyed(4, ROOM_CLOSE, "bob", "agreed")]
    assert derive_room(KEYED, spoke).closed_by == "bob"
    # spoke only after his close: he was no member when he closed
    late = [opened, keyed(3, ROOM_CLOSE, "bob", "agreed"), keyed(4, ROOM_MESSAGE, "bob", "I think")]
    assert derive_room(KEYED, late).closed is False


def test_a_close_dated_far_ahead_takes_no_part_until_the_clock_reaches_it():
    opened = keyed(1, ROOM_OPEN, "alice", "agenda", metadata={"name": "api-v2", "nonce": NONCE})
    ahead = keyed(2, ROOM_CLOSE, "alice", "later", at="2026-01-01T01:00:00.000000Z")
    assert derive_room(KEYED, [opened, ahead], now="2026-01-01T00:00:10.000000Z").closed is False
    assert derive_room(KEYED, [opened, ahead], now="2026-01-01T01:00:00.000000Z").closed is True


def test_one_daemons_turns_beyond_the_bound_are_no_turns():
    opened = keyed(1, ROOM_OPEN, "alice", "agenda", metadata={"name": "api-v2", "nonce": NONCE})
    flood = [{**keyed(2, ROOM_MESSAGE, "mallory", "x", origin="ori2_mallory"), "id": f"evt_f{i:05d}"}
             for i in range(5_001)]
    room = derive_room(KEYED, [opened, *flood])
    assert room.messages == 5_000 and [f["rule"] for f in room.flagged] == ["room.message"]


# -- the same room on every replica ------------------------------------------------------------------

def _partition_events():
    """Both sides of a partition: alice closes at :10, bob (not told) says at :08, :12 and closes
    at :14; carol writes two turns stamped the same instant."""
    return [
        opening(), event(2, ROOM_MESSAGE, "carol", "same instant A", at="2026-01-01T00:00:05.000000Z"),
        event(3, ROOM_MESSAGE, "carol", "same instant B", at="2026-01-01T00:00:05.000000Z"),
        event(4, ROOM_MESSAGE, "alice", "left side"), event(8, ROOM_MESSAGE, "bob", "right side, before"),
        event(10, ROOM_CLOSE, "alice", "we agree"), event(12, ROOM_MESSAGE, "bob", "right side, after"),
        event(14, ROOM_CLOSE, "bob", "I close too"), event(15, "note", "bob", "not the room's"),
    ]


@settings(max_examples=200, deadline=None)
@given(st.permutations(_partition_events()))
def test_any_arrival_order_gives_the_same_room_and_transcript(arrived):
    """The property every replica relies on: state, transcript, flags and drawers depend only on
    which events are held, never on the order they came in."""
    room = derive_room(ROOM, arrived)
    expected = derive_room(ROOM, _partition_events())
    assert room == expected
    assert transcript(room, arrived) == transcript(expected, _partition_events())
    assert [e["id"] for e in transcript(room, arrived)] == ["evt_0001", "evt_0004", "evt_0002", "evt_0003",
                                                            "evt_0008", "evt_0010"]
    assert [compact(e, room) for e in ordered(room, arrived)] == \
        [compact(e, expected) for e in ordered(expected, _partition_events())]
    assert [drawer_text(e) for e in transcript(room, arrived)] == \
        [drawer_text(e) for e in transcript(expected, _partition_events())]


def test_every_subset_orders_consistently():
    """A replica that holds only part of the events agrees on the order of what it holds."""
    events = _partition_events()
    full = [e["id"] for e in ordered(derive_room(ROOM, events), events)]
    for size in (2, 4, 6):
        for subset in itertools.combinations(events[1:], size):
            held = [events[0], *subset]
            ids = [e["id"] for e in ordered(derive_room(ROOM, held), held)]
            assert ids == [i for i in full if i in ids]
