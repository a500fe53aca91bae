"""A hostile member against real daemons (issue 11 §2): every attack of the issue, sent over real
mutual TLS by an enrolled member that speaks the protocol with the project's own encoders
(tests/hostile_peer.py). After each attack the victim keeps serving, and honest peers still
converge to identical digests.

The victim is ``alpha`` (the founder); ``beta`` is an honest member linked to it. Mallory's
certificate comes from alpha's CA, exactly what ``join`` would have given it. Mallory connects
from its own loopback address (127.0.0.66 and up), so per-host bounds hit it and not beta.
"""

from __future__ import annotations

import dataclasses
import hashlib
import socket
import sqlite3
import struct

import msgpack
import pytest
import trio

from palace_proto.bindings import OriginBinding, legacy_binding_signature
from palace_proto.broadcast import IHAVE_MAX, Graft, IHave, Prune
from palace_proto.canonical import canonical_json
from palace_proto.envelope import GENESIS_HASH, SignedEvent
from palace_proto.identity import REGISTER, registry_metadata
from palace_proto.ids import origin_id_from_random
from palace_proto.link import HELLO_TIMEOUT_S, SILENCE_S
from palace_proto.overlay import ACTIVE_MAX, PASSIVE_MAX, ForwardJoin, Neighbor, Shuffle, ShuffleReply
from palace_proto.peer import (
    MAX_BINDINGS_PER_MESSAGE,
    Addresses,
    ArtifactWant,
    Events,
    Have,
    Members,
    Presence,
    Report,
    Vector,
    VectorEntry,
    Want,
    addresses_signing_bytes,
    event_to_wire,
    presence_signing_bytes,
    report_signing_bytes,
)
from palace_proto.reports import decode_report, encode_report
from palace_proto.session import ConnectionClosed
from palace_proto.sync_plan import MAX_ARTIFACT_ASKS
from palaced.members import MAX_ORIGINS_PER_KEY
from palaced.peers.admission import MAX_ACCEPTS_PER_HOST, MAX_INBOUND_PER_HOST
from palaced.peers.link import SEND_STALL_S
from tests.fleet import api, append, bodies, ctl_json, peer_id, wait_converged, wait_until
from tests.helpers import RawClient, run_ctl
from tests.hostile_peer import HostilePeer, Scene, issue_member, origin_of, sealed

pytestmark = pytest.mark.transport_fixed  # about the peer port: the local API's transport plays no part


@pytest.fixture
def scene(fleet, short_tmp):
    return Scene(fleet, short_tmp)


def mallory_seen(scene: Scene) -> dict:
    """How alpha's ``peers`` shows mallory (its link's counters)."""
    (seen,) = [p for p in ctl_json(scene.alpha.home, "peers")["peers"] if p["peer_id"] == scene.mallory.peer_id]
    return seen


async def events_of(peer: HostilePeer, origin: str) -> list[SignedEvent]:
    """Pull every event of ``origin`` from the victim, as any member may."""
    await peer.send(Want(origin, 0))
    with trio.fail_after(10):
        while True:
            message = await peer.next_message()
            if isinstance(message, Events) and any(e.origin == origin for e in message.events):
                return [e for e in message.events if e.origin == origin]


# -- forged events -------------------------------------------------------------------------------


async def test_a_forgery_cannot_borrow_a_genuine_events_verification(scene):
    """Finding 1: a genuine event E of beta's origin and a forged E' (beta's origin, the next
    origin_seq, beta's head as prev_hash, other content) claiming E's event_hash and signature,
    in one batch. Before the fix E' was stored and relayed, and beta's real next event then
    looked like a fork everywhere."""
    beta_origin = origin_of(scene.beta.home)
    peer = await scene.connect()
    try:
        await peer.handshake()
        genuine = (await events_of(peer, beta_origin))[-1]  # beta's newest (after registering "beta")
        forged = dataclasses.replace(
            genuine, origin_seq=genuine.origin_seq + 1, prev_hash=genuine.event_hash, body="beta owes mallory 100",
            body_sha256=hashlib.sha256(b"beta owes mallory 100").digest(), from_agent="beta",
            created_at="2031-01-01T00:00:00.000000Z")
        await peer.push(genuine, forged)
        await peer.push(forged, genuine)
        await peer.drain(1.0)
    finally:
        await peer.aclose()
    assert "beta owes mallory 100" not in bodies(scene.alpha.home)
    scene.still_serving_and_converging("a borrowed signature")  # beta's real next event is no fork
    assert ctl_json(scene.alpha.home, "peers")["forks"] == []


