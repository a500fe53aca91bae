"""Upgrades: a home written by the release before each schema change opens under this palace,
migrates (each script once, in a transaction, recorded in ``_migrations``) and keeps everything:
the same events in the same order with their signatures and chain, redactions, acks, artifacts
byte for byte, the palace membership, the memory; and it takes new writes, memory included. Its
legacy (random) origin is retired on the first start (issue 11: a member could claim such an
origin for its own key): the old chain stays whole, and new events go to a key-derived origin.

The homes under ``tests/fixtures/legacy/`` were made by those releases themselves
(``tests/fixtures/legacy/make_legacy_homes.py``); ``expected.json`` records what they held."""

from __future__ import annotations

import collections
import datetime
import json
import shutil
from pathlib import Path

import apsw
import pytest

from palace_proto.stamps import MAX_DURATION_S
from tests.fleet import ctl_json
from tests.helpers import run_ctl

LEGACY = Path(__file__).resolve().parents[1] / "fixtures" / "legacy"
SCHEMAS = sorted(int(p.name.split("-")[1]) for p in LEGACY.glob("schema-*"))
CURRENT_SCHEMA = len(list((Path(__file__).resolve().parents[2] / "palaced" / "store" / "schema").glob("*.sql")))


def test_there_is_a_legacy_home_for_every_schema_change():
    """Regression guard: a new schema script needs a home from the release before it."""
    assert SCHEMAS == list(range(1, CURRENT_SCHEMA)), "run tests/fixtures/legacy/make_legacy_homes.py"


