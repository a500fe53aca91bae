"""Real discovery: daemons in two network namespaces created by the test (veth between them), mDNS
on, no static peers and no invite address, find each other, connect over mutual TLS and replicate;
a daemon of another palace on the same link is ignored. Never runs mDNS in the root namespace."""

from __future__ import annotations

import json

import pytest

from tests.fleet import Fleet, append, connected, ctl_json, peer_id, wait_converged, wait_until
from tests.helpers import run_ctl
from tests.netns import needs_namespaces, netns_pair

SUBNET = "10.213.79"


@pytest.mark.slow
@needs_namespaces
def test_daemons_find_each_other_by_mdns_and_replicate(daemon_factory, short_tmp):
    with netns_pair("f", SUBNET) as (one, two):
        fleet = Fleet(daemon_factory, short_tmp)
        in_one = {"prefix": ["ip", "netns", "exec", one], "network_args": ["--listen", "0.0.0.0:7437"]}
        in_two = {"prefix": ["ip", "netns", "exec", two], "network_args": ["--listen", "0.0.0.0:7437"]}
        a = fleet.start("alpha", **in_one)
        ctl_json(a.home, "init", "--palace-name", "fleet-test", "--daemon-name", "alpha")
        fleet.founder = a
        b = fleet.enrol_offline("beta")  # what join writes, but no inviter address to dial
        b.prefix, b.extra_args = in_two["prefix"], ["--listen", "0.0.0.0:7437"]
        b.start()
        # A daemon of another palace beside beta, on another port: heard by mDNS, never dialled.
        stranger = fleet.start("stranger", prefix=in_two["prefix"], network_args=["--listen", "0.0.0.0:7438"])
        ctl_json(stranger.home, "init", "--palace-name", "elsewhere")
        try:
            wait_until(lambda: connected(a.home) == [peer_id(b.home)], "alpha and beta to connect by mDNS")
            sent = append(a.home, "found you")
            append(b.home, "and you")
            wait_converged(a, b)
            # Alpha's note is on beta (before or after beta's own: the two were written a moment apart).
            assert sent["id"] in [e["id"] for e in ctl_json(b.home, "list", "--type", "note")["events"]]
            # Beta may still be announcing itself (mDNS "starting") when alpha has already heard it.
            wait_until(lambda: ctl_json(b.home, "peers")["mdns"] == "on", "beta's mDNS to be on")
            view = ctl_json(b.home, "peers")
            # Found by mDNS (and, when alpha's dial won the tie-break, also seen as incoming).
            assert [(p["name"], "mdns" in p["found_by"], p["addresses"][0]["address"]) for p in view["peers"]] == [
                ("alpha", True, f"{SUBNET}.1:7437")]
            assert ctl_json(stranger.home, "peers")["peers"] == []
            assert connected(stranger.home) == []
            # A peer that simply stopped is not a multicast problem: doctor says what it knows
            # (issue 26: it blamed multicast). Beta still hears the stranger, so wait for alpha's goodbye.
            a.stop()

            def mdns_check() -> dict:
                doctor = run_ctl(b.home, "doctor", "--json")
                return next(c for c in json.loads(doctor.stdout)["checks"] if c["check"] == "mdns")

            wait_until(lambda: "known peer" in mdns_check()["detail"], "beta's doctor to notice alpha stopped")
            check = mdns_check()
            assert check["status"] == "warn"
            assert "none of the 1 known peer(s) (alpha) is advertising: they are stopped" in check["detail"]
        finally:
            for daemon in (a, b, stranger):
                daemon.stop()
