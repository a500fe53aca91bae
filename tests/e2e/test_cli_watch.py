"""`palacectl watch` end to end: a real palaced, the watch as a real background process.

The contract is issue 2 §4 (`watch`) and reference §3.3–3.4; §6.5 lists the watch bugs that must
not recur (skips on first run / broken pipe / unreadable checkpoint, a bad --since-event-id
persisted, waking on one's own broadcasts, a negative idle meaning forever). Every wait below has
a timeout and every watch an --idle-exit-ms, so a regression fails instead of hanging.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import PYTHON, Daemon, append_event

# Why 20 s: a watch wakes in milliseconds; this only bounds a broken build on a slow CI machine.
WAIT_S = 20.0


class WatchProc:
    """``palacectl --home HOME watch ARGS`` in the background, stdout/stderr captured to files."""

    def __init__(self, home: Path, args: tuple[str, ...], out_dir: Path, n: int, *, stdout_pipe: bool = False) -> None:
        self.out_path = out_dir / f"watch{n}.out"
        self.err_path = out_dir / f"watch{n}.err"
        self._out = None if stdout_pipe else open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # SIGABRT dumps its stacks (see ``wait``)
        env.pop("PALACE_HOME", None)
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "palacectl", "--home", str(home), "watch", *args],
            stdout=subprocess.PIPE if stdout_pipe else self._out, stderr=self._err, stdin=subprocess.DEVNULL, env=env,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stdout(self) -> str:
        return self.out_path.read_text(encoding="utf-8", errors="replace") if self._out else ""

    def stderr(self) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.stdout())

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait_armed(self, timeout: float = WAIT_S) -> None:
        """Until the daemon has confirmed the subscription (the 'Watching …' line follows its reply)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Watching" in self.stderr():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"watch exited {self.proc.returncode} before arming: {self!r}")
            time.sleep(0.01)
        raise AssertionError(f"watch not armed within {timeout}s: {self!r}")

    def wait(self, timeout: float = WAIT_S) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # A watch that hangs says where: faulthandler writes every thread's stack to stderr.
            self.proc.send_signal(signal.SIGABRT)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()
            raise AssertionError(f"watch did not exit within {timeout}s: {self!r}\n{self.stderr()[-4000:]}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self) -> None:
        self.kill()
        for fh in (self._out, self._err, self.proc.stdout):
            if fh is not None and not fh.closed:
                fh.close()

    def __repr__(self) -> str:
        return f"<WatchProc rc={self.proc.returncode} stdout={self.stdout()[:500]!r} stderr={self.stderr()[:800]!r}>"


@pytest.fixture
def spawn(daemon: Daemon, short_tmp: Path) -> Iterator[Any]:
    """``spawn(*watch_args)`` → a running WatchProc on the daemon's home; all are killed afterwards."""
    procs: list[WatchProc] = []

    def start(*args: str, stdout_pipe: bool = False) -> WatchProc:
        w = WatchProc(daemon.home, args, short_tmp, len(procs), stdout_pipe=stdout_pipe)
        procs.append(w)
        return w

    yield start
    for w in procs:
        w.close()


def state_of(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def to_bob(ctl: Any, **fields: Any) -> dict[str, Any]:
    return append_event(ctl, **{"to_agent": "bob", "from_agent": "alice", **fields})


def wait_until(predicate: Any, timeout: float = WAIT_S, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"{what} not reached within {timeout}s")


# -- first run, hit, resume ---------------------------------------------------------------------


def test_first_run_starts_at_tip_checkpoints_then_wakes_on_hit(ctl, daemon, spawn) -> None:
    old = to_bob(ctl, body="before the watch")
    state = daemon.home / "watch" / "bob.json"
    assert not state.exists()

    w = spawn("--agent", "bob", "--json", "--idle-exit-ms", "20000")
    w.wait_armed()
    assert "Starting at the tip" in w.stderr(), w
    # The starting position is checkpointed before the watch waits (a first run on which nothing
    # arrives must still remember where it started, or the next run would skip).
    wait_until(state.exists, what="initial checkpoint")
    assert w.running(), w
    assert state_of(state)["cursor"] == old["id"]
    assert state_of(state).get("agent") == "bob"

    new = to_bob(ctl, body="wake up")
    assert w.wait() == 0, w
    doc = w.json()
    assert doc["timed_out"] is False
    assert doc["count"] == 1
    assert [e["id"] for e in doc["events"]] == [new["id"]]  # `old` is not replayed
    assert doc["cursor"] == new["id"]
    assert doc["events"][0]["body"] == "wake up"
    assert state_of(state)["cursor"] == new["id"]


def test_first_run_on_empty_log_checkpoints_null_then_later_run_gets_missed_event(ctl, daemon, spawn) -> None:
    """§6.5: an empty-log first run left no state file, and events that arrived while stopped were skipped."""
    state = daemon.home / "watch" / "bob.json"
    first = spawn("--agent", "bob", "--json", "--idle-exit-ms", "500")
    assert first.wait() == 2, first
    assert state.exists()
    assert state_of(state)["cursor"] is None

    missed = to_bob(ctl, body="arrived while nobody watched")
    second = spawn("--agent", "bob", "--json", "--idle-exit-ms", "10000")
    assert second.wait() == 0, second
    assert [e["id"] for e in second.json()["events"]] == [missed["id"]]


def test_watcher_is_visible_in_who(ctl, daemon, spawn) -> None:
    w = spawn("--agent", "bob", "--json", "--idle-exit-ms", "20000")

    def listed() -> list[dict[str, Any]]:
        return [x for x in ctl("who", "--json").json()["watchers"] if x.get("pid") == w.pid]

    wait_until(lambda: bool(listed()), what="watcher in who")
    (entry,) = listed()
    assert entry["agent"] == "bob"
    to_bob(ctl)
    assert w.wait() == 0, w
    wait_until(lambda: not listed(), what="watcher gone from who")


def test_agent_excludes_own_events_and_includes_broadcasts(ctl, daemon, spawn) -> None:
    anchor = append_event(ctl, body="anchor")
    own = append_event(ctl, from_agent="bob", to_agent="bob", body="note to self")
    own_broadcast = append_event(ctl, from_agent="bob", to_agent="*", body="bob to everyone")
    to_alice = append_event(ctl, from_agent="carol", to_agent="alice", body="not for bob")
    broadcast = append_event(ctl, from_agent="alice", to_agent="*", body="hello all")
    direct = to_bob(ctl, body="for bob")
    w = spawn("--agent", "bob", "--since-event-id", anchor["id"], "--json", "--idle-exit-ms", "10000")
    assert w.wait() == 0, w
    doc = w.json()
    assert [e["id"] for e in doc["events"]] == [broadcast["id"], direct["id"]], w
    assert {own["id"], own_broadcast["id"], to_alice["id"]}.isdisjoint(e["id"] for e in doc["events"])


def test_agent_is_not_woken_by_own_broadcast_live(ctl, daemon, spawn) -> None:
    """§6.5: a watcher once woke on its own broadcasts."""
    w = spawn("--agent", "bob", "--json", "--idle-exit-ms", "20000")
    w.wait_armed()
    append_event(ctl, from_agent="bob", to_agent="*", body="bob to everyone")
    broadcast = append_event(ctl, from_agent="alice", to_agent="*", body="hello all")
    assert w.wait() == 0, w
    assert [e["id"] for e in w.json()["events"]] == [broadcast["id"]]


def test_rearm_with_same_state_file_resumes_without_skipping(ctl, daemon, spawn) -> None:
    state = daemon.home / "watch" / "bob.json"
    w1 = spawn("--agent", "bob", "--json", "--idle-exit-ms", "20000")
    w1.wait_armed()
    e1 = to_bob(ctl, body="one")
    assert w1.wait() == 0, w1
    assert state_of(state)["cursor"] == e1["id"]

    # Nobody watches while these arrive.
    e2 = to_bob(ctl, body="two")
    e3 = to_bob(ctl, body="three")

    w2 = spawn("--agent", "bob", "--json", "--idle-exit-ms", "10000")
    assert w2.wait() == 0, w2
    doc = w2.json()
    assert [e["id"] for e in doc["events"]] == [e2["id"], e3["id"]]
    assert "Starting at the tip" not in w2.stderr()
    assert state_of(state)["cursor"] == e3["id"]

    w3 = spawn("--agent", "bob", "--json", "--idle-exit-ms", "500")
    assert w3.wait() == 2, w3  # nothing is delivered twice
    assert w3.json()["count"] == 0


# -- idle -----------------------------------------------------------------------------------------


def test_idle_exits_2_with_timed_out_json(ctl, daemon, spawn) -> None:
    started = time.monotonic()
    w = spawn("--agent", "bob", "--json", "--idle-exit-ms", "500")
    assert w.wait() == 2, w
    assert time.monotonic() - started >= 0.5
    doc = w.json()
    assert doc["timed_out"] is True
    assert doc["count"] == 0
    assert doc["events"] == []


def test_idle_human_output(ctl, daemon, spawn) -> None:
    w = spawn("--agent", "bob", "--idle-exit-ms", "300")
    assert w.wait() == 2, w
    assert w.stdout() == ""
    assert "Idle timeout" in w.stderr()


# -- state file conditions ----------------------------------------------------------------------


def _seed(ctl: Any, n: int = 3) -> list[dict[str, Any]]:
    return [to_bob(ctl, body=f"old {i}") for i in range(n)]


def test_empty_state_file_replays_from_beginning(ctl, daemon, spawn) -> None:
    events = _seed(ctl)
    state = daemon.home / "watch" / "bob.json"
    state.parent.mkdir(parents=True)
    state.write_text('{"cursor": null}')
    w = spawn("--agent", "bob", "--json", "--idle-exit-ms", "10000")
    assert w.wait() == 0, w
    assert [e["id"] for e in w.json()["events"]] == [e["id"] for e in events]
    assert "Starting at the tip" not in w.stderr()
    assert state_of(state)["cursor"] == events[-1]["id"]


@pytest.mark.parametrize("contents", [b"{not json", b"[]", b'{"cursor": 42}', b'{"cursor": "\xff"}'],
                         ids=["bad-json", "list", "int-cursor", "bad-utf8"])
def test_corrupt_state_file_replays_with_warning(ctl, daemon, spawn, contents: bytes) -> None:
    events = _seed(ctl)
    state = daemon.home / "watch" / "bob.json"
    state.parent.mkdir(parents=True)
    state.write_bytes(contents)
    w = spawn("--agent", "bob", "--json", "--idle-exit-ms", "10000")
    assert w.wait() == 0, w
    assert "corrupt" in w.stderr().lower(), w
    assert [e["id"] for e in w.json()["events"]] == [e["id"] for e in events]
    assert state_of(state)["cursor"] == events[-1]["id"]


def test_directory_at_state_path_warns_corrupt_and_refuses_to_start(ctl, daemon, spawn, short_tmp) -> None:
    """Unreadable must never look like a first run (§6.5, #2315): no start at the tip.

    The path cannot hold a checkpoint, so the required initial checkpoint fails and the watch
    refuses to start (reference §3.4 step 5) instead of running without memory.
    """
    _seed(ctl)
    state = short_tmp / "statedir.json"
    state.mkdir()
    w = spawn("--agent", "bob", "--state-file", str(state), "--json", "--idle-exit-ms", "10000")
    assert w.wait() == 1, w
    assert "corrupt" in w.stderr().lower(), w
    assert "Starting at the tip" not in w.stderr()
    err = w.json()["error"]
    assert "could not write the initial checkpoint" in err["message"] and "Refusing to start" in err["message"]
    assert state.is_dir() and list(state.iterdir()) == []


def test_unknown_stored_cursor_warns_and_replays(ctl, daemon, spawn) -> None:
    events = _seed(ctl)
    state = daemon.home / "watch" / "bob.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"cursor": "evt_from_another_palace", "agent": "bob"}))
    w = spawn("--agent", "bob", "--json", "--idle-exit-ms", "10000")
    assert w.wait() == 0, w
    assert "evt_from_another_palace" in w.stderr() and "Warning" in w.stderr(), w
    assert [e["id"] for e in w.json()["events"]] == [e["id"] for e in events]
    assert state_of(state)["cursor"] == events[-1]["id"]


# -- --since-event-id, --from-start, --state-file '' --------------------------------------------


def test_bad_since_event_id_fails_and_leaves_state_file_untouched(ctl, daemon, spawn) -> None:
    e = to_bob(ctl)
    state = daemon.home / "watch" / "bob.json"
    state.parent.mkdir(parents=True)
    original = (json.dumps({"cursor": e["id"], "updated_at": "2020-01-01T00:00:00Z", "agent": "bob"}) + "\n").encode()
    state.write_bytes(original)
    before = state.stat().st_mtime_ns
    w = spawn("--agent", "bob", "--since-event-id", "evt_nope", "--idle-exit-ms", "5000")
    assert w.wait() == 1, w
    assert "not found" in w.stderr() and "Nothing was written to the state file" in w.stderr(), w
    assert "evt_nope" in w.stderr()
    assert state.read_bytes() == original
    assert state.stat().st_mtime_ns == before
    assert sorted(p.name for p in state.parent.iterdir()) == ["bob.json"]


def test_bad_since_event_id_json_error_and_no_state_file_created(ctl, daemon, spawn) -> None:
    to_bob(ctl)
    w = spawn("--agent", "bob", "--since-event-id", "evt_nope", "--json", "--idle-exit-ms", "5000")
    assert w.wait() == 1, w
    err = w.json()["error"]
    assert "not found" in err["message"] and "Nothing was written to the state file" in err["message"]
    watch_dir = daemon.home / "watch"
    assert not watch_dir.exists() or list(watch_dir.iterdir()) == []


def test_since_event_id_overrides_state_file(ctl, daemon, spawn) -> None:
    events = _seed(ctl, 3)
    state = daemon.home / "watch" / "bob.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"cursor": events[-1]["id"]}))
    w = spawn("--agent", "bob", "--since-event-id", events[0]["id"], "--json", "--idle-exit-ms", "10000")
    assert w.wait() == 0, w
    assert [e["id"] for e in w.json()["events"]] == [events[1]["id"], events[2]["id"]]
    assert state_of(state)["cursor"] == events[2]["id"]


def test_from_start_replays_everything(ctl, daemon, spawn) -> None:
    events = _seed(ctl, 4)
    state = daemon.home / "watch" / "bob.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"cursor": events[-1]["id"]}))  # --from-start wins over the state file
    w = spawn("--agent", "bob", "--from-start", "--json", "--idle-exit-ms", "10000")
    assert w.wait() == 0, w
    doc = w.json()
    assert [e["id"] for e in doc["events"]] == [e["id"] for e in events]
    assert doc["count"] == 4 and doc["cursor"] == events[-1]["id"]
    assert "Starting at the tip" not in w.stderr()


def test_empty_state_file_option_disables_persistence(ctl, daemon, spawn) -> None:
    old = to_bob(ctl)
    w = spawn("--agent", "bob", "--state-file", "", "--json", "--idle-exit-ms", "20000")
    w.wait_armed()
    new = to_bob(ctl)
    assert w.wait() == 0, w
    assert [e["id"] for e in w.json()["events"]] == [new["id"]]
    assert not (daemon.home / "watch").exists()
    # Without persistence every run is a first run: it starts at the tip again.
    w2 = spawn("--agent", "bob", "--state-file", "", "--json", "--idle-exit-ms", "300")
    assert w2.wait() == 2, w2
    assert "Starting at the tip" in w2.stderr()
    assert old["id"] not in w2.stdout()
    assert not (daemon.home / "watch").exists()


def test_explicit_state_file_path_is_used(ctl, daemon, spawn, short_tmp) -> None:
    state = short_tmp / "custom" / "cursor.json"
    w = spawn("--agent", "bob", "--state-file", str(state), "--json", "--idle-exit-ms", "20000")
    w.wait_armed()
    e = to_bob(ctl)
    assert w.wait() == 0, w
    assert state_of(state)["cursor"] == e["id"]
    assert not (daemon.home / "watch" / "bob.json").exists()


# -- follow (NDJSON) ----------------------------------------------------------------------------


def test_follow_json_prints_one_compact_batch_per_line(ctl, daemon, spawn) -> None:
    state = daemon.home / "watch" / "bob.json"
    w = spawn("--agent", "bob", "--follow", "--json", "--idle-exit-ms", "3000")
    w.wait_armed()
    sent = []
    for i in range(3):
        sent.append(to_bob(ctl, body=f"msg {i}"))
        # Wait for this batch's line before the next append: the watch keeps running across hits.
        wait_until(lambda: w.stdout().count("\n") >= i + 1, what=f"batch {i}")
        assert w.running(), w
        # The cursor is saved right after the line is written (never before): give it that moment.
        wait_until(lambda: state_of(state)["cursor"] == sent[-1]["id"], what=f"cursor {i} saved")
    assert w.wait() == 0, w  # an idle timeout after at least one hit exits 0
    raw_lines = w.stdout().splitlines()
    docs = [json.loads(line) for line in raw_lines]
    assert len(docs) == 4, w
    for line, doc, event in zip(raw_lines, docs[:3], sent, strict=False):  # the last line: the idle timeout
        assert ": " not in line.split('"events"')[0] and "\n" not in line  # compact, one per line
        assert doc["timed_out"] is False and doc["count"] == 1
        assert [e["id"] for e in doc["events"]] == [event["id"]] and doc["cursor"] == event["id"]
    assert docs[3]["timed_out"] is True and docs[3]["count"] == 0 and docs[3]["cursor"] == sent[-1]["id"]


def test_follow_batch_envelope_not_event_per_line(ctl, daemon, spawn) -> None:
    """§6.5 (#2349): NDJSON is per batch; several queued events arrive as one line."""
    events = _seed(ctl, 3)
    w = spawn("--agent", "bob", "--from-start", "--follow", "--json", "--idle-exit-ms", "500")
    assert w.wait() == 0, w
    docs = [json.loads(line) for line in w.stdout().splitlines()]
    assert [e["id"] for e in docs[0]["events"]] == [e["id"] for e in events]
    assert docs[0]["count"] == 3
    assert docs[-1]["timed_out"] is True


# -- filters ------------------------------------------------------------------------------------


def test_repeated_type_is_or_and_cursor_passes_non_matching(ctl, daemon, spawn) -> None:
    a = append_event(ctl, type="alpha", body="a")
    b = append_event(ctl, type="beta", body="b")
    g = append_event(ctl, type="gamma", body="g")
    w = spawn("--type", "alpha", "--type", "beta", "--from-start", "--json", "--idle-exit-ms", "10000")
    assert w.wait() == 0, w
    doc = w.json()
    assert [e["id"] for e in doc["events"]] == [a["id"], b["id"]]
    assert {e["type"] for e in doc["events"]} == {"alpha", "beta"}
    # The cursor is the last event examined, match or not: gamma is never scanned again.
    assert doc["cursor"] == g["id"]


def test_non_matching_event_advances_checkpoint_while_idle(ctl, daemon, spawn, short_tmp) -> None:
    state = short_tmp / "types.json"
    w = spawn("--type", "alpha", "--type", "beta", "--state-file", str(state), "--json", "--idle-exit-ms", "2500")
    w.wait_armed()
    g = append_event(ctl, type="gamma", body="g")
    assert w.wait() == 2, w
    doc = w.json()
    assert doc["count"] == 0 and doc["timed_out"] is True
    assert doc["cursor"] == g["id"]
    assert state_of(state)["cursor"] == g["id"]
    # Next run: a matching event is delivered, the gamma is not.
    b = append_event(ctl, type="beta", body="b")
    w2 = spawn("--type", "alpha", "--type", "beta", "--state-file", str(state), "--json", "--idle-exit-ms", "10000")
    assert w2.wait() == 0, w2
    assert [e["id"] for e in w2.json()["events"]] == [b["id"]]


def test_idle_checkpoint_reaches_last_examined_event_after_a_burst(daemon, spawn, short_tmp) -> None:
    """Reference §3.4: idle polls checkpoint the advanced cursor (the last event examined)."""
    from palacectl.client import Client

    state = short_tmp / "types.json"
    w = spawn("--type", "alpha", "--state-file", str(state), "--json", "--idle-exit-ms", "2500")
    w.wait_armed()
    note = {"type": "gamma", "stream": "project/test", "room": "general", "from_agent": "tester"}
    with Client(daemon.home) as client:
        g1 = client.call("append", **note, body="g1")

        def daemon_cursor() -> str | None:
            mine = [x for x in client.call("who")["watchers"] if x.get("pid") == w.pid]
            return mine[0]["cursor"] if mine else None

        wait_until(lambda: daemon_cursor() == g1["id"], what="daemon examined g1")
        g2 = client.call("append", **note, body="g2")  # well inside the 1 s throttle window
        wait_until(lambda: daemon_cursor() == g2["id"], what="daemon examined g2")
    assert w.wait() == 2, w
    # The daemon has examined g2 (who says so); the watch should have checkpointed it on idle.
    assert w.json()["cursor"] == g2["id"], w
    assert state_of(state)["cursor"] == g2["id"]


def test_multi_valued_filters_or_within_and_across_fields(ctl, daemon, spawn) -> None:
    hit1 = append_event(ctl, stream="s1", room="r1", body="hit1")
    hit2 = append_event(ctl, stream="s2", room="r2", body="hit2")
    append_event(ctl, stream="s3", room="r1", body="wrong stream")
    append_event(ctl, stream="s1", room="r3", body="wrong room")
    w = spawn("--stream", "s1", "--stream", "s2", "--room", "r1", "--room", "r2",
              "--from-start", "--json", "--idle-exit-ms", "10000")
    assert w.wait() == 0, w
    assert [e["id"] for e in w.json()["events"]] == [hit1["id"], hit2["id"]]


def test_exclusion_wins_over_positive_match(ctl, daemon, spawn) -> None:
    append_event(ctl, from_agent="alice", to_agent="bob", body="excluded")
    kept = append_event(ctl, from_agent="carol", to_agent="bob", body="kept")
    w = spawn("--to-agent", "bob", "--exclude-from-agent", "alice", "--from-agent", "alice", "--from-agent", "carol",
              "--from-start", "--json", "--idle-exit-ms", "10000")
    assert w.wait() == 0, w
    assert [e["id"] for e in w.json()["events"]] == [kept["id"]]


# -- announce -----------------------------------------------------------------------------------


def test_announce_posts_status_broadcast_and_does_not_wake_itself(ctl, daemon, spawn) -> None:
    tip = to_bob(ctl)
    w = spawn("--agent", "bob", "--announce", "--type", "task.request", "--json", "--idle-exit-ms", "1500")
    # §6.5: a watcher must not wake on its own broadcast, so this is an idle exit.
    assert w.wait() == 2, w
    listed = ctl("list", "--type", "status", "--from-agent", "bob", "--json").json()
    assert listed["count"] == 1, listed
    ann = listed["events"][0]
    assert ann["to_agent"] == "*" and ann["from_agent"] == "bob" and ann["type"] == "status"
    assert "bob" in ann["body"] and "task.request" in ann["body"]
    assert tip["id"] in ann["body"]  # the starting cursor
    watch_meta = ann["metadata"]["watch"]
    assert watch_meta["cursor"] == tip["id"]
    assert watch_meta["filters"]["types"] == ["task.request"]
    assert watch_meta["filters"]["to_agents"] == ["bob"]


def test_another_agents_announce_wakes_only_a_watcher_that_asks_for_status(ctl, daemon, spawn) -> None:
    """The shared-brain rules: status is the type fleet watchers sleep through, so an announce
    burns nobody's wake (issue 26: every watcher of the fleet woke on each one)."""
    alice = spawn("--agent", "alice", "--json", "--idle-exit-ms", "3000", "--state-file", "")
    carol = spawn("--agent", "carol", "--with-status", "--json", "--idle-exit-ms", "20000", "--state-file", "")
    alice.wait_armed()
    carol.wait_armed()
    bob = spawn("--agent", "bob", "--announce", "--json", "--idle-exit-ms", "20000")
    assert carol.wait() == 0, carol
    (event,) = carol.json()["events"]
    assert event["type"] == "status" and event["from_agent"] == "bob" and event["to_agent"] == "*"
    assert alice.wait() == 2, alice  # slept through it: an idle exit
    bob.kill()


def test_announce_without_agent_is_usage_error(ctl, daemon, spawn) -> None:
    w = spawn("--announce", "--to-agent", "bob", "--idle-exit-ms", "500")
    assert w.wait() == 64, w
    assert "--agent" in w.stderr()
    assert ctl("list", "--type", "status", "--json").json()["count"] == 0


# -- signals and broken pipes -------------------------------------------------------------------


def test_sigint_exits_130(ctl, daemon, spawn) -> None:
    w = spawn("--agent", "bob", "--json", "--idle-exit-ms", "20000")
    w.wait_armed()
    w.proc.send_signal(signal.SIGINT)
    assert w.wait() == 130, w
    assert "Traceback" not in w.stderr()


def test_sigint_after_hits_in_follow_exits_130_not_0(ctl, daemon, spawn) -> None:
    """Reference §3.4: an interrupt exits 130, never 0, even after matches were printed."""
    state = daemon.home / "watch" / "bob.json"
    w = spawn("--agent", "bob", "--follow", "--json", "--idle-exit-ms", "20000")
    w.wait_armed()
    e = to_bob(ctl)
    wait_until(lambda: w.stdout().count("\n") >= 1, what="first batch")
    # Printed, then checkpointed: a Ctrl-C between the two replays the batch on the next watch
    # (at least once), which is not what this test is about.
    wait_until(lambda: state.exists() and state_of(state)["cursor"] == e["id"], what="cursor saved")
    w.proc.send_signal(signal.SIGINT)
    assert w.wait() == 130, w
    assert state_of(state)["cursor"] == e["id"]


def test_sigint_says_stopped_on_stderr(ctl, daemon, spawn) -> None:
    """Reference §3.4: stderr gets "Stopped." on interrupt (cli.main means to write it)."""
    w = spawn("--agent", "bob", "--idle-exit-ms", "20000")
    w.wait_armed()
    w.proc.send_signal(signal.SIGINT)
    assert w.wait() == 130, w
    assert "Stopped." in w.stderr(), w


def test_broken_pipe_does_not_advance_cursor_and_event_is_replayed(ctl, daemon, spawn) -> None:
    tip = to_bob(ctl, body="already seen")
    state = daemon.home / "watch" / "bob.json"
    w = spawn("--agent", "bob", "--json", "--idle-exit-ms", "20000", stdout_pipe=True)
    w.wait_armed()
    wait_until(state.exists, what="initial checkpoint")
    assert w.proc.stdout is not None
    w.proc.stdout.close()  # the reader goes away before the event arrives
    lost = to_bob(ctl, body="must not be lost")
    rc = w.wait()
    assert rc != 0, w
    assert state_of(state)["cursor"] == tip["id"], (state_of(state), w)
    assert state_of(state)["cursor"] != lost["id"]

    again = spawn("--agent", "bob", "--json", "--idle-exit-ms", "10000")
    assert again.wait() == 0, again
    assert [e["id"] for e in again.json()["events"]] == [lost["id"]]
    assert state_of(state)["cursor"] == lost["id"]


def test_broken_pipe_in_follow_keeps_last_written_cursor(ctl, daemon, spawn) -> None:
    state = daemon.home / "watch" / "bob.json"
    w = spawn("--agent", "bob", "--follow", "--json", "--idle-exit-ms", "20000", stdout_pipe=True)
    w.wait_armed()
    first = to_bob(ctl, body="first")
    assert w.proc.stdout is not None
    line = w.proc.stdout.readline()  # blocks until the first batch is written (bounded by the idle exit)
    assert json.loads(line)["cursor"] == first["id"]
    wait_until(lambda: state_of(state)["cursor"] == first["id"], what="checkpoint of the first batch")
    w.proc.stdout.close()
    second = to_bob(ctl, body="second")
    assert w.wait() != 0, w
    assert state_of(state)["cursor"] == first["id"]
    again = spawn("--agent", "bob", "--json", "--idle-exit-ms", "10000")
    assert again.wait() == 0, again
    assert [e["id"] for e in again.json()["events"]] == [second["id"]]


# -- push, restart ------------------------------------------------------------------------------


def test_event_is_pushed_promptly(ctl, daemon, spawn) -> None:
    """Behaviour, not a benchmark: the wake-up is pushed, so it is well inside the idle window."""
    w = spawn("--agent", "bob", "--json", "--idle-exit-ms", "30000")
    w.wait_armed()
    e = to_bob(ctl)
    appended = time.monotonic()
    assert w.wait(timeout=5.0) == 0, w
    assert time.monotonic() - appended < 5.0
    assert w.json()["events"][0]["id"] == e["id"]


def test_watch_survives_daemon_restart(ctl, daemon, spawn) -> None:
    before = to_bob(ctl, body="before")
    state = daemon.home / "watch" / "bob.json"
    w = spawn("--agent", "bob", "--json", "--idle-exit-ms", "20000")
    w.wait_armed()
    wait_until(state.exists, what="initial checkpoint")
    assert daemon.stop() == 0, daemon.log()
    wait_until(lambda: "palaced went away" in w.stderr() or not w.running(), what="the watch to notice")
    assert w.running(), w
    daemon.start()
    after = to_bob(ctl, body="after restart")
    assert w.wait() == 0, w
    assert [e["id"] for e in w.json()["events"]] == [after["id"]]
    assert before["id"] not in w.stdout()
    assert state_of(state)["cursor"] == after["id"]


def test_daemon_gone_until_idle_deadline_exits_2(ctl, daemon, spawn) -> None:
    e = to_bob(ctl)
    state = daemon.home / "watch" / "bob.json"
    w = spawn("--agent", "bob", "--json", "--idle-exit-ms", "1500")
    w.wait_armed()
    assert daemon.stop() == 0, daemon.log()
    assert w.wait() == 2, w
    doc = w.json()
    assert doc["timed_out"] is True and doc["cursor"] == e["id"]
    assert state_of(state)["cursor"] == e["id"]


def test_daemon_not_running_exits_3(short_tmp) -> None:
    home = short_tmp / "nohome"
    w = WatchProc(home, ("--agent", "bob", "--idle-exit-ms", "500"), short_tmp, 99)
    try:
        assert w.wait() == 3, w
        assert "palaced" in w.stderr()
        assert not (home / "watch" / "bob.json").exists()
    finally:
        w.close()


def test_human_output_on_hit(ctl, daemon, spawn) -> None:
    w = spawn("--agent", "bob", "--idle-exit-ms", "20000")
    w.wait_armed()
    e = to_bob(ctl, body="plain text please")
    assert w.wait() == 0, w
    lines = w.stdout().splitlines()
    assert lines[0] == "1 event(s):"
    assert e["id"] in lines[1] and "alice->bob" in lines[1] and "plain text please" in lines[1]
    assert "Watching bob" in w.stderr()


# -- argument validation ------------------------------------------------------------------------


def test_negative_idle_exit_ms_is_rejected(ctl, daemon, spawn) -> None:
    """§6.5: a negative idle value once meant 'forever'."""
    w = spawn("--agent", "bob", "--idle-exit-ms", "-1")
    assert w.wait() == 1, w
    assert "--idle-exit-ms" in w.stderr()
    assert not (daemon.home / "watch").exists()


def test_blank_agent_is_rejected(ctl, daemon, spawn) -> None:
    w = spawn("--agent", "  ", "--idle-exit-ms", "500")
    assert w.wait() == 1, w
    assert "agent identity is required" in w.stderr()


def test_bad_limit_is_rejected(ctl, daemon, spawn) -> None:
    w = spawn("--agent", "bob", "--limit", "0", "--idle-exit-ms", "500")
    assert w.wait() == 1, w
    assert "--limit" in w.stderr()


def test_unknown_option_is_usage_error(ctl, daemon, spawn) -> None:
    w = spawn("--agent", "bob", "--no-such-flag")
    assert w.wait() == 64, w


def test_repeated_filter_values_are_validated_and_nothing_written(ctl, daemon, spawn) -> None:
    """§6.5: a repeated --type once skipped validation."""
    w = spawn("--agent", "bob", "--type", "note", "--type", "Bad Type!", "--idle-exit-ms", "500")
    assert w.wait() == 1, w
    assert "Bad Type!" in w.stderr() and "type" in w.stderr()
    assert not (daemon.home / "watch").exists()
