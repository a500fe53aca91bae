"""End to end: the event-log commands of palacectl against a real palaced (issue 2 §3–§5).

Covers append (envelope, validation with exact MemPalace wording, byte-exact bodies), list
(order, limits, cursors, filters, preview), wait (immediate hit, timeout, wake-up by another
process), ack, redact (bytes gone from the database files), the daemon-unreachable exit code
and status. Every command runs as a real ``palacectl`` process. How the commands render a reply,
their usage errors and the input they refuse before any request are tests/ctl/test_cli_log.py,
against a fake client.
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from palacectl.client import Client
from tests.helpers import PYTHON, append_event, run_ctl

ENVELOPE_KEYS = [
    "id", "seq", "origin", "origin_seq", "type", "stream", "room", "topic", "from_agent", "to_agent",
    "correlation_id", "branch", "base_commit", "status", "ack_of", "artifact_ids", "body", "metadata",
    "created_at",
]
CREATED_AT_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
BASE_ARGS = ["--type", "note", "--stream", "project/test", "--room", "general", "--from-agent", "tester"]
SORTED_STATUSES = "applied, blocked, claimed, failed, open, ready, superseded"


# -- helpers ------------------------------------------------------------------------------------


def count_events(ctl: Any) -> int:
    result = ctl("status", "--json")
    assert result.returncode == 0, result
    return result.json()["events"]


def assert_fails(result: Any, message: str, *, exit_code: int = 1) -> None:
    """Human-mode failure: exit code, nothing on stdout, one ``palacectl: …`` line on stderr."""
    assert result.returncode == exit_code, result
    assert result.stdout == "", result
    assert result.stderr == f"palacectl: {message}\n", result


def append_many(home: Path, n: int, *, parallel: int = 8, **fields: str) -> None:
    """Append ``n`` events through ``palacectl append`` processes, ``parallel`` at a time."""
    args = list(BASE_ARGS)
    for key, value in fields.items():
        args += [f"--{key.replace('_', '-')}", value]
    running: list[subprocess.Popen[bytes]] = []

    def reap(proc: subprocess.Popen[bytes]) -> None:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err

    for _ in range(n):
        if len(running) >= parallel:
            reap(running.pop(0))
        running.append(subprocess.Popen(
            [PYTHON, "-m", "palacectl", "--home", str(home), "append", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        ))
    for proc in running:
        reap(proc)


# -- append -------------------------------------------------------------------------------------


def test_append_returns_full_envelope_in_order(ctl):
    result = ctl("append", *BASE_ARGS, "--topic", "t1", "--to-agent", "bob", "--correlation-id", "c-1",
                 "--branch", "feat/x", "--base-commit", "abc1234", "--status", "open", "--body", "hello",
                 "--metadata", '{"b": 1, "a": "x"}', "--json")
    assert result.returncode == 0, result
    assert result.stderr == ""
    event = result.json()
    assert list(event) == ENVELOPE_KEYS
    assert re.fullmatch(r"evt_\d{8}T\d{6}_[0-9a-f]{20}", event["id"])
    assert event["origin"].startswith("ori2_")
    assert (event["type"], event["stream"], event["room"], event["from_agent"]) == (
        "note", "project/test", "general", "tester")
    assert (event["topic"], event["to_agent"], event["correlation_id"]) == ("t1", "bob", "c-1")
    assert (event["branch"], event["base_commit"], event["status"]) == ("feat/x", "abc1234", "open")
    assert event["ack_of"] is None and event["artifact_ids"] == []
    assert event["body"] == "hello" and event["metadata"] == {"a": "x", "b": 1}
    assert CREATED_AT_RE.match(event["created_at"]), event["created_at"]


def test_append_optional_fields_default_to_null_and_empty(ctl):
    event = append_event(ctl)
    assert list(event) == ENVELOPE_KEYS
    for key in ("topic", "to_agent", "correlation_id", "branch", "base_commit", "status", "ack_of"):
        assert event[key] is None, key
    assert event["body"] == "" and event["metadata"] == {} and event["artifact_ids"] == []
    blank = append_event(ctl, status="", topic="  ", to_agent="")
    assert (blank["status"], blank["topic"], blank["to_agent"]) == (None, None, None)
    stripped = append_event(ctl, type=" note ", stream=" project/x ", from_agent=" a ", to_agent="*")
    assert (stripped["type"], stripped["stream"], stripped["from_agent"]) == ("note", "project/x", "a")
    assert stripped["to_agent"] == "*"


def test_append_routing_field_of_exactly_256_chars_accepted(ctl):
    event = append_event(ctl, topic="t" * 256, from_agent="a" * 256)
    assert event["topic"] == "t" * 256 and event["from_agent"] == "a" * 256


def test_append_metadata_size_limit(ctl):
    big = json.dumps({"k": "v" * 70_000})
    assert_fails(ctl("append", *BASE_ARGS, "--metadata", big), "metadata exceeds maximum size of 65536 bytes")
    assert count_events(ctl) == 0


def test_append_deeply_nested_metadata_is_a_clean_error(ctl):
    """Guards: a --metadata nested past Python's recursion limit is an exit-1 error, not a traceback."""
    nested = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
    result = ctl("append", *BASE_ARGS, "--metadata", nested, "--json")
    assert "Traceback" not in result.stderr, result.stderr[-300:]
    assert result.returncode == 1, result
    error = result.json()["error"]
    assert error["code"] == "invalid_argument" and "metadata" in error["message"]
    assert count_events(ctl) == 0


