"""Export and import: the log as NDJSON (signed events, their origins' keys, artifacts inline on
request), and an import that verifies every event and stores it as history — searchable and
listable, never replicated to peers, refusing anything altered or anything this palace
replicates itself."""

from __future__ import annotations

import json
import stat
import time

from tests.fleet import append, ctl_json, digest, wait_converged
from tests.helpers import run_ctl, run_ctl_on_terminal


def _fill(home) -> dict:
    events = [append(home, f"history {i}", stream="project/history") for i in range(5)]
    secret = append(home, "token tok_export_secret", stream="project/history")
    ctl_json(home, "redact", secret["id"], "--from-agent", "tester")
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
    append(alpha.home, "after the import")
    wait_converged(alpha, beta)
    assert source_origin not in {o["origin"] for o in digest(alpha.home)["origins"]}
    time.sleep(1)
    assert not any(e["origin"] == source_origin for e in ctl_json(beta.home, "list", "--limit", "500")["events"])
    assert all(p["rejected_events"] == 0 for p in ctl_json(beta.home, "peers")["peers"])


def test_import_refuses_altered_events_and_what_this_palace_replicates(fleet, tmp_path):
    source = fleet.start("source")
    _fill(source.home)
    clean = tmp_path / "clean.ndjson"
    ctl_json(source.home, "export", "--output", str(clean))
    lines = clean.read_text().splitlines()
    altered_at = next(i for i, line in enumerate(lines) if '"history 2"' in line)
    lines[altered_at] = lines[altered_at].replace('"history 2"', '"history two"')
    altered = tmp_path / "altered.ndjson"
    altered.write_text("\n".join(lines) + "\n")
    alpha = fleet.found("alpha")
    result = ctl_json(alpha.home, "import", str(altered))
    assert len(result["refused"]) == 1 and "does not verify" in result["refused"][0]["reason"]
    assert result["imported"] == ctl_json(source.home, "status")["events"] - 1
    # A member's events reach this palace by replication only, never from a file: what beta
    # lacks of alpha's chain is refused; the history alpha imported travels on as history.
    beta = fleet.join("beta")
    wait_converged(alpha, beta)
    assert beta.stop() == 0
    unseen = append(alpha.home, "written while beta was away")
    own = tmp_path / "alpha.ndjson"
    ctl_json(alpha.home, "export", "--output", str(own))
    assert alpha.stop() == 0
    beta.start()
    back = ctl_json(beta.home, "import", str(own))
    reasons = {r["id"]: r["reason"] for r in back["refused"]}
    assert "is replicated in this palace" in reasons[unseen["id"]]
    assert back["imported"] == result["imported"]  # alpha's imported history was never replicated to beta


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
    assert code == 0 and "importing [" in terminal and "Imported 50 event(s)" in out
