"""The shared memory through palacectl, on one daemon and across a palace: files, finds and quotes
verbatim; facts change by invalidate + add; diaries read newest first; everything written on A is
searchable, queryable and readable on B; a redacted drawer vanishes from B's search."""

from __future__ import annotations

import pytest

from tests.fleet import append, ctl_json, wait_converged, wait_until
from tests.helpers import run_ctl, run_ctl_on_terminal

DECISION = "Decision: the fleet keeps its memory in the replicated log, so every peer can search it.\n"


def test_remember_search_and_quote_verbatim(ctl, daemon):
    filed = ctl("remember", "--wing", "wing_palace", "--room", "decisions", "--added-by", "mac-claude", "--json",
                input=DECISION.encode())
    assert filed.returncode == 0, filed
    again = ctl("remember", "--wing", "wing_palace", "--room", "decisions", "--json", input=DECISION.encode())
    assert again.json()["drawer_id"] == filed.json()["drawer_id"] and again.json()["duplicate"] is True
    hits = ctl("search", "memory replicated", "--json").json()
    assert hits["count"] == 1 and hits["results"][0]["content"] == DECISION
    assert ctl("search", "memory", "--wing", "wing_elsewhere", "--json").json()["count"] == 0
    human = ctl("search", "replicated log")
    assert DECISION.strip() in human.stdout


def test_memory_commands_need_to_know_who_files_and_say_so(daemon):
    """Issue 26: they filed as a shared ``palacectl`` agent by default, registered to the first
    daemon that wrote, so the same command was refused on every other machine."""
    nobody = {"PALACE_AGENT": ""}
    for args in (["remember", "--wing", "w", "--room", "r"], ["kg", "add", "a", "b", "c"],
                 ["kg", "invalidate", "a", "b", "c"]):
        refused = run_ctl(daemon.home, *args, input=b"x", env=nobody)
        assert refused.returncode == 64 and "--added-by YOUR_AGENT_ID (or set PALACE_AGENT)" in refused.stderr, args
    assert ctl_json(daemon.home, "status")["events"] == 0
    filed = run_ctl(daemon.home, "remember", "--wing", "w", "--room", "r", "--json", input=b"x",
                    env={"PALACE_AGENT": "linux-bot"})
    assert filed.returncode == 0, filed
    drawer = ctl_json(daemon.home, "list", "--type", "memory.drawer")["events"][0]
    assert drawer["from_agent"] == "linux-bot"


def test_memory_input_errors_are_one_line_and_write_nothing(ctl, daemon):
    empty = ctl("remember", "--wing", "w", "--room", "r", input=b"")
    assert empty.returncode == 1 and "content must be a non-empty string" in empty.stderr
    bad_date = ctl("kg", "add", "a", "b", "c", "--valid-from", "tomorrow")
    assert bad_date.returncode == 1 and "not a valid ISO-8601 date" in bad_date.stderr
    reversed_span = ctl("kg", "add", "a", "b", "c", "--valid-from", "2026-05-01", "--valid-to", "2026-01-01")
    assert reversed_span.returncode == 1 and "valid_to must not be before valid_from" in reversed_span.stderr
    raw = ctl("append", "--type", "memory.drawer", "--stream", "memory", "--room", "r", "--from-agent", "a")
    assert raw.returncode == 1 and "reserved" in raw.stderr and "palacectl remember" in raw.stderr
    long_query = ctl("search", "x" * 300)
    assert long_query.returncode == 1 and "at most 250 characters" in long_query.stderr
    assert ctl("diary", "write", "--agent", "a").returncode == 64
    assert ctl("status", "--json").json()["events"] == 0


