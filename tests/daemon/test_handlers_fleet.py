"""The fleet's handlers (palaced/handlers/fleet.py) without a socket: what a daemon that has not
joined a palace answers (``fleet`` included), ``init`` starting the network through the context's
callback, watchers in ``who``, and the role and key checks before any write."""

from __future__ import annotations

import dataclasses
import datetime

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.errors import ApiError, ValidationError
from palaced.features import fleet
from palaced.handlers import Watcher, log
from palaced.membership import Membership, create_palace
from tests.daemon.handler_context import note, open_context


@pytest.mark.parametrize(("op", "args"), [
    (fleet.peers, {}), (fleet.peers_add, {"address": "127.0.0.1:7946"}), (fleet.peers_remove, {"address": "x:1"}),
    (fleet.invite, {}), (fleet.revoke, {"peer_id": "ABC"}),
])
async def test_palace_operations_before_joining_say_how_to_join(tmp_path, op, args):
    async with open_context(tmp_path) as ctx:
        with pytest.raises(ApiError) as refused:
            await op(ctx, args)
        assert refused.value.code == "not_member" and "palacectl init" in refused.value.message


async def test_the_fleet_of_a_daemon_not_in_a_palace_is_empty_not_an_error(tmp_path):
    """The fleet view asks every daemon it can reach; one that never joined has nothing to show.
    (A member's fleet: tests/daemon/test_network_reports.py.)"""
    async with open_context(tmp_path) as ctx:
        assert await fleet.fleet(ctx, {}) == {"self": None, "daemons": [], "origins": [], "revoked": []}


async def test_doctor_before_joining_fails_one_check(tmp_path):
    async with open_context(tmp_path) as ctx:
        report = await fleet.doctor(ctx, {})
        assert report["ok"] is False and [c["check"] for c in report["checks"]] == ["palace"]


async def test_a_replicated_wait_needs_a_palace_unless_it_asks_for_no_peer(tmp_path):
    async with open_context(tmp_path) as ctx:
        event = await log.append(ctx, note())
        assert await fleet.replicated(ctx, {"event_id": event["id"], "replicated": 0}) == {
            "event_id": event["id"], "replicated": [], "replicated_count": 0, "timed_out": False}
        with pytest.raises(ApiError) as refused:
            await fleet.replicated(ctx, {"event_id": event["id"], "replicated": 1})
        assert refused.value.code == "not_member"
        with pytest.raises(ApiError) as refused:
            await log.append(ctx, note(replicated=1))
        assert refused.value.code == "not_member"
        # Refused before the write (issue 27: it was stored, then answered with an error without its id).
        assert (await log.list_events(ctx, {}))["count"] == 1
        with pytest.raises(ValidationError):
            await fleet.replicated(ctx, {"event_id": event["id"], "replicated": 1001})


async def test_init_makes_a_palace_and_starts_the_network_once(tmp_path):
    started: list[Membership] = []

    async def start_network(membership: Membership) -> None:
        started.append(membership)

    async with open_context(tmp_path, start_network=start_network) as ctx:
        view = await fleet.init(ctx, {"name": "home", "daemon_name": "laptop"})
        assert started == [ctx.membership] and ctx.membership is not None
        assert (view["palace_name"], view["name"], view["role"], view["can_invite"], view["listen"]) == (
            "home", "laptop", "member", True, [])
        with pytest.raises(ApiError) as refused:
            await fleet.join(ctx, {"code": "anything"})
        assert refused.value.code == "invalid_argument" and "already belongs" in refused.value.message
        who = await fleet.who(ctx, {})
        assert who == {"watchers": [], "count": 0, "local_count": 0}


async def test_who_lists_local_watchers_oldest_first(tmp_path):
    async with open_context(tmp_path) as ctx:
        for conn_id, agent, since in ((1, "bob", "2024-01-02T00:00:00Z"), (2, None, "2024-01-01T00:00:00Z")):
            ctx.watchers[conn_id] = Watcher(conn_id=conn_id, agent=agent, filters="all", cursor=None, since=since,
                                            pid=None)
        who = await fleet.who(ctx, {})
        assert [w["connection"] for w in who["watchers"]] == [2, 1] and who["local_count"] == 2
        assert all(w["local"] is True and w["daemon"] is None for w in who["watchers"])


def _palace(tmp_path) -> Membership:
    (tmp_path / "palace").mkdir()
    return create_palace(tmp_path / "palace", Ed25519PrivateKey.generate(), "p", "d",
                         datetime.datetime.now(datetime.UTC))


async def test_only_the_palace_key_holder_invites_or_revokes(tmp_path):
    member = dataclasses.replace(_palace(tmp_path), can_invite=False)
    async with open_context(tmp_path / "home", membership=member) as ctx:
        for op, args in ((fleet.invite, {}), (fleet.revoke, {"peer_id": "ABC"})):
            with pytest.raises(ApiError) as refused:
                await op(ctx, args)
            assert refused.value.code == "not_permitted" and "palacectl init" in refused.value.message
        assert (await log.list_events(ctx, {}))["count"] == 0


async def test_invite_arguments_are_checked_before_anything_is_issued(tmp_path):
    async with open_context(tmp_path / "home", membership=_palace(tmp_path)) as ctx:
        for args, field in (({"role": "admin"}, "role"), ({"ttl_s": 59}, "ttl_s"),
                            ({"address": "not an address"}, "address")):
            with pytest.raises(ValidationError) as refused:
                await fleet.invite(ctx, args)
            assert refused.value.field == field
        (count,) = ctx.store.store.db.reader().execute("SELECT count(*) FROM invites").fetchone()
        assert count == 0
