"""End to end: artifacts, patches, tasks and ``who`` through palacectl against a real palaced.

Covers issue 2 §4 (artifact put/get content addressing and byte-exact I/O, patch warnings, patch
submit in one transaction, task create validation with MemPalace wording, the task lifecycle,
task list --open) and ``who`` reporting live watchers as the daemon sees them. How the commands
print a reply and their usage errors are tests/ctl/test_cli_artifacts.py and test_cli_tasks.py
(a fake client).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
from typing import Any

import pytest

from tests.helpers import PYTHON, append_event, run_ctl

ALL_BYTES = bytes(range(256)) * 4 + b"\r\n\x00\xff\xfe"
RECORD_KEYS = {"id", "kind", "sha256", "size_bytes", "created_by", "created_at"}
CREATED_AT_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{6})?Z$")
CLEAN_PATCH = b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-old\n+new\n"
BASE = "0123abcd" * 5
NO_NEWLINE_WARNING = (
    "Warning: patch content does not end with a trailing newline; git apply will reject the final hunk as "
    "corrupt — store the diff byte-exactly including its trailing newline"
)
CRLF_WARNING = (
    "Warning: patch content contains carriage returns (CRLF line endings); git apply often rejects CRLF "
    "diffs — generate the diff with LF endings"
)


# -- helpers ------------------------------------------------------------------------------------


def counts(ctl: Any) -> tuple[int, int]:
    status = ctl("status", "--json")
    assert status.returncode == 0, status
    doc = status.json()
    return doc["events"], doc["artifacts"]


def assert_fails(result: Any, message: str, *, exit_code: int = 1) -> None:
    assert result.returncode == exit_code, result
    assert result.stdout == "", result
    assert result.stderr == f"palacectl: {message}\n", result


def put(ctl: Any, data: bytes, *, kind: str = "file", created_by: str = "alice", **extra: str) -> dict[str, Any]:
    args = ["artifact", "put", "--kind", kind, "--created-by", created_by, "--json"]
    for key, value in extra.items():
        args += [f"--{key.replace('_', '-')}", value]
    result = ctl(*args, input=data)
    assert result.returncode == 0, result
    return result.json()


def create_task(ctl: Any, *, project: str = "Palace Core", from_agent: str = "alice", to_agent: str = "bob",
                goal: str = "Fix the flaky watch test!", done: str = "tests green; patch submitted") -> dict[str, Any]:
    result = ctl("task", "create", "--project", project, "--from-agent", from_agent, "--to-agent", to_agent,
                 "--goal", goal, "--branch", "fix/watch", "--base-commit", BASE, "--done", done, "--json")
    assert result.returncode == 0, result
    return result.json()


TASK_ARGS = {
    "--project": "palace", "--from-agent": "alice", "--to-agent": "bob", "--goal": "Do the thing",
    "--branch": "feat/thing", "--base-commit": "abcdef1", "--done": "it is done",
}


def task_args(**overrides: str) -> list[str]:
    values = {**TASK_ARGS, **{f"--{k.replace('_', '-')}": v for k, v in overrides.items()}}
    return [part for flag, value in values.items() for part in (flag, value)]


# -- artifact put / get -------------------------------------------------------------------------


def test_artifact_put_from_stdin_record(ctl):
    data = b"hello artifact\n"
    result = ctl("artifact", "put", "--kind", "note", "--created-by", "alice", "--json", input=data)
    assert result.returncode == 0, result
    assert result.stderr == ""
    record = result.json()
    assert set(record) == RECORD_KEYS
    digest = hashlib.sha256(data).hexdigest()
    assert record["sha256"] == digest
    assert record["id"] == "art_" + digest[:32]
    assert record["kind"] == "note" and record["created_by"] == "alice"
    assert record["size_bytes"] == len(data)
    assert CREATED_AT_RE.match(record["created_at"])


def test_artifact_binary_round_trip_stdout_and_out_file(ctl, short_tmp):
    record = put(ctl, ALL_BYTES)
    assert record["size_bytes"] == len(ALL_BYTES)
    assert record["sha256"] == hashlib.sha256(ALL_BYTES).hexdigest()

    got = ctl("artifact", "get", record["id"])
    assert got.returncode == 0, got
    assert got.stdout_bytes == ALL_BYTES
    assert got.stderr == ""

    out = short_tmp / "copy.bin"
    written = ctl("artifact", "get", record["id"], "--out", str(out))
    assert written.returncode == 0, written
    assert out.read_bytes() == ALL_BYTES
    assert written.stdout == f"Wrote {len(ALL_BYTES)} bytes to {out}\n  sha256={record['sha256']}\n"

    by_sha = ctl("artifact", "get", record["sha256"])
    assert by_sha.returncode == 0 and by_sha.stdout_bytes == ALL_BYTES
    by_upper_sha = ctl("artifact", "get", record["sha256"].upper())
    assert by_upper_sha.returncode == 0 and by_upper_sha.stdout_bytes == ALL_BYTES


def test_artifact_file_put_is_byte_exact(ctl, short_tmp):
    path = short_tmp / "crlf.txt"
    data = "crlf line\r\nünïcødé\r\nno newline".encode()
    path.write_bytes(data)
    record = put(ctl, b"", file=str(path))
    assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert ctl("artifact", "get", record["id"]).stdout_bytes == data


def test_artifact_identical_bytes_stored_once(ctl):
    first = put(ctl, b"same bytes\n", kind="file", created_by="alice")
    second = put(ctl, b"same bytes\n", kind="note", created_by="bob")
    assert second["id"] == first["id"] and second["sha256"] == first["sha256"]
    assert counts(ctl) == (0, 1)
    third = put(ctl, b"same bytes!\n")
    assert third["id"] != first["id"]
    assert counts(ctl) == (0, 2)


def test_artifact_get_json_out(ctl, short_tmp):
    record = put(ctl, b"json me\n", kind="json")
    out = short_tmp / "out.json"
    result = ctl("artifact", "get", record["id"], "--json", "--out", str(out))
    assert result.returncode == 0, result
    doc = result.json()
    assert "content" not in doc
    assert doc["content_written_to"] == str(out)
    for key in RECORD_KEYS:
        assert doc[key] == record[key], key
    assert out.read_bytes() == b"json me\n"


@pytest.mark.parametrize(
    ("args", "data", "message"),
    [
        (["--kind", "binary"], b"x", "kind='binary' is not one of: file, json, log, note, patch"),
        (["--kind", "file"], b"", "content must not be empty"),
        (["--kind", "file", "--created-by", "a\x01b"], b"x", "created_by contains control characters"),
    ],
    ids=["kind", "empty", "created-by-control"],
)
def test_artifact_put_errors(ctl, args, data, message):
    full = ["artifact", "put", "--created-by", "alice", *args]
    if full.count("--created-by") > 1:
        del full[2:4]
    assert_fails(ctl(*full, input=data), message)
    as_json = ctl(*full, "--json", input=data)
    assert as_json.returncode == 1
    assert as_json.json()["error"]["message"] == message
    assert counts(ctl) == (0, 0)


def test_artifact_get_unknown(ctl):
    assert_fails(ctl("artifact", "get", "art_nope"), "artifact 'art_nope' not found")
    as_json = ctl("artifact", "get", "art_nope", "--json")
    assert as_json.returncode == 1
    assert as_json.json()["error"] == {"code": "not_found", "message": "artifact 'art_nope' not found"}
    unknown_sha = "ab" * 32
    assert_fails(ctl("artifact", "get", unknown_sha), f"artifact '{unknown_sha}' not found")
    well_formed = "art_" + "0" * 32
    assert_fails(ctl("artifact", "get", well_formed), f"artifact '{well_formed}' not found")


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "human"])
def test_patch_warnings_on_stderr(ctl, as_json):
    data = b"diff --git a/f b/f\r\n-old\r\n+new"  # CRLF and no trailing newline
    args = ["artifact", "put", "--kind", "patch", "--created-by", "alice"] + (["--json"] if as_json else [])
    result = ctl(*args, input=data)
    assert result.returncode == 0, result
    assert result.stderr.splitlines() == [NO_NEWLINE_WARNING, CRLF_WARNING]
    if as_json:
        record = result.json()
        assert record["warnings"] == [NO_NEWLINE_WARNING.removeprefix("Warning: "),
                                      CRLF_WARNING.removeprefix("Warning: ")]
        assert record["sha256"] == hashlib.sha256(data).hexdigest()
    else:
        assert result.stdout.startswith("Stored art_")
    assert ctl("artifact", "get", "art_" + hashlib.sha256(data).hexdigest()[:32]).stdout_bytes == data


def test_patch_warning_only_missing_newline(ctl):
    result = ctl("artifact", "put", "--kind", "patch", "--created-by", "alice", "--json", input=CLEAN_PATCH[:-1])
    assert result.returncode == 0
    assert result.stderr.splitlines() == [NO_NEWLINE_WARNING]
    assert len(result.json()["warnings"]) == 1


def test_clean_patch_and_other_kinds_have_no_warnings_key(ctl):
    clean = ctl("artifact", "put", "--kind", "patch", "--created-by", "alice", "--json", input=CLEAN_PATCH)
    assert clean.returncode == 0 and clean.stderr == ""
    assert "warnings" not in clean.json()
    note = ctl("artifact", "put", "--kind", "note", "--created-by", "alice", "--json", input=b"no newline\r")
    assert note.returncode == 0 and note.stderr == ""
    assert "warnings" not in note.json()


def test_artifact_size_limit_from_config(daemon_factory, short_tmp):
    home = short_tmp / "limited"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text("[limits]\nmax_artifact_bytes = 1024\n")
    daemon = daemon_factory(home)
    result = run_ctl(daemon.home, "artifact", "put", "--kind", "file", "--created-by", "alice", input=b"x" * 2000)
    assert_fails(result, "content is 2000 bytes; maximum is 1024 bytes")
    ok = run_ctl(daemon.home, "artifact", "put", "--kind", "file", "--created-by", "alice", "--json",
                 input=b"y" * 1024)
    assert ok.returncode == 0, ok
    assert ok.json()["size_bytes"] == 1024
    patch = run_ctl(daemon.home, "patch", "submit", "--from-agent", "bob", "--to-agent", "alice",
                    "--correlation-id", "c", "--stream", "s", input=b"z" * 2000)
    assert_fails(patch, "content is 2000 bytes; maximum is 1024 bytes")
    status = run_ctl(daemon.home, "status", "--json").json()
    assert (status["events"], status["artifacts"]) == (0, 1)


# -- patch submit -------------------------------------------------------------------------------


def test_patch_submit_defaults_stream_from_task(ctl):
    created = create_task(ctl)
    cid = created["task"]["correlation_id"]
    result = ctl("patch", "submit", "--from-agent", "bob", "--to-agent", "alice", "--correlation-id", cid,
                 "--branch", "fix/watch", "--base-commit", BASE, "--body", "fixed", "--json", input=CLEAN_PATCH)
    assert result.returncode == 0, result
    assert result.stderr == ""
    doc = result.json()
    assert set(doc) == {"artifact", "event"}
    artifact, event = doc["artifact"], doc["event"]
    assert set(artifact) == RECORD_KEYS
    assert artifact["kind"] == "patch" and artifact["created_by"] == "bob"
    assert artifact["sha256"] == hashlib.sha256(CLEAN_PATCH).hexdigest()
    assert event["type"] == "patch.ready" and event["status"] == "ready"
    assert event["room"] == "patches"
    assert event["stream"] == created["task"]["stream"] == "project/palace_core"
    assert event["artifact_ids"] == [artifact["id"]]
    assert (event["from_agent"], event["to_agent"], event["correlation_id"]) == ("bob", "alice", cid)
    assert (event["branch"], event["base_commit"], event["body"]) == ("fix/watch", BASE, "fixed")
    assert ctl("artifact", "get", artifact["id"]).stdout_bytes == CLEAN_PATCH
    assert counts(ctl) == (2, 1)


def test_patch_submit_from_file_with_explicit_stream_room_and_warnings(ctl, short_tmp):
    path = short_tmp / "p.diff"
    path.write_bytes(CLEAN_PATCH[:-1])
    result = ctl("patch", "submit", "--from-agent", "bob", "--to-agent", "alice", "--correlation-id", "free-form",
                 "--stream", "project/other", "--room", "review", "--topic", "t", "--file", str(path), "--json")
    assert result.returncode == 0, result
    assert result.stderr.splitlines() == [NO_NEWLINE_WARNING]
    doc = result.json()
    assert doc["artifact"]["warnings"] == [NO_NEWLINE_WARNING.removeprefix("Warning: ")]
    assert (doc["event"]["stream"], doc["event"]["room"], doc["event"]["topic"]) == ("project/other", "review", "t")
    human = ctl("patch", "submit", "--from-agent", "bob", "--to-agent", "alice", "--correlation-id", "free-form",
                input=CLEAN_PATCH)
    assert human.returncode == 0, human
    assert human.stdout.startswith("Stored art_")
    assert "patch.ready" in human.stdout and "[ready]" in human.stdout


def test_patch_submit_without_stream_and_no_correlation_event(ctl):
    result = ctl("patch", "submit", "--from-agent", "bob", "--to-agent", "alice", "--correlation-id", "nothing-here",
                 input=CLEAN_PATCH)
    assert result.returncode == 1, result
    assert result.stderr.startswith("palacectl: stream must be a non-empty string")
    assert "nothing-here" in result.stderr
    assert counts(ctl) == (0, 0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topic", "t" * 257], "topic exceeds maximum length of 256 characters"),
        (["--to-agent", "al\x02ice"], "to_agent contains control characters"),
        (["--branch", "b\x1bx"], "branch contains control characters"),
        (["--metadata", "[]"], "--metadata must be a JSON object"),
        (["--correlation-id", "c\x01"], "correlation_id contains control characters"),
    ],
    ids=["topic-too-long", "to-agent-control", "branch-control", "metadata-array", "correlation-control"],
)
def test_patch_submit_invalid_event_writes_nothing(ctl, args, message):
    task = create_task(ctl)
    cid = task["task"]["correlation_id"]
    before = counts(ctl)
    base = {"--from-agent": "bob", "--to-agent": "alice", "--correlation-id": cid}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    flat = [part for flag, value in base.items() for part in (flag, value)]
    result = ctl("patch", "submit", *flat, input=CLEAN_PATCH)
    assert_fails(result, message)
    assert counts(ctl) == before == (1, 0)
    # The patch bytes were not stored either.
    sha = hashlib.sha256(CLEAN_PATCH).hexdigest()
    assert_fails(ctl("artifact", "get", sha), f"artifact '{sha}' not found")


def test_patch_submit_empty_content(ctl):
    create_task(ctl)
    result = ctl("patch", "submit", "--from-agent", "bob", "--to-agent", "alice", "--correlation-id", "x",
                 "--stream", "s", input=b"")
    assert_fails(result, "content must not be empty")
    assert counts(ctl) == (1, 0)


def test_patch_submit_routing_is_optional(ctl):
    """Issue 12: MemPalace requires only the content, the author and the stream; to_agent and
    correlation_id are optional (they were required). Without --to-agent, a patch on a task's
    correlation goes to whoever requested the task; without a correlation it goes to nobody in
    particular and is still a patch.ready."""
    created = create_task(ctl, from_agent="alice", to_agent="bob")
    cid = created["task"]["correlation_id"]
    to_requester = ctl("patch", "submit", "--from-agent", "bob", "--correlation-id", cid, "--json", input=CLEAN_PATCH)
    assert to_requester.returncode == 0, to_requester
    event = to_requester.json()["event"]
    assert (event["to_agent"], event["correlation_id"], event["stream"]) == ("alice", cid, "project/palace_core")
    blank = ctl("patch", "submit", "--from-agent", "bob", "--correlation-id", cid, "--to-agent", "  ", "--json",
                input=CLEAN_PATCH + b"\n")
    assert blank.returncode == 0, blank
    assert blank.json()["event"]["to_agent"] == "alice"
    unrouted = ctl("patch", "submit", "--from-agent", "bob", "--stream", "project/x", "--json", input=b"+x\n")
    assert unrouted.returncode == 0, unrouted
    doc = unrouted.json()
    assert doc["event"]["type"] == "patch.ready" and doc["event"]["status"] == "ready"
    assert doc["event"]["to_agent"] is None and doc["event"]["correlation_id"] is None
    assert doc["event"]["artifact_ids"] == [doc["artifact"]["id"]]
    # A correlation with no task.request on it gives its stream but no addressee.
    chat = append_event(ctl, correlation_id="chat-1", stream="project/chat")
    on_chat = ctl("patch", "submit", "--from-agent", "bob", "--correlation-id", "chat-1", "--json", input=b"+y\n")
    assert on_chat.returncode == 0, on_chat
    assert (on_chat.json()["event"]["stream"], on_chat.json()["event"]["to_agent"]) == (chat["stream"], None)
    assert counts(ctl) == (6, 4)


# -- task create --------------------------------------------------------------------------------


def test_task_create(ctl):
    result = ctl("task", "create", *task_args(project="Palace Core", goal="Fix: the WATCH   test!",
                                              base_commit="ABCDEF1234", done="all green"), "--json")
    assert result.returncode == 0, result
    doc = result.json()
    assert set(doc) == {"task", "handoff"}
    task = doc["task"]
    assert re.fullmatch(r"task_fix_the_watch_test_[0-9a-f]{8}", task["correlation_id"]), task["correlation_id"]
    assert task["type"] == "task.request"
    assert task["stream"] == "project/palace_core"
    assert task["room"] == "delegation"
    assert task["status"] == "open"
    assert (task["from_agent"], task["to_agent"]) == ("alice", "bob")
    assert task["branch"] == "feat/thing"
    assert task["base_commit"] == "abcdef1234"
    body = task["body"]
    assert "Fix: the WATCH   test!" in body
    assert "all green" in body
    assert "feat/thing" in body and "abcdef1234" in body
    assert "Definition of done" in body
    assert task["correlation_id"] in doc["handoff"]
    assert "bob" in doc["handoff"]
    # Issue 12: the worker may have the MCP tools or a shell; the delivery line names both.
    delivery = body.split("\n\nDelivery:\n", 1)[1]
    assert "mempalace_patch_submit" in delivery
    assert f"palacectl patch submit --correlation-id {task['correlation_id']}" in delivery
    listed = ctl("list", "--type", "task.request", "--json").json()
    assert listed["events"] == [task]


def test_task_create_slug_rules(ctl):
    long_goal = "A" * 30 + " " + "b" * 30
    cid = ctl("task", "create", *task_args(goal=long_goal), "--json").json()["task"]["correlation_id"]
    slug = cid.removeprefix("task_")[:-9]
    assert slug == ("a" * 30 + "_" + "b" * 9)
    assert len(slug) == 40
    symbols = ctl("task", "create", *task_args(goal="!!! ???", project="***"), "--json").json()["task"]
    assert re.fullmatch(r"task_work_[0-9a-f]{8}", symbols["correlation_id"])
    assert symbols["stream"] == "project/project"
    a = ctl("task", "create", *task_args(), "--json").json()["task"]["correlation_id"]
    b = ctl("task", "create", *task_args(), "--json").json()["task"]["correlation_id"]
    assert a != b


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("project", "task project must not be empty"),
        ("from_agent", "task requesting agent must not be empty"),
        ("to_agent", "task destination agent must not be empty"),
        ("branch", "task branch must not be empty"),
        ("base_commit", "task base commit must not be empty"),
        ("goal", "task goal must not be empty"),
        ("done", "task definition of done must not be empty"),
    ],
)
def test_task_create_empty_field(ctl, field, message):
    assert_fails(ctl("task", "create", *task_args(**{field: ""})), message)
    blank = ctl("task", "create", *task_args(**{field: "  \t "}), "--json")
    assert blank.returncode == 1
    assert blank.json()["error"]["message"] == message
    assert counts(ctl) == (0, 0)


def test_task_create_omitted_goal_and_done(ctl):
    args = task_args()
    i = args.index("--goal")
    del args[i:i + 2]
    assert_fails(ctl("task", "create", *args), "task goal must not be empty")
    args = task_args()
    i = args.index("--done")
    del args[i:i + 2]
    assert_fails(ctl("task", "create", *args), "task definition of done must not be empty")
    args = task_args()
    i = args.index("--branch")
    del args[i:i + 2]
    assert ctl("task", "create", *args).returncode == 64
    assert counts(ctl) == (0, 0)


def test_task_create_base_commit_must_be_hex(ctl):
    message = "task base commit must be a hexadecimal Git object id (at least 7 characters), not a branch or tag"
    for base in ["main", "abc123", "abcdefg", "a" * 65]:
        assert_fails(ctl("task", "create", *task_args(base_commit=base)), message)
    as_json = ctl("task", "create", *task_args(base_commit="v1.2.3"), "--json")
    assert as_json.returncode == 1 and as_json.json()["error"]["message"] == message
    assert counts(ctl) == (0, 0)


def test_task_create_goal_and_done_files(ctl, short_tmp):
    goal = short_tmp / "goal.md"
    goal.write_text("Refactor the writer\n\nwith details\n")
    done = short_tmp / "done.md"
    done.write_text("- tests pass\n- bench unchanged\n")
    args = task_args()
    for flag in ("--goal", "--done"):
        i = args.index(flag)
        del args[i:i + 2]
    result = ctl("task", "create", *args, "--goal-file", str(goal), "--done-file", str(done), "--json")
    assert result.returncode == 0, result
    task = result.json()["task"]
    assert task["correlation_id"].startswith("task_refactor_the_writer_with_details_")
    assert "Refactor the writer\n\nwith details" in task["body"]
    assert "- tests pass\n- bench unchanged" in task["body"]
    stdin = ctl("task", "create", *args, "--goal-file", "-", "--done", "done", "--json", input=b"From stdin\n")
    assert stdin.returncode == 0, stdin
    assert "From stdin" in stdin.json()["task"]["body"]
    both = ctl("task", "create", *task_args(), "--goal-file", str(goal))
    assert both.returncode == 64, both
    assert counts(ctl) == (2, 0)


# -- task show / list ---------------------------------------------------------------------------


def test_task_show_lifecycle(ctl):
    created = create_task(ctl, from_agent="alice", to_agent="bob")
    task = created["task"]
    cid = task["correlation_id"]

    view = ctl("task", "show", cid, "--json").json()
    assert view["state"] == "open" and view["claimed_by"] is None
    assert view["correlation_id"] == cid
    assert view["request"] == task
    assert [e["id"] for e in view["events"]] == [task["id"]]
    assert (view["requested_by"], view["assigned_to"]) == ("alice", "bob")

    claim = ctl("ack", task["id"], "--from-agent", "bob", "--status", "claimed", "--json").json()
    view = ctl("task", "show", cid, "--json").json()
    assert view["state"] == "claimed" and view["claimed_by"] == "bob"

    unrelated = append_event(ctl, correlation_id="another", status="failed")
    patch = ctl("patch", "submit", "--from-agent", "bob", "--to-agent", "alice", "--correlation-id", cid, "--json",
                input=CLEAN_PATCH).json()["event"]
    view = ctl("task", "show", cid, "--json").json()
    assert view["state"] == "ready" and view["claimed_by"] == "bob"

    applied = ctl("ack", patch["id"], "--from-agent", "alice", "--status", "applied", "--json").json()
    assert applied["correlation_id"] == cid
    view = ctl("task", "show", cid, "--json").json()
    assert view["state"] == "applied"
    assert view["claimed_by"] == "bob"
    assert [e["id"] for e in view["events"]] == [task["id"], claim["id"], patch["id"], applied["id"]]
    assert [e["type"] for e in view["events"]] == ["task.request", "event.ack", "patch.ready", "event.ack"]
    assert unrelated["id"] not in [e["id"] for e in view["events"]]


def test_task_show_blocked_state(ctl):
    task = create_task(ctl)["task"]
    ctl("ack", task["id"], "--from-agent", "bob", "--status", "claimed")
    blocked = ctl("ack", task["id"], "--from-agent", "bob", "--status", "blocked", "--body", "need creds")
    assert blocked.returncode == 0
    view = ctl("task", "show", task["correlation_id"], "--json").json()
    assert view["state"] == "blocked"


def test_task_show_unknown(ctl):
    assert_fails(ctl("task", "show", "x"), "task 'x' not found")
    as_json = ctl("task", "show", "x", "--json")
    assert as_json.returncode == 1
    assert as_json.json()["error"] == {"code": "not_found", "message": "task 'x' not found"}
    # A correlation without a task.request is not a task.
    append_event(ctl, correlation_id="chat-1")
    assert_fails(ctl("task", "show", "chat-1"), "task 'chat-1' not found")


def test_task_list_agent_and_open(ctl):
    t1 = create_task(ctl, from_agent="alice", to_agent="bob", goal="first")["task"]
    t2 = create_task(ctl, from_agent="carol", to_agent="alice", goal="second")["task"]
    t3 = create_task(ctl, from_agent="carol", to_agent="dave", goal="third")["task"]
    assert ctl("ack", t1["id"], "--from-agent", "alice", "--status", "applied").returncode == 0  # its requester

    for_alice = ctl("task", "list", "--agent", "alice", "--json").json()
    by_cid = {t["correlation_id"]: t for t in for_alice["tasks"]}
    assert set(by_cid) == {t1["correlation_id"], t2["correlation_id"]}
    assert for_alice["count"] == 2
    assert by_cid[t1["correlation_id"]]["state"] == "applied"
    assert by_cid[t1["correlation_id"]]["role"] == "requester"
    assert by_cid[t2["correlation_id"]]["state"] == "open"
    assert by_cid[t2["correlation_id"]]["role"] == "assignee"

    open_for_alice = ctl("task", "list", "--agent", "alice", "--open", "--json").json()
    assert [t["correlation_id"] for t in open_for_alice["tasks"]] == [t2["correlation_id"]]

    everything = ctl("task", "list", "--json").json()
    assert {t["correlation_id"] for t in everything["tasks"]} == {
        t1["correlation_id"], t2["correlation_id"], t3["correlation_id"]}
    all_open = ctl("task", "list", "--open", "--json").json()
    assert {t["correlation_id"] for t in all_open["tasks"]} == {t2["correlation_id"], t3["correlation_id"]}

    nobody = ctl("task", "list", "--agent", "zed", "--json")
    assert nobody.returncode == 0 and nobody.json() == {"tasks": [], "count": 0, "newest": 500, "capped": False}


# -- who ----------------------------------------------------------------------------------------


def _who(ctl: Any) -> list[dict[str, Any]]:
    result = ctl("who", "--json")
    assert result.returncode == 0, result
    doc = result.json()
    assert doc["count"] == len(doc["watchers"])
    return doc["watchers"]


def _poll(predicate: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_who_reports_live_watchers(ctl, daemon):
    assert _who(ctl) == []
    human = ctl("who")
    assert human.returncode == 0 and human.stdout == ""

    proc = subprocess.Popen(
        [PYTHON, "-m", "palacectl", "--home", str(daemon.home), "watch", "--agent", "bob", "--json"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        watchers = _poll(lambda: [w for w in _who(ctl) if w["agent"] == "bob"])
        assert watchers, f"watch --agent bob never showed up in who: {_who(ctl)}"
        (bob,) = watchers
        assert "bob" in bob["filters"]
        assert "to_agents=bob" in bob["filters"] and "exclude_from_agents=bob" in bob["filters"]
        assert CREATED_AT_RE.match(bob["since"])
        assert bob["pid"] == proc.pid
        assert ctl("status", "--json").json()["watchers"] == 1
        human = ctl("who")
        assert human.stdout.startswith("bob\t")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    gone = _poll(lambda: _who(ctl) == [])
    assert gone, f"watcher still listed after the watch process ended: {_who(ctl)}"
    assert ctl("status", "--json").json()["watchers"] == 0


def test_who_without_daemon_exits_3(home):
    result = run_ctl(home, "who", "--json")
    assert result.returncode == 3
    assert result.json()["error"]["code"] == "unreachable"


def test_artifact_commands_without_daemon_exit_3(home, short_tmp):
    put_result = run_ctl(home, "artifact", "put", "--kind", "file", "--created-by", "a", input=b"x")
    assert put_result.returncode == 3 and "palaced" in put_result.stderr
    task_result = run_ctl(home, "task", "list", "--json")
    assert task_result.returncode == 3
    assert json.loads(task_result.stdout)["error"]["code"] == "unreachable"


def test_config_limits_do_not_leak_between_homes(daemon_factory, short_tmp):
    # Sanity: a default daemon accepts artifacts far over the 1024-byte limit of the other test.
    d = daemon_factory(short_tmp / "plain")
    result = run_ctl(d.home, "artifact", "put", "--kind", "file", "--created-by", "a", "--json", input=b"q" * 5000)
    assert result.returncode == 0, result
    assert result.json()["size_bytes"] == 5000