def test_append_origin_seq_contiguous_and_ids_stable_in_list(ctl):
    appended = [append_event(ctl, body=f"n{i}") for i in range(3)]
    assert [e["origin_seq"] for e in appended] == [1, 2, 3]
    assert len({e["origin"] for e in appended}) == 1
    assert appended[0]["seq"] < appended[1]["seq"] < appended[2]["seq"]
    listed = ctl("list", "--json").json()
    assert listed["count"] == 3
    assert listed["events"] == appended


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--type", "Not A Type!"],
         "type='Not A Type!' is not a valid event type (lowercase letters, digits, '.', '_', '-'; max 64 chars)"),
        (["--type", "x" * 65],
         f"type='{'x' * 65}' is not a valid event type (lowercase letters, digits, '.', '_', '-'; max 64 chars)"),
        (["--type", "   "], "type must be a non-empty string"),
        (["--stream", "  "], "stream must be a non-empty string"),
        (["--status", "bogus"], f"status='bogus' is not one of: {SORTED_STATUSES}"),
        (["--topic", "t" * 257], "topic exceeds maximum length of 256 characters"),
        (["--from-agent", "a" * 257], "from_agent exceeds maximum length of 256 characters"),
        (["--to-agent", "bo\x01b"], "to_agent contains control characters"),
        (["--room", "gen\teral"], "room contains control characters"),
        (["--correlation-id", "c\x7fd"], "correlation_id contains control characters"),
        (["--metadata", "[1, 2]"], "--metadata must be a JSON object"),
        (["--artifact-id", "art_x"], "artifact_ids references unknown artifact 'art_x'"),
        (["--type", "event.redact"],
         "type 'event.redact' is reserved: it is written by redact (palacectl redact), not by append"),
    ],
    ids=["type-regex", "type-too-long", "type-blank", "stream-blank", "status", "topic-len", "from-len",
         "to-ctrl", "room-tab", "corr-del", "metadata-array", "unknown-artifact", "reserved-type"],
)
def test_append_validation_errors_exit_1_and_write_nothing(ctl, args, message):
    append_event(ctl, body="baseline")
    full = list(BASE_ARGS)
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in full:
            full[full.index(flag) + 1] = value
        else:
            full += [flag, value]
    result = ctl("append", *full)
    assert_fails(result, message)
    as_json = ctl("append", *full, "--json")
    assert as_json.returncode == 1, as_json
    assert as_json.json()["error"]["message"] == message
    assert count_events(ctl) == 1


def test_append_body_size_limit(ctl, short_tmp):
    exact = short_tmp / "exact.txt"
    exact.write_bytes(b"a" * 262_144)
    over = short_tmp / "over.txt"
    over.write_bytes(b"a" * 262_143 + "é".encode())  # 262145 bytes: the limit counts UTF-8 bytes
    assert_fails(ctl("append", *BASE_ARGS, "--body-file", str(over)), "body is 262145 bytes; maximum is 262144 bytes")
    assert count_events(ctl) == 0
    ok = ctl("append", *BASE_ARGS, "--body-file", str(exact), "--json")
    assert ok.returncode == 0, ok
    assert len(ok.json()["body"]) == 262_144
    assert ctl("list", "--json").json()["events"][0]["body"] == "a" * 262_144


def test_append_nul_in_body_rejected(ctl, short_tmp):
    path = short_tmp / "nul.txt"
    path.write_bytes(b"before\x00after")
    assert_fails(ctl("append", *BASE_ARGS, "--body-file", str(path)), "body contains null bytes")
    assert_fails(ctl("append", *BASE_ARGS, "--body-file", "-", input=b"x\x00"), "body contains null bytes")
    assert count_events(ctl) == 0


