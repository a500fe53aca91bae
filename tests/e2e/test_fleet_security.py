"""Who may take part, enforced by every receiver: observers read and never write, strangers and
daemons that never joined cannot connect, forged or altered events are refused, a revoked peer is
cut off everywhere — also through a third peer that still knew it."""

from __future__ import annotations

import dataclasses
import socket
import ssl

import pytest

from palace_proto.envelope import GENESIS_HASH
from tests.fleet import append, bodies, connected, ctl_json, listen_address, peer_id, wait_converged, wait_until
from tests.helpers import run_ctl
from tests.hostile_peer import HostilePeer, issue_member, sealed


def origin_of(home):
    return ctl_json(home, "status")["origin"]


def palace_of(home):
    return ctl_json(home, "status")["palace"]["palace_id"]


def test_an_observer_receives_everything_and_cannot_write(fleet):
    a = fleet.found("alpha")
    append(a.home, "for everyone")
    o = fleet.join("watcher", role="observer")
    wait_converged(a, o)
    assert bodies(o.home) == ["for everyone"]
    refused = run_ctl(o.home, "append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "o",
                      "--body", "let me in")
    assert refused.returncode == 1 and "read-only observer" in refused.stderr
    event_id = ctl_json(o.home, "list")["events"][0]["id"]
    assert run_ctl(o.home, "ack", event_id, "--from-agent", "o").returncode == 1
    assert run_ctl(o.home, "redact", event_id, "--from-agent", "o").returncode == 1
    assert ctl_json(o.home, "status")["palace"]["role"] == "observer"
    assert [p["role"] for p in ctl_json(a.home, "peers")["peers"]] == ["observer"]
    # It keeps receiving.
    append(a.home, "later")
    wait_converged(a, o)


async def test_members_refuse_events_signed_by_an_observers_key(fleet, short_tmp):
    a = fleet.found("alpha")
    creds = issue_member(a.home, short_tmp / "creds", "sneaky", role="observer")
    ca_pem = (a.home / "palace" / "ca.crt").read_bytes()
    peer = await HostilePeer.connect(listen_address(a.home), creds, ca_pem, palace_id=palace_of(a.home),
                                     role="observer", name="sneaky")
    try:
        await peer.handshake()
        await peer.push(sealed(creds.key, creds.origin, body="an observer writing"))
        await peer.drain(1.5)
    finally:
        await peer.aclose()
    assert bodies(a.home) == []
    assert "rejected 1 event(s)" in a.log()


async def test_forged_and_altered_events_from_a_peer_are_refused(fleet, short_tmp):
    a = fleet.found("alpha")
    append(a.home, "genuine")
    creds = issue_member(a.home, short_tmp / "creds", "mallory")
    key, own = creds.key, creds.origin
    ca_pem = (a.home / "palace" / "ca.crt").read_bytes()
    peer = await HostilePeer.connect(listen_address(a.home), creds, ca_pem, palace_id=palace_of(a.home),
                                     name="mallory")
    try:
        await peer.handshake()
        good = sealed(key, own, body="honest")
        altered_body = dataclasses.replace(sealed(key, own, body="original"), body="altered in transit")
        bad_signature = dataclasses.replace(good, signature=bytes(64))
        impersonation = sealed(key, origin_of(a.home), seq=2, prev=GENESIS_HASH, body="I am alpha")
        await peer.push(altered_body)
        await peer.push(bad_signature)
        await peer.push(impersonation)
        await peer.drain(1.5)
        assert bodies(a.home) == ["genuine"]
        await peer.push(good)  # the same member's honest event is accepted: the refusals were specific
        await peer.drain(1.5)
        (seen,) = [p for p in ctl_json(a.home, "peers")["peers"] if p["peer_id"] == creds.peer_id]
        assert seen["rejected_events"] == 3 and seen["state"] in ("live", "catching up")
    finally:
        await peer.aclose()
    assert bodies(a.home) == ["genuine", "honest"]
    # Logged once, not once per refusal: a flood of forgeries must not flood the log.
    assert a.log().count("rejected 1 event(s)") == 1


async def test_a_stranger_without_a_certificate_learns_nothing(fleet):
    a = fleet.found("alpha")
    host, port = listen_address(a.home).rsplit(":", 1)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            with ctx.wrap_socket(raw) as tls:
                tls.sendall(b"hello?")
                assert tls.recv(100) == b""  # TLS 1.3: the refusal arrives on first read
                raise ConnectionError("closed without a word")
    wait_until(lambda: "refused a connection" in a.log(), "the refusal in alpha's log", timeout=10)