async def test_forged_origins_altered_bodies_and_chains_with_gaps(scene):
    beta_origin = origin_of(scene.beta.home)
    key, own = scene.mallory.key, scene.mallory.origin
    peer = await scene.connect()
    try:
        await peer.handshake()
        beta_last = (await events_of(peer, beta_origin))[-1]
        as_beta = sealed(key, beta_origin, seq=beta_last.origin_seq + 1, prev=beta_last.event_hash,
                         body="I am beta")  # mallory's key
        first = sealed(key, own, body="mallory 1")
        second = sealed(key, own, seq=2, prev=first.event_hash, body="mallory 2")
        third = sealed(key, own, seq=3, prev=second.event_hash, body="mallory 3")
        altered = dataclasses.replace(second, body="mallory 2, altered")
        await peer.push(as_beta)
        await peer.push(first, third)  # a gap: 3 waits for 2
        await peer.push(altered)
        await peer.drain(1.0)
        assert "mallory 3" not in bodies(scene.alpha.home) and "I am beta" not in bodies(scene.alpha.home)
        await peer.push(second, third)  # the honest continuation fills the gap
        await peer.drain(1.0)
    finally:
        await peer.aclose()
    held = bodies(scene.alpha.home)
    assert {"mallory 1", "mallory 2", "mallory 3"} <= set(held) and "mallory 2, altered" not in held
    scene.still_serving_and_converging("forged events")


async def test_a_member_cannot_write_as_another_daemons_agent_unnoticed(scene):
    """Issue 16: mallory, whose origin registers agents, writes as alpha's agent without a
    registration, then with one of its own (void: alpha's came first), and every replica flags
    those events as impersonations. Issue 43: both are stored and relayed (replicas converge
    whatever a member writes); the verdict, not a refusal, keeps them from moving anything."""
    append(scene.alpha.home, "alpha's own words", from_agent="alpha-bot")
    wait_converged(scene.alpha, scene.beta)
    key, own = scene.mallory.key, scene.mallory.origin

    def registration(agent: str, seq: int, prev: bytes):
        metadata = canonical_json(registry_metadata(REGISTER, agent, scene.mallory.peer_id))
        return sealed(key, own, seq=seq, prev=prev, type=REGISTER, stream="palace", room="agents",
                      from_agent="palaced", body=f"{agent} is registered", metadata_json=metadata)

    mine = registration("mallory-bot", 1, GENESIS_HASH)
    unregistered = sealed(key, own, seq=2, prev=mine.event_hash, from_agent="alpha-bot", body="unregistered")
    peer = await scene.connect()
    try:
        await peer.handshake()
        await peer.push(mine, unregistered)
        await peer.drain(1.0)
    finally:
        await peer.aclose()
    wait_converged(scene.alpha, scene.beta)
    for d in (scene.alpha, scene.beta):
        (event,) = [e for e in api(d.home, "list", limit=500)["events"] if e["body"] == "unregistered"]
        assert event["impersonation"]["holder"] == peer_id(scene.alpha.home), event
    # A registered impostor comes from a second credential of mallory's, a daemon of its own.
    scene2 = issue_member(scene.alpha.home, scene.alpha.home.parent / "creds2", "mallory2")
    key2, own2 = scene2.key, scene2.origin
    claim = sealed(key2, own2, seq=1, prev=GENESIS_HASH, type=REGISTER, stream="palace", room="agents",
                   from_agent="palaced", body="alpha-bot is mine",
                   metadata_json=canonical_json(registry_metadata(REGISTER, "alpha-bot", scene2.peer_id)))
    posing = sealed(key2, own2, seq=2, prev=claim.event_hash, from_agent="alpha-bot", body="pay mallory")
    peer = await HostilePeer.connect(scene.address, scene2, scene.ca_pem, palace_id=scene.palace_id,
                                     name="mallory2", source_host=scene.fresh_host())
    try:
        await peer.handshake()
        await peer.push(claim, posing)
        await peer.drain(1.0)
    finally:
        await peer.aclose()
    wait_converged(scene.alpha, scene.beta)
    for d in (scene.alpha, scene.beta):
        (event,) = [e for e in api(d.home, "list", limit=500)["events"] if e["body"] == "pay mallory"]
        assert event["impersonation"]["holder"] == peer_id(scene.alpha.home)
        assert event["impersonation"]["written_by"] == scene2.peer_id
    scene.still_serving_and_converging("an impostor")


async def test_events_with_lone_surrogates_or_broken_rules_are_refused_without_dropping_the_link(scene):
    """Findings 6 and 9: a lone surrogate in a peer's event raised deep in the daemon and left the
    link marked live; an authentic event breaking a rule (type, created_at, sizes) was stored."""
    key, own = scene.mallory.key, scene.mallory.origin
    peer = await scene.connect()
    try:
        await peer.handshake()
        good = sealed(key, own, body="fine")
        surrogate = event_to_wire(sealed(key, own, seq=2, prev=good.event_hash, body="x"))
        surrogate["stream"] = "a\ud800b"
        rule_breaker = sealed(key, own, seq=2, prev=good.event_hash, created_at="2031-01-01 noon", body="bad date")
        await peer.push(good)
        await peer.send_frame({"t": "events", "events": [surrogate]})
        await peer.push(rule_breaker)
        await peer.drain(1.5)
        assert peer.session.state.name != "CLOSED"
        (seen,) = [p for p in ctl_json(scene.alpha.home, "peers")["peers"] if p["peer_id"] == scene.mallory.peer_id]
        assert seen["state"] in ("live", "catching up") and seen["refused_events"] == 1 and seen["rejected_events"] == 1
    finally:
        await peer.aclose()
    held = bodies(scene.alpha.home)
    assert "fine" in held and "bad date" not in held
    assert "that origin stops here on this replica" in scene.alpha.log()
    scene.still_serving_and_converging("rule-breaking events")


