"""Backups that cannot fork the log: ``palacectl backup`` copies a running daemon's database
consistently (writes go on meanwhile); ``palacectl restore`` puts a copy into a stopped home and
retires the copy's origin, so the restored replica writes as a new origin, takes back from its
peers what it wrote after the backup, and the fleet converges with no fork reported."""

from __future__ import annotations

import stat
import threading

import apsw

from tests.fleet import append, connected, ctl_json, digest, peer_id, wait_converged, wait_until
from tests.helpers import run_ctl


def _events_in(path) -> int:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        return conn.execute("SELECT count(*) FROM events").fetchone()[0]
    finally:
        conn.close()


def test_backup_is_a_consistent_private_copy_taken_while_writes_go_on(ctl, daemon, tmp_path):
    for i in range(20):
        append(daemon.home, f"before the backup {i}")
    stop = threading.Event()

    def keep_writing():
        i = 0
        while not stop.is_set():
            append(daemon.home, f"during the backup {i}")
            i += 1

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        target = tmp_path / "palace-backup.sqlite3"
        result = ctl("backup", str(target), "--json")
    finally:
        stop.set()
        writer.join()
    assert result.returncode == 0, result
    made = result.json()
    assert made["path"] == str(target) and made["events"] >= 20 and _events_in(target) == made["events"]
    assert made["bytes"] == target.stat().st_size and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert not list(tmp_path.glob(".*partial"))  # nothing half-written left behind
    # A relative path is the caller's (palacectl's working directory), not the daemon's.
    human = run_ctl(daemon.home, "backup", "again.sqlite3", cwd=tmp_path)
    assert human.returncode == 0 and "Backed up" in human.stdout and (tmp_path / "again.sqlite3").is_file()


def test_backup_refuses_what_it_must_not_overwrite(ctl, daemon, tmp_path):
    target = tmp_path / "b.sqlite3"
    target.write_bytes(b"precious")
    exists = ctl("backup", str(target))
    assert exists.returncode == 1 and "already exists; pass --force" in exists.stderr
    assert target.read_bytes() == b"precious"
    missing = ctl("backup", str(tmp_path / "no" / "such" / "b.sqlite3"))
    assert missing.returncode == 1 and "does not exist; create it first" in missing.stderr
    live = ctl("backup", str(daemon.home / "palace.sqlite3"), "--force")
    assert live.returncode == 1 and "the live database itself" in live.stderr
    for result in (exists, missing, live):
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_restore_refuses_a_running_daemon_and_files_that_are_not_palace_backups(ctl, daemon, tmp_path):
    backup = tmp_path / "b.sqlite3"
    assert ctl("backup", str(backup)).returncode == 0
    running = ctl("restore", str(backup), "--force")
    assert running.returncode == 1 and "palaced is running" in running.stderr and "stop it first" in running.stderr
    daemon.stop()
    before = {p.name: p.read_bytes() for p in daemon.home.glob("palace.sqlite3*")}
    stranger = tmp_path / "other.sqlite3"
    conn = apsw.Connection(str(stranger))
    conn.execute("CREATE TABLE t(x)")
    conn.close()
    for path, message in ((stranger, "is not a palace database"), (tmp_path / "nope", "is not a file")):
        refused = run_ctl(daemon.home, "restore", str(path), "--force")
        assert refused.returncode == 1 and message in refused.stderr, refused
    damaged = tmp_path / "damaged.sqlite3"
    damaged.write_bytes(backup.read_bytes()[: backup.stat().st_size // 2])
    refused = run_ctl(daemon.home, "restore", str(damaged), "--force")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused
    no_force = run_ctl(daemon.home, "restore", str(backup))
    assert no_force.returncode == 1 and "already holds a log" in no_force.stderr
    assert {p.name: p.read_bytes() for p in daemon.home.glob("palace.sqlite3*")} == before  # untouched


def test_a_restored_replica_writes_as_a_new_origin_and_the_fleet_converges_without_a_fork(fleet, tmp_path):
    alpha = fleet.found("alpha")
    beta = fleet.join("beta")
    for i in range(5):
        append(beta.home, f"beta before the backup {i}")
    wait_converged(alpha, beta)
    old_origin = ctl_json(beta.home, "status")["origin"]
    backup = tmp_path / "beta.sqlite3"
    assert ctl_json(beta.home, "backup", str(backup))["events"] >= 5
    for i in range(5):
        append(beta.home, f"beta after the backup {i}")  # alpha holds these; the backup does not
    wait_converged(alpha, beta)
    assert beta.stop() == 0
    restored = ctl_json(beta.home, "restore", str(backup), "--force")
    assert restored["retired_origin"] == old_origin and restored["kept_previous"]
    beta.start()
    assert ctl_json(beta.home, "status")["origin"] != old_origin  # a new origin: never seq N+1 twice
    wait_until(lambda: peer_id(alpha.home) in connected(beta.home), "beta to reconnect to alpha")
    mine = append(beta.home, "beta after the restore")
    converged = wait_converged(alpha, beta)
    assert converged == digest(beta.home)
    bodies_on_alpha = [e["body"] for e in ctl_json(alpha.home, "list", "--limit", "100")["events"]]
    assert "beta after the backup 4" in bodies_on_alpha and "beta after the restore" in bodies_on_alpha
    assert [e["body"] for e in ctl_json(beta.home, "list", "--limit", "100")["events"]
            if e["origin"] == old_origin][-1] == "beta after the backup 4"  # given back by alpha
    for daemon in (alpha, beta):
        assert ctl_json(daemon.home, "status")["network"]["forks"] == 0
    assert mine["origin"] != old_origin
