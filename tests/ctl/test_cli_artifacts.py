"""The artifact and patch commands (palacectl/cli/artifacts.py) against a fake client: what they
send (the bytes, read exactly), what they print, the warnings the daemon gives shown on stderr,
the hash check of what arrives, and the usage errors that end a command before any request.
Content addressing and byte-exact storage in a real palaced are tests/e2e/test_cli_artifacts_tasks.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.ctl.fake_client import FakeClient, invoke
from tests.ctl.replies import PATCH_SUBMITTED

LOG = b"log line 1\nlog line 2\n"
RECORD = {"id": "art_f80b17edebf36578f28b6c006d7e9f7b", "kind": "log",
          "sha256": "f80b17edebf36578f28b6c006d7e9f7b8da0a55f6046cdf52932cefe2e9d0ba1", "size_bytes": 22,
          "created_by": "alice", "created_at": "2026-12-06T03:57:18.667246Z"}
NO_NEWLINE = ("patch content does not end with a trailing newline; git apply will reject the final hunk as corrupt — "
              "store the diff byte-exactly including its trailing newline")
CRLF = ("patch content contains carriage returns (CRLF line endings); git apply often rejects CRLF diffs — generate "
        "the diff with LF endings")
DIFF = b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-old\n+new\n"


def test_artifact_put_sends_the_files_bytes_and_prints_the_record(fake: FakeClient, tmp_path: Path):
    path = tmp_path / "log.txt"
    path.write_bytes(LOG)
    fake.answers["artifact_put"] = RECORD
    result = invoke("artifact", "put", "--kind", "log", "--created-by", "alice", "--file", str(path))
    assert result.returncode == 0, result
    assert result.stdout == (f"Stored {RECORD['id']}  kind=log\n  sha256={RECORD['sha256']}\n  size=22 bytes\n")
    assert fake.requests == [("artifact_put", {"kind": "log", "created_by": "alice", "content": LOG})]
    from_stdin = invoke("artifact", "put", "--kind", "log", "--created-by", "alice", "--file", "-", "--json",
                        input=b"other\r\n")
    assert from_stdin.json() == RECORD and fake.requests[-1][1]["content"] == b"other\r\n"


def test_the_daemons_patch_warnings_go_to_stderr_and_stay_in_the_json(fake: FakeClient):
    fake.answers["artifact_put"] = {**RECORD, "kind": "patch", "warnings": [NO_NEWLINE, CRLF]}
    for args in ((), ("--json",)):
        result = invoke("artifact", "put", "--kind", "patch", "--created-by", "alice", *args, input=b"-old\r\n+new")
        assert result.returncode == 0, result
        assert result.stderr.splitlines() == [f"Warning: {NO_NEWLINE}", f"Warning: {CRLF}"]
    assert result.json()["warnings"] == [NO_NEWLINE, CRLF]


def test_artifact_put_missing_kind_is_usage_error(fake: FakeClient):
    result = invoke("artifact", "put", "--created-by", "alice", input=b"x")
    assert result.returncode == 64, result
    assert fake.requests == []


def test_artifact_put_unreadable_file(fake: FakeClient, tmp_path: Path):
    result = invoke("artifact", "put", "--kind", "file", "--created-by", "alice", "--file", str(tmp_path / "nope"))
    assert result.returncode == 1, result
    assert "cannot read --file" in result.stderr
    assert fake.requests == []


def test_artifact_put_metadata_must_be_a_json_object(fake: FakeClient):
    result = invoke("artifact", "put", "--kind", "file", "--created-by", "alice", "--metadata", "[1]", input=b"x")
    assert (result.returncode, result.stderr) == (1, "palacectl: --metadata must be a JSON object\n")
    assert fake.requests == []


def test_artifact_get_writes_the_exact_bytes_to_stdout_or_a_file(fake: FakeClient, tmp_path: Path):
    content = bytes(range(256)) + b"\r\n"
    record = {**RECORD, "sha256": hashlib.sha256(content).hexdigest(), "size_bytes": len(content)}
    fake.answers["artifact_get"] = lambda args: {**record, "content": content}
    result = invoke("artifact", "get", RECORD["id"])
    assert result.returncode == 0 and result.stdout_bytes == content
    out = tmp_path / "copy.bin"
    told = invoke("artifact", "get", RECORD["id"], "--out", str(out))
    assert told.stdout == f"Wrote {len(content)} bytes to {out}\n  sha256={record['sha256']}\n"
    assert out.read_bytes() == content
    as_json = invoke("artifact", "get", RECORD["id"], "--out", str(tmp_path / "again.bin"), "--json").json()
    assert as_json == {**record, "content_written_to": str(tmp_path / "again.bin")}


def test_artifact_get_refuses_bytes_that_do_not_match_their_hash_and_writes_nothing(fake: FakeClient,
                                                                                      tmp_path: Path):
    fake.answers["artifact_get"] = lambda args: {**RECORD, "content": b"not what was stored"}
    out = tmp_path / "copy.log"
    result = invoke("artifact", "get", RECORD["id"], "--out", str(out))
    assert result.returncode == 1
    assert result.stderr == f"palacectl: artifact {RECORD['id']} failed hash verification; nothing written\n"
    assert not out.exists()
    as_json = invoke("artifact", "get", RECORD["id"], "--json")
    assert as_json.returncode == 1 and as_json.json()["error"]["code"] == "integrity"


def test_patch_submit_prints_the_patch_and_its_event(fake: FakeClient):
    fake.answers["patch_submit"] = PATCH_SUBMITTED
    cid = PATCH_SUBMITTED["event"]["correlation_id"]
    result = invoke("patch", "submit", "--from-agent", "bob", "--correlation-id", cid, input=DIFF)
    assert result.returncode == 0, result
    stored, event = result.stdout.splitlines()
    artifact = PATCH_SUBMITTED["artifact"]
    assert stored == f"Stored {artifact['id']}  sha256={artifact['sha256']}  size={artifact['size_bytes']} bytes"
    assert event.endswith(f"patch.ready  project/palace/patches  bob->alice [ready] corr={cid} "
                          f"artifacts={artifact['id']}")
    assert fake.requests == [("patch_submit", {"from_agent": "bob", "correlation_id": cid, "content": DIFF,
                                               "room": "patches"})]
    assert invoke("patch", "submit", "--from-agent", "bob", "--correlation-id", cid, "--json",
                  input=DIFF).json() == PATCH_SUBMITTED


def test_patch_submit_missing_required_is_usage_error(fake: FakeClient):
    result = invoke("patch", "submit", "--correlation-id", "x", input=DIFF)
    assert result.returncode == 64, result
    neither = invoke("patch", "submit", "--from-agent", "bob", "--to-agent", "alice", input=DIFF)
    assert (neither.returncode, neither.stdout) == (64, "")
    assert neither.stderr == ("palacectl: pass --correlation-id (the task this patch answers; its stream is used) "
                              "or --stream\n")
    assert fake.requests == []