def test_facts_change_through_invalidate_and_add(ctl, daemon):
    assert ctl("kg", "add", "palace", "stores logs in", "sqlite", "--valid-from", "2026-01-01").returncode == 0
    ended = ctl("kg", "invalidate", "palace", "stores logs in", "sqlite", "--ended", "2026-10-01", "--json").json()
    assert ended["facts_ended"] == 1
    assert ctl("kg", "add", "palace", "stores logs in", "sqlite+fts5", "--valid-from", "2026-10-01").returncode == 0
    then = ctl("kg", "query", "palace", "--as-of", "2026-05-01", "--json").json()
    now = ctl("kg", "query", "palace", "--as-of", "2026-11-30", "--json").json()
    assert [f["object"] for f in then["active_facts"]] == ["sqlite"]
    assert [f["object"] for f in now["active_facts"]] == ["sqlite+fts5"]
    assert [f["object"] for f in now["historical_facts"]] == ["sqlite"]
    unknown = ctl("kg", "query", "palac", "--json").json()
    assert unknown["count"] == 0 and unknown["candidates"] == ["palace"]


def test_diaries_read_newest_first(ctl, daemon):
    for i in range(3):
        assert ctl("diary", "write", "--agent", "Mac Claude", "--entry", f"day {i}", "--topic", "work").returncode == 0
    page = ctl("diary", "read", "--agent", "mac claude", "--last", "2", "--json").json()
    assert page["wing"] == "wing_mac_claude" and page["total"] == 3 and page["showing"] == 2
    assert [e["content"] for e in page["entries"]] == ["day 2", "day 1"]
    agents = {a["agent"]: a for a in ctl("agents", "--json").json()["agents"]}
    assert agents["mac claude"]["diary_entries"] == 3


def test_memory_written_on_a_reaches_b_and_a_redaction_follows(fleet):
    a = fleet.found("alpha")
    b = fleet.join("beta")
    result = run_ctl(a.home, "remember", "--wing", "wing_palace", "--room", "decisions", "--added-by", "mac-claude",
                     "--json", input=DECISION.encode())
    assert result.returncode == 0, result
    drawer_id = result.json()["drawer_id"]
    secret = run_ctl(a.home, "remember", "--wing", "wing_palace", "--room", "decisions", "--json",
                     input=b"oops, the deploy token is tok_live_123 for the replicated log")
    ctl_json(a.home, "kg", "add", "palace", "replicates", "memory", "--valid-from", "2026-11-30")
    ctl_json(a.home, "diary", "write", "--agent", "mac-claude", "--entry", "filed the memory decision")
    append(a.home, "an ordinary event too")
    wait_converged(a, b)
    hits = ctl_json(b.home, "search", "replicated log", "--mode", "keyword")["results"]
    assert {h["drawer_id"] for h in hits} == {drawer_id, secret.json()["drawer_id"]}
    assert [h["content"] for h in hits if h["drawer_id"] == drawer_id] == [DECISION]
    assert ctl_json(b.home, "kg", "query", "palace")["active_facts"][0]["object"] == "memory"
    assert ctl_json(b.home, "diary", "read", "--agent", "mac-claude")["entries"][0]["content"] == \
        "filed the memory decision"
    # Forget the secret on A: the drawer leaves B's search too.
    leaked = next(e for e in ctl_json(a.home, "list", "--stream", "memory", "--limit", "50")["events"]
                  if "tok_live_123" in e["body"])
    ctl_json(a.home, "redact", leaked["id"], "--from-agent", leaked["from_agent"], "--reason", "a token")
    wait_until(lambda: [h["drawer_id"] for h in ctl_json(b.home, "search", "replicated log", "--mode",
                                                          "keyword")["results"]]
               == [drawer_id], "the redacted drawer to leave beta's search")
    assert "tok_live_123" not in run_ctl(b.home, "search", "deploy token").stdout


PARAPHRASE_DRAWERS = {
    "deploy": "We ship to production only from the main branch, after the full test suite passes in CI.\n",
    "cats": "The office cat sleeps on the warm router every afternoon.\n",
    "db": "Palace stores each replica's log in SQLite with write-ahead logging and fsync on commit.\n",
    "oncall": "Whoever is on call rotates every Monday; the handover note goes in the ops room.\n",
}