BYTE_EXACT_BODY = "line one\r\nline two\r\n\r\nünïcødé ✓ 日本語 🙂\nlast line no newline\t "


def test_append_body_file_is_byte_exact(ctl, short_tmp):
    path = short_tmp / "body.txt"
    path.write_bytes(BYTE_EXACT_BODY.encode("utf-8"))
    event = ctl("append", *BASE_ARGS, "--body-file", str(path), "--json").json()
    assert event["body"] == BYTE_EXACT_BODY
    listed = ctl("list", "--json")
    assert listed.json()["events"][0]["body"] == BYTE_EXACT_BODY
    assert listed.json()["events"][0]["body"].encode("utf-8") == path.read_bytes()


def test_append_body_from_stdin_is_byte_exact(ctl):
    result = ctl("append", *BASE_ARGS, "--body-file", "-", "--json", input=BYTE_EXACT_BODY.encode("utf-8"))
    assert result.returncode == 0, result
    assert result.json()["body"] == BYTE_EXACT_BODY
    assert ctl("list", "--json").json()["events"][0]["body"] == BYTE_EXACT_BODY


def test_append_with_existing_artifact(ctl):
    art = ctl("artifact", "put", "--kind", "note", "--created-by", "tester", "--json", input=b"note\n").json()
    event = ctl("append", *BASE_ARGS, "--artifact-id", art["id"], "--artifact-id", art["id"], "--json").json()
    assert event["artifact_ids"] == [art["id"]]


# -- list ---------------------------------------------------------------------------------------


def test_list_default_limit_order_and_cap(ctl, daemon):
    # 501 events: through the socket API (501 palacectl processes would take minutes); read via the CLI.
    with Client(daemon.home) as client:
        for i in range(501):
            client.call("append", type="note", stream="bulk", room="r", from_agent="loader", body=str(i))
    default = ctl("list", "--json")
    assert default.returncode == 0, default
    events = default.json()["events"]
    assert default.json()["count"] == 50
    assert [e["body"] for e in events] == [str(i) for i in range(50)]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs)

    capped = ctl("list", "--limit", "1000", "--json").json()
    assert capped["count"] == 500
    assert capped["events"][0]["body"] == "0" and capped["events"][-1]["body"] == "499"
    assert ctl("list", "--limit", "500", "--json").json()["count"] == 500
    assert ctl("list", "--limit", "7", "--json").json()["count"] == 7

    desc = ctl("list", "--order", "desc", "--limit", "3", "--json").json()
    assert [e["body"] for e in desc["events"]] == ["500", "499", "498"]
    upper = ctl("list", "--order", "DESC", "--limit", "1", "--json").json()
    assert upper["events"][0]["body"] == "500"
    desc_default = ctl("list", "--order", "desc", "--json").json()
    assert desc_default["count"] == 50 and desc_default["events"][-1]["body"] == "451"


def test_concurrent_cli_appends_keep_origin_seq_contiguous(ctl, daemon):
    append_many(daemon.home, 16, parallel=8)
    events = ctl("list", "--json").json()["events"]
    assert len(events) == 16
    assert sorted(e["origin_seq"] for e in events) == list(range(1, 17))
    assert len({e["id"] for e in events}) == 16
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--limit", "0"], "limit must be a positive integer"),
        (["--limit", "-3"], "limit must be a positive integer"),
        (["--order", "sideways"], "order='sideways' must be 'asc' or 'desc'"),
        (["--since-event-id", "evt_nope"], "since_event_id 'evt_nope' not found"),
        (["--before-event-id", "evt_nope"], "before_event_id 'evt_nope' not found"),
        (["--since-created-at", "yesterday"],
         ("since_created_at='yesterday' is not a valid ISO-8601 date or UTC datetime "
          "(expected YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ)")),
        (["--status", "bogus"], f"status='bogus' is not one of: {SORTED_STATUSES}"),
    ],
    ids=["limit-0", "limit-neg", "order", "since-unknown", "before-unknown", "created-at", "status"],
)
def test_list_invalid_arguments(ctl, args, message):
    append_event(ctl)
    assert_fails(ctl("list", *args), message)
    as_json = ctl("list", *args, "--json")
    assert as_json.returncode == 1
    assert as_json.json()["error"]["message"] == message


