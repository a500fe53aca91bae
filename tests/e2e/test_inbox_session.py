"""The inbox the daemon keeps for each agent, `session start`, and text search, against real
daemons: a cursor that never skips an event that replicates late and never moves backwards,
a session block with everything an agent needs (and how big it is), text search combined with
the filters, and a redacted body gone from the index and the database file."""

from __future__ import annotations

import json
import time

import pytest

from tests.fleet import api, append, ctl_json, wait_converged, wait_until
from tests.helpers import run_ctl


def to(home, agent, body, sender="boss", **fields):
    return append(home, body, from_agent=sender, to_agent=agent, **fields)


def inbox(home, agent, *flags):
    return ctl_json(home, "inbox", "--agent", agent, *flags)


def mark(home, agent, event_id):
    return ctl_json(home, "inbox", "mark-read", "--agent", agent, "--upto", event_id)


def test_the_inbox_lists_what_is_for_the_agent_and_its_cursor_only_moves_forward(daemon):
    home = daemon.home
    first = to(home, "alice", "review my patch")
    to(home, "bob", "not for alice")
    everyone = to(home, "*", "stand-up in five")
    append(home, "alice's own broadcast", from_agent="alice", to_agent="*")
    page = inbox(home, "alice")
    assert [e["id"] for e in page["events"]] == [first["id"], everyone["id"]]
    assert (page["unread"], page["more"], page["cursor"]["read_event_id"]) == (2, False, None)
    moved = mark(home, "alice", first["id"])
    assert moved["moved"] is True and moved["unread"] == 1
    assert [e["id"] for e in inbox(home, "alice")["events"]] == [everyone["id"]]
    again = mark(home, "alice", first["id"])  # never backwards
    assert again["moved"] is False and again["cursor"]["read_event_id"] == first["id"]
    later = to(home, "alice", "one more")
    refused = run_ctl(home, "inbox", "mark-read", "--agent", "alice", "--upto", later["id"])
    assert refused.returncode == 1 and "has not been listed" in refused.stderr, refused  # not yet listed
    assert inbox(home, "alice")["unread"] == 2
    mark(home, "alice", later["id"])
    assert inbox(home, "alice")["events"] == []
    unknown = run_ctl(home, "inbox", "mark-read", "--agent", "alice", "--upto", "evt_nope")
    assert unknown.returncode == 1 and "unknown event" in unknown.stderr
    usage = run_ctl(home, "inbox")
    assert usage.returncode == 64 and "--agent" in usage.stderr


def test_mark_read_without_upto_marks_what_the_inbox_showed_and_nothing_after(daemon):
    """Issue 47 §1.4: the quick start's step 2 had no id to give on an empty inbox. Without --upto,
    mark-read marks the last event `inbox` showed; one that arrived since stays unread; an empty
    inbox marks nothing, in words, exit 0; never listed here: a one-line usage error."""
    home = daemon.home
    never = run_ctl(home, "inbox", "mark-read", "--agent", "carol")
    assert never.returncode == 64 and "list your inbox first" in never.stderr and never.stderr.count("\n") == 1
    assert inbox(home, "carol")["events"] == []
    empty = run_ctl(home, "inbox", "mark-read", "--agent", "carol")
    assert empty.returncode == 0 and "nothing to mark" in empty.stderr, empty
    shown = to(home, "carol", "first")
    assert [e["id"] for e in inbox(home, "carol")["events"]] == [shown["id"]]
    late = to(home, "carol", "arrived after the listing")
    moved = ctl_json(home, "inbox", "mark-read", "--agent", "carol")
    assert moved["moved"] is True and moved["cursor"]["read_event_id"] == shown["id"]
    assert [e["id"] for e in inbox(home, "carol")["events"]] == [late["id"]]  # still unread


def test_a_long_inbox_pages_through_its_cursor(daemon):
    for i in range(7):
        to(daemon.home, "alice", f"message {i}")
    seen = []
    while True:
        page = inbox(daemon.home, "alice", "--limit", "3")
        if not page["events"]:
            break
        seen += [e["body"] for e in page["events"]]
        mark(daemon.home, "alice", page["events"][-1]["id"])
    assert seen == [f"message {i}" for i in range(7)]


@pytest.mark.slow
def test_an_event_that_replicates_late_is_never_skipped_by_the_cursor(fleet):
    """Guards the rule that the cursor is a local seq: an event written earlier elsewhere, during a
    partition, arrives after the agent read past later ones, and still shows up after its cursor."""
    a, b, c = fleet.ends_through_middle()
    wait_converged(a, b, c)
    with fleet.partitioned(b):
        early = to(c.home, "alice", "written first, on gamma, during the partition", sender="gamma-bot")
        time.sleep(0.05)
        later = to(a.home, "alice", "written later, on alpha", sender="alpha-bot")
        assert early["created_at"] < later["created_at"]
        assert [e["id"] for e in inbox(a.home, "alice")["events"]] == [later["id"]]
        mark(a.home, "alice", later["id"])
    wait_until(lambda: any(e["id"] == early["id"] for e in api(a.home, "list", limit=500)["events"]),
               "gamma's event to reach alpha")
    page = inbox(a.home, "alice")
    assert [e["id"] for e in page["events"]] == [early["id"]] and page["unread"] == 1


