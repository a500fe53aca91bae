"""Daemon names, end to end (issue 47 §1.5): two machines cloned from one image share a hostname,
and were told apart only by fingerprint in ``peers``, ``agents`` and the Fleet page. A daemon that
joins under a hostname another daemon bears now takes a name of its own; a ``--daemon-name``
another daemon bears is refused; names that two daemons share anyway (a palace joined before)
are shown with each one's short id. The option is spelled ``--daemon-name`` on init and join."""

from __future__ import annotations

import socket
import subprocess

import pytest

from palace_proto.fleet import derived_daemon_name
from tests.dashboard import DashboardProcess
from tests.fleet import api, append, ctl_json, listen_address, peer_id, wait_until
from tests.helpers import PYTHON, run_ctl

pytestmark = pytest.mark.transport_fixed  # about enrolment and names: the local API's transport plays no part


def test_two_daemons_joining_under_one_hostname_get_names_that_tell_them_apart(fleet):
    """Guards §1.5: the second clone joins as its hostname plus a piece of its own peer id, says
    so, and ``peers`` and ``agents`` name the two apart."""
    alpha = fleet.found("alpha")
    host = socket.gethostname()
    first = fleet.start("clone-1")
    joined = ctl_json(first.home, "join", fleet.invite())
    assert joined["name"] == host and "renamed_from" not in joined
    second = fleet.start("clone-2")
    result = run_ctl(second.home, "join", fleet.invite())
    assert result.returncode == 0, result
    derived = derived_daemon_name(host, peer_id(second.home))
    assert f"({derived})" in result.stdout
    assert result.stderr.strip() == (f"This daemon is named {derived}: another daemon of the palace is named "
                                     f"{host} already.")
    assert ctl_json(second.home, "status")["palace"]["name"] == derived

    for home, agent in ((first.home, "clone1-claude"), (second.home, "clone2-claude")):
        append(home, "hello", from_agent=agent)
    names = wait_until(lambda: {p["name"] for p in ctl_json(alpha.home, "peers")["peers"]} == {host, derived} or None,
                       "both clones in alpha's peers")
    assert names
    peers_text = run_ctl(alpha.home, "peers").stdout
    assert f"{host} {peer_id(first.home)}" in peers_text and f"{derived} {peer_id(second.home)}" in peers_text

    def roster():
        agents = {a["agent"]: a for a in ctl_json(alpha.home, "agents")["agents"]}
        return agents if {"clone1-claude", "clone2-claude"} <= agents.keys() else None

    agents = wait_until(roster, "both clones' agents in alpha's roster")
    assert (agents["clone1-claude"]["daemon_name"], agents["clone2-claude"]["daemon_name"]) == (host, derived)
    assert (agents["clone1-claude"]["daemon_label"], agents["clone2-claude"]["daemon_label"]) == (host, derived)
    lines = {line.split("\t")[0]: line.split("\t")[2] for line in run_ctl(alpha.home, "agents").stdout.splitlines()}
    assert lines["clone1-claude"] != lines["clone2-claude"] and derived in lines["clone2-claude"]


def test_a_daemon_name_another_daemon_bears_is_refused_and_the_invite_stays_usable(fleet):
    """Guards §1.5: ``--daemon-name`` asks for that name, so a taken one (in any case) is refused in
    one line that says what to pass; the invite is not spent by the refusal."""
    fleet.found("alpha")
    fleet.join("beta")
    gamma = fleet.start("gamma")
    code = fleet.invite()
    refused = run_ctl(gamma.home, "join", code, "--daemon-name", "BETA")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused
    assert "the daemon name 'BETA' is taken" in refused.stderr and "--daemon-name NAME" in refused.stderr
    assert ctl_json(gamma.home, "join", code, "--daemon-name", "gamma")["name"] == "gamma"


def test_the_daemons_name_is_spelled_daemon_name_on_init_and_join(daemon):
    """Guards §1.5: ``--name`` meant the palace on init and the daemon on join. Help shows
    ``--palace-name`` and ``--daemon-name``; ``init --name`` is refused naming both; on join, where
    it can mean only the daemon, the old spelling still works (hidden)."""
    init_help, join_help = run_ctl(daemon.home, "init", "--help").stdout, run_ctl(daemon.home, "join", "--help").stdout
    assert "--palace-name" in init_help and "--daemon-name" in init_help and "--name " not in init_help
    assert "--daemon-name" in join_help and "--name " not in join_help
    refused = run_ctl(daemon.home, "init", "--name", "shop")
    assert refused.returncode == 64 and refused.stderr.count("\n") == 1, refused
    assert "--palace-name" in refused.stderr and "--daemon-name" in refused.stderr
    created = ctl_json(daemon.home, "init", "--palace-name", "shop", "--daemon-name", "mac")
    assert (created["palace_name"], created["name"]) == ("shop", "mac")


def test_daemons_that_share_a_name_are_shown_with_their_short_ids(fleet):
    """Guards §1.5 for palaces joined before names were made distinct: two daemons named ``vm``
    are ``vm (SHORTID)`` where a name stands alone (who, agents' watchers, the Fleet page)."""
    alpha = fleet.found("alpha")
    clones = [fleet.enrol_offline(f"vm{i}", daemon_name="vm").start() for i in (1, 2)]
    for clone in clones:
        ctl_json(clone.home, "peers", "add", listen_address(alpha.home))
    expected = {peer_id(c.home): f"vm ({peer_id(c.home)[:7]})" for c in clones}
    watches = [subprocess.Popen([PYTHON, "-m", "palacectl", "--home", str(c.home), "watch", "--agent", f"vm{i}-bot",
                                 "--follow", "--state-file", ""], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for i, c in enumerate(clones, 1)]
    try:
        def remote():
            seen = [w for w in ctl_json(alpha.home, "who")["watchers"] if not w["local"]]
            return seen if len(seen) == 2 else None

        seen = wait_until(remote, "both clones' watchers in alpha's who")
        assert {w["daemon"]["peer_id"]: w["daemon"]["label"] for w in seen} == expected
        who_text = run_ctl(alpha.home, "who").stdout
        assert all(label in who_text for label in expected.values()), who_text
        agents = {a["agent"]: a for a in ctl_json(alpha.home, "agents")["agents"]}
        assert {tuple(agents[f"vm{i}-bot"]["watching_on"]) for i in (1, 2)} == {(v,) for v in expected.values()}
        ui = DashboardProcess(alpha.home)
        try:
            def clones_shown():
                shown = [n for n in ui.get_json("/api/fleet")["nodes"] if n.get("name") == "vm"]
                return shown if len(shown) == 2 else None

            nodes = wait_until(clones_shown, "both clones on the Fleet page")
            assert {n["peer_id"]: n["label"] for n in nodes} == expected
            assert [n["label"] for n in ui.get_json("/api/fleet")["nodes"] if n["self"]] == ["alpha"]
        finally:
            assert ui.stop() == 0
    finally:
        for watch in watches:
            watch.kill()
            watch.wait()
    assert api(alpha.home, "status")["palace"]["name"] == "alpha"