# -- bindings ------------------------------------------------------------------------------------


async def test_a_member_cannot_pre_claim_the_origin_of_a_daemon_that_joins_later(fleet, scene):
    """Finding 2: any peer bound an origin it had not seen to any valid certificate, first binding
    won and was persisted — locking the real daemon out everywhere."""
    gamma = fleet.enrol_offline("gamma")
    gamma.start()
    gamma_origin = origin_of(gamma.home)  # known to mallory before gamma ever links (it is not secret)
    gamma_cert = (gamma.home / "palace" / "member.crt").read_bytes()
    m = scene.mallory
    claims = (
        OriginBinding(gamma_origin, m.cert_pem, m.nonce),
        OriginBinding(gamma_origin, m.cert_pem, legacy_binding_signature(m.key, scene.palace_id, gamma_origin)),
        OriginBinding(gamma_origin, gamma_cert, b"\x00" * 16),
        OriginBinding(gamma_origin, gamma_cert, legacy_binding_signature(m.key, scene.palace_id, gamma_origin)),
    )
    peer = await scene.connect()
    try:
        await peer.handshake(members=claims)
        await peer.send(Members(claims))
        await peer.drain(1.0)
    finally:
        await peer.aclose()
    append(gamma.home, "gamma is here")
    ctl_json(gamma.home, "peers", "add", scene.address)
    wait_converged(scene.alpha, scene.beta, gamma)
    assert "gamma is here" in bodies(scene.beta.home)
    scene.still_serving_and_converging("a binding hijack")


async def test_a_flood_of_bindings_is_capped_and_every_link_still_starts(fleet, scene):
    """Finding 2: thousands of junk bindings made the members message every link sends at its
    start exceed the frame limit, so every link of the victim failed — revocations included."""
    m = scene.mallory
    peer = await scene.connect()
    try:
        await peer.handshake()
        for _ in range(12):  # 3072 bindings, each a valid key-derived origin of mallory's own key
            await peer.send(Members(tuple(m.new_origin() for _ in range(MAX_BINDINGS_PER_MESSAGE))))
        junk = tuple(OriginBinding(origin_id_from_random(bytes([i % 256]) * 16), m.cert_pem, b"\x01" * 64)
                     for i in range(MAX_BINDINGS_PER_MESSAGE))
        await peer.send(Members(junk))
        await peer.drain(1.5)
    finally:
        await peer.aclose()
    with sqlite3.connect(f"file:{scene.alpha.home / 'palace.sqlite3'}?mode=ro", uri=True) as db:
        (stored,) = db.execute("SELECT count(*) FROM bindings").fetchone()
    assert stored <= MAX_ORIGINS_PER_KEY + 3, stored  # mallory's cap, plus alpha's, beta's (and gamma's)
    assert scene.alpha.log().count("binding(s) it relayed") == 1  # logged once, counted in peers
    delta = fleet.join("delta")  # a new link starts with alpha's whole members list
    append(delta.home, "delta joined after the flood")
    wait_converged(scene.alpha, scene.beta, delta)
    scene.still_serving_and_converging("a binding flood")


# -- malformed, oversized and out-of-order messages -------------------------------------------------

HEADER = struct.Struct(">I")


def _frame(obj) -> bytes:
    payload = msgpack.packb(obj, use_bin_type=True, unicode_errors="surrogatepass")
    return HEADER.pack(len(payload)) + payload


MALFORMED = [
    pytest.param(HEADER.pack(17 << 20), id="frame-over-16MiB"),
    pytest.param(HEADER.pack(5) + b"\xc1\xc1\xc1\xc1\xc1", id="not-msgpack"),
    pytest.param(_frame([1, 2, 3]), id="not-a-map"),
    pytest.param(_frame({"t": "want", "origin": "ori_" + "a" * 26, "after_seq": -1}), id="negative-int"),
    pytest.param(_frame({"t": "want", "origin": "ori_" + "a" * 26, "after_seq": 2**64 - 1}), id="huge-int"),
    pytest.param(_frame({"t": "vector", "entries": [["ori_" + "a" * 26, 1, b"short"]]}), id="bad-vector"),
    pytest.param(_frame({"t": "events", "events": "nope"}), id="events-not-a-list"),
    pytest.param(_frame({"t": "hello", "version": 2, "palace_id": "x", "peer_id": "y", "name": "n", "role": "member",
                         "origin": "ori_" + "a" * 26, "certificate": b"", "origin_proof": b""}), id="second-hello"),
    pytest.param(_frame({"t": "enrol", "invite_id": "i", "public_key": b"k" * 32, "name": "n", "proof": b"p" * 32}),
                 id="enrolment-in-a-session"),
    pytest.param(_frame({"t": "members", "entries": [["ori_" + "a" * 26, b"c"]] * 2}), id="protocol-1-members"),
    pytest.param(_frame({"t": "presence", "peer_id": "p", "name": "n", "serial": 1,
                         "watchers": [["a", "f" * 10_000, "s"]], "signature": b"s" * 64}), id="presence-too-big"),
]