def test_session_start_has_everything_to_start_with_and_says_what_next(daemon, short_tmp):
    home = daemon.home
    for i in range(25):
        to(home, "mac-claude", f"message {i}: " + "please look at the failing build on main " * 3)
    mine = ctl_json(home, "task", "create", "--project", "shop", "--from-agent", "mac-claude", "--to-agent", "*",
                    "--goal", "Add the orders table", "--branch", "main", "--base-commit", "abc1234", "--done",
                    "tests pass")["task"]
    theirs = ctl_json(home, "task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent",
                      "mac-claude", "--goal", "Fix the flaky wait test", "--branch", "main", "--base-commit",
                      "abc1234", "--done", "20 runs pass")["task"]
    ctl_json(home, "task", "claim", theirs["correlation_id"], "--agent", "mac-claude")
    ctl_json(home, "lease", "acquire", "src/orders/**", "--agent", "mac-claude", "--project", "shop")
    for i in range(4):
        ctl_json(home, "diary", "write", "--agent", "mac-claude", "--entry", f"SESSION {i}|orders|done", "--topic", "t")
    session = ctl_json(home, "session", "start", "--agent", "mac-claude")
    # 25 messages and the task addressed to it
    assert session["inbox"]["unread"] == 26 and len(session["inbox"]["items"]) == 10
    assert session["inbox"]["more"] == 16
    assert all(len(e["body"]) <= 160 for e in session["inbox"]["items"])
    loops = {t["correlation_id"]: t for t in session["open_loops"]["items"]}
    assert loops[mine["correlation_id"]]["role"] == "requester"
    assert loops[theirs["correlation_id"]]["role"] == "claimant"
    assert loops[mine["correlation_id"]]["goal"] == "Add the orders table"
    assert [lease["patterns"] for lease in session["leases"]["items"]] == [["src/orders/**"]]
    assert len(session["diary"]["items"]) == 3 and session["diary"]["total"] == 4
    assert session["identity"]["here"] is False  # a daemon alone registers nobody...
    assert session["identity"]["registers"] is False
    assert session["next"].startswith("Next: arm `palacectl watch --agent mac-claude`")
    text = run_ctl(home, "session", "start", "--agent", "mac-claude").stdout
    assert "## Inbox: 26 unread" in text and "… and 16 more unread" in text and "## Open loops" in text
    assert "src/orders/**" in text and "SESSION 3|orders|done" in text
    # ...and says so, not "your first write registers it" after every write (issue 26).
    assert "this daemon is in no palace yet" in text and "first write registers it here" not in text
    print(f"session start for a busy agent: {len(text.encode())} bytes of text, "
          f"{len(json.dumps(session).encode())} bytes of JSON")
    assert len(text.encode()) < 6000  # short enough to paste into a context window
    hook = json.loads(run_ctl(home, "session", "start", "--agent", "mac-claude", "--hook", "claude").stdout)
    context = hook["hookSpecificOutput"]["additionalContext"]
    assert context.split("\n", 1)[1] == text.split("\n", 1)[1]  # the same block (its first line has the time)


def test_text_search_is_ranked_combined_with_filters_and_forgets_a_redacted_body(daemon):
    home = daemon.home
    secret = to(home, "alice", "the staging deploy key is zq8-hunter-7741, rotate it after use")
    to(home, "bob", "the deploy went fine on staging")
    to(home, "alice", "lunch at noon")
    found = ctl_json(home, "list", "--text", "deploy staging")["events"]
    assert {e["to_agent"] for e in found} == {"alice", "bob"}
    assert [e["id"] for e in ctl_json(home, "list", "--text", "deploy", "--to-agent", "alice")["events"]] == \
        [secret["id"]]
    assert ctl_json(home, "list", "--text", "zq8-hunter-7741")["events"][0]["id"] == secret["id"]
    assert ctl_json(home, "list", "--text", "nothing-like-this")["events"] == []
    for bad in ('"', "a" * 251):
        result = run_ctl(home, "list", "--text", bad)
        assert result.returncode in (0, 1), result  # a quote is just a word; too long is one line
    assert run_ctl(home, "list", "--text", "a" * 251).returncode == 1
    ctl_json(home, "redact", secret["id"], "--from-agent", "boss")
    assert ctl_json(home, "list", "--text", "zq8-hunter-7741")["events"] == []
    assert [e["to_agent"] for e in ctl_json(home, "list", "--text", "deploy")["events"]] == ["bob"]
    wait_until(lambda: all(b"zq8-hunter-7741" not in path.read_bytes()
                           for path in home.glob("palace.sqlite3*") if path.is_file()),
               "the secret to leave every database file")
    wait = run_ctl(home, "wait", "--text", "x", "--timeout-ms", "10")
    assert wait.returncode == 64 or "list" in wait.stderr
