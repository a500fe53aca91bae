"""Agent rooms end to end (issue 29, docs/rooms.md): real palaced processes, real sockets.

``palacectl room`` as agents and people run it (JSON, human lines, one-line errors and their exit
codes); a room's members woken by ``watch --agent`` and nobody else; and two daemons writing to
one room while cut off from each other: once the partition heals every replica holds the same
transcript, read positions never move back, and the closed room's drawers are found on all."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.dashboard import DashboardProcess
from tests.e2e.test_cli_watch import WatchProc
from tests.e2e.test_ui_browser import browser_factory, console_errors, open_page, sign_in, text_of, wait_for  # noqa: F401
from tests.fleet import api, ctl_json, wait_converged, wait_until
from tests.helpers import run_ctl

WAIT_S = 30.0


def _search(home: Path, words: str) -> list[dict]:
    return api(home, "search", query=words, wing="shop", mode="keyword", limit=20)["results"]


def _transcript(home: Path, room_id: str) -> list[tuple[str, bool]]:
    """(event id, after_close) of every event of the room in the agreed order, and which are turns."""
    shown = api(home, "room_show", room_id=room_id, limit=500)
    return [(e["id"], e.get("after_close", False), e["turn"]) for e in shown["events"]]


# -- the command line ------------------------------------------------------------------------------

def test_the_room_commands(daemon):
    home = daemon.home
    opened = ctl_json(home, "room", "open", "Orders API v2", "--project", "shop", "--from-agent", "alice",
                      "--member", "bob", "--agenda", "agree on paging before anyone codes")
    room_id = opened["room"]["room_id"]
    assert opened["success"] and room_id.startswith("room_orders-api-v2_") and opened["room"]["members"] == ["alice", "bob"]
    human = run_ctl(home, "room", "open", "second", "--project", "shop", "--from-agent", "alice")
    assert human.returncode == 0 and human.stdout.startswith("room_second_") and human.stdout.count("\n") == 1
    assert "Join palace room" in human.stderr

    said = run_ctl(home, "room", "say", room_id, "--from-agent", "bob", "--body-file", "-",
                   input=b"Cursors, opaque.\r\nNever offsets.\n")
    assert said.returncode == 0 and said.stdout.startswith("evt_") and "1 turn(s) by others" in said.stderr
    page = ctl_json(home, "room", "read", room_id, "--agent", "bob")
    assert [e["body"] for e in page["events"]] == ["agree on paging before anyone codes",
                                                   "Cursors, opaque.\r\nNever offsets.\n"]
    ctl_json(home, "room", "say", room_id, "--from-agent", "alice", "--body", "agreed", "--to-agent", "bob")
    text = run_ctl(home, "room", "read", room_id, "--agent", "bob")
    assert text.returncode == 0 and "room.message" in text.stdout and "alice -> bob\n    agreed\n" in text.stdout
    assert ctl_json(home, "room", "read", room_id, "--agent", "bob")["events"] == []  # an empty read exits 0

    listed = ctl_json(home, "room", "list", "--project", "shop", "--status", "open")
    assert [r["room_id"] for r in listed["rooms"]][1] == room_id and listed["count"] == 2
    rows = run_ctl(home, "room", "list", "--agent", "bob").stdout.splitlines()
    assert len(rows) == 1 and rows[0].split("\t")[:4] == [room_id, "open", "shop", "2"]

    closed = ctl_json(home, "room", "close", room_id, "--from-agent", "alice", "--outcome", "opaque cursors")
    assert (closed["already_closed"], closed["filed"], closed["wing"], closed["palace_room"]) == \
        (False, 4, "shop", "orders-api-v2")
    again = run_ctl(home, "room", "close", room_id, "--from-agent", "bob")
    assert again.returncode == 0 and again.stdout.startswith("Already closed by alice at ")
    assert "(4 there already)" in again.stdout
    hits = ctl_json(home, "search", "Never offsets", "--wing", "shop", "--mode", "keyword")["results"]
    assert hits and hits[0]["content"].endswith("\nCursors, opaque.\r\nNever offsets.\n")
    shown = run_ctl(home, "room", "show", room_id)
    assert shown.returncode == 0 and "closed by alice" in shown.stdout and "    opaque cursors" in shown.stdout

    # Refusals: one line on stderr, exit 1; usage errors exit 64; an absent daemon exits 3.
    late = run_ctl(home, "room", "say", room_id, "--from-agent", "bob", "--body", "one more thing")
    assert late.returncode == 1 and late.stderr == f"palacectl: room '{room_id}' is closed\n", late
    late_json = run_ctl(home, "room", "say", room_id, "--from-agent", "bob", "--body", "x", "--json")
    assert late_json.returncode == 1 and late_json.json()["error"]["code"] == "conflict"
    for args, words in ((["read", "task_1", "--agent", "bob"], "room_id='task_1' is not a room id"),
                        (["read", "room_gone_00000000", "--agent", "bob"], "room 'room_gone_00000000' not found"),
                        (["open", " ", "--project", "p", "--from-agent", "a"], "room name must not be empty"),
                        (["say", room_id, "--from-agent", "bob", "--body", " "], "room message body must not be empty")):
        refused = run_ctl(home, "room", *args)
        assert refused.returncode == 1 and words in refused.stderr and refused.stderr.count("\n") == 1, refused
    for args in (["list", "--status", "ajar"], ["say", room_id, "--from-agent", "bob"],
                 ["say", room_id, "--from-agent", "b", "--body", "x", "--body-file", "-"], ["read", room_id]):
        assert run_ctl(home, "room", *args).returncode == 64, args
    assert run_ctl(home.parent / "nobody-home", "room", "list").returncode == 3


# -- the dashboard ---------------------------------------------------------------------------------

def test_room_turns_stay_out_of_the_inbox_and_session_start_names_a_members_rooms(daemon):
    """A room's talk to everyone would otherwise land in every agent's inbox: it is read in the
    room (its own read position), and session start names the member's open rooms with what it
    has not read; a turn addressed to an agent wakes its watch, and is in the room too."""
    home = daemon.home
    room_id = ctl_json(home, "room", "open", "api shape", "--project", "shop", "--from-agent", "alice",
                       "--member", "bob", "--agenda", "paging")["room"]["room_id"]
    ctl_json(home, "room", "say", room_id, "--from-agent", "alice", "--body", "cursors?")
    ctl_json(home, "append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "alice",
             "--to-agent", "*", "--body", "ordinary broadcast")
    for agent in ("bob", "carol"):
        inbox = ctl_json(home, "inbox", "--agent", agent)
        assert [e["body"] for e in inbox["events"]] == ["ordinary broadcast"], (agent, inbox)
    bob = ctl_json(home, "session", "start", "--agent", "bob")
    assert [(r["room_id"], r["unread"]) for r in bob["rooms"]] == [(room_id, 2)]
    text = run_ctl(home, "session", "start", "--agent", "bob")
    assert f"`palacectl room read {room_id} --agent bob`" in text.stdout, text.stdout
    assert ctl_json(home, "session", "start", "--agent", "carol")["rooms"] == []
    ctl_json(home, "room", "read", room_id, "--agent", "bob")
    assert ctl_json(home, "session", "start", "--agent", "bob")["rooms"][0]["unread"] == 0


def test_the_dashboard_lists_rooms_and_shows_one_live(daemon):
    home = daemon.home
    run_ctl(home, "init", "--palace-name", "shop", "--daemon-name", "mac")
    room_id = ctl_json(home, "room", "open", "orders API", "--project", "shop", "--from-agent", "alice",
                       "--agenda", "paging?")["room"]["room_id"]
    ctl_json(home, "room", "say", room_id, "--from-agent", "bob", "--body", "cursors")
    ui = DashboardProcess(home, "--as", "ana")
    try:
        listing = ui.get_json("/api/rooms")
        assert listing["supported"] and [r["room_id"] for r in listing["rooms"]] == [room_id]
        shown = ui.get_json(f"/api/room/{room_id}")
        assert [e["body"] for e in shown["events"]] == ["paging?", "cursors"] and shown["room"]["closed"] is False
        assert ui.get("/api/room/task_1").status == 400 and ui.get("/api/room/room_gone_00000000").status == 404
        # Showing moves nobody's read position: bob's first read is still everything.
        assert ctl_json(home, "room", "read", room_id, "--agent", "bob")["count"] == 2
    finally:
        assert ui.stop() == 0, ui.output()


@pytest.mark.slow
def test_the_rooms_pages_in_a_browser_follow_a_room_live(daemon, browser_factory):
    home = daemon.home
    run_ctl(home, "init", "--palace-name", "shop", "--daemon-name", "mac")
    room_id = ctl_json(home, "room", "open", "orders API", "--project", "shop", "--from-agent", "alice",
                       "--agenda", "paging?")["room"]["room_id"]
    ui = DashboardProcess(home, "--as", "ana")
    try:
        driver = browser_factory()
        sign_in(driver, ui)
        open_page(driver, ui, "rooms")
        wait_for(driver, lambda d: "orders-api" in text_of(d) and "open" in text_of(d), "the room in the list")
        open_page(driver, ui, f"room/{room_id}")
        wait_for(driver, lambda d: d.find_element("id", "live").text == "live", "the live stream")
        hostile = '<img src=x onerror="window.__pwned=1">'
        ctl_json(home, "room", "say", room_id, "--from-agent", "bob", "--body", f"cursors {hostile}")
        wait_for(driver, lambda d: f"cursors {hostile}" in text_of(d), "bob's turn, live, as text")
        ctl_json(home, "room", "close", room_id, "--from-agent", "alice", "--outcome", "cursors it is")
        wait_for(driver, lambda d: "cursors it is" in text_of(d) and "closed" in text_of(d), "the close, live")
        assert driver.execute_script("return window.__pwned") is None
        assert console_errors(driver) == []
    finally:
        assert ui.stop() == 0, ui.output()


# -- waking the members ----------------------------------------------------------------------------

def test_watch_wakes_a_rooms_members_and_nobody_else(daemon, short_tmp):
    """Guards `watch --agent`: a room message to everyone wakes the room's members (opener, listed,
    speakers, readers) and no other agent, though it is addressed to `*`."""
    home = daemon.home
    room_id = ctl_json(home, "room", "open", "review", "--project", "shop", "--from-agent", "alice",
                       "--member", "bob")["room"]["room_id"]
    ctl_json(home, "room", "read", room_id, "--agent", "dave")
    other = ctl_json(home, "room", "open", "elsewhere", "--project", "shop", "--from-agent", "erin")["room"]["room_id"]
    watches = {}
    for n, (agent, extra) in enumerate((("bob", ()), ("dave", ()), ("carol", ()), ("erin", ()),
                                        ("carol", ("--correlation-id", room_id)))):
        args = ("--agent", agent, "--state-file", "", "--idle-exit-ms", "4000", "--json", *extra)
        watches[(agent, bool(extra))] = WatchProc(home, args, short_tmp, n)
    try:
        for watch in watches.values():
            watch.wait_armed()
        said = ctl_json(home, "room", "say", room_id, "--from-agent", "alice", "--body", "please review the patch")
        for key in (("bob", False), ("dave", False), ("carol", True)):
            assert watches[key].wait() == 0, watches[key]
            assert [e["id"] for e in watches[key].json()["events"]] == [said["event"]["id"]]
        for key in (("carol", False), ("erin", False)):
            assert watches[key].wait() == 2, watches[key]  # idle: not their room
        # A message in erin's own room wakes erin.
        erin = WatchProc(home, ("--agent", "erin", "--state-file", "", "--idle-exit-ms", "4000", "--json"), short_tmp, 9)
        watches[("erin", "again")] = erin
        erin.wait_armed()
        ctl_json(home, "room", "say", other, "--from-agent", "zed", "--body", "anyone?")
        assert erin.wait() == 0 and erin.json()["events"][0]["body"] == "anyone?"
    finally:
        for watch in watches.values():
            watch.close()


# -- across a partition ----------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.transport_fixed  # about the peers: the local API's transport plays no part
def test_a_room_written_on_both_sides_of_a_partition_converges(fleet):
    a, b, c = fleet.ends_through_middle()
    room_id = api(a.home, "room_open", project="shop", from_agent="alice", name="paging",
                  agenda="how do we page orders", members=["carol"])["room"]["room_id"]
    # A second room only alpha closes: gamma's turn there reaches the closer late, and is filed there.
    quiet = api(a.home, "room_open", project="shop", from_agent="alice", name="naming")["room"]["room_id"]
    wait_converged(a, b, c)
    assert [e["body"] for e in api(c.home, "room_read", room_id=room_id, agent="carol")["events"]] == \
        ["how do we page orders"]
    with fleet.partitioned(b):
        api(a.home, "room_say", room_id=room_id, from_agent="alice", body="alpha says quokka cursors")
        api(c.home, "room_say", room_id=room_id, from_agent="carol", body="gamma says narwhal offsets")
        time.sleep(0.05)
        api(c.home, "room_say", room_id=quiet, from_agent="carol", body="gamma names it axolotl")
        close = api(a.home, "room_close", room_id=room_id, from_agent="alice", outcome="agreed: wombat cursors")
        assert api(a.home, "room_close", room_id=quiet, from_agent="alice")["filed"] == 0  # nothing with words yet
        assert close["filed"] == 3  # the agenda, alice's turn, the outcome: all alpha holds
        time.sleep(0.05)
        # Gamma has not heard of the close: it takes a turn stamped after it, and even closes itself.
        late = api(c.home, "room_say", room_id=room_id, from_agent="carol", body="gamma adds platypus limits")
        api(c.home, "room_close", room_id=room_id, from_agent="carol", outcome="gamma closes too")
        assert api(c.home, "room_read", room_id=room_id, agent="carol")["events"] == []  # only its own, new
        first_look = api(c.home, "room_read", room_id=room_id, agent="dave")
        assert [e["from_agent"] for e in first_look["events"]] == ["alice", "carol", "carol", "carol"]
    wait_converged(a, b, c)

    # The same transcript on every replica; the late turn and the second close are after the close.
    views = {d.home.name: _transcript(d.home, room_id) for d in (a, b, c)}
    assert views["alpha"] == views["beta"] == views["gamma"], views
    flagged = {event_id for event_id, after, _ in views["alpha"] if after}
    assert late["event"]["id"] in flagged and len(flagged) == 2
    assert [turn for _, after, turn in views["alpha"]] == [not after for _, after, _ in views["alpha"]]
    for d in (a, b, c):
        room = api(d.home, "room_show", room_id=room_id)["room"]
        assert (room["closed_by"], room["outcome"], room["closes"], room["close_event_id"]) == \
            ("alice", "agreed: wombat cursors", 2, close["event"]["id"])

    # Read positions never move back: what arrived late is read once, what was read is not again.
    news = api(c.home, "room_read", room_id=room_id, agent="carol")["events"]
    assert [e["body"] for e in news] == ["alpha says quokka cursors", "agreed: wombat cursors"]
    assert news[1].get("after_close") is None
    assert [e["body"] for e in api(c.home, "room_read", room_id=room_id, agent="dave")["events"]] == \
        ["alpha says quokka cursors", "agreed: wombat cursors"]
    for agent in ("carol", "dave"):
        assert api(c.home, "room_read", room_id=room_id, agent=agent)["events"] == []
    refused = run_ctl(c.home, "room", "say", room_id, "--from-agent", "carol", "--body", "now?")
    assert refused.returncode == 1 and "is closed" in refused.stderr

    # Every turn of the transcript is a drawer on every replica: alpha filed gamma's turn once it
    # arrived (its close is the one that counts), and the drawers replicated.
    for d in (a, b, c):
        for words in ("quokka", "narwhal", "wombat", "orders"):
            wait_until(lambda h=d.home, w=words: _search(h, w), f"{words} filed on {d.home.name}", WAIT_S)
        found = _search(d.home, "narwhal")
        assert len(found) == 1 and found[0]["source_file"] == room_id and found[0]["room"] == "paging"
    words = ("orders", "quokka", "narwhal", "wombat", "platypus", "closes")

    def drawer_ids(home: Path) -> set[str]:
        return {h["drawer_id"] for w in words for h in _search(home, w) if h["source_file"] == room_id}

    wait_until(lambda: drawer_ids(a.home) == drawer_ids(b.home) == drawer_ids(c.home), "the same drawers everywhere",
               WAIT_S)
    for d in (a, b, c):
        filed = wait_until(lambda h=d.home: _search(h, "axolotl"), f"the late turn filed, seen on {d.home.name}", WAIT_S)
        assert (filed[0]["source_file"], filed[0]["added_by"]) == (quiet, "alice")  # by the closer's daemon