@pytest.mark.parametrize("data", MALFORMED)
async def test_malformed_and_oversized_messages_end_only_that_link(scene, data):
    peer = await scene.connect()
    try:
        await peer.handshake()
        await peer.send_raw(data)
        assert await peer.closed_by_daemon(timeout=10), "the daemon kept a link that broke the protocol"
    finally:
        await peer.aclose()
    again = await scene.connect(source_host=scene.fresh_host())  # the victim takes mallory back: it backed off, not banned
    try:
        await again.handshake()
    finally:
        await again.aclose()
    scene.still_serving_and_converging("a malformed message")


async def test_unknown_message_types_are_skipped_and_the_link_stays(scene):
    peer = await scene.connect()
    try:
        await peer.handshake()
        await peer.send_raw(_frame({"t": "from-the-future", "payload": b"x" * 1000}))
        await peer.push(sealed(scene.mallory.key, scene.mallory.origin, body="after the unknown message"))
        wait_until(lambda: "after the unknown message" in bodies(scene.alpha.home), "mallory's event on alpha")
    finally:
        await peer.aclose()


# -- floods and stalls ---------------------------------------------------------------------------------


async def test_endless_pulls_do_not_starve_the_victim(scene):
    """Mallory asks for alpha's whole log again and again and reads everything as fast as it can:
    alpha serves it at a bounded rate and goes on with everyone else."""
    alpha_origin = origin_of(scene.alpha.home)
    for i in range(3):
        append(scene.alpha.home, f"alpha {i} " + "x" * 500)
    peer = await scene.connect()
    try:
        await peer.handshake()
        async with trio.open_nursery() as nursery:
            async def read_everything() -> None:
                with trio.move_on_after(60):
                    while not isinstance(await peer.next_message(), ConnectionClosed):
                        pass

            nursery.start_soon(read_everything)
            for _ in range(2000):
                await peer.send(Want(alpha_origin, 0))
            for _ in range(200):
                await peer.send(ArtifactWant("art_" + "0" * 32, 0))
            await trio.to_thread.run_sync(scene.still_serving_and_converging, "endless pulls")
            nursery.cancel_scope.cancel()
    finally:
        await peer.aclose()


async def test_more_artifact_requests_than_an_honest_peer_has_open_end_the_link(scene):
    """A link records the peer's artifact requests and serves them from a task of its own (reading
    never waits on writing, issue 30); what it records is bounded: an honest peer has at most
    16 open, so more than MAX_ARTIFACT_ASKS distinct ones at once is a protocol error that ends
    the link (instead of a table that grows with what the peer sends). Repeats of one request
    coalesce and are served once."""
    with RawClient(scene.alpha.socket_path) as client:
        client.hello()
        for i in range(40):
            client.call("append", type="note", stream="s", room="r", from_agent="alpha", body=f"{i} " + "y" * 100_000)
    peer = await scene.connect()
    try:
        await peer.handshake()
        # Alpha's senders stop at a full socket (mallory reads nothing from now on), so requests
        # pile up instead of being answered as fast as they come.
        await peer.send(Want(origin_of(scene.alpha.home), 0))
        for _ in range(100):  # one artifact asked again and again: one entry, not a hundred
            await peer.send(ArtifactWant("art_" + "0" * 32, 0))
        for i in range(MAX_ARTIFACT_ASKS + 2):
            await peer.send(ArtifactWant(f"art_{i:032x}", 0))
        with trio.fail_after(30):
            while mallory_seen(scene)["state"] in ("live", "catching up", "connecting"):
                await trio.sleep(0.2)
    finally:
        await peer.aclose()
    seen = mallory_seen(scene)
    assert f"more than {MAX_ARTIFACT_ASKS} artifacts at once" in (seen["last_error"] or ""), seen
    scene.still_serving_and_converging("a flood of artifact requests")


def stalls_in_health(scene: Scene) -> list[str]:
    """alpha's health problems about a link that makes no progress (status exits 1 with them)."""
    return [p for p in ctl_json(scene.alpha.home, "status")["health"]["problems"] if "makes no progress" in p]


