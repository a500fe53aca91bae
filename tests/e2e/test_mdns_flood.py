"""mDNS is open to anyone on the LAN, and the palace id in its records is public (issue 11,
finding 8): a rogue announcing our palace with hundreds of addresses, or with peer ids that are
not fingerprints, must not make a daemon dial without bound, track every name, or flood its log.
The rogue runs in a network namespace beside the daemon's (never in the root namespace)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from palaced.peers.dialing import MAX_TARGETS
from tests.fleet import Fleet, ctl_json, wait_until
from tests.helpers import PYTHON
from tests.netns import needs_namespaces, netns_pair

SUBNET = "10.213.81"
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.transport_fixed
@needs_namespaces
def test_an_mdns_flood_is_bounded_and_logged_once(daemon_factory, short_tmp):
    with netns_pair("r", SUBNET) as (one, two):
        fleet = Fleet(daemon_factory, short_tmp)
        a = fleet.start("alpha", prefix=["ip", "netns", "exec", one], network_args=["--listen", "0.0.0.0:7437"])
        ctl_json(a.home, "init", "--palace-name", "flood-test", "--daemon-name", "alpha")
        palace = ctl_json(a.home, "status")["palace"]["palace_id"]
        rogue = subprocess.Popen(["ip", "netns", "exec", two, PYTHON, "-m", "tests.mdns_rogue", palace,
                                  str(MAX_TARGETS + 80), "6"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, cwd=REPO)
        try:
            assert rogue.stdout.readline().strip() == b"registered", rogue.stderr.read()[-2000:]

            def hits():
                return ctl_json(a.home, "status")["network"]["limits"]

            wait_until(lambda: hits().get("dial_targets") and hits().get("mdns_malformed"),
                       "alpha to hit the dial-target bound and ignore the malformed records", timeout=60)
            addresses = [addr for p in ctl_json(a.home, "peers")["peers"] for addr in p["addresses"]]
            assert len(addresses) <= MAX_TARGETS
            log = a.log()
            assert log.count("ignoring mDNS sightings") == 1 and log.count("is not a fingerprint") == 1
            assert "\x1b" not in log  # the rogue's escape sequence never reaches the log raw
            assert ctl_json(a.home, "status")["events"] == 0 and a.running
        finally:
            rogue.communicate(timeout=30)  # closes its stdin (it stops) and reads its pipes to the end
            a.stop()