def _claimed_before(home: Path, seconds: int) -> bool:
    """Whether the home's log holds a claim (an ack with status ``claimed``) older than ``seconds``."""
    conn = apsw.Connection(str(home / "palace.sqlite3"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        stamps = [stamp for (stamp,) in conn.execute(
            "SELECT created_at FROM events WHERE type='event.ack' AND status='claimed'")]
    finally:
        conn.close()
    now = datetime.datetime.now(datetime.UTC)
    return any((now - datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds() > seconds
               for stamp in stamps)


def _wait_for_type(home: Path, event_type: str) -> None:
    result = run_ctl(home, "wait", "--type", event_type, "--timeout-ms", "30000", "--json")
    assert result.returncode == 0, result


def _migrations(db: Path) -> list[int]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [v for (v,) in conn.execute("SELECT version FROM _migrations ORDER BY version")]
    finally:
        conn.close()


@pytest.mark.parametrize("schema", SCHEMAS)
def test_a_home_from_the_previous_release_migrates_and_keeps_everything(schema, daemon_factory, short_tmp):
    expected = json.loads((LEGACY / f"schema-{schema}" / "expected.json").read_text())
    home = short_tmp / "old"
    shutil.copytree(LEGACY / f"schema-{schema}" / "home", home)
    (home / "identity.key").chmod(0o600)
    # The release's own scripts (0014 landed before 0013: a home of that release holds 1-12 and 14).
    assert _migrations(home / "palace.sqlite3") == expected.get("migrations", list(range(1, schema + 1)))
    # A task claimed in the fixture and silent since is stalled once the fixture is older than the
    # stall time: its notice is written at start. The longest stall time keeps that from happening
    # while the test runs; for a fixture older than that, the notice is waited for and counted.
    (home / "config.toml").write_text('[tasks]\nstall_after = "30d"\n', encoding="utf-8")
    daemon = daemon_factory(home)
    if _claimed_before(home, MAX_DURATION_S):
        _wait_for_type(home, "task.stalled")
    status = ctl_json(home, "status")
    assert status["origin"].startswith("ori2_")
    # A legacy (random) origin is retired on upgrade, a key-derived one (schema 5 on) kept.
    assert (status["origin"] != expected["origin"]) == expected["origin"].startswith("ori_")
    # A member daemon registers, on its first start, the agents it wrote as (issue 16).
    everything = ctl_json(home, "list", "--limit", "500")["events"]
    registered = [e for e in everything if e["type"] == "agent.register"]
    authors = {e["from_agent"] for e in everything if e["type"] != "agent.register"} - {"palaced"}
    assert {e["metadata"]["agent"] for e in registered} == (authors if expected["palace"] else set())
    # Homes from before schema 7 register their agents now; later ones had them registered already.
    registered = [e for e in everything if e["seq"] > expected["events"]]
    assert {e["type"] for e in registered} <= {"agent.register", "task.stalled"}
    assert status["events"] == expected["events"] + len(registered)
    # The roster's counts (kept by a trigger since schema 0008, filled from the log on upgrade).
    roster = {a["agent"]: a["events"] for a in ctl_json(home, "agents")["agents"]}
    counted = collections.Counter(e["from_agent"] for e in everything if e["from_agent"] != "palaced")
    assert {agent: roster.get(agent) for agent in counted} == dict(counted)
    # Every task of the log is followed (schema 0009 fills task_threads from it on upgrade).
    requested = {e["correlation_id"] or e["id"] for e in everything if e["type"] == "task.request"}
    assert requested and {t["correlation_id"] for t in ctl_json(home, "task", "list")["tasks"]} == requested
    legacy = expected["origin"].startswith("ori_")
    heads = {o["origin"]: o for o in ctl_json(home, "digest")["origins"]}
    # The legacy chain, whole (and, for a key-derived origin, the registrations after it).
    assert heads[expected["origin"]]["origin_seq"] == expected["events"] + (0 if legacy else len(registered))
    assert (status["palace"] is not None) == expected["palace"]
    listed = ctl_json(home, "list", "--stream", "project/legacy", "--limit", "100")["events"]
    assert [e["id"] for e in listed if e["seq"] <= expected["events"]] == expected["event_ids"]
    by_id = {e["id"]: e for e in listed}
    assert by_id[expected["redacted_id"]]["body"] == "" and by_id[expected["redacted_id"]]["body_redacted"] is True
    assert "ünïcode ✓" in by_id[expected["acked_id"]]["body"]
    artifact = run_ctl(home, "artifact", "get", expected["artifact"]["artifact_id"])
    assert artifact.returncode == 0 and artifact.stdout_bytes == expected["artifact"]["content"].encode()
    # New events go on under the key-derived origin: from 1 after a legacy one, whose head then
    # does not move; right after the events already there if the origin was key-derived already.
    new = ctl_json(home, "append", "--type", "note", "--stream", "project/legacy", "--room", "general",
                   "--from-agent", "new-claude", "--body", "after the upgrade")
    before_it = len(registered) + (1 if expected["palace"] else 0)  # and new-claude's own registration
    assert (new["origin"], new["origin_seq"]) == (status["origin"],
                                                  before_it + 1 if legacy else expected["events"] + before_it + 1)
    assert ctl_json(home, "digest")["events"] == expected["events"] + before_it + 1
    if legacy:
        assert {o["origin"]: o for o in ctl_json(home, "digest")["origins"]}[expected["origin"]] \
            == heads[expected["origin"]]
    assert ctl_json(home, "list", "--stream", "project/legacy", "--limit", "100")["events"][-1]["id"] == new["id"]
    # The usage totals (schema 0013) are filled from the log: its claimant's report counts.
    if "usage" in expected:
        summed = ctl_json(home, "usage", "--by", "task")
        assert (summed["totals"], summed["flagged"]) == (expected["usage"], 0)
    else:
        assert ctl_json(home, "usage", "--by", "task")["flagged"] == 0
    # The memory views exist and are filled from the (migrated) log.
    filed = run_ctl(home, "remember", "--wing", "wing_legacy", "--room", "notes", "--added-by", "palacectl", "--json",
                    input=b"migrated and still fine\n").json()
    assert ctl_json(home, "search", "migrated", "--mode", "keyword")["results"][0]["drawer_id"] == filed["drawer_id"]
    if "memory" in expected:  # a home of the memory era: its memory survives, its redactions leave no trace
        memory = expected["memory"]
        assert [r["drawer_id"] for r in ctl_json(home, "search", "legacy router", "--mode", "keyword")["results"]] \
            == [memory["kept_drawer"]]
        assert ctl_json(home, "search", memory["redacted_word"], "--mode", "keyword")["results"] == []
        facts = ctl_json(home, "kg", "query", "legacybox", "--as-of", "2026-03-01")
        assert [(f["predicate"], f["object"]) for f in facts["active_facts"]] == [("runs", "debian")]
    daemon.stop()
    assert _migrations(home / "palace.sqlite3") == list(range(1, CURRENT_SCHEMA + 1))
    if "memory" in expected:
        # The release before kept a redacted drawer's words in its keyword index; the upgrade drops them.
        for path in home.rglob("*"):
            if path.is_file():
                assert expected["memory"]["redacted_word"].encode() not in path.read_bytes(), path
    # And it opens again (migrations are recorded, not re-run).
    daemon_factory(home)
    # The note and the drawer, and the registration of the drawer's author (palacectl) if new.
    newly = 1 if expected["palace"] and "palacectl" not in authors else 0
    assert ctl_json(home, "status")["events"] == expected["events"] + before_it + newly + 2
