"""``palacectl doctor`` against a real daemon (issue 47 §1.6): its own test connection to the
daemon's peer port left a WARNING ("refused a connection … not a member of this palace") in the
daemon's log each time it ran."""

from __future__ import annotations

from tests.fleet import ctl_json, wait_until
from tests.helpers import run_ctl


def test_doctors_own_probe_of_the_peer_port_leaves_no_warning_in_the_log(fleet):
    alpha = fleet.found("alpha")
    wait_until(lambda: "listening for peers" in alpha.log() or None, "alpha listening")
    before = len(alpha.log().splitlines())
    result = run_ctl(alpha.home, "doctor", "--json")
    listening = [c for c in ctl_json(alpha.home, "doctor")["checks"] if c["check"] == "listening"]
    assert result.returncode in (0, 1), result
    assert listening and "accepts connections" in listening[0]["detail"], listening
    logged = alpha.log().splitlines()[before:]
    assert not [line for line in logged if " WARNING " in line or " ERROR " in line], logged