@pytest.mark.slow
async def test_a_peer_that_stops_reading_loses_its_link(scene):
    """Mallory asks for far more than a socket buffer holds and never reads, though it keeps
    sending its vector (it looks alive): alpha's senders would wait forever. Health says the link
    makes no progress while it lasts; after SEND_STALL_S the link ends; alpha serves on, and
    mallory may come back."""
    alpha_origin = origin_of(scene.alpha.home)
    with RawClient(scene.alpha.socket_path) as client:
        client.hello()
        for i in range(40):
            client.call("append", type="note", stream="s", room="r", from_agent="alpha", body=f"{i} " + "y" * 100_000)
    peer = await scene.connect()
    stalls: list[str] = []
    try:
        await peer.handshake()
        for _ in range(20):
            await peer.send(Want(alpha_origin, 0))
        with trio.fail_after(SEND_STALL_S + 30):
            while True:  # never read: only notice when alpha gives up on us
                await trio.sleep(1)
                await peer.send(Vector(()))
                stalls = stalls or await trio.to_thread.run_sync(stalls_in_health, scene)
                seen = [p for p in ctl_json(scene.alpha.home, "peers")["peers"] if p["peer_id"] == scene.mallory.peer_id]
                if seen and seen[0]["state"] not in ("live", "catching up", "connecting"):
                    break
        assert "stopped reading" in (seen[0]["last_error"] or ""), seen
        assert stalls and "mallory" in stalls[0] and "taken nothing we sent" in stalls[0], stalls
    finally:
        await peer.aclose()
    scene.still_serving_and_converging("a peer that stopped reading")
    assert not stalls_in_health(scene)


@pytest.mark.slow
async def test_a_peer_that_goes_silent_loses_its_link(scene):
    """Mallory completes the handshake, then sends nothing and never closes (a laptop shut, a cable
    pulled: no FIN ever comes). Every live peer sends its vector every 10 s, so after SILENCE_S
    alpha ends the link instead of showing it live forever; health says so meanwhile."""
    peer = await scene.connect()
    stalls: list[str] = []
    try:
        await peer.handshake()
        with trio.fail_after(SILENCE_S + 30):
            while True:
                await trio.sleep(1)
                stalls = stalls or await trio.to_thread.run_sync(stalls_in_health, scene)
                seen = [p for p in ctl_json(scene.alpha.home, "peers")["peers"] if p["peer_id"] == scene.mallory.peer_id]
                if seen and seen[0]["state"] not in ("live", "catching up", "connecting"):
                    break
        assert "sent nothing for" in (seen[0]["last_error"] or ""), seen
        assert stalls and "it has sent nothing" in stalls[0], stalls
    finally:
        await peer.aclose()
    scene.still_serving_and_converging("a peer that went silent")


async def test_receipts_and_vectors_naming_invented_origins_are_not_kept(scene):
    """Finding 8: what a peer says it holds (vector, have) grew per-peer tables without bound."""
    invented = [origin_id_from_random(i.to_bytes(16, "big")) for i in range(3000)]
    peer = await scene.connect()
    try:
        await peer.handshake()
        for start in range(0, len(invented), 1000):
            chunk = invented[start:start + 1000]
            await peer.send(Vector(tuple(VectorEntry(o, 5, b"\x01" * 32) for o in chunk)))
            await peer.send(Have(tuple((o, 5) for o in chunk)))
        wants = [m for m in await peer.drain(1.5) if isinstance(m, Want)]
        assert wants == []  # nothing asked for origins nobody can vouch for (they would only be rejected)
        (seen,) = [p for p in ctl_json(scene.alpha.home, "peers")["peers"] if p["peer_id"] == scene.mallory.peer_id]
        assert len(seen["vector"]) <= 5  # only the origins alpha can verify
    finally:
        await peer.aclose()
    scene.still_serving_and_converging("invented origins")


async def test_an_origin_whose_events_were_rejected_is_not_pulled_again_and_again(scene):
    """Finding 8: events a peer sent that failed verification were asked for again on every
    anti-entropy vector, forever. Mallory shows three events of its origin and serves forgeries."""
    key, own = scene.mallory.key, scene.mallory.origin
    genuine = [sealed(key, own, body="first")]
    for n in (2, 3):
        genuine.append(sealed(key, own, seq=n, prev=genuine[-1].event_hash, body=f"event {n}"))
    shown = (VectorEntry(own, 3, genuine[-1].event_hash),)
    peer = await scene.connect()
    try:
        await peer.handshake(vector=shown)
        wants = 0
        for _ in range(4):  # as if four anti-entropy rounds passed
            for message in await peer.drain(0.7):
                if isinstance(message, Want) and message.origin == own:
                    wants += 1
                    await peer.push(*[dataclasses.replace(e, signature=bytes(64)) for e in genuine])
                    wait_until(lambda: mallory_seen(scene)["rejected_events"] == 3, "the forgeries rejected")
            await peer.send(Vector(shown))
        assert wants == 1, f"asked {wants} times for events it had rejected"
        await peer.push(*genuine)  # the honest events are still welcome, pushed
        wait_until(lambda: "event 3" in bodies(scene.alpha.home), "mallory's genuine events")
    finally:
        await peer.aclose()
    scene.still_serving_and_converging("rejected events")


