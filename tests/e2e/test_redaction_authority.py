"""Who may redact (issue 11, finding 5), across real daemons.

Before: an ``event.redact`` from any member purged any event on every replica, and locally any
agent could redact anything. Now a redaction arriving from a peer is honoured when it comes from
the redacted event's own origin or carries the palace CA's signature (only the daemon holding
the palace key can make it); others stay in the log, unhonoured, and are reported. Locally the
event's author agent may redact it, or the operator (``--operator``); an event written on
another daemon only there or on the palace owner's machine.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_hostile_peers import Scene, origin_of
from tests.fleet import append, ctl_json, wait_converged, wait_until
from tests.helpers import run_ctl
from tests.hostile_peer import sealed

pytestmark = pytest.mark.transport_fixed


def body_on(home, event_id):
    """The event as that replica lists it."""
    return next(e for e in ctl_json(home, "list", "--limit", "500")["events"] if e["id"] == event_id)


def test_locally_only_the_author_agent_or_the_operator_may_redact(fleet):
    a = fleet.found("alpha")
    event = append(a.home, "written by claude", from_agent="mac-claude")
    other = run_ctl(a.home, "redact", event["id"], "--from-agent", "linux-codex")
    assert other.returncode == 1 and "only the event's author (mac-claude)" in other.stderr and "--operator" in \
        other.stderr, other
    assert body_on(a.home, event["id"])["body"] == "written by claude"
    done = ctl_json(a.home, "redact", event["id"], "--from-agent", "mac-claude")
    assert done["type"] == "event.redact" and done["purge"] in ("done", "pending")
    second = append(a.home, "another", from_agent="mac-claude")
    by_operator = ctl_json(a.home, "redact", second["id"], "--from-agent", "ops-human", "--operator")
    assert by_operator["metadata"] == {"redacts": second["id"]}  # our own origin: no CA signature needed
    assert body_on(a.home, second["id"])["body_redacted"] is True


async def test_a_peers_redaction_is_honoured_only_from_the_origin_or_the_palace_ca(fleet, short_tmp):
    scene = Scene(fleet, short_tmp)
    alpha, beta = scene.alpha, scene.beta
    gamma = fleet.join("gamma")
    secret = append(beta.home, "beta's words: keep them", from_agent="beta-agent")
    wait_converged(alpha, beta, gamma)
    # gamma is neither the author's daemon nor the palace owner: refused before anything is written.
    refused = run_ctl(gamma.home, "redact", secret["id"], "--from-agent", "beta-agent", "--json")
    assert refused.returncode == 1 and json.loads(refused.stdout)["error"]["code"] == "not_permitted"
    assert "palacectl init" in json.loads(refused.stdout)["error"]["message"]
    # A hostile member signs a redaction of beta's event with its own key and sends it.
    peer = await scene.connect()
    try:
        await peer.handshake()
        forged = sealed(scene.mallory.key, scene.mallory.origin, type="event.redact", stream="project/fleet",
                        room="general", from_agent="beta-agent", body="mallory redacts",
                        metadata_json=json.dumps({"redacts": secret["id"]}, separators=(",", ":")))
        await peer.push(forged)
        await peer.drain(1.0)
    finally:
        await peer.aclose()
    wait_until(lambda: ctl_json(alpha.home, "status")["redactions"]["refused_from_peers"] >= 1,
               "alpha reporting the refused redaction")
    assert "did not honour redaction" in alpha.log()
    wait_converged(alpha, beta, gamma)  # the unhonoured event.redact itself replicates as history
    for daemon in (alpha, beta, gamma):
        assert body_on(daemon.home, secret["id"])["body"] == "beta's words: keep them"
    # The palace owner may redact anyone's event: its CA signature makes every replica honour it.
    owner = ctl_json(alpha.home, "redact", secret["id"], "--from-agent", "ops-human", "--operator")
    assert set(owner["metadata"]) == {"redacts", "ca_signature"}
    for daemon in (alpha, beta, gamma):
        wait_until(lambda d=daemon: body_on(d.home, secret["id"]).get("body_redacted") is True,
                   f"the owner's redaction honoured on {daemon.home.name}")
    # And the author's own daemon may always redact its own events.
    own = append(beta.home, "beta's second thought", from_agent="beta-agent")
    wait_converged(alpha, beta, gamma)
    ctl_json(beta.home, "redact", own["id"], "--from-agent", "beta-agent")
    for daemon in (alpha, gamma):
        wait_until(lambda d=daemon: body_on(d.home, own["id"]).get("body_redacted") is True,
                   f"beta's redaction honoured on {daemon.home.name}")
    assert origin_of(beta.home) == own["origin"]
