"""Replication between real daemons over mutual TLS on loopback, checked with palacectl as an agent
would: pairs and lines converge, partitions heal, a killed receiver loses and duplicates nothing,
artifacts arrive byte-identical, a watcher on one machine wakes for an append on another."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from tests.fleet import (
    append,
    bodies,
    connected,
    ctl_json,
    event_count,
    fork_an_origin,
    listen_address,
    peer_id,
    seed_bulk,
    wait_converged,
    wait_until,
)
from tests.helpers import PYTHON, run_ctl


def test_a_pair_converges_both_ways(fleet):
    a = fleet.found("alpha")
    append(a.home, "before the join")
    b = fleet.join("beta")
    append(b.home, "from beta")
    append(a.home, "from alpha")
    wait_converged(a, b)
    assert bodies(a.home) == bodies(b.home) == ["before the join", "from alpha", "from beta"]
    # Events keep their ids everywhere; each replica numbers arrivals with its own seq.
    ids_a = {e["id"] for e in ctl_json(a.home, "list")["events"]}
    assert ids_a == {e["id"] for e in ctl_json(b.home, "list")["events"]}
    # Converged is both holding the same; "live" also needs alpha's receipt of beta's last event
    # (it follows alpha's WAL sync), which may come a moment later.
    peers = wait_until(lambda: [p for p in ctl_json(b.home, "peers")["peers"] if p["state"] == "live"],
                       "beta's link to alpha to settle")
    assert [(p["name"], p["state"], p["role"]) for p in peers] == [("alpha", "live", "member")]
    assert peers[0]["we_lack"] == 0 and peers[0]["they_lack"] == 0 and "invite" in peers[0]["found_by"]


def test_an_append_on_one_machine_wakes_a_watcher_on_another(fleet):
    a = fleet.found("alpha")
    b = fleet.join("beta")
    wait_until(lambda: connected(a.home), "the link")
    watch = subprocess.Popen([PYTHON, "-m", "palacectl", "--home", str(b.home), "watch", "--agent", "bob", "--json",
                              "--idle-exit-ms", "30000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: ctl_json(b.home, "who")["local_count"] == 1, "the watcher on beta")
        sent = append(a.home, "wake up, bob", to_agent="bob", from_agent="alice")
        out, err = watch.communicate(timeout=30)
    finally:
        watch.kill()
    assert watch.returncode == 0, err
    assert [e["id"] for e in json.loads(out)["events"]] == [sent["id"]]


def test_who_shows_watchers_of_the_whole_palace(fleet):
    a = fleet.found("alpha")
    b = fleet.join("beta")
    watch = subprocess.Popen([PYTHON, "-m", "palacectl", "--home", str(b.home), "watch", "--agent", "bob",
                              "--follow", "--state-file", ""], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def remote_bob():
            return [w for w in ctl_json(a.home, "who")["watchers"] if w["agent"] == "bob" and not w["local"]]

        seen = wait_until(remote_bob, "bob's watcher in alpha's who")
        assert seen[0]["daemon"]["name"] == "beta" and seen[0]["daemon_silent"] is False
        human = run_ctl(a.home, "who").stdout
        assert "bob" in human and "beta" in human
    finally:
        watch.kill()
        watch.wait()
    wait_until(lambda: not [w for w in ctl_json(a.home, "who")["watchers"] if w["agent"] == "bob"],
               "bob's watcher to disappear from alpha's who")


def test_a_line_of_three_converges_through_the_middle(fleet):
    # The ends dial no gossiped address: on one loopback they would otherwise meet (issue 45 §1).
    a = fleet.found("alpha", extra_args=["--no-gossip-dial"])
    b = fleet.enrol_offline("beta").start()
    c = fleet.enrol_offline("gamma", extra_args=["--no-gossip-dial"]).start()
    ctl_json(b.home, "peers", "add", listen_address(a.home))
    ctl_json(c.home, "peers", "add", listen_address(b.home))
    append(a.home, "from alpha")
    append(c.home, "from gamma")
    wait_converged(a, b, c)
    assert bodies(a.home) == bodies(c.home) == ["from alpha", "from gamma"]
    # The ends never met: everything went through beta.
    assert peer_id(c.home) not in connected(a.home) and peer_id(a.home) not in connected(c.home)
    names = {p["name"]: p for p in ctl_json(a.home, "peers")["peers"]}
    assert names["gamma"]["found_by"] == ["relay"] and names["beta"]["state"] == "live"


def test_a_partition_heals_to_identical_digests(fleet):
    a, b, c = fleet.ends_through_middle()
    append(a.home, "before")
    wait_converged(a, b, c)
    with fleet.partitioned(b):
        for i in range(20):
            append(a.home, f"alpha {i}")
            append(c.home, f"gamma {i}")
        # alpha: its registration of "alpha", "before", 20 more; gamma also registered "gamma".
        assert event_count(a.home) == 22 and event_count(c.home) == 23
    final = wait_converged(a, b, c)
    assert final["events"] == 43


@pytest.mark.slow
def test_a_receiver_killed_mid_catch_up_loses_and_duplicates_nothing(fleet):
    # 20,000: a catch-up of several seconds, so the kill (the moment beta holds its first batch of
    # a few hundred) lands mid-way with a wide margin.
    total = 20_000
    a = fleet.found("alpha")
    seed_bulk(a, total)
    b = fleet.enrol_offline("beta").start()
    ctl_json(b.home, "peers", "add", listen_address(a.home))
    wait_until(lambda: 0 < event_count(b.home), "the catch-up to start", timeout=30)
    b.kill9()
    b.start()
    partial = event_count(b.home)
    assert 0 < partial < total, "the kill must land mid catch-up"
    final = wait_converged(a, b, timeout=90)
    # Same digest and the same number of rows: nothing lost, nothing stored twice (the seed, and
    # the registration of the agent it wrote as).
    assert final["events"] == total + 1 and event_count(b.home) == total + 1


def test_a_20_mb_artifact_arrives_byte_identical(fleet, short_tmp):
    a = fleet.found("alpha")
    b = fleet.join("beta")
    content = os.urandom(20 * 1024 * 1024)
    path = short_tmp / "blob.bin"
    path.write_bytes(content)
    record = ctl_json(a.home, "artifact", "put", "--kind", "file", "--created-by", "alice", "--file", str(path))
    event = append(a.home, "the blob", artifact_id=record["id"])
    wait_until(lambda: run_ctl(b.home, "list", "--type", "note", "--json").json()["count"] == 1, "the event on beta",
               timeout=60)
    listed = ctl_json(b.home, "list", "--type", "note")["events"][0]
    assert listed["id"] == event["id"] and listed["artifact_ids"] == [record["id"]]
    out = short_tmp / "copy.bin"
    ctl_json(b.home, "artifact", "get", record["id"], "--out", str(out))
    assert hashlib.sha256(out.read_bytes()).hexdigest() == hashlib.sha256(content).hexdigest()


def test_append_replicated_returns_once_peers_hold_the_event(fleet):
    a = fleet.found("alpha")
    alone = run_ctl(a.home, "append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "x",
                    "--body", "nobody else", "--replicated", "1", "--timeout-ms", "300", "--json")
    assert alone.returncode == 2 and "only 0 of 1" in alone.stderr
    assert alone.json()["replication"]["timed_out"] is True  # stored locally all the same
    b = fleet.join("beta")
    c = fleet.join("gamma")
    wait_until(lambda: len(connected(a.home)) == 2, "two links on alpha")
    result = run_ctl(a.home, "append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "x",
                     "--body", "durable", "--replicated", "2", "--timeout-ms", "20000", "--json")
    assert result.returncode == 0, result
    replication = result.json()["replication"]
    assert replication["replicated_count"] == 2 and set(replication["replicated"]) == {peer_id(b.home), peer_id(c.home)}
    # The event is already on both: wait --replicated answers at once.
    waited = ctl_json(b.home, "wait", "--replicated", "1", "--event-id", result.json()["id"], "--timeout-ms", "20000")
    assert waited["replicated_count"] >= 1 and waited["timed_out"] is False
    assert bodies(b.home) == bodies(c.home) == ["durable", "nobody else"]


def test_static_peers_are_kept_across_restarts_and_bad_addresses_refused(fleet):
    a = fleet.found("alpha")
    bad = run_ctl(a.home, "peers", "add", "not an address")
    assert bad.returncode == 1 and "HOST:PORT" in bad.stderr and "Traceback" not in bad.stderr
    ctl_json(a.home, "peers", "add", "127.0.0.1:9")  # nothing listens there: shown with its error
    wait_until(lambda: any(p["last_error"] for p in ctl_json(a.home, "peers")["peers"]), "a dial error")
    view = ctl_json(a.home, "peers")["peers"]
    assert view[0]["peer_id"] is None and "refused" in view[0]["last_error"]
    assert a.stop() == 0
    a.start()
    assert [p["addresses"][0]["address"] for p in ctl_json(a.home, "peers")["peers"]] == ["127.0.0.1:9"]
    assert ctl_json(a.home, "peers", "remove", "127.0.0.1:9")["removed"] == "127.0.0.1:9"
    missing = run_ctl(a.home, "peers", "remove", "127.0.0.1:9")
    assert missing.returncode == 1 and "not a static peer" in missing.stderr


def test_a_restarted_daemon_reconnects_to_remembered_addresses(fleet):
    a = fleet.found("alpha")
    b = fleet.join("beta")
    wait_until(lambda: connected(b.home), "the first link")
    a_address = listen_address(a.home)
    assert a.stop() == 0
    # Beta remembers where alpha was; alpha comes back on the same port and beta redials it.
    a.extra_args[a.extra_args.index("127.0.0.1:0")] = a_address
    a.start()
    append(a.home, "after the restart")
    wait_converged(a, b)  # the link came back without mDNS, static peers or a new invite
    # The invite's address (which alpha's own address record names too, once it came: issue 45 §1).
    (source,) = [p["addresses"][0]["source"] for p in ctl_json(b.home, "peers")["peers"]]
    assert "invite" in source.split("/") and set(source.split("/")) <= {"invite", "gossip"}


def test_a_redaction_purges_the_body_on_every_replica_and_late_copies_never_carry_it(fleet):
    a = fleet.found("alpha")
    b = fleet.join("beta")
    secret = "sk-live-0123456789abcdef-do-not-share"
    leaked = append(a.home, f"my key is {secret}")
    wait_converged(a, b)
    ctl_json(a.home, "redact", leaked["id"], "--from-agent", "alpha", "--reason", "pasted a key")
    wait_converged(a, b)
    # A replica that was offline all along catches up from beta, which only has the redacted copy.
    c = fleet.enrol_offline("gamma").start()
    ctl_json(c.home, "peers", "add", listen_address(b.home))
    wait_converged(a, b, c)
    for daemon in (a, b, c):
        event = ctl_json(daemon.home, "list", "--type", "note")["events"][0]
        assert event["id"] == leaked["id"] and event["body_redacted"] is True and event["body"] == ""
        for path in daemon.home.glob("palace.sqlite3*"):
            assert secret.encode() not in path.read_bytes(), path


def test_a_fork_is_refused_kept_as_evidence_and_reported(fleet, short_tmp):
    # A copied home: the same key and origin now run twice (a restored backup, a cloned VM).
    a, b = fork_an_origin(fleet, short_tmp)
    assert "alpha's version of seq 3" not in bodies(b.home)  # the first one stays; the second is refused
    unhealthy = run_ctl(b.home, "status")
    assert "FORKS" in unhealthy.stdout and unhealthy.returncode == 1 and "fork(s) detected" in unhealthy.stdout
    assert "FORK" in run_ctl(b.home, "peers").stdout
    forks = ctl_json(b.home, "peers")["forks"]
    # seq 1: alpha registering "alpha", 2: the shared history; 3: where the two copies parted
    assert forks[0]["origin"] == ctl_json(a.home, "status")["origin"] and forks[0]["origin_seq"] == 3
    doctor = run_ctl(b.home, "doctor")
    assert doctor.returncode == 1 and "forked" in doctor.stdout


def test_doctor_explains_a_healthy_pair_and_an_unreachable_static_peer(fleet):
    a = fleet.found("alpha")
    b = fleet.join("beta")
    wait_until(lambda: connected(a.home), "the link")
    healthy = ctl_json(b.home, "doctor")
    by_name = {c["check"]: c for c in healthy["checks"]}
    assert healthy["ok"] is True and by_name["palace"]["status"] == "ok"
    assert by_name["peers"]["status"] == "ok" and "1 connected" in by_name["peers"]["detail"]
    assert by_name["mdns"]["status"] == "warn" and "peers add" in by_name["mdns"]["detail"]
    assert "loopback only" in by_name["listening"]["detail"]
    ctl_json(b.home, "peers", "add", "127.0.0.1:9")
    wait_until(lambda: run_ctl(b.home, "doctor", "--json").returncode == 1, "doctor to notice the dead static peer")
    text = run_ctl(b.home, "doctor")
    assert text.returncode == 1 and "FAIL  static peer 127.0.0.1:9: unreachable: connection refused" in text.stdout
