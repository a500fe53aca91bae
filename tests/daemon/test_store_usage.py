"""Usage totals kept at commit (palaced/store/usage.py, schema 0013; issue 43 §1, findings 3 and 4),
on real SQLite files: only the reports the authority table lets count are summed; the totals are
the same whatever order a task's request, claim and reports arrive in, and move when a registry
change makes a claimant's events impersonations; a task counts its first 256 reports; the migration
fills the tables from the log; and every answer equals the pure sum (palace_proto.usage.totals,
spending) over the reports derive_task counts."""

from __future__ import annotations

import itertools
import json
import os
import random

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from palace_proto.canonical import canonical_json
from palace_proto.envelope import GENESIS_HASH, seal_event
from palace_proto.ids import origin_id_for_key
from palace_proto.tasks import derive_task
from palace_proto.usage import (
    MAX_COST_USD,
    MAX_TOKENS,
    MAX_USAGE_REPORTS_PER_TASK,
    USAGE_TYPE,
    record_from_event,
    spending,
    totals,
)
from palace_proto.validation import AppendRequest, Limits
from palaced.features import STORE_PARTS
from palaced.store import Store, append_event, apply_remote
from palaced.store.usage import read_usage
from tests.daemon.test_store_agents import sync

LIMITS = Limits()
CID = "task_fix_parser_0001"


