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


def test_a_daemon_offers_where_its_peers_saw_it_come_from(fleet):
    """A daemon listening on one address and dialling from another (a NAT's or a VPN's outside
    address) learns from the peer it dialled where it came from (``seen``), and offers that host too,
    on its listen port, in its signed record."""
    alpha = fleet.found("alpha")
    beta = fleet.start("beta", network_args=("--no-mdns", "--listen", "127.0.0.2:0"))
    ctl_json(beta.home, "join", fleet.invite(), "--name", "beta")
    port = ctl_json(beta.home, "status")["network"]["listen"][0].rsplit(":", 1)[1]
    # Beta's connection to alpha (127.0.0.1) leaves from 127.0.0.1: alpha tells it so.
    wait_until(lambda: ctl_json(beta.home, "status")["network"]["addresses"]["own"]
               == [f"127.0.0.2:{port}", f"127.0.0.1:{port}"], "beta's record to offer where alpha saw it")
    # And alpha holds that record, signed by beta.
    wait_until(lambda: ctl_json(alpha.home, "status")["network"]["addresses"]["heard"] == 1, "beta's record at alpha")


def test_a_revoked_daemons_addresses_are_dropped_and_no_longer_dialled(fleet):
    """A revocation forgets the daemon's address record everywhere it replicates, and the gossip
    stops dialling it (its link is refused anyway: the records must not pile up behind it)."""
    alpha = fleet.found("alpha")
    beta, gamma = fleet.join("beta"), fleet.join("gamma")
    gamma_id = peer_id(gamma.home)
    for home in (alpha.home, beta.home):
        wait_until(lambda home=home: ctl_json(home, "status")["network"]["addresses"]["heard"] == 2,
                   f"both other records at {home.name}")
    ctl_json(alpha.home, "revoke", gamma_id)

    def forgotten_at_beta() -> bool:
        if ctl_json(beta.home, "status")["network"]["addresses"]["heard"] != 1:
            return False
        gamma_at_beta = [p for p in ctl_json(beta.home, "peers")["peers"] if p["peer_id"] == gamma_id]
        return all("gossip" not in a["source"].split("/") for p in gamma_at_beta for a in p["addresses"])

    wait_until(forgotten_at_beta, "gamma's record and gossiped addresses gone at beta once the revocation replicated")
    assert ctl_json(alpha.home, "status")["network"]["addresses"]["heard"] == 1