async def test_a_flood_of_presence_records_is_relayed_newest_only(scene):
    """Finding 8: every presence record relayed spawned a task per link, without back-pressure."""
    m = scene.mallory
    peer = await scene.connect()
    try:
        await peer.handshake()
        # One event of its own first: its binding then travels to beta, which can verify its presence.
        await peer.push(sealed(m.key, m.origin, body="mallory is here"))
        wait_until(lambda: "mallory is here" in bodies(scene.beta.home), "mallory's event at beta")
        for serial in range(1, 3001):
            watchers = ((f"agent-{serial}", "to_agents=x", "2026-12-01T00:00:00Z"),)
            signature = m.key.sign(presence_signing_bytes(m.peer_id, "mallory", serial, watchers))
            await peer.send(Presence(m.peer_id, "mallory", serial, watchers, signature))
        wait_until(lambda: "agent-3000" in {w["agent"] for w in ctl_json(scene.beta.home, "who")["watchers"]},
                   "mallory's newest presence relayed to beta")
        assert {w["agent"] for w in ctl_json(scene.beta.home, "who")["watchers"]
                if w["daemon"]["peer_id"] == m.peer_id} == {"agent-3000"}
    finally:
        await peer.aclose()
    scene.still_serving_and_converging("a presence flood")


async def test_a_forged_or_altered_report_is_ignored_and_a_hostile_one_is_shown_only_as_visible_text(scene):
    """Daemon reports (the fleet view) are signed by their daemon: a member relaying beta's report
    with other content, or one it signed itself in beta's name, changes nothing anywhere; a report
    it signs as itself is relayed, and every daemon shows it only as checked, bounded text."""
    m = scene.mallory
    beta_id = peer_id(scene.beta.home)
    wait_until(lambda: beta_id in {d["peer_id"] for d in api(scene.alpha.home, "fleet")["daemons"]},
               "beta's report at alpha")
    peer = await scene.connect()
    try:
        await peer.handshake()
        with trio.fail_after(20):  # alpha hands every new link the reports it holds: beta's among them
            while not [r for r in peer.received if isinstance(r, Report) and r.peer_id == beta_id]:
                await peer.next_message()
        genuine = next(r for r in peer.received if isinstance(r, Report) and r.peer_id == beta_id)
        lie = encode_report({**decode_report(genuine.report), "events": 666_666,
                             "health": {"ok": False, "problems": ["beta is on fire"]}})
        await peer.send(Report(beta_id, genuine.name, genuine.serial + 1, lie, genuine.signature))  # altered
        await peer.send(Report(beta_id, genuine.name, 2**61, lie,  # in beta's name, signed by mallory
                               m.key.sign(report_signing_bytes(beta_id, genuine.name, 2**61, lie))))
        hostile = encode_report({"role": "member", "version": "\x1b[2J\x1b]0;owned\x07", "links": [
            {"peer_id": beta_id, "state": "live\nforged line"}], "health": {"ok": True, "problems": ["\x1b[31mred"]}})
        await peer.send(Report(m.peer_id, "mallory", 1, hostile,
                               m.key.sign(report_signing_bytes(m.peer_id, "mallory", 1, hostile))))
        await peer.drain(1.0)

        def mallory_heard(home):
            return next((d for d in api(home, "fleet")["daemons"] if d["peer_id"] == m.peer_id), None)

        # Its own report travels on (its binding ahead of it: beta never met mallory), checked text only.
        for home in (scene.alpha.home, scene.beta.home):
            report = wait_until(lambda home=home: mallory_heard(home), f"mallory's report at {home.name}")["report"]
            assert report["version"] == "\\x1b[2J\\x1b]0;owned\\x07" and report["version"].isprintable()
            assert report["links"] == [{"peer_id": beta_id, "state": None, "direction": None, "last_contact": None,
                                        "we_lack": None, "they_lack": None}]
            assert report["health"]["problems"] == ["\\x1b[31mred"]
    finally:
        await peer.aclose()
    (beta_at_alpha,) = [d for d in api(scene.alpha.home, "fleet")["daemons"] if d["peer_id"] == beta_id]
    assert beta_at_alpha["report"]["events"] != 666_666
    assert "beta is on fire" not in (beta_at_alpha["report"]["health"]["problems"] or [])
    assert ctl_json(scene.alpha.home, "status")["network"]["limits"]["bad_report"] == 2
    scene.still_serving_and_converging("forged reports")


