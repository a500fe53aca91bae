"""The log commands (palacectl/cli/log.py) against a fake client: their human lines, their
``--json`` documents and error shapes, and the usage errors and input checks that end a command
before any request. What the daemon does with a request (validation in MemPalace's words, order,
cursors, redaction) is tests/e2e/test_cli_log.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from palace_proto.errors import ApiError
from palace_proto.validation import Limits
from tests.ctl.fake_client import EVENT, FakeClient, invoke

BASE_ARGS = ["--type", "note", "--stream", "project/test", "--room", "general", "--from-agent", "tester"]
ROUTING = ("--type", "note", "--stream", "bulk", "--room", "r", "--from-agent", "loader")
ACK = {**EVENT, "id": "evt_20261206T035559_161a512451953171b185", "seq": 3, "origin_seq": 3, "type": "event.ack",
       "from_agent": "bob", "to_agent": "tester", "correlation_id": EVENT["id"], "status": "applied",
       "body": "", "metadata": {"ack_of": EVENT["id"]}, "ack_of": EVENT["id"],
       "created_at": "2026-12-06T03:55:59.001511Z"}
REDACT = {**EVENT, "id": "evt_20261206T035559_cdf3843e70afefc076af", "seq": 5, "origin_seq": 5,
          "type": "event.redact", "to_agent": None, "correlation_id": EVENT["id"], "status": None, "body": "",
          "metadata": {"redacts": EVENT["id"]}, "created_at": "2026-12-06T03:55:59.336905Z", "also_redacted": [],
          "purge": "done"}
#: how a list shows an event whose body was redacted
REDACTED = {**EVENT, "body": "", "body_redacted": True,
            "body_sha256": "9b96a1fe1d548cbbc960cc6a0286668fd74a763667b06366fb2324269fcabaa4"}


def assert_fails(result, message: str, *, exit_code: int = 1) -> None:
    """Human-mode failure: exit code, nothing on stdout, one ``palacectl: …`` line on stderr."""
    assert result.returncode == exit_code, result
    assert result.stdout == "", result
    assert result.stderr == f"palacectl: {message}\n", result


# -- append -------------------------------------------------------------------------------------


def test_append_human_output(fake: FakeClient):
    fake.answers["append"] = EVENT
    result = invoke("append", *BASE_ARGS, "--to-agent", "bob", "--status", "open", "--body", "hi there")
    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert lines[0] == "Appended:"
    assert lines[1] == (f"  {EVENT['id']}  {EVENT['created_at']}  note  project/test/general  tester->bob [open] "
                        ":: hi there")
    assert fake.requests == [("append", {"type": "note", "stream": "project/test", "room": "general",
                                         "from_agent": "tester", "to_agent": "bob", "status": "open",
                                         "body": "hi there"})]


@pytest.mark.parametrize("missing", ["--type", "--stream", "--room", "--from-agent"])
def test_append_missing_required_option_is_usage_error(fake: FakeClient, missing: str):
    args = list(BASE_ARGS)
    i = args.index(missing)
    del args[i:i + 2]
    result = invoke("append", *args)
    assert result.returncode == 64, result
    assert f"Missing option '{missing}'" in result.stderr
    assert result.stdout == ""
    as_json = invoke("append", *args, "--json")
    assert as_json.returncode == 64
    assert as_json.json()["error"]["code"] == "usage"
    assert fake.requests == []


def test_append_json_error_shape(fake: FakeClient):
    """A refusal with --json: one document, ``{"error": {"code", "message"}}`` on stdout, exit 1."""
    fake.answers["append"] = ApiError("status='bogus' is not one of: applied, blocked, claimed",
                                      code="invalid_argument")
    result = invoke("append", *BASE_ARGS, "--status", "bogus", "--json")
    assert result.returncode == 1
    assert result.stderr == ""
    doc = result.json()
    assert list(doc) == ["error"]
    assert doc["error"] == {"code": "invalid_argument", "message": "status='bogus' is not one of: applied, blocked, "
                                                                   "claimed"}
    assert_fails(invoke("append", *BASE_ARGS, "--status", "bogus"),
                 "status='bogus' is not one of: applied, blocked, claimed")


def test_append_metadata_not_json(fake: FakeClient):
    result = invoke("append", *BASE_ARGS, "--metadata", "{not json")
    assert result.returncode == 1, result
    assert result.stderr.startswith("palacectl: --metadata is not valid JSON: ")
    assert fake.requests == []


def test_append_body_and_body_file_together_is_usage_error(fake: FakeClient, tmp_path: Path):
    path = tmp_path / "b.txt"
    path.write_text("file body")
    result = invoke("append", *BASE_ARGS, "--body", "inline", "--body-file", str(path))
    assert result.returncode == 64, result
    assert "pass inline text or a file, not both" in result.stderr
    as_json = invoke("append", *BASE_ARGS, "--body", "inline", "--body-file", str(path), "--json")
    assert as_json.returncode == 64
    assert as_json.json()["error"]["code"] == "usage"
    assert fake.requests == []


def test_append_invalid_utf8_body_file(fake: FakeClient, tmp_path: Path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"caf\xe9\n")
    result = invoke("append", *BASE_ARGS, "--body-file", str(path))
    assert result.returncode == 1, result
    assert "is not valid UTF-8" in result.stderr
    assert result.stderr.startswith("palacectl: ")
    assert fake.requests == []


def test_append_unreadable_body_file(fake: FakeClient, tmp_path: Path):
    result = invoke("append", *BASE_ARGS, "--body-file", str(tmp_path / "missing.txt"))
    assert result.returncode == 1, result
    assert "cannot read --body-file" in result.stderr
    assert fake.requests == []


# -- append --ndjson: every line is checked before anything is sent ------------------------------


def _ndjson(*objects: object) -> bytes:
    return "".join(json.dumps(o) + "\n" for o in objects).encode()


@pytest.mark.parametrize(("content", "message"), [
    (b'{"body": "fine"}\nnot json\n', "line 2: not JSON"),
    (b'{"body": "fine"}\n["a list"]\n', "line 2: must be a JSON object"),
    (b'{"body": "fine"}\n{"body": 7}\n', "line 2: body"),
    (b'{"body": "fine"}\n{"type": "event.redact"}\n', "line 2: type 'event.redact' is reserved"),
    (b'{"body": "fine"}\n{"stream": ""}\n', "line 2: stream"),
    (b'{"body": "fine"}\n{"replicated": 2}\n', "line 2: replicated"),
    (b"\n\n", "no events"),
])
def test_append_ndjson_checks_every_line_first_and_appends_nothing_if_one_is_bad(fake: FakeClient, content: bytes,
                                                                                message: str):
    result = invoke("append", "--ndjson", "-", *ROUTING, input=content)
    assert result.returncode == 1, result
    assert message in result.stderr and "nothing was appended" in result.stderr, result
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert fake.requests == []


@pytest.mark.parametrize("extra", [("--body", "x"), ("--metadata", "{}"), ("--replicated", "1"),
                                   ("--artifact-id", "art_x")])
def test_append_ndjson_refuses_per_event_options(fake: FakeClient, extra: tuple[str, str]):
    result = invoke("append", "--ndjson", "-", *ROUTING, *extra, input=_ndjson({"body": "x"}))
    assert result.returncode == 64 and "does not go with --ndjson" in result.stderr, result
    assert fake.requests == []


def test_append_ndjson_says_what_it_appended(fake: FakeClient):
    first, last = EVENT, {**EVENT, "id": "evt_20261206T035516_f666a2e619973a1de42e", "seq": 2}
    fake.answers["append_many"] = {"events": [first, last], "count": 2}
    result = invoke("append", "--ndjson", "-", *ROUTING, input=_ndjson({"body": "one"}, {"body": "two"}))
    assert (result.returncode, result.stdout) == (0, f"Appended 2 events ({first['id']} … {last['id']})\n")
    assert [len(args["events"]) for _, args in fake.requests] == [2]


def test_append_ndjson_checks_against_the_default_limits_when_the_hello_names_none(fake: FakeClient):
    """A daemon whose hello names no limits (an older one) gets the default limits applied, not a crash."""
    fake.hello.pop("limits")
    fake.answers["append_many"] = {"events": [EVENT], "count": 1}
    assert invoke("append", "--ndjson", "-", *ROUTING, input=_ndjson({"body": "one"})).returncode == 0
    too_big = invoke("append", "--ndjson", "-", *ROUTING, input=_ndjson({"body": "x" * (Limits().max_body_bytes + 1)}))
    assert too_big.returncode == 1 and "line 1: body" in too_big.stderr, too_big
    assert len(fake.requests) == 1


def test_append_without_ndjson_still_requires_its_routing(fake: FakeClient):
    result = invoke("append", "--type", "note", "--stream", "s", "--room", "r", "--body", "x")
    assert result.returncode == 64 and "Missing option '--from-agent'" in result.stderr, result
    assert fake.requests == []


# -- list and wait ------------------------------------------------------------------------------


def test_list_empty(fake: FakeClient):
    fake.answers["list"] = {"events": [], "count": 0}
    result = invoke("list", "--json")
    assert result.returncode == 0, result
    assert result.json() == {"events": [], "count": 0}
    human = invoke("list")
    assert (human.returncode, human.stdout, human.stderr) == (0, "", "")


def test_list_human_output(fake: FakeClient):
    event = {**EVENT, "body": "line1\nline2 " + "z" * 100}
    fake.answers["list"] = {"events": [event], "count": 1}
    result = invoke("list")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "1 event(s):"
    assert lines[1].startswith(f"  {event['id']}  {event['created_at']}  note  project/test/general  tester->bob")
    assert lines[1].endswith("...")
    assert ":: line1 line2 " in lines[1]


def test_list_huge_limit_is_capped_not_a_crash(fake: FakeClient):
    """Guards: --limit is silently capped at 500 even when it does not fit in 64 bits (no traceback)."""
    fake.answers["list"] = {"events": [EVENT], "count": 1}
    result = invoke("list", "--limit", "99999999999999999999999", "--json")
    assert "Traceback" not in result.stderr, result.stderr[-300:]
    assert result.returncode == 0, result
    assert [e["id"] for e in result.json()["events"]] == [EVENT["id"]]
    assert fake.requests[0][1]["limit"] == 500


def test_wait_huge_timeout_is_clamped_not_a_crash(fake: FakeClient):
    """Guards: --timeout-ms is clamped to 300000 even when it does not fit in 64 bits (no traceback)."""
    fake.answers["wait"] = {"events": [EVENT], "count": 1, "timed_out": False}
    result = invoke("wait", "--to-agent", "bob", "--timeout-ms", "99999999999999999999999", "--json")
    assert "Traceback" not in result.stderr, result.stderr[-300:]
    assert result.returncode == 0, result
    assert result.json()["events"][0]["id"] == EVENT["id"]
    assert fake.requests[0][1]["timeout_ms"] == 300_000


# -- ack and redact -----------------------------------------------------------------------------


def test_ack_human_output(fake: FakeClient):
    fake.answers["ack"] = ACK
    result = invoke("ack", EVENT["id"], "--from-agent", "bob", "--status", "applied")
    assert result.returncode == 0, result
    assert result.stdout == (f"Acknowledged:\n  {ACK['id']}  {ACK['created_at']}  event.ack  project/test/general  "
                             f"bob->tester [applied] corr={EVENT['id']}\n")
    assert fake.requests == [("ack", {"event_id": EVENT["id"], "from_agent": "bob", "status": "applied"})]


def test_ack_errors_are_one_line_and_a_missing_author_is_a_usage_error(fake: FakeClient):
    fake.answers["ack"] = ApiError("event 'evt_nope' not found", code="not_found")
    assert_fails(invoke("ack", "evt_nope", "--from-agent", "bob"), "event 'evt_nope' not found")
    nf = invoke("ack", "evt_nope", "--from-agent", "bob", "--json")
    assert nf.returncode == 1 and nf.json()["error"] == {"code": "not_found", "message": "event 'evt_nope' not found"}
    asked = len(fake.requests)
    missing = invoke("ack", EVENT["id"])
    assert missing.returncode == 64, missing
    assert len(fake.requests) == asked


def test_redact_human_output(fake: FakeClient):
    fake.answers["redact"] = REDACT
    result = invoke("redact", EVENT["id"], "--from-agent", "tester")
    assert result.returncode == 0, result
    assert result.stdout.startswith(f"Redacted {EVENT['id']}:\n")
    assert fake.requests == [("redact", {"event_id": EVENT["id"], "from_agent": "tester", "operator": False})]
    fake.answers["list"] = {"events": [REDACTED], "count": 1}
    assert invoke("list").stdout.splitlines()[1].endswith("tester->bob [open] :: [redacted]")


def test_a_redaction_whose_purge_waits_says_so(fake: FakeClient):
    fake.answers["redact"] = {**REDACT, "also_redacted": ["evt_b"], "purge": "pending"}
    lines = invoke("redact", EVENT["id"], "--from-agent", "tester").stdout.splitlines()
    assert lines[2] == "Also redacted (the same fact): evt_b"
    assert lines[3].startswith("The body is gone from every view and index; old database pages still hold it")
    assert invoke("redact", EVENT["id"], "--from-agent", "tester", "--json").json()["purge"] == "pending"


# -- usage errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["list", "--bogus"],
        ["bogus-command"],
        ["list", "--limit", "abc"],
        ["append", *BASE_ARGS, "--bogus", "1"],
        ["artifact", "nope"],
        ["ack"],
        ["list", "--json", "--order"],
    ],
    ids=["unknown-option", "unknown-command", "bad-int", "append-unknown", "unknown-subcommand", "missing-arg",
         "missing-value"],
)
def test_usage_errors_exit_64(fake: FakeClient, args: list[str]):
    result = invoke(*args)
    assert result.returncode == 64, result
    assert fake.requests == []


def test_usage_error_json_shape(fake: FakeClient):
    result = invoke("list", "--bogus", "--json")
    assert result.returncode == 64
    err = result.json()["error"]
    assert err["code"] == "usage"
    assert "--bogus" in err["message"]


# -- digest -------------------------------------------------------------------------------------


def test_digest_prints_each_origins_head_then_the_digest(fake: FakeClient):
    fake.answers["digest"] = {
        "origins": [{"origin": "ori2_y2dcwxdnawnisdnzg7huybmoti", "origin_seq": 5,
                     "head_hash": "cdf3843e70afefc076af6732c080deaea951133b546e4ff8983c7aebaba8d423"}],
        "digest": "348d7f42173a2dc1e6ccce6354cb17a3b5d64fb2f204a1ed23bc23a747999ccb", "events": 5}
    result = invoke("digest")
    assert result.returncode == 0
    assert result.stdout == (
        "ori2_y2dcwxdnawnisdnzg7huybmoti\t5\tcdf3843e70afefc076af6732c080deaea951133b546e4ff8983c7aebaba8d423\n"
        "digest\t5\t348d7f42173a2dc1e6ccce6354cb17a3b5d64fb2f204a1ed23bc23a747999ccb\n")
    assert invoke("digest", "--json").json() == fake.answers["digest"]