@pytest.fixture
def stores(tmp_path):
    opened = [Store(tmp_path / f"{name}.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS) for name in "abc"]
    yield opened
    for store in opened:
        store.close()


class HandChain:
    """One origin's chain sealed by hand: what a member's (possibly modified) daemon writes, at
    any date, as any agent."""

    def __init__(self) -> None:
        self.key = Ed25519PrivateKey.generate()
        self.public_key = self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.origin = origin_id_for_key(self.public_key, os.urandom(16))
        self.events = []

    def write(self, at: str, **fields):
        fields.setdefault("stream", "project/shop")
        fields.setdefault("room", "delegation")
        if "metadata" in fields:
            fields["metadata_json"] = canonical_json(fields.pop("metadata"))
        prev = self.events[-1] if self.events else None
        event = seal_event(self.key, origin=self.origin, origin_seq=len(self.events) + 1,
                           prev_hash=prev.event_hash if prev else GENESIS_HASH, created_at=at, **fields)
        self.events.append(event)
        return event


def at(day: int, second: int = 0, month: int = 3) -> str:
    return f"2026-{month:02d}-{day:02d}T10:{second // 60 % 60:02d}:{second % 60:02d}.{second:06d}Z"


def figures(task=CID, tokens_in=100, tokens_out=10, cost=0.25, machine="m1", model="m-1", **more):
    return {"runner": "custom", "tokens_in": tokens_in, "tokens_out": tokens_out, "cost_usd": cost, "model": model,
            "task_id": task, "machine": machine, **more}


def request(chain, when, cid=CID, to="bob", by="alice"):
    return chain.write(when, type="task.request", from_agent=by, to_agent=to, correlation_id=cid, status="open",
                       body="fix the parser")


def claim(chain, when, req, cid=CID, by="bob"):
    return chain.write(when, type="event.ack", from_agent=by, correlation_id=cid, status="claimed", ack_of=req.id)


def report(chain, when, cid=CID, by="bob", **fields):
    return chain.write(when, type=USAGE_TYPE, from_agent=by, correlation_id=cid,
                       metadata=figures(**{"task": cid, **fields}), body="usage")


def deliver(store, *chains, events=None):
    """Each chain's events (or ``events`` of theirs), applied on ``store`` in one batch (an origin's
    events in chain order)."""
    table = {c.origin: c.public_key for c in chains}
    events = [e for c in chains for e in c.events] if events is None else events
    ok, result = store.write_batch([lambda w: apply_remote(w, events, lambda origin, seq: table.get(origin))]).outcomes[0]
    assert ok and not result.refused and not result.rejected, result
    return result


def counted(store, by="task"):
    """(key, runs, tokens_in, cost_usd) of each total, and the flagged count."""
    found = read_usage(store, by)
    return [(t.key, t.runs, t.tokens_in, t.cost_usd) for t in found.totals], found.flagged


def append(store, **fields):
    req = AppendRequest.from_wire({"type": "note", "stream": "project/shop", "room": "delegation",
                                   "from_agent": "alice", "body": "x", **fields}, LIMITS)
    ok, value = store.write_batch([lambda w: append_event(w, req)]).outcomes[0]
    if not ok:
        raise value
    return value


def test_a_report_counts_once_its_request_and_claim_arrive_whatever_order_the_origins_come_in(tmp_path):
    """Replicas receive origins in their own order: bob's report (written on the daemon bob runs on
    now) may arrive before the request, or before the claim bob wrote elsewhere. It is held and
    flagged until both are there, then counted; a stranger's report on the task, and one on a task
    nobody requested, count nowhere, whatever the order."""
    requester, claimer, runner = HandChain(), HandChain(), HandChain()
    req = request(requester, at(2))
    claim(claimer, at(2, 5), req)
    report(runner, at(2, 9), tokens_in=1200, cost=0.042)
    report(runner, at(2, 11), by="mallory", tokens_in=MAX_TOKENS, cost=MAX_COST_USD)  # never claimed it
    report(runner, at(2, 12), cid="task_invented_0002", by="bob", tokens_in=MAX_TOKENS, cost=MAX_COST_USD)
    finals = set()
    for n, order in enumerate(itertools.permutations([requester, claimer, runner])):
        store = Store(tmp_path / f"order{n}.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
        try:
            for step, chain in enumerate(order, 1):
                deliver(store, chain)
                held = 3 if runner in order[:step] else 0
                if step < 3:  # the report waits for what it depends on
                    assert counted(store) == ([], held), (order, step)
            assert counted(store) == ([(CID, 1, 1200, 0.042)], 2), order
            finals.add((tuple(counted(store, "agent")[0]), tuple(counted(store, "day")[0])))
        finally:
            store.close()
    assert finals == {(((("bob", 1, 1200, 0.042),), (("2026-03-02", 1, 1200, 0.042),)))}


def test_a_registration_learnt_late_makes_the_claimants_reports_count_nowhere(stores):
    """A registry event can change a verdict after the fact: b, cut off from a, writes a claim and a
    report as bob, whom a registered first. Once a's registration arrives, bob's events on b are
    impersonations: the report stops counting on b, and never counts on a."""
    a, b, _ = stores
    for store in (a, b):
        store.agents.enforcing = True  # as when the daemons belong to a palace
    append(a, from_agent="bob", body="bob lives on a")  # registers bob to a, first
    req = append(b, type="task.request", to_agent="bob", correlation_id=CID, status="open", body="fix it")
    append(b, type="event.ack", from_agent="bob", correlation_id=CID, status="claimed", ack_of=req["id"])
    append(b, type=USAGE_TYPE, from_agent="bob", correlation_id=CID, metadata=figures(), body="usage")
    assert counted(b) == ([(CID, 1, 100, 0.25)], 0)
    sync(a, b, a, b)
    assert counted(b) == ([], 1)
    sync(b, a, a, b)
    assert counted(a) == ([], 1)


def test_the_registry_derived_anew_judges_again_the_reports_of_the_agents_whose_record_changed(stores):
    """``AgentRegistry.reload_ca`` (the palace CA's check changed): a person's reports count only
    while the CA's grant of their id verifies, and move with it."""
    a, _, _ = stores
    a.agents.enforcing = True
    a.agents.human_grant = lambda agent: {"ca_nonce": "n" * 32, "ca_signature": "ab" * 32}
    a.agents.ca_check = lambda event: True
    req = append(a, type="task.request", to_agent="*", correlation_id=CID, status="open", body="anyone")
    append(a, type="event.ack", from_agent="human:ann", correlation_id=CID, status="claimed", ack_of=req["id"])
    append(a, type=USAGE_TYPE, from_agent="human:ann", correlation_id=CID, metadata=figures(), body="usage")
    assert counted(a) == ([(CID, 1, 100, 0.25)], 0)
    a.agents.ca_check = lambda event: False  # the grant no longer verifies: human:ann is unproven
    ok, value = a.write_batch([a.agents.reload_ca]).outcomes[0]
    assert ok, value
    assert counted(a) == ([], 1)
    a.agents.ca_check = lambda event: True
    ok, value = a.write_batch([a.agents.reload_ca]).outcomes[0]
    assert ok, value
    assert counted(a) == ([(CID, 1, 100, 0.25)], 0)


def test_of_300_reports_on_one_task_its_first_256_count(stores):
    """A claimant's modified daemon floods its task: the first 256 reports (created_at, event id)
    count, the rest are flagged, whichever batch brought them."""
    a, _, _ = stores
    req = append(a, type="task.request", to_agent="bob", correlation_id=CID, status="open", body="fix it")
    append(a, type="event.ack", from_agent="bob", correlation_id=CID, status="claimed", ack_of=req["id"])
    flood = HandChain()
    day = a.get_event(req["id"])["created_at"][:10]
    for n in range(300):
        flood.write(f"{day}T23:59:59.{n:06d}Z", type=USAGE_TYPE, from_agent="bob", correlation_id=CID,
                    metadata=figures(tokens_in=1, cost=0.000001), body="usage")
    deliver(a, flood, events=flood.events[:120])
    assert counted(a) == ([(CID, 120, 120, 0.00012)], 0)
    deliver(a, flood, events=flood.events[120:])
    assert counted(a) == ([(CID, MAX_USAGE_REPORTS_PER_TASK, 256, 0.000256)], 300 - MAX_USAGE_REPORTS_PER_TASK)
    last_counted = a.db.reader().execute("SELECT max(created_at) FROM usage_reports WHERE counts = 1").fetchone()[0]
    assert last_counted == f"{day}T23:59:59.000255Z"


def test_since_reads_whole_days_and_of_a_time_of_day_its_first_days_reports_from_then(tmp_path):
    chain = HandChain()
    req = request(chain, at(1))
    claim(chain, at(1, 1), req)
    for day, second, tokens in ((2, 10, 1), (2, 50, 10), (3, 10, 100), (4, 10, 1000)):
        report(chain, at(day, second), tokens_in=tokens)
    store = Store(tmp_path / "s.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    try:
        deliver(store, chain)

        def since(bound):
            return [(t.key, t.tokens_in) for t in read_usage(store, "day", bound).totals]

        assert since("") == [("2026-03-02", 11), ("2026-03-03", 100), ("2026-03-04", 1000)]
        assert since("2026-03-03") == since("2026-03-03T00:00:00.000000Z") == [("2026-03-03", 100),
                                                                               ("2026-03-04", 1000)]
        assert since(at(2, 30)) == [("2026-03-02", 10), ("2026-03-03", 100), ("2026-03-04", 1000)]
        assert [(t.key, t.tokens_in) for t in read_usage(store, "task", at(2, 30)).totals] == [(CID, 1110)]
    finally:
        store.close()


def test_the_migration_fills_the_tables_from_the_log(stores):
    """Schema 0013 on a database from before it: the store judges every report of the log when it
    opens, and holds what the insert path would have kept."""
    a, _, _ = stores
    req = append(a, type="task.request", to_agent="bob", correlation_id=CID, status="open", body="fix it")
    append(a, type="event.ack", from_agent="bob", correlation_id=CID, status="claimed", ack_of=req["id"])
    for model in ("m-1", "m-2", None):
        append(a, type=USAGE_TYPE, from_agent="bob", correlation_id=CID, metadata=figures(model=model), body="u")
    stranger = HandChain()
    report(stranger, a.get_event(req["id"])["created_at"], by="mallory")
    deliver(a, stranger)
    kept = {by: counted(a, by) for by in ("task", "agent", "machine", "day", "model")}
    rows = a.db.writer.execute("SELECT * FROM usage_reports ORDER BY event_id").fetchall()
    assert kept["model"] == ([("m-1", 1, 100, 0.25), ("m-2", 1, 100, 0.25), (None, 1, 100, 0.25)], 1)
    a.db.writer.execute("DROP TABLE usage_reports; DROP TABLE usage_totals; DELETE FROM _migrations WHERE version >= 13; "
                        "DELETE FROM meta WHERE key LIKE 'usage%'")
    path, key = a.path, Ed25519PrivateKey.generate()
    a.close()
    reopened = Store(path, key, LIMITS, parts=STORE_PARTS)
    try:
        assert {by: counted(reopened, by) for by in kept} == kept
        assert reopened.db.writer.execute("SELECT * FROM usage_reports ORDER BY event_id").fetchall() == rows
    finally:
        reopened.close()


def test_every_answer_is_the_pure_sum_of_the_reports_the_tasks_count(tmp_path):
    """Random tasks, claims, releases and reports (strangers', backdated, on invented tasks,
    mistyped task ids) from five origins, arriving interleaved at random, a few a batch: the totals by every field,
    since any bound,
    and the spending budgets judge equal palace_proto.usage's over the reports derive_task counts."""
    rng = random.Random(43)
    agents = ["bob", "carol", "dave", "mallory"]
    chains = [HandChain() for _ in range(5)]
    tasks = [f"task_t{n}" for n in range(6)]
    requests = {}
    for n in range(320):
        # Mostly in time order across four days of two months; one event in ten backdated.
        step = n if rng.random() < 0.9 else rng.randrange(n + 1)
        month, day = ((2, 27), (2, 28), (3, 1), (3, 2))[step // 80]
        chain, when = rng.choice(chains), at(day, step * 10 % 3600 + rng.randrange(10), month=month)
        cid = rng.choice([*tasks, "task_nobody_asked"])
        kind = rng.random()
        if kind < 0.1 and cid != "task_nobody_asked":
            requests.setdefault(cid, request(chain, when, cid=cid, to=rng.choice([*agents[:3], "*"])))
        elif kind < 0.3 and cid in requests:
            claim(chain, when, requests[cid], cid=cid, by=rng.choice(agents))
        elif kind < 0.35 and cid in requests:
            chain.write(when, type="task.release", from_agent=rng.choice(agents), correlation_id=cid)
        else:
            named = cid if rng.random() < 0.9 else rng.choice(tasks)
            cost = rng.choice([None, 0.0, 0.125, 1.5])
            report(chain, when, cid=cid, by=rng.choice(agents), tokens_in=rng.randrange(1000), cost=cost,
                   machine=rng.choice(["m1", "m2"]), model=rng.choice(["m-1", None]), task_id=named)
    everything = [e.to_public(0) for c in chains for e in c.events]
    counts = set()
    for cid in {e["correlation_id"] for e in everything}:
        view = derive_task(cid, [e for e in everything if e["correlation_id"] == cid])
        counts.update(view["counted"].get("usage.report", []) if view else [])
    records = [record_from_event(e) for e in everything if e["id"] in counts]
    assert 10 < len(records) < len([e for e in everything if e["type"] == USAGE_TYPE])
    now = "2026-03-02T12:00:00.000000Z"
    answers = set()
    for n in range(3):
        store = Store(tmp_path / f"r{n}.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
        try:
            # The origins' events interleaved at random (each origin's in its order), a few a batch.
            queues = [list(c.events) for c in chains]
            arrival = []
            while any(queues):
                arrival.append(rng.choice([q for q in queues if q]).pop(0))
            while arrival:
                size = rng.randrange(1, 30)
                deliver(store, *chains, events=arrival[:size])
                del arrival[:size]
            for by in ("task", "agent", "machine", "day", "model"):
                for bound in ("", "2026-03-02", at(2, 1800)):
                    got = read_usage(store, by, bound)
                    assert got.totals == totals([r for r in records if r.created_at >= bound], by), (by, bound)
                    assert got.flagged == sum(e["type"] == USAGE_TYPE for e in everything) - len(records)
            assert read_usage(store, "task", "", now).spending == spending(records, now)
            answers.add(json.dumps([t.to_wire() for t in read_usage(store, "agent").totals]))
        finally:
            store.close()
    assert len(answers) == 1