async def test_a_member_cannot_say_where_another_daemon_is(scene):
    """Address records (issue 45 §1) are signed by the daemon they are about: a member relaying
    beta's record with another address, or signing one in beta's name, changes nothing anywhere;
    the record it signs as itself, naming beta's address, only sends alpha to beta (a dial that
    meets beta's certificate: the link alpha has already), and nothing else moves."""
    m = scene.mallory
    beta_id = peer_id(scene.beta.home)
    beta_address = ctl_json(scene.beta.home, "status")["network"]["listen"][0]
    trap = "127.0.0.99:9"
    wait_until(lambda: ctl_json(scene.alpha.home, "status")["network"]["addresses"]["heard"] == 1,
               "beta's address record at alpha")
    peer = await scene.connect()
    try:
        await peer.handshake()
        with trio.fail_after(20):  # alpha hands every new link the address records it holds: beta's among them
            while not [r for r in peer.received if isinstance(r, Addresses) and r.peer_id == beta_id]:
                await peer.next_message()
        genuine = next(r for r in peer.received if isinstance(r, Addresses) and r.peer_id == beta_id)
        assert genuine.addresses == (beta_address,)
        await peer.send(Addresses(beta_id, genuine.serial + 1, (trap,), genuine.signature))  # altered
        await peer.send(Addresses(beta_id, genuine.serial + 2, (trap,),  # in beta's name, signed by mallory
                                  m.key.sign(addresses_signing_bytes(beta_id, genuine.serial + 2, (trap,)))))
        own = (beta_address, trap)  # its own record: beta's address and a place with nobody
        await peer.send(Addresses(m.peer_id, genuine.serial, own, m.key.sign(
            addresses_signing_bytes(m.peer_id, genuine.serial, own))))
        await peer.drain(1.0)
    finally:
        await peer.aclose()
    network = ctl_json(scene.alpha.home, "status")["network"]
    assert network["limits"]["bad_addresses"] == 2
    targets = {t["address"]: t for p in ctl_json(scene.alpha.home, "peers")["peers"] for t in p["addresses"]}
    # Beta keeps its link and its own addresses; the trap is dialled only as mallory's place.
    beta_at_alpha = next(p for p in ctl_json(scene.alpha.home, "peers")["peers"] if p["peer_id"] == beta_id)
    assert beta_at_alpha["state"] == "live"
    assert trap not in [a["address"] for a in beta_at_alpha["addresses"]]
    mallory_at_alpha = next(p for p in ctl_json(scene.alpha.home, "peers")["peers"] if p["peer_id"] == m.peer_id)
    assert trap in [a["address"] for a in mallory_at_alpha["addresses"]] and trap in targets
    scene.still_serving_and_converging("forged address records")


async def test_a_slowloris_peer_is_closed_and_never_blocks_its_own_reconnection(scene):
    stalled = await scene.connect()  # TLS done, then silence: no hello
    host, port = scene.address.rsplit(":", 1)
    raw = socket.create_connection((host, int(port)))  # and one that never even starts TLS
    try:
        assert await stalled.closed_by_daemon(timeout=HELLO_TIMEOUT_S + 10)
        raw.settimeout(20)
        assert raw.recv(100) == b""  # a TCP connection that never starts TLS is closed too
    finally:
        raw.close()
        await stalled.aclose()
    peer = await scene.connect(source_host=scene.fresh_host())
    try:
        await peer.handshake()
        await peer.push(sealed(scene.mallory.key, scene.mallory.origin, body="back after stalling"))
        wait_until(lambda: "back after stalling" in bodies(scene.alpha.home), "mallory's event")
    finally:
        await peer.aclose()


async def test_a_reconnect_storm_is_refused_per_host_and_honest_peers_carry_on(scene):
    refused = 0
    for _ in range(MAX_ACCEPTS_PER_HOST + 40):
        try:
            peer = await scene.connect(source_host="127.0.0.99")
        except (trio.BrokenResourceError, OSError, trio.TooSlowError):
            refused += 1
            continue
        await peer.aclose()
    assert refused >= 40, refused
    assert scene.alpha.log().count("reconnect storm") == 1
    scene.still_serving_and_converging("a reconnect storm")
    status = ctl_json(scene.alpha.home, "status")
    assert status["network"]["limits"]["accept_rate"] >= 40


async def test_connections_per_host_are_capped(scene):
    host, port = scene.address.rsplit(":", 1)
    held = []
    try:
        for _ in range(MAX_INBOUND_PER_HOST + 8):
            sock = socket.socket()
            sock.bind(("127.0.0.123", 0))
            sock.connect((host, int(port)))
            held.append(sock)
        await trio.sleep(0.5)
        closed = 0
        for sock in held:
            sock.settimeout(0.2)
            try:
                if sock.recv(10) == b"":
                    closed += 1
            except (TimeoutError, ConnectionResetError):
                pass
        assert closed >= 8, closed
    finally:
        for sock in held:
            sock.close()
    assert "refusing peer connections from 127.0.0.123" in scene.alpha.log()
    scene.still_serving_and_converging("too many connections")


