"""`palacectl init`: a new palace with this daemon as its first member, kept across restarts."""

from __future__ import annotations

import datetime
import stat
import subprocess

from palace_proto.pki import verify_member_certificate
from tests.helpers import PYTHON, run_ctl


def test_init_creates_a_palace_and_status_reports_it(ctl, daemon):
    before = ctl("status", "--json").json()
    assert before["palace"] is None
    assert "palacectl init" in ctl("status").stdout
    created = ctl("init", "--palace-name", "lab", "--json")
    assert created.returncode == 0, created
    palace = created.json()
    assert palace["palace_id"].startswith("pal_") and palace["palace_name"] == "lab" and palace["role"] == "member"
    assert palace["peer_id"] == before["fingerprint"] and palace["can_invite"] is True
    assert ctl("status", "--json").json()["palace"]["palace_id"] == palace["palace_id"]
    folder = daemon.home / "palace"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "ca.key").stat().st_mode) == 0o600
    cert = verify_member_certificate((folder / "ca.crt").read_bytes(), (folder / "member.crt").read_bytes(),
                                     datetime.datetime.now(datetime.UTC))
    assert cert.peer_id == palace["peer_id"] and cert.palace_id == palace["palace_id"]


def test_a_daemon_belongs_to_one_palace(ctl):
    assert ctl("init", "--json").returncode == 0
    again = ctl("init", "--palace-name", "second")
    assert again.returncode == 1 and "already belongs to palace" in again.stderr


def test_membership_survives_a_restart(daemon_factory, home):
    d = daemon_factory(home)
    palace_id = run_ctl(home, "init", "--json").json()["palace_id"]
    assert d.stop() == 0
    d.start()
    assert run_ctl(home, "status", "--json").json()["palace"]["palace_id"] == palace_id


def test_damaged_membership_refuses_to_start_with_a_clear_message(daemon_factory, home):
    d = daemon_factory(home)
    assert run_ctl(home, "init").returncode == 0
    assert d.stop() == 0
    (home / "palace" / "member.crt").write_bytes(b"not a certificate")
    proc = subprocess.run([PYTHON, "-m", "palaced", "--home", str(home)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "palace membership" in proc.stderr and "Traceback" not in proc.stderr