def test_list_cursors_are_exclusive(ctl):
    events = [append_event(ctl, body=str(i)) for i in range(5)]
    ids = [e["id"] for e in events]
    after = ctl("list", "--since-event-id", ids[1], "--json").json()
    assert [e["id"] for e in after["events"]] == ids[2:]
    before = ctl("list", "--before-event-id", ids[3], "--json").json()
    assert [e["id"] for e in before["events"]] == ids[:3]
    between = ctl("list", "--since-event-id", ids[0], "--before-event-id", ids[4], "--json").json()
    assert [e["id"] for e in between["events"]] == ids[1:4]
    desc = ctl("list", "--since-event-id", ids[1], "--order", "desc", "--json").json()
    assert [e["id"] for e in desc["events"]] == ids[2:][::-1]
    at_tip = ctl("list", "--since-event-id", ids[-1], "--json")
    assert at_tip.returncode == 0 and at_tip.json() == {"events": [], "count": 0}


def test_list_repeated_filter_means_or(ctl):
    a = append_event(ctl, stream="s/a")
    b = append_event(ctl, stream="s/b")
    append_event(ctl, stream="s/c")
    result = ctl("list", "--stream", "s/a", "--stream", "s/b", "--json").json()
    assert [e["id"] for e in result["events"]] == [a["id"], b["id"]]
    # Different filters combine with AND.
    only_a = ctl("list", "--stream", "s/a", "--stream", "s/b", "--room", "general", "--type", "note",
                 "--from-agent", "tester", "--json").json()
    assert only_a["count"] == 2
    none = ctl("list", "--stream", "s/a", "--room", "elsewhere", "--json").json()
    assert none == {"events": [], "count": 0}


def test_list_to_agent_matches_agent_and_broadcast_only(ctl):
    to_x = append_event(ctl, to_agent="x", body="for x")
    everyone = append_event(ctl, to_agent="*", body="for all")
    append_event(ctl, to_agent="y", body="for y")
    append_event(ctl, body="for nobody")
    result = ctl("list", "--to-agent", "x", "--json").json()
    assert [e["id"] for e in result["events"]] == [to_x["id"], everyone["id"]]
    desc = ctl("list", "--to-agent", "x", "--order", "desc", "--limit", "1", "--json").json()
    assert [e["id"] for e in desc["events"]] == [everyone["id"]]


def test_list_two_to_agents(ctl):
    x = append_event(ctl, to_agent="x")
    y = append_event(ctl, to_agent="y")
    append_event(ctl, to_agent="z")
    star = append_event(ctl, to_agent="*")
    result = ctl("list", "--to-agent", "x", "--to-agent", "y", "--json").json()
    assert [e["id"] for e in result["events"]] == [x["id"], y["id"], star["id"]]
    only_star = ctl("list", "--to-agent", "*", "--json").json()
    assert [e["id"] for e in only_star["events"]] == [star["id"]]


def test_list_exclude_from_agent(ctl):
    append_event(ctl, from_agent="alice", to_agent="*")
    bob = append_event(ctl, from_agent="bob", to_agent="*")
    carol = append_event(ctl, from_agent="carol", to_agent="alice")
    result = ctl("list", "--exclude-from-agent", "alice", "--json").json()
    assert [e["id"] for e in result["events"]] == [bob["id"], carol["id"]]
    # The --agent pattern: what is for alice and not written by her.
    inbox = ctl("list", "--to-agent", "alice", "--exclude-from-agent", "alice", "--json").json()
    assert [e["id"] for e in inbox["events"]] == [bob["id"], carol["id"]]
    two = ctl("list", "--exclude-from-agent", "alice", "--exclude-from-agent", "bob", "--json").json()
    assert [e["id"] for e in two["events"]] == [carol["id"]]


def test_list_other_filters(ctl):
    e1 = append_event(ctl, topic="t1", correlation_id="c1", status="open", type="task.request")
    e2 = append_event(ctl, topic="t2", correlation_id="c2", status="claimed", type="event.ack", room="other")
    assert [e["id"] for e in ctl("list", "--topic", "t1", "--json").json()["events"]] == [e1["id"]]
    assert [e["id"] for e in ctl("list", "--correlation-id", "c2", "--json").json()["events"]] == [e2["id"]]
    assert [e["id"] for e in ctl("list", "--status", "claimed", "--json").json()["events"]] == [e2["id"]]
    assert [e["id"] for e in ctl("list", "--type", "task.request", "--json").json()["events"]] == [e1["id"]]
    assert [e["id"] for e in ctl("list", "--room", "other", "--json").json()["events"]] == [e2["id"]]