async def test_a_member_cannot_move_anothers_task(scene):
    """Issue 25, finding 7: a bystander could re-open a delivered task (a worker ran it again), stop
    a running one with `superseded`, or block it for good with a second `task.request`. Mallory
    pushes all three, signed with its own key (a daemon of its own would refuse to write them):
    every replica flags them and the task stays as its requester and claimant left it. A bystander
    on an honest daemon is refused at once, in words."""
    request = ctl_json(scene.alpha.home, "task", "create", "--project", "shop", "--from-agent", "alice",
                       "--to-agent", "bob", "--goal", "Add the table", "--branch", "main",
                       "--base-commit", "a" * 40, "--done", "tests pass")["task"]
    cid = request["correlation_id"]
    ctl_json(scene.alpha.home, "ack", request["id"], "--from-agent", "bob", "--status", "claimed")
    ctl_json(scene.alpha.home, "append", "--type", "patch.ready", "--stream", request["stream"], "--room",
             request["room"], "--from-agent", "bob", "--to-agent", "alice", "--correlation-id", cid,
             "--status", "ready", "--body", "the patch")
    key, own = scene.mallory.key, scene.mallory.origin
    common = {"stream": request["stream"], "room": request["room"], "from_agent": "mallory", "correlation_id": cid}
    reopen = sealed(key, own, seq=1, body="again!", type="event.ack", status="open", to_agent="bob", **common)
    supersede = sealed(key, own, seq=2, prev=reopen.event_hash, body="stop", type="task.reply", status="superseded",
                       **common)
    second = sealed(key, own, seq=3, prev=supersede.event_hash, body="mine now", type="task.request", status="open",
                    to_agent="mallory", **common)
    peer = await scene.connect()
    try:
        await peer.handshake()
        await peer.push(reopen, supersede, second)
        await peer.drain(1.0)
    finally:
        await peer.aclose()
    scene.still_serving_and_converging("a bystander moving a task")
    for daemon in (scene.alpha, scene.beta):
        view = ctl_json(daemon.home, "task", "show", cid)
        assert (view["state"], view["claimed_by"], view["requested_by"], view["assigned_to"]) == \
            ("ready", "bob", "alice", "bob"), view
        assert sorted(f["event_id"] for f in view["out_of_role"]) == sorted(e.id for e in (reopen, supersede, second))
    refused = run_ctl(scene.beta.home, "ack", request["id"], "--from-agent", "carol", "--status", "superseded")
    assert refused.returncode == 1 and "task.supersede is for the task's requester (alice)" in refused.stderr, refused
    assert "Traceback" not in refused.stderr


# -- the partial views and the broadcast tree (issue 45 §2) ---------------------------------------


async def test_a_member_cannot_take_every_slot_or_push_an_honest_link_out_of_a_partial_view(scene, short_tmp):
    """Past nine members a daemon links to a partial view of them. Mallory, a member, floods alpha
    with what the views and the tree exchange — requests for a link, walks naming itself, shuffles
    of invented peers, announcements of events that never come, grafts and prunes — and takes at
    most one slot; alpha keeps its link to beta, every table stays within its bound, and the
    revocation still takes mallory out for good."""
    m = scene.mallory
    # Eight more members, enrolled by the CA but never started: with alpha, beta and mallory the
    # palace has eleven, so alpha leaves the full mesh (their bindings travel as any relayed ones).
    others = [issue_member(scene.alpha.home, short_tmp / "creds", f"member{i}") for i in range(8)]
    peer = await scene.connect()
    try:
        await peer.handshake(members=tuple(o.binding for o in others))
        wait_until(lambda: api(scene.alpha.home, "status")["network"]["overlay"]["mode"] == "partial views",
                   "alpha past the full mesh")
        for _ in range(50):
            await peer.send(Neighbor(high=True))
            await peer.send(ForwardJoin(m.peer_id, 255))
            await peer.send(ForwardJoin("not-a-member", 6))
            await peer.send(Shuffle(m.peer_id, 6, tuple(f"invented-{i}" for i in range(8))))
            await peer.send(ShuffleReply((m.peer_id, *(o.peer_id for o in others[:7]))))
        for start in range(0, 40 * IHAVE_MAX, IHAVE_MAX):  # 10,240 events alpha never gets
            await peer.send(IHave(tuple((m.origin, seq) for seq in range(start + 1000, start + 1000 + IHAVE_MAX))))
        for _ in range(100):
            await peer.send(Graft(origin_of(scene.beta.home), 1))
            await peer.send(Prune())
        await peer.drain(1.5)
        overlay = api(scene.alpha.home, "status")["network"]["overlay"]
        assert len(overlay["active"]) <= ACTIVE_MAX and overlay["active"].count(m.peer_id) <= 1, overlay
        assert peer_id(scene.beta.home) in overlay["active"], overlay  # no honest link pushed out
        assert overlay["passive"] <= PASSIVE_MAX and overlay["ignored"] > 0, overlay
    finally:
        await peer.aclose()
    scene.still_serving_and_converging("a flood of view and tree messages")
    ctl_json(scene.alpha.home, "revoke", m.peer_id)
    wait_until(lambda: m.peer_id not in api(scene.alpha.home, "status")["network"]["overlay"]["active"],
               "mallory out of alpha's view")
    try:
        peer = await scene.connect(source_host=scene.fresh_host())
    except (OSError, trio.BrokenResourceError):
        return  # refused in the handshake: never linked again
    try:
        await peer.hello()
        assert await peer.closed_by_daemon(), "a revoked member is never linked again"
    finally:
        await peer.aclose()
    assert m.peer_id not in api(scene.alpha.home, "status")["network"]["overlay"]["active"]
