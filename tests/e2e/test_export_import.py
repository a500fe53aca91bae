"""Export and import: the log as NDJSON (signed events, their origins' keys, artifacts inline on
request), and an import that verifies every event and stores it as history — searchable and
listable, never replicated to peers, refusing anything altered or anything this palace
replicates itself."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest

from tests.fleet import append, ctl_json, digest, wait_converged
from tests.helpers import run_ctl, run_ctl_on_terminal


def _fill(home) -> dict:
    events = [append(home, f"history {i}", stream="project/history") for i in range(5)]
    secret = append(home, "token tok_export_secret", stream="project/history")
    ctl_json(home, "redact", secret["id"], "--from-agent", home.name)  # its author
    patch = run_ctl(home, "patch", "submit", "--from-agent", "a", "--to-agent", "b", "--correlation-id", "task_x",
                    "--stream", "project/history", "--json", input=b"--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n")
    assert patch.returncode == 0, patch
    drawer = run_ctl(home, "remember", "--wing", "wing_history", "--room", "notes", "--json",
                     input=b"We moved the build to the new runner pool.\n")
    return {"events": events, "secret": secret, "patch": patch.json(), "drawer": drawer.json()}


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_export_writes_signed_events_with_their_keys_and_artifacts(daemon, tmp_path):
    _fill(daemon.home)
    target = tmp_path / "log.ndjson"
    summary = ctl_json(daemon.home, "export", "--output", str(target), "--with-artifacts")
    lines = _lines(target)
    assert lines[0]["palace_export"] == 1 and stat.S_IMODE(target.stat().st_mode) == 0o600
    origin = ctl_json(daemon.home, "status")["origin"]
    kinds = [next(iter(k for k in line if k in ("palace_export", "origin", "artifact", "event"))) for line in lines]
    assert kinds.index("origin") < kinds.index("event") and lines[kinds.index("origin")]["origin"] == origin
    assert kinds.count("event") == summary["events"] == ctl_json(daemon.home, "status")["events"]
    assert kinds.count("artifact") == summary["artifacts"] == 1 and kinds.index("artifact") < len(kinds) - 1
    assert all(len(line["event"]["signature"]) == 128 for line in lines if "event" in line)
    redacted = [line["event"] for line in lines if "event" in line and line["event"]["body"] is None]
    assert len(redacted) == 1 and "tok_export_secret" not in target.read_text()
    only = ctl_json(daemon.home, "export", "--output", str(tmp_path / "mem.ndjson"), "--stream", "memory")
    assert only["events"] == 1
    piped = run_ctl(daemon.home, "export")  # to stdout, for pipes
    assert piped.returncode == 0 and piped.stdout.splitlines()[0].startswith('{"palace_export":1')
    bad = run_ctl(daemon.home, "export", "--json")
    assert bad.returncode == 64 and "--output" in bad.stdout


def test_import_verifies_and_stores_history_that_lists_and_searches_but_never_replicates(fleet, tmp_path):
    source = fleet.start("source")  # a daemon of no palace: its log is someone else's history
    filled = _fill(source.home)
    target = tmp_path / "source.ndjson"
    ctl_json(source.home, "export", "--output", str(target), "--with-artifacts")
    alpha = fleet.found("alpha")
    beta = fleet.join("beta")
    result = ctl_json(alpha.home, "import", str(target))
    total = ctl_json(source.home, "status")["events"]
    assert result["imported"] == total and result["refused"] == [] and result["artifacts"] == 1
    listed = {e["id"]: e for e in ctl_json(alpha.home, "list", "--stream", "project/history", "--limit", "100")["events"]}
    assert all(e["id"] in listed for e in filled["events"]) and listed[filled["secret"]["id"]]["body_redacted"] is True
    hit = ctl_json(alpha.home, "search", "runner pool", "--mode", "keyword")["results"][0]
    assert hit["drawer_id"] == filled["drawer"]["drawer_id"]
    assert run_ctl(alpha.home, "artifact", "get", filled["patch"]["artifact"]["id"]).returncode == 0
    again = ctl_json(alpha.home, "import", str(target))
    assert again["imported"] == 0 and again["duplicates"] == total
    # History stays here: not in the vector, never offered to beta (which would refuse it anyway).
    source_origin = ctl_json(source.home, "status")["origin"]
    # An event written after the import: alpha's link sends what alpha committed in commit order,
    # so once beta holds it, any of the imported history offered to beta reached it first.
    append(alpha.home, "after the import")
    wait_converged(alpha, beta)
    assert source_origin not in {o["origin"] for o in digest(alpha.home)["origins"]}
    assert not any(e["origin"] == source_origin for e in ctl_json(beta.home, "list", "--limit", "500")["events"])
    assert all(p["rejected_events"] == 0 for p in ctl_json(beta.home, "peers")["peers"])


def _damaged(clean, tmp_path, name: str = "altered.ndjson"):
    """``clean`` with the body of "history 2" altered and a line of garbage after "history 3";
    returns (path, line numbers of the two failures, id of the altered event)."""
    lines = clean.read_text().splitlines()
    altered_at = next(i for i, line in enumerate(lines) if '"history 2"' in line)
    altered_id = json.loads(lines[altered_at])["event"]["id"]
    lines[altered_at] = lines[altered_at].replace('"history 2"', '"history two"')
    garbage_at = next(i for i, line in enumerate(lines) if '"history 3"' in line) + 1
    lines.insert(garbage_at, '{"event": {"id": "evt_truncated", "orig')
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path, (altered_at + 1, garbage_at + 1), altered_id


def _source_events_on(home, source_origin: str) -> int:
    return sum(e["origin"] == source_origin for e in ctl_json(home, "list", "--limit", "500")["events"])


def test_a_file_with_altered_events_imports_nothing_and_names_each_failure(fleet, tmp_path):
    """Finding 10 (issue 11): one altered event used to leave the rest imported and exit 0. Now
    the whole file is verified first: any failure imports nothing, exits 1 and names each one."""
    source = fleet.start("source")
    _fill(source.home)
    source_origin = ctl_json(source.home, "status")["origin"]
    clean = tmp_path / "clean.ndjson"
    ctl_json(source.home, "export", "--output", str(clean))
    altered, (altered_line, garbage_line), altered_id = _damaged(clean, tmp_path)
    alpha = fleet.found("alpha")
    result = run_ctl(alpha.home, "import", str(altered))
    assert result.returncode == 1, result
    first, *named = result.stderr.strip().splitlines()
    assert "2 line(s) fail verification; nothing was imported" in first and "--partial" in first
    assert named == [f"  line {altered_line} ({altered_id}): does not verify: body does not match its sha256",
                     f"  line {garbage_line}: not JSON"], result.stderr
    assert result.stdout == ""
    as_json = run_ctl(alpha.home, "import", str(altered), "--json")
    assert as_json.returncode == 1
    error = json.loads(as_json.stdout)["error"]
    assert error["code"] == "integrity" and error["failure_count"] == 2
    assert [(f["line"], f["kind"], f["id"]) for f in error["failures"]] == [
        (altered_line, "event", altered_id), (garbage_line, "line", None)]
    assert _source_events_on(alpha.home, source_origin) == 0  # nothing imported, not even the sound events

    # --partial keeps what verifies, lists the failures, exits 0 (the file's failures are in `failed`).
    partial = run_ctl(alpha.home, "import", str(altered), "--partial", "--json")
    assert partial.returncode == 0, partial
    report = partial.json()
    total = ctl_json(source.home, "status")["events"]
    assert report["imported"] == total - 1 == _source_events_on(alpha.home, source_origin)
    assert report["failed_count"] == 2 and [f["line"] for f in report["failed"]] == [altered_line, garbage_line]
    assert report["refused"] == []
    human = run_ctl(alpha.home, "import", str(altered), "--partial")
    assert human.returncode == 0 and "Imported 0 event(s) as history" in human.stdout
    assert "Skipped 2 line(s)" in human.stderr and f"line {altered_line} ({altered_id})" in human.stderr


def test_an_artifact_whose_bytes_were_altered_fails_the_import(fleet, tmp_path):
    """Artifacts in the file are verified like events: bytes that do not match their sha256 are a
    failure (nothing imported), and --partial leaves that artifact out."""
    source = fleet.start("source")
    filled = _fill(source.home)
    clean = tmp_path / "clean.ndjson"
    ctl_json(source.home, "export", "--output", str(clean), "--with-artifacts")
    lines = clean.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith('{"artifact"'))
    record = json.loads(lines[at])
    content = base64.b64decode(record["artifact"]["content_base64"])
    record["artifact"]["content_base64"] = base64.b64encode(content.replace(b"+y", b"+z")).decode()
    lines[at] = json.dumps(record)
    altered = tmp_path / "altered.ndjson"
    altered.write_text("\n".join(lines) + "\n")
    alpha = fleet.found("alpha")
    result = run_ctl(alpha.home, "import", str(altered))
    assert result.returncode == 1, result
    assert f"line {at + 1} ({filled['patch']['artifact']['id']}): artifact content does not match its sha256" \
        in result.stderr
    partial = run_ctl(alpha.home, "import", str(altered), "--partial", "--json")
    assert partial.returncode == 0 and partial.json()["artifacts"] == 0
    assert partial.json()["imported"] == ctl_json(source.home, "status")["events"]
    assert run_ctl(alpha.home, "artifact", "get", filled["patch"]["artifact"]["id"]).returncode == 1


def test_import_from_stdin_verifies_all_of_it_before_sending_anything(fleet, tmp_path):
    """``import -``: the input is buffered (memory, then a private temporary file) so it can be
    verified whole before the first event is sent."""
    source = fleet.start("source")
    _fill(source.home)
    source_origin = ctl_json(source.home, "status")["origin"]
    clean = tmp_path / "clean.ndjson"
    ctl_json(source.home, "export", "--output", str(clean))
    altered, _lines, _id = _damaged(clean, tmp_path)
    alpha = fleet.found("alpha")
    refused = run_ctl(alpha.home, "import", "-", input=altered.read_bytes())
    assert refused.returncode == 1 and "standard input: 2 line(s) fail verification" in refused.stderr
    assert _source_events_on(alpha.home, source_origin) == 0
    piped = run_ctl(alpha.home, "import", "-", "--json", input=clean.read_bytes())
    assert piped.returncode == 0 and piped.json()["imported"] == ctl_json(source.home, "status")["events"]
    assert piped.json()["failed"] == []


def test_the_daemon_refuses_a_whole_import_request_holding_one_forged_event(fleet, tmp_path):
    """The daemon holds the rule for any client, not only palacectl: an ``import_events``
    request with an event that fails verification stores nothing unless it says ``partial``."""
    from palace_proto.errors import ApiError
    from palace_proto.export import parse_line
    from palacectl.client import Client

    source = fleet.start("source")
    _fill(source.home)
    source_origin = ctl_json(source.home, "status")["origin"]
    clean = tmp_path / "clean.ndjson"
    ctl_json(source.home, "export", "--output", str(clean))
    parsed = [parse_line(line) for line in clean.read_text().splitlines()]
    origins = {payload[0]: payload[1].hex() for kind, payload in parsed if kind == "origin"}
    events = [payload for kind, payload in parsed if kind == "event"]
    forged_at = next(i for i, e in enumerate(events) if e["body"] == "history 1")
    events[forged_at] = {**events[forged_at], "body": "history one"}
    alpha = fleet.found("alpha")
    with Client(alpha.home) as client:
        with pytest.raises(ApiError) as refused:
            client.call("import_events", events=events, origins=origins, artifacts=[])
        assert refused.value.code == "invalid_argument"
        assert [(f["index"], f["id"]) for f in refused.value.detail["failures"]] == [
            (forged_at, events[forged_at]["id"])]
        assert _source_events_on(alpha.home, source_origin) == 0
        kept = client.call("import_events", events=events, origins=origins, artifacts=[], partial=True)
    assert kept["imported"] == len(events) - 1 == _source_events_on(alpha.home, source_origin)
    assert [f["index"] for f in kept["failed"]] == [forged_at] and kept["refused"] == []


def test_policy_refusals_are_listed_but_do_not_fail_the_import(fleet, tmp_path):
    """A member's events reach this palace by replication only, never from a file: what beta
    lacks of alpha's chain is refused (listed, exit 0: the file is sound, this palace declines
    those events), while the history alpha imported travels on as history."""
    source = fleet.start("source")
    _fill(source.home)
    clean = tmp_path / "clean.ndjson"
    ctl_json(source.home, "export", "--output", str(clean))
    alpha = fleet.found("alpha")
    result = ctl_json(alpha.home, "import", str(clean))
    # An event of alpha's own before beta joins: converged then means beta stored it, and with
    # it alpha's origin binding (alpha's imported history alone never replicates).
    append(alpha.home, "before beta joins")
    beta = fleet.join("beta")
    wait_converged(alpha, beta)
    assert beta.stop() == 0
    unseen = append(alpha.home, "written while beta was away")
    own = tmp_path / "alpha.ndjson"
    ctl_json(alpha.home, "export", "--output", str(own))
    assert alpha.stop() == 0
    beta.start()
    back = ctl_json(beta.home, "import", str(own))  # exit 0
    reasons = {r["id"]: r["reason"] for r in back["refused"]}
    assert "is replicated in this palace" in reasons[unseen["id"]] and back["failed"] == []
    assert back["imported"] == result["imported"]  # alpha's imported history was never replicated to beta
    human = run_ctl(beta.home, "import", str(own))
    assert human.returncode == 0 and f"refused {unseen['id']}" in human.stdout


def test_export_writes_its_temporary_file_private_from_the_start(daemon, tmp_path, monkeypatch, capsys):
    """Finding 11 (issue 11): the partial export was created with the default mode (0644 under the
    usual umask) and chmod-ed only once complete; it must be 0600 from its creation."""
    import palace_proto.export
    from palacectl.cli import main

    for i in range(3):
        append(daemon.home, f"private {i}")
    target = tmp_path / "log.ndjson"
    seen: list[int] = []
    real_event_line = palace_proto.export.event_line

    def spy(event):  # runs while the export is being written: the temporary file exists
        seen.extend(stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir() if p.name != target.name)
        return real_event_line(event)

    monkeypatch.setattr(palace_proto.export, "event_line", spy)
    old_umask = os.umask(0o022)
    try:
        assert main(["--home", str(daemon.home), "export", "--output", str(target)]) == 0
    finally:
        os.umask(old_umask)
    assert seen and set(seen) == {0o600}
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and [p.name for p in tmp_path.iterdir()] == [target.name]
    missing = run_ctl(daemon.home, "export", "--output", str(tmp_path / "no" / "such" / "dir.ndjson"))
    assert missing.returncode == 1 and "cannot write" in missing.stderr and "Traceback" not in missing.stderr


def test_import_rejects_files_that_are_not_exports_with_one_line(daemon, tmp_path):
    for content, fragment in ((b"not json\n", "line 1: not JSON"), (b'{"event": {}}\n', "not a palace export"),
                              (b'{"palace_export": 9}\n', "format 9"), (b"\xff\xfe\n", "not UTF-8")):
        path = tmp_path / "bad.ndjson"
        path.write_bytes(content)
        result = run_ctl(daemon.home, "import", str(path))
        assert result.returncode == 1 and fragment in result.stderr, result
        assert len(result.stderr.strip().splitlines()) == 1
    missing = run_ctl(daemon.home, "import", str(tmp_path / "nope.ndjson"))
    assert missing.returncode == 1 and "cannot read" in missing.stderr


def test_export_and_import_draw_progress_bars_on_a_terminal(daemon, daemon_factory, tmp_path, short_tmp):
    for i in range(50):
        append(daemon.home, f"bar {i}")
    target = tmp_path / "bar.ndjson"
    code, out, terminal = run_ctl_on_terminal(daemon.home, "export", "--output", str(target))
    assert code == 0 and "exporting [" in terminal and "100%" in terminal and "Exported 50 events" in out
    other = daemon_factory(short_tmp / "other")
    code, out, terminal = run_ctl_on_terminal(other.home, "import", str(target))
    assert code == 0 and "verifying [" in terminal and "importing [" in terminal and "Imported 50 event(s)" in out