def test_list_since_created_at(ctl):
    first = append_event(ctl, body="first")
    time.sleep(0.01)
    second = append_event(ctl, body="second")
    third = append_event(ctl, body="third")
    inclusive = ctl("list", "--since-created-at", second["created_at"], "--json").json()
    assert [e["id"] for e in inclusive["events"]] == [second["id"], third["id"]]
    assert first["created_at"] < second["created_at"]
    by_date = ctl("list", "--since-created-at", "2000-01-01", "--json").json()
    assert by_date["count"] == 3
    offset = second["created_at"][:19] + "+00:00"
    assert ctl("list", "--since-created-at", offset, "--json").returncode == 0
    future = ctl("list", "--since-created-at", "2999-01-01T00:00:00Z", "--json").json()
    assert future == {"events": [], "count": 0}


def test_list_preview(ctl):
    long_body = "é" * 150 + "x" * 100  # 250 characters, more bytes: the cut counts characters
    short_body = "s" * 200
    append_event(ctl, body=long_body)
    append_event(ctl, body=short_body)
    events = ctl("list", "--preview", "--json").json()["events"]
    assert events[0]["body"] == long_body[:200]
    assert events[0]["body_truncated"] is True
    assert events[0]["body_length"] == 250
    assert events[1]["body"] == short_body
    assert "body_truncated" not in events[1] and "body_length" not in events[1]
    full = ctl("list", "--json").json()["events"]
    assert full[0]["body"] == long_body and "body_truncated" not in full[0]


# -- wait ---------------------------------------------------------------------------------------


def test_wait_returns_at_once_when_a_match_exists(ctl):
    event = append_event(ctl, to_agent="bob")
    started = time.monotonic()
    result = ctl("wait", "--to-agent", "bob", "--timeout-ms", "20000", "--json")
    assert time.monotonic() - started < 10
    assert result.returncode == 0, result
    doc = result.json()
    assert doc["timed_out"] is False and doc["count"] == 1
    assert doc["events"][0]["id"] == event["id"]


def test_wait_times_out_with_exit_2(ctl):
    append_event(ctl, to_agent="alice")
    started = time.monotonic()
    result = ctl("wait", "--to-agent", "bob", "--timeout-ms", "300", "--json")
    elapsed = time.monotonic() - started
    assert result.returncode == 2, result
    assert result.json() == {"timed_out": True, "events": [], "count": 0}
    assert 0.3 <= elapsed < 10
    human = ctl("wait", "--to-agent", "bob", "--timeout-ms", "100")
    assert human.returncode == 2
    assert human.stdout == ""
    assert "Timed out" in human.stderr


def test_a_wait_on_a_correlation_nothing_carries_says_so_when_it_times_out(ctl):
    """Issue 26: an id copied from the docs made `wait` time out without a word on why."""
    append_event(ctl, to_agent="bob", correlation_id="task_real_1")
    made_up = ctl("wait", "--correlation-id", "task_20260101_1a2b3c4d", "--type", "patch.ready", "--timeout-ms", "100")
    assert made_up.returncode == 2 and "No event carries correlation task_20260101_1a2b3c4d here" in made_up.stderr
    real = ctl("wait", "--correlation-id", "task_real_1", "--type", "patch.ready", "--timeout-ms", "100")
    assert real.returncode == 2 and "Timed out" in real.stderr and "No event carries" not in real.stderr


def test_wait_since_event_id_skips_older_matches(ctl):
    event = append_event(ctl, to_agent="bob")
    result = ctl("wait", "--to-agent", "bob", "--since-event-id", event["id"], "--timeout-ms", "200", "--json")
    assert result.returncode == 2, result
    assert result.json()["timed_out"] is True


