"""Daemon reports in palaced/peers/reports.py, in-process: a real daemon (``app.serve``) that ran
``init``, its network fed reports through the hook its links call (``link_report``) by stand-in
links, and read back through the ``fleet`` operation. What is kept is newest-first, one per member
daemon, and only what verifies with that daemon's key; a relay's outbox holds the newest report per
daemon; a revoked daemon's report is forgotten. The real links are tests/e2e/test_fleet_reports.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto import __version__
from palace_proto.peer import Presence, Report, report_signing_bytes
from palace_proto.reports import decode_report, encode_report
from palaced.app import serve
from palaced.config import Config
from palaced.features import fleet
from palaced.handlers import Context
from palaced.peers import reports as reports_module
from tests.hostile_peer import Credentials, issue_member


class StandInLink:
    """What the network needs of a link to hand it gossip: a peer id, its machine's ``gossip`` and
    ``discard_gossip``, and ``wake``. Like a real link it keeps the newest record per daemon and
    kind, and nothing about its own peer (a real link also skips daemons its peer hears first-hand,
    and sends the bindings ahead: tests/proto/test_link.py, tests/e2e/test_fleet_reports.py)."""

    def __init__(self, peer_id: str) -> None:
        self.peer_id = peer_id
        self.pending: dict[tuple[type, str], Any] = {}
        self.machine = self  # the machine's side and the shell's are one here

    def wake(self) -> None:
        pass

    def gossip(self, record: Any) -> None:
        known = self.pending.get((type(record), record.peer_id))
        if record.peer_id != self.peer_id and (known is None or known.serial < record.serial):
            self.pending[(type(record), record.peer_id)] = record

    def discard_gossip(self, peer_id: str) -> None:
        self.pending = {key: record for key, record in self.pending.items() if key[1] != peer_id}

    @property
    def sent(self) -> list[Any]:
        return list(self.pending.values())

    def reports(self, about: str) -> list[Report]:
        return [m for m in self.sent if isinstance(m, Report) and m.peer_id == about]


@pytest.fixture
def short_home(short_tmp: Path) -> Path:
    """A home whose socket path fits in sun_path (pytest's tmp_path may not)."""
    return short_tmp / "h"


@pytest.fixture
async def daemon(short_home: Path) -> AsyncIterator[Context]:
    """A daemon that founded a palace (its network listening on loopback, mDNS off)."""
    config = Config(home=short_home, mdns=False, memory_embed=False, listen="127.0.0.1:0")
    async with trio.open_nursery() as nursery:
        ctx: Context = await nursery.start(serve, config)
        await fleet.init(ctx, {"name": "p", "daemon_name": "alpha"})
        yield ctx
        nursery.cancel_scope.cancel(reason="test done")


def member(ctx: Context, name: str, role: str = "member") -> Credentials:
    """A second daemon of the palace, known to this one as if a link had brought its binding."""
    creds = issue_member(ctx.config.home, ctx.config.home.parent / "creds", name, role)
    assert ctx.directory is not None
    ctx.directory.bind(creds.binding)
    return creds


def signed(key: Ed25519PrivateKey, peer_id: str, serial: int, content: bytes, name: str = "beta") -> Report:
    return Report(peer_id, name, serial, content, key.sign(report_signing_bytes(peer_id, name, serial, content)))


def content(**fields: Any) -> bytes:
    return encode_report({"role": "member", "version": "9.9", "events": 7, "links": [],
                          "health": {"ok": True, "problems": []}, "forks": 0, "watchers": 0, **fields})


async def settle() -> None:
    """Until every task of the daemon is blocked: what the last call set going (a report built on
    a thread, a revocation's hop into trio) has reached the links."""
    await trio.testing.wait_all_tasks_blocked()


async def test_a_daemon_reports_itself_as_status_sees_it(daemon):
    ctx = daemon
    assert ctx.membership is not None and ctx.network is not None
    view = await fleet.fleet(ctx, {})
    me = view["self"]
    assert (me["peer_id"], me["name"]) == (ctx.membership.peer_id, "alpha")
    report = me["report"]
    assert (report["v"], report["role"], report["version"], report["origin"]) == (
        1, "member", __version__, ctx.store.origin_id)
    status = await ctx.store.counts()
    assert report["events"] == status["events"] and report["links"] == [] and report["forks"] == 0
    assert report["health"] == {"ok": True, "problems": []} and report["watchers"] == 0
    assert view["daemons"] == [] and view["revoked"] == []
    assert view["origins"] == [{"origin": ctx.store.origin_id, "peer_id": ctx.membership.peer_id, "name": "alpha"}]

    # What a new link is sent first: this daemon's report, signed with its key.
    link = StandInLink("SOMEONE")
    ctx.network.link_ready(link)  # type: ignore[arg-type]
    with trio.fail_after(10):  # the first report is built at start, from status read on a thread
        while not link.reports(ctx.membership.peer_id):
            await trio.sleep(0.01)
    (sent,) = link.reports(ctx.membership.peer_id)
    public = ctx.identity.public_key()
    public.verify(sent.signature, report_signing_bytes(sent.peer_id, sent.name, sent.serial, sent.report))
    assert decode_report(sent.report)["origin"] == ctx.store.origin_id
    assert any(isinstance(m, Presence) for m in link.sent)  # presence and reports share the one sender


async def test_a_verified_report_is_kept_and_relayed_newest_first(daemon, monkeypatch):
    ctx = daemon
    assert ctx.network is not None
    beta = member(ctx, "beta")
    relay, other = StandInLink(beta.peer_id), StandInLink("OTHER")
    ctx.network.link_ready(other)  # type: ignore[arg-type]
    await settle()
    # A burst of reports, as a flood would come: one kept, one relayed (the newest), none queued.
    for serial in range(1, 101):
        flood = signed(beta.key, beta.peer_id, serial, content(events=serial))
        ctx.network.link_report(relay, flood)  # type: ignore[arg-type]
    await settle()
    assert [r.serial for r in other.reports(beta.peer_id)] == [100]
    assert relay.reports(beta.peer_id) == []  # never sent back where it came from
    (heard,) = (await fleet.fleet(ctx, {}))["daemons"]
    assert (heard["peer_id"], heard["name"], heard["silent"]) == (beta.peer_id, "beta", False)
    assert heard["report"]["events"] == 100 and heard["heard_at"].endswith("Z")
    # An older one changes nothing, and is not relayed.
    ctx.network.link_report(relay, signed(beta.key, beta.peer_id, 50, content(events=50)))  # type: ignore[arg-type]
    await settle()
    assert (await fleet.fleet(ctx, {}))["daemons"][0]["report"]["events"] == 100
    assert [r.serial for r in other.reports(beta.peer_id)] == [100]
    # Unheard for three heartbeats: silent.
    monkeypatch.setattr(reports_module, "REPORT_SILENT_S", 0.0)
    assert (await fleet.fleet(ctx, {}))["daemons"][0]["silent"] is True
    origins = {o["origin"]: o["name"] for o in (await fleet.fleet(ctx, {}))["origins"]}
    assert origins == {ctx.store.origin_id: "alpha", beta.origin: "beta"}


async def test_reports_that_do_not_verify_or_name_no_known_daemon_are_ignored_and_counted(daemon):
    ctx = daemon
    network = ctx.network
    assert network is not None
    beta, mallory = member(ctx, "beta"), member(ctx, "mallory")
    relay, other = StandInLink(mallory.peer_id), StandInLink("OTHER")
    network.link_ready(other)  # type: ignore[arg-type]
    genuine = signed(beta.key, beta.peer_id, 5, content())
    network.link_report(relay, genuine)  # type: ignore[arg-type]
    forged = [
        signed(mallory.key, beta.peer_id, 6, content(events=666)),  # beta's, signed by mallory
        Report(beta.peer_id, "beta", 7, content(events=666), genuine.signature),  # altered after signing
        Report(beta.peer_id, "beta", 8, genuine.report, genuine.signature),  # a newer serial it never signed
        Report(beta.peer_id, "beta", 9, genuine.report, bytes(64)),
    ]
    for report in forged:
        network.link_report(relay, report)  # type: ignore[arg-type]
    stranger = issue_member(ctx.config.home, ctx.config.home.parent / "creds", "stranger")  # never bound here
    network.link_report(relay, signed(stranger.key, stranger.peer_id, 1, content()))  # type: ignore[arg-type]
    network.link_report(relay, signed(mallory.key, mallory.peer_id, 1, b"not json"))  # type: ignore[arg-type]
    network.link_report(relay, signed(mallory.key, mallory.peer_id, 2, b"[1, 2]"))  # type: ignore[arg-type]
    own = ctx.membership
    assert own is not None
    network.link_report(relay, signed(ctx.identity, own.peer_id, 2**61, content(events=1)))  # type: ignore[arg-type]
    await settle()
    (heard,) = (await fleet.fleet(ctx, {}))["daemons"]
    assert heard["peer_id"] == beta.peer_id and heard["report"]["events"] == 7
    assert [r.serial for r in other.reports(beta.peer_id)] == [5]
    assert other.reports(mallory.peer_id) == [] and other.reports(stranger.peer_id) == []
    limits = network.limits.statistics()
    assert limits["bad_report"] == len(forged) and limits["report_unknown_daemon"] == 1
    assert limits["bad_report_content"] == 2
    assert (await fleet.fleet(ctx, {}))["self"]["report"]["events"] != 1  # our own word is ours alone


async def test_a_hostile_but_signed_report_is_shown_only_as_visible_bounded_text(daemon):
    ctx = daemon
    assert ctx.network is not None
    mallory = member(ctx, "mallory")
    hostile = json.dumps({"v": 1, "role": "admin", "version": "\x1b]0;pwned\x07" + "v" * 500, "events": -1,
                          "links": [{"peer_id": "A\nB", "state": "live\x1b[2J"}] * 100,
                          "health": {"ok": "fine", "problems": ["\x1b[31m" + "p" * 300] * 12},
                          "forks": 2**70, "watchers": {"a": 1}, "extra": [[[[[]]]]]}, separators=(",", ":")).encode()
    assert len(hostile) <= 16 * 1024
    report = signed(mallory.key, mallory.peer_id, 1, hostile)
    ctx.network.link_report(StandInLink(mallory.peer_id), report)  # type: ignore[arg-type]
    (heard,) = (await fleet.fleet(ctx, {}))["daemons"]
    report = heard["report"]
    assert report["role"] is None and report["events"] is None and report["forks"] is None
    assert report["watchers"] is None and "extra" not in report
    assert report["version"].isprintable() and len(report["version"]) == 64
    assert len(report["links"]) == 64 and report["links"][0] == {
        "peer_id": None, "state": None, "direction": None, "last_contact": None, "we_lack": None, "they_lack": None}
    problems = report["health"]["problems"]
    assert report["health"]["ok"] is None and len(problems) == 8
    assert all(p.isprintable() and len(p) == 200 for p in problems)


async def test_a_revoked_daemons_report_is_forgotten_and_it_is_listed_as_revoked(daemon):
    ctx = daemon
    assert ctx.network is not None
    beta = member(ctx, "beta")
    relay = StandInLink(beta.peer_id)
    ctx.network.link_report(relay, signed(beta.key, beta.peer_id, 1, content()))  # type: ignore[arg-type]
    assert [d["peer_id"] for d in (await fleet.fleet(ctx, {}))["daemons"]] == [beta.peer_id]
    await fleet.revoke(ctx, {"peer_id": beta.peer_id})
    await settle()
    view = await fleet.fleet(ctx, {})
    assert view["daemons"] == []
    (revoked,) = view["revoked"]
    assert (revoked["peer_id"], revoked["name"]) == (beta.peer_id, "beta") and revoked["at"].endswith("Z")
    assert beta.origin in {o["origin"] for o in view["origins"]}  # its events keep naming it
    # Its reports are refused from now on, and counted.
    ctx.network.link_report(relay, signed(beta.key, beta.peer_id, 2, content()))  # type: ignore[arg-type]
    assert (await fleet.fleet(ctx, {}))["daemons"] == []
    assert ctx.network.limits.statistics()["report_revoked_daemon"] == 1


async def test_an_observers_report_says_so(daemon):
    ctx = daemon
    assert ctx.network is not None
    watcher = member(ctx, "watcher", role="observer")
    ctx.network.link_report(StandInLink(watcher.peer_id),  # type: ignore[arg-type]
                            signed(watcher.key, watcher.peer_id, 1, content(role="observer"), name="watcher"))
    (heard,) = (await fleet.fleet(ctx, {}))["daemons"]
    assert (heard["name"], heard["report"]["role"]) == ("watcher", "observer")
