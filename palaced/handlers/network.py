"""The peer network as the core's operations see it: ``status``'s network part, and a write that
waits until peers hold it (``append --replicated K``, ``replicated``).

Owns: how ``status`` reports the network and its peers (``network_status``, ``peer_counts``), and
the rules of a replicated write (``replicated_args``: how many peers and how long; a daemon in no
palace refuses one before anything is written; ``wait_replicated``: the receipts awaited). The
network itself is ``palaced.peers``.

Must not import: ``palaced.api``, ``palaced.app``, ``palaced.features``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from palace_proto.errors import ApiError, ValidationError

from .context import Context

__all__ = ["network_status", "peer_counts", "replicated_args", "require_peers_for", "wait_replicated"]

# Why an hour: the longest anyone waits for a write to reach peers; a longer wait is a question for
# ``replicated`` later, not a request held open.
MAX_REPLICATED_TIMEOUT_MS: Final = 3_600_000
# Why 30 s: time for a peer on the LAN to receive, store and sync an event many times over.
DEFAULT_REPLICATED_TIMEOUT_MS: Final = 30_000


async def peer_counts(ctx: Context) -> dict[str, int]:
    """Peers connected and known (revoked ones left out), for ``status``."""
    if ctx.network is None:
        return {"live": 0, "total": 0}
    heads = ctx.store.version_vector()  # kept in memory: no read
    known = [p for p in ctx.network.views.peers_view(heads) if not p["revoked"]]
    return {"live": sum(p["state"] in ("live", "catching up") for p in known), "total": len(known)}


async def network_status(ctx: Context) -> dict[str, Any] | None:
    """The network's part of ``status`` (None before this daemon joins a palace)."""
    network = ctx.network
    if network is None:
        return None
    forks = await ctx.store.forks()
    return {"listen": network.listen_addresses, "mdns": network.dialer.mdns_state,
            # what this daemon gossips as its addresses, and how many daemons' records it holds
            "addresses": network.addresses.view(),
            # the partial views and the broadcast tree: which peers this daemon links to, and pushes to
            "overlay": network.overlay.status(),
            "connected": network.views.connected_peers(), "forks": len(forks),
            "limits": network.limits.statistics(), "link_failures": network.links.failures,
            "stalled_links": network.views.stalled_links(), "sent": network.views.link_totals(),
            "refused_next": len(ctx.store.refusals.next), "refused_redactions": ctx.store.refusals.redactions}


def replicated_args(args: Mapping[str, Any]) -> tuple[int, float]:
    """(how many peers must hold the event, how long to wait for them in seconds), checked."""
    count = args.get("replicated", 0)
    if type(count) is not int or count < 0 or count > 1000:
        raise ValidationError("replicated must be an integer from 0 to 1000 (the number of peers)", field="replicated")
    timeout_ms = args.get("timeout_ms", DEFAULT_REPLICATED_TIMEOUT_MS)
    if type(timeout_ms) is not int or not 0 <= timeout_ms <= MAX_REPLICATED_TIMEOUT_MS:
        raise ValidationError(f"timeout_ms must be an integer from 0 to {MAX_REPLICATED_TIMEOUT_MS}",
                              field="timeout_ms")
    return count, timeout_ms / 1000


def require_peers_for(ctx: Context, count: int) -> None:
    """Refuse to wait for ``count`` peers on a daemon in no palace: before anything is written (an
    append asked to be replicated must not be stored and then answered with an error; issue 27)."""
    if count and ctx.network is None:
        raise ApiError("this daemon has not joined a palace: no peer can hold the event "
                       "(run `palacectl init` / `palacectl join`)", code="not_member")


async def wait_replicated(ctx: Context, event: Mapping[str, Any], count: int, timeout_s: float) -> dict[str, Any]:
    if count == 0:
        return {"replicated": [], "replicated_count": 0, "timed_out": False}
    require_peers_for(ctx, count)
    assert ctx.network is not None
    reached = ctx.network.overlay.reach(count, timeout_s)  # past the active view: link to as many while waiting
    try:
        holders = await ctx.network.receipts.wait_replicated(event["origin"], event["origin_seq"], count, timeout_s)
    finally:
        ctx.network.overlay.release(reached)
    return {"replicated": holders, "replicated_count": len(holders), "timed_out": len(holders) < count}
