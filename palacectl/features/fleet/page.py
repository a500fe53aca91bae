"""The fleet feature's dashboard part: the Fleet page's data (``page.js`` draws it).

Owns the route ``GET /api/fleet``: the daemons of the palace as a graph — this one, its peers,
and what the others report of their own links, each named apart (``label``) — with forks and watchers, over the daemon's
``status``, ``peers``, ``who`` and ``fleet`` (``palacectl.ui.views.Route``); and
``daemons_by_origin``, which daemon an origin belongs to (the timeline's proof of an event uses it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from palace_proto.fleet import daemon_labels

from ...ui.http import Request
from ...ui.views import Route, Views, gather

__all__ = ["ROUTES", "daemons_by_origin", "fleet"]


def daemons_by_origin(fleet: Mapping[str, Any] | None) -> dict[str | None, dict[str, Any]]:
    """origin -> {peer_id, name} of the daemon it belongs to, from the daemon's ``fleet`` map."""
    return {o.get("origin"): {"peer_id": o.get("peer_id"), "name": o.get("name")}
            for o in (fleet or {}).get("origins", [])}


async def fleet(views: Views, request: Request) -> dict[str, Any]:
    status, peers, who, reports = await gather([
        lambda: views.call("status"), lambda: views.call("peers"), lambda: views.call("who"),
        lambda: views.optional("fleet"),
    ])
    palace = status.get("palace") or {}
    me = palace.get("peer_id")
    nodes: dict[str, dict[str, Any]] = {}
    if me:
        nodes[me] = {"peer_id": me, "name": palace.get("name"), "role": palace.get("role"), "self": True,
                     "state": "self", "health": status.get("health"), "events": status.get("events"),
                     "version": status.get("version"), "revoked": False}
    edges: dict[tuple[str, str], dict[str, Any]] = {}

    def edge(a: str, b: str, info: Mapping[str, Any], seen_by: str) -> None:
        key = (min(a, b), max(a, b))
        known = edges.get(key)
        if known is None or (info.get("state") == "live" and known.get("state") != "live"):
            edges[key] = {"a": key[0], "b": key[1], "state": info.get("state"), "seen_by": seen_by,
                          "we_lack": info.get("we_lack"), "they_lack": info.get("they_lack"),
                          "last_contact": info.get("last_contact")}

    for peer in peers.get("peers", []):
        peer_id = peer.get("peer_id")
        if not peer_id:
            continue
        nodes.setdefault(peer_id, {"peer_id": peer_id, "name": peer.get("name"), "role": peer.get("role"),
                                   "self": False, "revoked": bool(peer.get("revoked"))})
        nodes[peer_id].update({"state": peer.get("state"), "last_contact": peer.get("last_contact"),
                               "we_lack": peer.get("we_lack"), "they_lack": peer.get("they_lack"),
                               "forks": peer.get("forks"), "last_error": peer.get("last_error")})
        if me and peer.get("state") not in ("discovered", None):
            edge(me, peer_id, peer, "self")
    for daemon in (reports or {}).get("daemons", []):
        peer_id = daemon.get("peer_id")
        report = daemon.get("report") or {}
        if not peer_id:
            continue
        node = nodes.setdefault(peer_id, {"peer_id": peer_id, "name": daemon.get("name"), "self": False,
                                          "state": "known", "revoked": False})
        node.update({"health": report.get("health"), "events": report.get("events"),
                     "version": report.get("version"), "role": node.get("role") or report.get("role"),
                     "heard_at": daemon.get("heard_at"), "silent": daemon.get("silent")})
        for link in report.get("links") or []:
            other = link.get("peer_id")
            if other and link.get("state") not in ("discovered", None):
                nodes.setdefault(other, {"peer_id": other, "name": None, "self": False, "state": "known",
                                         "revoked": False})
                edge(peer_id, other, link, peer_id)
    for revoked in (reports or {}).get("revoked", []):
        if revoked.get("peer_id") in nodes:
            nodes[revoked["peer_id"]]["revoked"] = True
    daemon_of = daemons_by_origin(reports)
    forks = [{**fork, "daemon": (daemon_of.get(fork.get("origin")) or {}).get("name")}
             for fork in peers.get("forks", [])]
    # Cloned machines share a hostname: a name two daemons bear is shown with each one's short id.
    labels = daemon_labels({peer_id: node.get("name") or "" for peer_id, node in nodes.items()})
    for peer_id, node in nodes.items():
        node["label"] = labels[peer_id]
    return {
        "self": me, "nodes": list(nodes.values()), "edges": list(edges.values()),
        "forks": forks, "watchers": who.get("watchers", []),
        "network": status.get("network"), "reports": reports is not None,
    }


ROUTES: Final = (Route("GET", r"^/api/fleet$", fleet),)
