"""The lease handlers' kept derivation (palaced/handlers/leases.py, ``LeaseBook``): a real store,
bus and writer, and a second replica's events applied as replication applies them.

Guards issue 25, finding 6: a lease event costs the daemon one step of its ledger, never a
derivation of the month; a late event (a peer's, stamped before what the ledger applied) is
derived afresh; and whatever path a read takes, it answers what one derivation of every lease
event would.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.leases import ACQUIRE, LEASE_ROOM, RELEASE, RENEW, derive_leases
from palace_proto.validation import AppendRequest, Limits
from palaced.handlers import leases
from palaced.handlers.leases import DERIVED_FROM, LeaseBook
from palaced.store import Store
from palaced.store.clock import utc_now
from tests.daemon.handler_context import open_context


def _acquire_request(agent: str, lease_id: str, patterns: list[str]) -> AppendRequest:
    return AppendRequest.from_wire(
        {"type": ACQUIRE, "stream": "project/p", "room": LEASE_ROOM, "from_agent": agent, "correlation_id": lease_id,
         "body": "takes", "metadata": {"patterns": patterns, "mode": "exclusive", "ttl_s": 3600}}, Limits())


async def _derived_from_scratch(ctx) -> list[dict]:
    events = await ctx.astore.read(lambda: ctx.store.agents.annotate(
        ctx.store.lease_events(DERIVED_FROM, "2000-01-01T00:00:00Z", None, 100_000)))
    now = utc_now()
    return sorted((lease.to_wire(now) for lease in derive_leases(events)), key=lambda w: w["id"])


async def _listed(ctx) -> list[dict]:
    listed = (await leases.lease_list(ctx, {"all": True}))["leases"]
    for lease in listed:
        lease.pop("state")  # asked at another instant than _derived_from_scratch's
    return sorted(listed, key=lambda w: w["id"])


def _stateless(wires: list[dict]) -> list[dict]:
    return [{k: v for k, v in w.items() if k != "state"} for w in wires]


async def test_lease_events_are_fed_to_the_ledger_not_derived_again(tmp_path):
    async with open_context(tmp_path / "a") as ctx:
        first = await leases.lease_acquire(ctx, {"agent": "alice", "project": "p", "patterns": ["src/**"]})
        book = LeaseBook.of(ctx)
        derivations = book.derivations
        taken = [first["lease"]["id"]]
        for n in range(5):
            got = await leases.lease_acquire(ctx, {"agent": f"agent{n}", "project": "p", "patterns": [f"doc{n}/**"]})
            taken.append(got["lease"]["id"])
        await leases.lease_renew(ctx, {"lease_id": taken[1], "ttl_s": "2h"})
        await leases.lease_release(ctx, {"lease_id": taken[3]})  # agent2's doc2/**
        checked = await leases.lease_check(ctx, {"agent": "bob", "paths": ["src/x.py", "doc2/a.md"], "project": "p"})
        assert [b["path"] for b in checked["blocked"]] == ["src/x.py"]
        assert book.derivations == derivations, "a lease event made the daemon derive the month again"
        assert book.feeds >= 7
        assert await _listed(ctx) == _stateless(await _derived_from_scratch(ctx))


async def test_a_late_lease_event_from_a_peer_is_derived_afresh_and_wins_by_its_stamp(tmp_path):
    peer = Store(tmp_path / "peer.sqlite3", Ed25519PrivateKey.generate(), Limits())
    try:
        # The peer's lease is stamped first, but arrives after a later local lease on the same files.
        req = _acquire_request("bob", "lease_00000000000000b0", ["src/api/**"])
        ok, early = peer.write_batch([lambda w: w.append(req)]).outcomes[0]
        assert ok, early
        async with open_context(tmp_path / "a") as ctx:
            mine = await leases.lease_acquire(ctx, {"agent": "alice", "project": "p", "patterns": ["src/**"]})
            book = LeaseBook.of(ctx)
            derivations = book.derivations
            signed = peer.signed_events_of_origin(peer.origin_id, 0, 10)
            report = await ctx.astore.write(lambda w: w.apply_remote(
                signed, lambda origin, seq: peer.public_key if origin == peer.origin_id else None, source="test"))
            assert len(report.applied) == 1, report
            listed = {w["id"]: w["state"] for w in (await leases.lease_list(ctx, {"all": True}))["leases"]}
            assert listed == {"lease_00000000000000b0": "active", mine["lease"]["id"]: "lost"}
            assert book.derivations == derivations + 1
            # Then on, fed again: a new local lease goes on from the fresh derivation.
            await leases.lease_acquire(ctx, {"agent": "carol", "project": "p", "patterns": ["docs/**"]})
            assert book.derivations == derivations + 1
            assert await _listed(ctx) == _stateless(await _derived_from_scratch(ctx))
    finally:
        peer.close()


async def test_a_release_or_renew_by_another_agent_changes_nothing_in_the_kept_ledger(tmp_path):
    async with open_context(tmp_path / "a") as ctx:
        got = await leases.lease_acquire(ctx, {"agent": "alice", "project": "p", "patterns": ["src/**"]})
        lease_id = got["lease"]["id"]
        for kind in (RENEW, RELEASE):
            req = AppendRequest.from_wire({"type": kind, "stream": "project/p", "room": LEASE_ROOM, "from_agent": "mallory",
                                           "correlation_id": lease_id, "body": "x", "metadata": {"ttl_s": 999999}},
                                          Limits())
            await ctx.astore.write(lambda w, req=req: w.append(req))
        (lease,) = (await leases.lease_list(ctx, {}))["leases"]
        assert (lease["state"], lease["renewals"], lease["expires_at"]) == ("active", 0, got["lease"]["expires_at"])
        assert await _listed(ctx) == _stateless(await _derived_from_scratch(ctx))
