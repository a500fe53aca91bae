"""The lease handlers' kept derivation (palaced/handlers/leases.py, ``LeaseBook``): a real store,
bus and writer, and a second replica's events applied as replication applies them.

Guards issue 25, finding 6: a lease event costs the daemon one step of its ledger, never a
derivation of the month; a late event (a peer's, stamped before what the ledger applied) is
derived afresh; and whatever path a read takes, it answers what one derivation of every lease
event would.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.leases import ACQUIRE, CONFLICT, LEASE_ROOM, RELEASE, RENEW, LeaseIndex, derive_leases
from palace_proto.validation import AppendRequest, Limits
from palaced.clock import utc_now
from palaced.features import STORE_PARTS, leases
from palaced.features.leases import DERIVED_FROM, LeaseBook
from palaced.store import Store, append_event, apply_remote
from palaced.store.leases import LeaseReads
from tests.daemon.handler_context import open_context


def _acquire_request(agent: str, lease_id: str, patterns: list[str]) -> AppendRequest:
    return AppendRequest.from_wire(
        {"type": ACQUIRE, "stream": "project/p", "room": LEASE_ROOM, "from_agent": agent, "correlation_id": lease_id,
         "body": "takes", "metadata": {"patterns": patterns, "mode": "exclusive", "ttl_s": 3600}}, Limits())


def _peer_with_an_early_lease(tmp_path) -> Store:
    """A second replica holding bob's lease on src/api/**, stamped before anything written later."""
    peer = Store(tmp_path / "peer.sqlite3", Ed25519PrivateKey.generate(), Limits(), parts=STORE_PARTS)
    req = _acquire_request("bob", "lease_00000000000000b0", ["src/api/**"])
    ok, early = peer.write_batch([lambda w: append_event(w, req)]).outcomes[0]
    assert ok, early
    return peer


async def _apply_from(ctx, peer: Store) -> list[dict]:
    """Everything ``peer`` wrote, applied here as replication applies it; the events applied."""
    signed = peer.signed_events_of_origin(peer.origin_id, 0, 10)
    report = await ctx.store.write(lambda w: apply_remote(w,
        signed, lambda origin, seq: peer.public_key if origin == peer.origin_id else None, source="test"))
    return [record.public for record in report.applied]


async def _derived_from_scratch(ctx) -> list[dict]:
    events = ctx.store.agents.annotate(
        (await ctx.store.reads(LeaseReads).window(DERIVED_FROM, "2000-01-01T00:00:00Z", 100_000))[1])
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
    # The peer's lease is stamped first, but arrives after a later local lease on the same files.
    peer = _peer_with_an_early_lease(tmp_path)
    try:
        async with open_context(tmp_path / "a") as ctx:
            mine = await leases.lease_acquire(ctx, {"agent": "alice", "project": "p", "patterns": ["src/**"]})
            book = LeaseBook.of(ctx)
            derivations = book.derivations
            assert len(await _apply_from(ctx, peer)) == 1
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
            await ctx.store.write(lambda w, req=req: append_event(w, req))
        (lease,) = (await leases.lease_list(ctx, {}))["leases"]
        assert (lease["state"], lease["renewals"], lease["expires_at"]) == ("active", 0, got["lease"]["expires_at"])
        assert await _listed(ctx) == _stateless(await _derived_from_scratch(ctx))


async def test_the_kept_index_answers_as_one_built_from_the_leases_in_force(tmp_path):
    """The index of leases in force is evolved with each fed event (taken, forced out, released,
    renewed): lease check must find exactly the leases a fresh index would."""
    async with open_context(tmp_path / "a") as ctx:
        ids = []
        for n, patterns in enumerate([["src/**"], ["docs/*.md"], ["src/api/**"], ["res:gpu"], ["lib"]]):
            got = await leases.lease_acquire(ctx, {"agent": f"agent{n}", "project": "p", "patterns": patterns,
                                                   "force": True})
            ids.append(got["lease"]["id"])
        await leases.lease_release(ctx, {"lease_id": ids[1]})
        await leases.lease_renew(ctx, {"lease_id": ids[4], "ttl_s": "2h"})
        snapshot = await LeaseBook.of(ctx).snapshot(fresh=True)
        now = utc_now()
        in_force = [lease for lease in snapshot.leases if lease.state(now) == "active"]
        assert sorted(lease.id for lease in in_force) == sorted([ids[2], ids[3], ids[4]])  # src/** was forced out
        fresh = LeaseIndex(in_force)
        for path in ["src/api/x.py", "docs/a.md", "lib", "src/x.py", "res:gpu"]:
            kept = sorted(lease.id for lease in snapshot.index.covering(path))
            assert kept == sorted(lease.id for lease in fresh.covering(path)), path


async def test_a_lost_lease_is_told_once_and_a_notice_forged_elsewhere_silences_nobody(tmp_path):
    """The reconciler tells the holder of a lease written here that lost, once; it looks its own
    notices up by lease id, and a peer's ``lease.conflict`` on that id does not count as told."""
    peer = _peer_with_an_early_lease(tmp_path)
    try:
        async with open_context(tmp_path / "a") as ctx:
            mine = (await leases.lease_acquire(ctx, {"agent": "alice", "project": "p", "patterns": ["src/**"]}))["lease"]
            forged = AppendRequest.from_wire(
                {"type": CONFLICT, "stream": "project/p", "room": LEASE_ROOM, "from_agent": "palaced", "to_agent": "alice",
                 "correlation_id": mine["id"], "body": "nothing to see", "metadata": {}}, Limits())
            ok, _ = peer.write_batch([lambda w: append_event(w, forged)]).outcomes[0]
            assert ok
            await _apply_from(ctx, peer)
            reconciler = leases.LeaseReconciler(ctx)
            assert await reconciler.reconcile() == 1
            assert await reconciler.reconcile() == 0
            assert await leases.LeaseReconciler(ctx).reconcile() == 0  # a fresh one reads it from the log
            notices = await ctx.store.events_of_types((CONFLICT,), "2000-01-01T00:00:00Z", 10)
            own = [n for n in notices if n["origin"] == ctx.store.origin_id]
            assert [(n["correlation_id"], n["to_agent"]) for n in own] == [(mine["id"], "alice")]
    finally:
        peer.close()
