"""Address gossip on one loopback (issue 45 §1): five daemons, mDNS off, each joined only through
the founder's invite, learn where the others are from their signed address records, link to each
other directly, and keep replicating once the founder stops. (The same across five subnets with no
multicast between them: tests/e2e/test_address_gossip.py, in network namespaces.)"""

from __future__ import annotations

import pytest

from tests.fleet import append, bodies, connected, ctl_json, peer_id, wait_until

pytestmark = pytest.mark.transport_fixed  # about the peer port: the local API's transport plays no part

NAMES = ("alpha", "beta", "gamma", "delta", "epsilon")


def _missing_links(homes: dict) -> dict[str, list[str]]:
    ids = {name: peer_id(home) for name, home in homes.items()}
    missing = {}
    for name, home in homes.items():
        have = set(connected(home))
        lacking = [other for other, pid in ids.items() if other != name and pid not in have]
        if lacking:
            missing[name] = lacking
    return missing


@pytest.mark.slow
def test_a_palace_joined_through_one_invite_meshes_and_outlives_its_inviter(fleet):
    founder = fleet.found("alpha")
    daemons = [founder, *(fleet.join(name) for name in NAMES[1:])]
    homes = {d.home.name: d.home for d in daemons}
    # Without gossip each joiner holds one link, to alpha (the star the issue measured).
    try:
        wait_until(lambda: not _missing_links(homes), "every daemon linked to every other (address gossip)")
    except AssertionError as exc:
        seen = {name: (ctl_json(home, "status")["network"]["addresses"], ctl_json(home, "status")["network"]["limits"])
                for name, home in homes.items()}
        raise AssertionError(f"{exc}; missing: {_missing_links(homes)}; addresses and limits: {seen}") from None
    beta, epsilon = daemons[1], daemons[4]
    found = {p["name"]: p for p in ctl_json(epsilon.home, "peers")["peers"]}
    assert "gossip" in found["beta"]["found_by"], found["beta"]
    own = ctl_json(beta.home, "status")["network"]["addresses"]
    assert own["own"] == ctl_json(beta.home, "status")["network"]["listen"] and own["heard"] == 4

    assert founder.stop() == 0
    sent = append(beta.home, "after the founder went to sleep")
    wait_until(lambda: sent["body"] in bodies(epsilon.home), "beta's event at epsilon, alpha stopped")
    # Nothing went through a relay: epsilon got it on its own link to beta.
    assert peer_id(beta.home) in connected(epsilon.home)