def test_wait_wakes_on_append_from_another_process(ctl, daemon):
    tip = append_event(ctl, to_agent="bob", body="old")
    proc = subprocess.Popen(
        [PYTHON, "-m", "palacectl", "--home", str(daemon.home), "wait", "--to-agent", "bob",
         "--since-event-id", tip["id"], "--timeout-ms", "60000", "--json"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        # Until the daemon has greeted the wait's connection (its wait request follows at once).
        deadline = time.monotonic() + 60
        while _greeted_connections(daemon.home) < 1 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, "wait returned before anything matched"
        append_event(ctl, to_agent="carol", body="not for bob")
        fresh = append_event(ctl, to_agent="bob", body="new")
        appended_at = time.monotonic()
        out, err = proc.communicate(timeout=20)
        woke_after = time.monotonic() - appended_at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    doc = json.loads(out)
    assert doc["timed_out"] is False
    assert [e["id"] for e in doc["events"]] == [fresh["id"]]
    assert doc["count"] == 1
    assert woke_after < 5, woke_after


def test_wait_zero_timeout(ctl):
    result = ctl("wait", "--to-agent", "bob", "--timeout-ms", "0", "--json")
    assert result.returncode == 2, result
    assert result.json() == {"timed_out": True, "events": [], "count": 0}
    event = append_event(ctl, to_agent="*")
    hit = ctl("wait", "--to-agent", "bob", "--timeout-ms", "0", "--json")
    assert hit.returncode == 0, hit
    assert hit.json()["events"][0]["id"] == event["id"]


def _greeted_connections(home: Path) -> int:
    """Connections the daemon has greeted, besides the one asking."""
    with Client(home) as client:
        return client.call("status")["api_connections"]["greeted"] - 1


def test_wait_interrupted_exits_130(daemon):
    proc = subprocess.Popen(
        [PYTHON, "-m", "palacectl", "--home", str(daemon.home), "wait", "--to-agent", "bob", "--timeout-ms", "60000"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        # Interrupt it while it waits, not while it starts: a loaded machine may take seconds to
        # import (and an interrupted import is Python's, not palacectl's, to report).
        deadline = time.monotonic() + 60
        while _greeted_connections(daemon.home) < 1 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # from hello to the wait request: one round trip
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert b"Traceback" not in err


def test_wait_negative_timeout(ctl):
    assert_fails(ctl("wait", "--timeout-ms", "-1"), "timeout_ms must be a non-negative number")
    as_json = ctl("wait", "--timeout-ms", "-1", "--json")
    assert as_json.returncode == 1
    assert as_json.json()["error"]["message"] == "timeout_ms must be a non-negative number"


def test_wait_unknown_cursor(ctl):
    assert_fails(ctl("wait", "--since-event-id", "evt_nope", "--timeout-ms", "100"),
                 "since_event_id 'evt_nope' not found")


# -- ack ----------------------------------------------------------------------------------------


def test_ack_creates_event_ack_and_leaves_target_unchanged(ctl):
    target = append_event(ctl, type="task.request", stream="project/x", room="delegation", from_agent="alice",
                          to_agent="bob", topic="topic-a", correlation_id="task_x_1", status="open", body="do it")
    result = ctl("ack", target["id"], "--from-agent", "bob", "--status", "claimed", "--body", "on it", "--json")
    assert result.returncode == 0, result
    ack = result.json()
    assert list(ack) == ENVELOPE_KEYS
    assert ack["type"] == "event.ack"
    assert ack["ack_of"] == target["id"]
    assert (ack["stream"], ack["room"], ack["topic"]) == ("project/x", "delegation", "topic-a")
    assert ack["from_agent"] == "bob" and ack["to_agent"] == "alice"
    assert ack["correlation_id"] == "task_x_1"
    assert ack["status"] == "claimed" and ack["body"] == "on it"
    assert ack["metadata"].get("ack_of") == target["id"]
    assert ack["origin_seq"] == target["origin_seq"] + 1

    listed = ctl("list", "--json").json()["events"]
    assert listed[0] == target
    assert listed[1] == ack


def test_ack_without_correlation_uses_target_id_and_topic_override(ctl):
    target = append_event(ctl, from_agent="alice", topic="orig")
    ack = ctl("ack", target["id"], "--from-agent", "bob", "--topic", "override", "--json").json()
    assert ack["correlation_id"] == target["id"]
    assert ack["topic"] == "override"
    assert ack["status"] is None
    assert ack["to_agent"] == "alice"


def test_ack_errors(ctl):
    target = append_event(ctl)
    assert_fails(ctl("ack", "evt_nope", "--from-agent", "bob"), "event 'evt_nope' not found")
    nf = ctl("ack", "evt_nope", "--from-agent", "bob", "--json")
    assert nf.returncode == 1 and nf.json()["error"] == {"code": "not_found", "message": "event 'evt_nope' not found"}
    assert_fails(ctl("ack", target["id"], "--from-agent", "bob", "--status", "bogus"),
                 f"status='bogus' is not one of: {SORTED_STATUSES}")
    missing = ctl("ack", target["id"])
    assert missing.returncode == 64, missing
    assert count_events(ctl) == 1


# -- redact -------------------------------------------------------------------------------------


def _database_bytes(home: Path) -> bytes:
    data = b""
    for path in sorted(home.glob("palace.sqlite3*")):
        data += path.read_bytes()
    return data


def test_redact_purges_body_everywhere(ctl, daemon):
    secret = "SECRET-" + uuid.uuid4().hex
    before = append_event(ctl, body="harmless")
    target = append_event(ctl, from_agent="alice", to_agent="bob", correlation_id="c-9",
                          body=f"my token is {secret} oops")
    after = append_event(ctl, body="later")
    assert secret.encode() in _database_bytes(daemon.home)

    result = ctl("redact", target["id"], "--from-agent", "alice", "--reason", "pasted a token", "--json")
    assert result.returncode == 0, result
    redaction = result.json()
    assert redaction["type"] == "event.redact"
    assert redaction["metadata"]["redacts"] == target["id"]
    assert redaction["body"] == "pasted a token"
    assert redaction["from_agent"] == "alice"

    events = ctl("list", "--json").json()["events"]
    assert [e["id"] for e in events] == [before["id"], target["id"], after["id"], redaction["id"]]
    shown = events[1]
    assert shown["body"] == ""
    assert shown["body_redacted"] is True
    assert shown["body_sha256"] == hashlib.sha256(target["body"].encode("utf-8")).hexdigest()
    assert shown["correlation_id"] == "c-9" and shown["to_agent"] == "bob"
    assert events[0]["body"] == "harmless" and "body_redacted" not in events[0]
    assert events[2]["body"] == "later"
    assert secret not in ctl("list", "--json").stdout
    assert secret not in ctl("list", "--preview", "--json").stdout
    by_type = ctl("list", "--type", "event.redact", "--json").json()
    assert by_type["count"] == 1 and by_type["events"][0]["metadata"]["redacts"] == target["id"]

    # The writer checkpoints right after the redaction batch; a later write is queued behind it.
    append_event(ctl, body="after redaction")
    deadline = time.monotonic() + 5
    while secret.encode() in _database_bytes(daemon.home) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert secret.encode() not in _database_bytes(daemon.home)


def test_redact_bytes_gone_when_redact_returns(daemon):
    """Guards: once redact is acknowledged, the secret is gone from palace.sqlite3 and its WAL."""
    # Through the socket API (what palacectl redact calls) so the check runs right after the reply,
    # without a process exit in between that hides the window. Each round: append, redact, read files.
    leftovers = 0
    with Client(daemon.home) as client:
        for _ in range(20):
            secret = "SECRET-" + uuid.uuid4().hex
            event = client.call("append", type="note", stream="s", room="r", from_agent="a", body=secret)
            client.call("redact", event_id=event["id"], from_agent="a")
            leftovers += secret.encode() in _database_bytes(daemon.home)
    assert leftovers == 0, f"secret still on disk right after redact returned in {leftovers}/20 rounds"


def test_redact_twice_and_unknown(ctl):
    target = append_event(ctl, from_agent="alice", body="oops")
    assert ctl("redact", target["id"], "--from-agent", "alice").returncode == 0
    again = ctl("redact", target["id"], "--from-agent", "alice")
    assert again.returncode == 1, again
    assert "already redacted" in again.stderr
    assert_fails(ctl("redact", "evt_nope", "--from-agent", "alice"), "event 'evt_nope' not found")
    assert count_events(ctl) == 2  # target + one event.redact


def test_append_event_redact_type_is_reserved_even_with_metadata(ctl):
    target = append_event(ctl, body="keep me")
    result = ctl("append", "--type", "event.redact", "--stream", "project/test", "--room", "general",
                 "--from-agent", "mallory", "--metadata", json.dumps({"redacts": target["id"]}))
    assert_fails(result, "type 'event.redact' is reserved: it is written by redact (palacectl redact), not by append")
    assert ctl("list", "--json").json()["events"][0]["body"] == "keep me"


# -- daemon unreachable, usage errors, status ---------------------------------------------------


def test_no_daemon_exit_3(home):
    result = run_ctl(home, "list")
    assert result.returncode == 3, result
    assert result.stdout == ""
    assert "palaced" in result.stderr
    assert "start it with `palaced" in result.stderr
    as_json = run_ctl(home, "status", "--json")
    assert as_json.returncode == 3
    err = as_json.json()["error"]
    assert err["code"] == "unreachable"
    assert "palaced" in err["message"]
    appended = run_ctl(home, "append", *BASE_ARGS)
    assert appended.returncode == 3


def test_no_daemon_wait_is_exit_3_not_2(home):
    result = run_ctl(home, "wait", "--timeout-ms", "100", "--json")
    assert result.returncode == 3, result
    assert result.json()["error"]["code"] == "unreachable"


def test_status_json(ctl, daemon):
    event = append_event(ctl)
    result = ctl("status", "--json")
    assert result.returncode == 0, result
    status = result.json()
    for key in ("version", "home", "origin", "fingerprint", "events", "artifacts", "latest_event_id", "uptime_s"):
        assert key in status, key
    assert status["home"] == str(daemon.home)
    assert status["origin"].startswith("ori2_") and status["origin"] == event["origin"]
    assert isinstance(status["fingerprint"], str) and status["fingerprint"]
    assert status["events"] == 1 and status["artifacts"] == 0
    assert status["latest_event_id"] == event["id"]
    assert isinstance(status["uptime_s"], (int, float)) and status["uptime_s"] >= 0
    assert isinstance(status["version"], str) and status["version"]
    human = ctl("status")
    assert human.returncode == 0
    assert status["origin"] in human.stdout and status["fingerprint"] in human.stdout


def test_status_on_empty_log(ctl):
    status = ctl("status", "--json").json()
    assert status["events"] == 0 and status["latest_event_id"] is None


def test_digest_names_every_origin_head_and_changes_with_the_log(ctl):
    """`palacectl digest`: per origin (origin_seq, head hash) and one digest over them."""
    empty = ctl("digest", "--json").json()
    assert empty["origins"] == [] and empty["events"] == 0
    first = append_event(ctl, body="one")
    second = append_event(ctl, body="two")
    result = ctl("digest", "--json").json()
    (origin,) = result["origins"]
    assert origin["origin"] == first["origin"] and origin["origin_seq"] == second["origin_seq"] == 2
    assert len(origin["head_hash"]) == 64 and result["digest"] != empty["digest"]
    human = ctl("digest")
    assert human.returncode == 0 and result["digest"] in human.stdout


# -- append --ndjson (issue 13: bulk writers) -----------------------------------------------------

ROUTING = ("--type", "note", "--stream", "bulk", "--room", "r", "--from-agent", "loader")


def _ndjson(*objects: Any) -> bytes:
    return "".join(json.dumps(o) + "\n" for o in objects).encode()


def _bulk_bodies(ctl) -> list[str]:
    """Every body on stream "bulk", oldest first (paged: a list returns 500 at most)."""
    bodies: list[str] = []
    cursor: list[str] = []
    while True:
        page = ctl("list", "--stream", "bulk", "--order", "asc", "--limit", "500", *cursor, "--json").json()["events"]
        bodies += [e["body"] for e in page]
        if len(page) < 500:
            return bodies
        cursor = ["--since-event-id", page[-1]["id"]]


def test_append_ndjson_appends_every_line_in_order_with_options_as_defaults(ctl):
    lines = [{"body": f"line {i}"} for i in range(2500)]  # three requests of at most 1000
    lines[7] = {"body": "for bob", "to_agent": "bob", "type": "task.reply", "metadata": {"k": 1}}
    result = ctl("append", "--ndjson", "-", *ROUTING, "--json", input=_ndjson(*lines[:10], {}, *lines[10:]).replace(
        b"{}\n", b"\n"))  # a blank line is skipped
    assert result.returncode == 0, result
    reply = result.json()
    assert reply["count"] == 2500 and len(reply["events"]) == 2500
    seqs = [e["origin_seq"] for e in reply["events"]]
    assert seqs == list(range(seqs[0], seqs[0] + 2500))
    assert _bulk_bodies(ctl) == [line["body"] for line in lines]
    bob = ctl("list", "--to-agent", "bob", "--json").json()["events"]
    assert [(e["body"], e["type"], e["from_agent"], e["metadata"]) for e in bob] == [
        ("for bob", "task.reply", "loader", {"k": 1})]
    human = ctl("append", "--ndjson", "-", *ROUTING, input=_ndjson({"body": "one more"}))
    assert human.returncode == 0 and human.stdout.startswith("Appended 1 events"), human


def test_append_ndjson_stops_at_a_request_the_daemon_refuses_and_says_where(ctl):
    """An unknown ack_of is found only by the daemon, while writing: that request (of at most
    1000 lines) is refused whole; the requests before it stay appended, none after is sent."""
    lines = [{"body": f"line {i}"} for i in range(1500)]
    lines[1200] = {"body": "acks nothing", "ack_of": "evt_20260101T000000_00000000000000000000"}
    result = ctl("append", "--ndjson", "-", *ROUTING, input=_ndjson(*lines))
    assert result.returncode == 1, result
    assert "line 1201" in result.stderr and "nothing from line 1001 on was appended" in result.stderr, result
    assert "lines before 1001 were appended (1000 events)" in result.stderr, result
    assert _bulk_bodies(ctl) == [f"line {i}" for i in range(1000)]