@pytest.mark.slow
def test_daemons_of_another_palace_cannot_connect(fleet):
    a = fleet.found("alpha")
    append(a.home, "private")
    other = fleet.start("other")
    ctl_json(other.home, "init", "--palace-name", "elsewhere")
    append(other.home, "theirs")
    ctl_json(other.home, "peers", "add", listen_address(a.home))
    wait_until(lambda: any(p["last_error"] for p in ctl_json(other.home, "peers")["peers"]), "the dial error")
    error = ctl_json(other.home, "peers")["peers"][0]["last_error"]
    assert "TLS" in error or "closed the connection" in error, error
    wait_until(lambda: "refused a connection" in a.log(), "alpha logging the stranger")
    assert bodies(a.home) == ["private"] and bodies(other.home) == ["theirs"]
    assert connected(a.home) == [] and connected(other.home) == []


def test_a_daemon_that_never_joined_has_no_network_at_all(fleet):
    lone = fleet.start("lone")
    assert ctl_json(lone.home, "status")["network"] is None
    refused = run_ctl(lone.home, "peers", "add", "127.0.0.1:7437")
    assert refused.returncode == 1 and "has not joined a palace" in refused.stderr
    doctor = run_ctl(lone.home, "doctor")
    assert doctor.returncode == 1 and "palacectl init" in doctor.stdout


def test_invites_are_single_use_expire_and_bad_codes_are_explained(fleet):
    a = fleet.found("alpha")
    code = fleet.invite()
    b = fleet.start("beta")
    ctl_json(b.home, "join", code, "--name", "beta")
    c = fleet.start("gamma")
    reused = run_ctl(c.home, "join", code)
    assert reused.returncode == 1 and "already used or has expired" in reused.stderr
    damaged = run_ctl(c.home, "join", code[:-5])
    assert damaged.returncode == 1 and "damaged" in damaged.stderr and "Traceback" not in damaged.stderr
    assert run_ctl(c.home, "join", "hello").returncode == 1
    assert run_ctl(a.home, "invite", "--ttl", "soon").returncode == 64
    not_founder = run_ctl(b.home, "invite")
    assert not_founder.returncode == 1 and "palace key" in not_founder.stderr
    assert ctl_json(c.home, "status")["palace"] is None  # nothing half-written by the failures


def test_a_revoked_peer_is_cut_off_everywhere(fleet):
    a = fleet.found("alpha")
    b = fleet.join("beta")
    c = fleet.join("gamma")
    # beta also knows gamma directly: the "third peer that still knows it".
    ctl_json(b.home, "peers", "add", listen_address(c.home))
    wait_until(lambda: peer_id(c.home) in connected(b.home), "beta and gamma linked")
    append(b.home, "before the revocation")
    wait_converged(a, b, c)
    assert run_ctl(b.home, "revoke", peer_id(c.home)).returncode == 1  # only the palace key revokes
    revoked = ctl_json(a.home, "revoke", peer_id(b.home))
    assert revoked["revoked"] == peer_id(b.home)
    b_id = peer_id(b.home)
    wait_until(lambda: b_id not in connected(a.home) and b_id not in connected(c.home), "beta dropped by everyone")
    append(b.home, "after the revocation")
    append(a.home, "members only")
    wait_until(lambda: "members only" in bodies(c.home), "alpha's event at gamma")
    for home in (a.home, c.home):
        assert "after the revocation" not in bodies(home)
        assert "before the revocation" in bodies(home)  # what beta wrote while a member stays
        states = {p["peer_id"]: p["state"] for p in ctl_json(home, "peers")["peers"]}
        assert states[b_id] == "revoked"
    # It cannot come back: both refuse it at the handshake.
    assert b_id not in connected(a.home) and b_id not in connected(c.home)
    wait_until(lambda: "refused revoked peer" in a.log() or "refused revoked peer" in c.log(),
               "a refused reconnection")
    again = run_ctl(a.home, "revoke", b_id)
    assert again.returncode == 1 and "already revoked" in again.stderr


def test_a_taken_peer_port_stops_the_daemon_with_one_clear_line(fleet):
    a = fleet.found("alpha")
    b = fleet.enrol_offline("beta")
    b.extra_args[b.extra_args.index("127.0.0.1:0")] = listen_address(a.home)
    b.start(wait=False)
    assert b.proc.wait(timeout=30) == 1
    assert b.stop() == 1  # (closes its log file)
    log = b.log()
    assert "cannot listen for peers on 127.0.0.1:" in log and "Traceback" not in log, log
