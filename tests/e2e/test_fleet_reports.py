"""Daemon reports between real daemons over mutual TLS on loopback (mDNS off): in a line
alpha — beta — gamma, with an observer delta also linked to beta, alpha's ``fleet`` shows every
daemon — the far end's report relayed by beta, with its own links and health, the observer's saying
so — and names the daemon behind every origin; a revoked daemon's report disappears everywhere.
The hostile side (forged and altered reports) is tests/e2e/test_hostile_peers.py."""

from __future__ import annotations

from typing import Any

from tests.fleet import api, ctl_json, listen_address, peer_id, wait_until
from tests.helpers import Daemon

# Why 60 s: four daemons start, link up and settle on a loaded 2-core machine; reports go out within
# 2 s of a link's change and every 30 s.
WAIT_S = 60.0


def heard(home, name: str) -> dict[str, Any] | None:
    """The report ``home``'s daemon holds of the daemon named ``name`` (None: none yet)."""
    return next((d for d in api(home, "fleet")["daemons"] if d["name"] == name), None)


def links_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {link["peer_id"]: link for link in report["links"] or ()}


def line_with_an_observer(fleet) -> tuple[Daemon, Daemon, Daemon, Daemon]:
    a, b, c = fleet.ends_through_middle()
    d = fleet.enrol_offline("delta", role="observer").start()
    ctl_json(d.home, "peers", "add", listen_address(b.home))
    return a, b, c, d


def test_a_daemon_sees_every_daemon_of_a_line_with_its_links_health_and_origins(fleet):
    a, b, c, d = line_with_an_observer(fleet)
    ids = {x.home.name: peer_id(x.home) for x in (a, b, c, d)}

    def far_end_settled():
        gamma = heard(a.home, "gamma")
        return gamma if gamma and links_of(gamma["report"]).get(ids["beta"], {}).get("state") == "live" else None

    # gamma's report reaches alpha only through beta, and says gamma's link to beta is live.
    gamma = wait_until(far_end_settled, "gamma's report at alpha, relayed by beta", WAIT_S)
    assert gamma["peer_id"] == ids["gamma"] and gamma["silent"] is False and gamma["heard_at"].endswith("Z")
    link = links_of(gamma["report"])[ids["beta"]]
    assert link["direction"] == "out" and link["we_lack"] == 0 and link["they_lack"] == 0
    assert ids["alpha"] not in links_of(gamma["report"])  # gamma has no link of its own to alpha

    def beta_sees_all_three():
        beta = heard(a.home, "beta")
        states = {p: link["state"] for p, link in links_of(beta["report"]).items()} if beta else {}
        return beta if states == {ids["alpha"]: "live", ids["gamma"]: "live", ids["delta"]: "live"} else None

    beta = wait_until(beta_sees_all_three, "beta's report with its three live links", WAIT_S)
    assert {p: link["direction"] for p, link in links_of(beta["report"]).items()} == dict.fromkeys(
        (ids["alpha"], ids["gamma"], ids["delta"]), "in")  # everyone dialled beta
    delta = wait_until(lambda: heard(a.home, "delta"), "the observer's report at alpha", WAIT_S)

    view = api(a.home, "fleet")
    assert view["self"]["peer_id"] == ids["alpha"] and view["self"]["name"] == "alpha"
    assert links_of(view["self"]["report"])[ids["beta"]]["state"] == "live"
    assert [x["name"] for x in view["daemons"]] == [x["name"] for x in sorted(view["daemons"],
                                                                               key=lambda x: x["peer_id"])]
    assert {x["name"] for x in view["daemons"]} == {"beta", "gamma", "delta"} and view["revoked"] == []
    reports = {"alpha": view["self"]["report"], **{x["name"]: x["report"] for x in view["daemons"]}}
    assert {name: r["role"] for name, r in reports.items()} == {
        "alpha": "member", "beta": "member", "gamma": "member", "delta": "observer"}
    assert delta["report"]["role"] == "observer"
    for name, report in reports.items():
        # Every daemon's health, as its own status judges it.
        assert isinstance(report["health"]["ok"], bool) and isinstance(report["health"]["problems"], list), name
        assert report["version"] and report["started_at"] and report["events"] >= 0 and report["forks"] == 0, name
    # What alpha shows of gamma's health is what gamma judges of itself (as of its newest report).
    wait_until(lambda: heard(a.home, "gamma")["report"]["health"] == api(c.home, "fleet")["self"]["report"]["health"],
               "gamma's health at alpha as gamma judges it", WAIT_S)
    assert reports["gamma"]["origin"] == api(c.home, "status")["origin"]

    # Every daemon's origin is named, so the fleet view can say which daemon wrote an event.
    owners = {o["origin"]: (o["peer_id"], o["name"]) for o in view["origins"]}
    for x in (a, b, c, d):
        assert owners[api(x.home, "status")["origin"]] == (ids[x.home.name], x.home.name)


def test_a_revoked_daemons_report_disappears_everywhere(fleet):
    a, b, c = fleet.ends_through_middle()
    gamma_id, beta_id = peer_id(c.home), peer_id(b.home)
    for home in (a.home, b.home):
        wait_until(lambda home=home: heard(home, "gamma"), f"gamma's report at {home.name}", WAIT_S)

    ctl_json(a.home, "revoke", gamma_id)
    view = api(a.home, "fleet")
    assert "gamma" not in {x["name"] for x in view["daemons"]}  # at once, where the revocation was made
    assert [(r["peer_id"], r["name"]) for r in view["revoked"]] == [(gamma_id, "gamma")]

    def gone_at_beta():
        at_beta = api(b.home, "fleet")
        return "gamma" not in {x["name"] for x in at_beta["daemons"]} and at_beta["revoked"]

    wait_until(gone_at_beta, "gamma's report gone at beta, once the revocation replicated", WAIT_S)

    def beta_reports_the_revocation():
        beta = heard(a.home, "beta")
        return beta and links_of(beta["report"]).get(gamma_id, {}).get("state") == "revoked"

    wait_until(beta_reports_the_revocation, "beta's report showing its link to gamma revoked", WAIT_S)
    assert beta_id in {x["peer_id"] for x in api(a.home, "fleet")["daemons"]}