@pytest.mark.slow
def test_a_paraphrased_question_finds_its_drawer_by_meaning(ctl, daemon):
    """The real offline model (no network here either): no keyword of the question is in the drawer."""
    ids = {}
    for name, text in PARAPHRASE_DRAWERS.items():
        ids[name] = ctl("remember", "--wing", "wing_palace", "--room", "notes", "--json",
                        input=text.encode()).json()["drawer_id"]
    wait_until(lambda: (ctl("status", "--json").json()["memory"]["embedding"] or {}).get("indexed") == 4,
               "the drawers to be embedded", timeout=120)
    question = "which database keeps the event history on disk?"
    assert ctl("search", question, "--mode", "keyword", "--json").json()["count"] == 0 or \
        ctl("search", question, "--mode", "keyword", "--json").json()["results"][0]["drawer_id"] != ids["db"]
    hybrid = ctl("search", question, "--json").json()
    assert hybrid["mode"] == "hybrid" and hybrid["results"][0]["drawer_id"] == ids["db"]
    assert hybrid["results"][0]["content"] == PARAPHRASE_DRAWERS["db"]  # verbatim
    vector = ctl("search", "kitty napping on network gear", "--mode", "vector", "--json").json()
    assert vector["results"][0]["drawer_id"] == ids["cats"]
    status = ctl("status", "--json").json()["memory"]["embedding"]
    assert status["model_loads"] == 1 and status["pending"] == 0 and status["error"] is None
    # Forgetting reaches the vectors too.
    event = next(e for e in ctl("list", "--stream", "memory", "--json").json()["events"] if "SQLite" in e["body"])
    assert ctl("redact", event["id"], "--from-agent", event["from_agent"]).returncode == 0  # its author
    wait_until(lambda: ids["db"] not in [h["drawer_id"] for h in ctl("search", question, "--json").json()["results"]],
               "the redacted drawer to leave vector search")


def test_memory_rebuild_derives_the_views_again_with_a_progress_bar_on_a_terminal(ctl, daemon):
    for text in ("We deploy on Mondays.\n", "The printer lives in room 4.\n", "SQLite runs in WAL mode.\n"):
        assert ctl("remember", "--wing", "wing_palace", "--room", "notes", input=text.encode()).returncode == 0
    assert ctl("kg", "add", "palace", "uses", "sqlite", "--json").returncode == 0
    assert ctl("diary", "write", "--agent", "mac-claude", "--entry", "rebuilt the views", "--json").returncode == 0
    rebuilt = ctl("memory", "rebuild", "--json")
    assert rebuilt.returncode == 0 and rebuilt.stderr == "", rebuilt
    counts = rebuilt.json()
    assert (counts["events"], counts["drawers"], counts["facts"], counts["vectors_reset"]) == (5, 4, 1, False)
    assert ctl("search", "printer", "--json").json()["results"][0]["content"] == "The printer lives in room 4.\n"
    # piped stderr (scripts): a plain line, no control characters
    piped = ctl("memory", "rebuild")
    assert piped.returncode == 0 and "\r" not in piped.stderr and "Rebuilt from 5 memory event(s)" in piped.stdout
    code, out, terminal = run_ctl_on_terminal(daemon.home, "memory", "rebuild")
    assert code == 0 and "Rebuilt from 5" in out
    assert "memory views [" in terminal and "100%" in terminal and "5/5" in terminal, terminal
    # --vectors: the index is thrown away and every drawer embedded again; the bar follows it
    code, out, terminal = run_ctl_on_terminal(daemon.home, "memory", "rebuild", "--vectors")
    assert code == 0 and "Re-embedding" in out, out
    assert "embedding [" in terminal and "4/4" in terminal, terminal
    embedding = ctl("status", "--json").json()["memory"]["embedding"]
    assert embedding["indexed"] == 4 and embedding["pending"] == 0 and embedding["model_loads"] == 1
    assert ctl("search", "which database mode", "--mode", "vector", "--json").json()["count"] >= 1
