"""The store's agent registry (palaced/store/agents.py): registration by the first write, refusal
of writes as another daemon's agent, the rules an arriving event must keep, and verdicts that two
replicas reach alike however their events arrived."""

from __future__ import annotations

import dataclasses
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.canonical import canonical_json
from palace_proto.envelope import seal_event
from palace_proto.errors import ValidationError
from palace_proto.identity import REGISTER, RETIRE, SYSTEM_AGENT, registry_metadata
from palace_proto.ids import fingerprint
from palace_proto.tasks import derive_task
from palace_proto.validation import AppendRequest, Limits
from palaced.features import STORE_PARTS
from palaced.store import Store, append_event, append_system, apply_remote, import_history
from palaced.store.identity import AgentElsewhere, AgentRetired

LIMITS = Limits()


@pytest.fixture
def trio_of_stores(tmp_path):
    stores = [Store(tmp_path / f"{name}.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS) for name in "abc"]
    for store in stores:
        store.agents.enforcing = True  # as when the daemon belongs to a palace
    yield stores
    for store in stores:
        store.close()


def request(**fields):
    return AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": "mac-claude",
                                    "body": "hi", **fields}, LIMITS)


def append(store, **fields):
    ok, value = store.write_batch([lambda w: append_event(w, request(**fields))]).outcomes[0]
    if not ok:
        raise value
    return value


def system(store, kind, agent, **extra):
    req = AppendRequest.from_wire({"type": kind, "stream": "palace", "room": "agents", "from_agent": SYSTEM_AGENT,
                                   "body": kind, "metadata": registry_metadata(kind, agent, store.agents.daemon,
                                                                               **extra)}, LIMITS)
    ok, value = store.write_batch([lambda w: append_system(w, req)]).outcomes[0]
    assert ok, value
    return value


def keys_of(*stores):
    table = {s.origin_id: s.public_key for s in stores}
    return lambda origin, origin_seq: table.get(origin)


def sync(source, target, *stores):
    """Everything ``source`` holds of every origin, applied on ``target`` (origins in seq order)."""
    events = []
    for origin in source.version_vector():
        events += source.signed_events_of_origin(origin, 0, 10_000)
    ok, report = target.write_batch([lambda w: apply_remote(w, events, keys_of(*stores), source="test")]).outcomes[0]
    assert ok, report
    return report


def types_of(store):
    return [(e["type"], e["from_agent"]) for e in store.list_events(_query())]


def _query(**fields):
    from palace_proto.validation import ListQuery

    return ListQuery.from_wire({"order": "asc", "limit": 500, **fields})


def test_the_first_write_as_an_agent_registers_it_in_the_same_commit(trio_of_stores):
    a, _, _ = trio_of_stores
    append(a)
    append(a)
    assert types_of(a) == [(REGISTER, SYSTEM_AGENT), ("note", "mac-claude"), ("note", "mac-claude")]
    record = a.agents.records["mac-claude"]
    assert record.current.daemon == fingerprint(a.public_key) == a.agents.daemon


def test_a_daemon_alone_registers_nothing(tmp_path):
    """Guards the rule that registration starts when a daemon belongs to a palace (until then
    there is no other daemon to tell apart, and the log stays as it was)."""
    alone = Store(tmp_path / "alone.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    try:
        append(alone)
        assert types_of(alone) == [("note", "mac-claude")] and alone.agents.records == {}
    finally:
        alone.close()


def test_a_write_as_another_daemons_agent_is_refused_with_where_it_lives(trio_of_stores):
    a, b, _ = trio_of_stores
    append(a)
    sync(a, b, a, b)
    with pytest.raises(AgentElsewhere) as refused:
        append(b, body="I am mac-claude too")
    assert f"peer id {a.agents.daemon}" in refused.value.message and "palacectl agent transfer" in refused.value.message
    assert [t for t, _ in types_of(b)] == [REGISTER, "note"]  # nothing of the refused write


def test_a_retired_agent_writes_no_more(trio_of_stores):
    a, _, _ = trio_of_stores
    append(a)
    system(a, RETIRE, "mac-claude")
    with pytest.raises(AgentRetired, match="palacectl agent register mac-claude"):
        append(a)
    system(a, REGISTER, "mac-claude")  # registered again
    append(a)


def test_palaced_writes_only_its_notices(trio_of_stores):
    a, _, _ = trio_of_stores
    with pytest.raises(ValidationError, match="daemon's own id"):
        append(a, from_agent=SYSTEM_AGENT)


def test_a_partition_where_two_daemons_took_one_id_ends_with_the_same_verdicts_everywhere(trio_of_stores):
    a, b, c = trio_of_stores
    first = append(a, body="a's mac-claude")  # earlier: a's registration wins
    second = append(b, body="b's mac-claude, written without knowing")
    # c hears of b first, then of a; a and b then hear of each other.
    sync(b, c, a, b, c)
    assert c.agents.verdict(second) is None  # nothing known against it yet
    sync(a, c, a, b, c)
    sync(a, b, a, b, c)
    sync(b, a, a, b, c)
    for store in (a, b, c):
        events = {e["id"]: e for e in store.agents.annotate(store.list_events(_query()))}
        assert "impersonation" not in events[first["id"]]
        verdict = events[second["id"]]["impersonation"]
        assert verdict["holder"] == a.agents.daemon and verdict["written_by"] == b.agents.daemon
        record = store.agents.records["mac-claude"]
        assert record.current.daemon == a.agents.daemon and record.void[0][0].daemon == b.agents.daemon
    with pytest.raises(AgentElsewhere):  # and b, now knowing, writes as it no more
        append(b)


def _stored_and_flagged(a, b, forged):
    """``forged`` (an authentic event of a's chain) pushed to b: stored (replicas converge), and
    the verdict b attaches to it."""
    ok, report = b.write_batch([lambda w: apply_remote(w, [forged], keys_of(a, b), source="test")]).outcomes[0]
    assert ok and report.refused == [] and [r.signed.id for r in report.applied] == [forged.id], report
    [stored] = b.agents.annotate([b.get_event(forged.id)])
    return stored.get("impersonation")


def test_an_origin_that_writes_as_an_agent_it_never_registered_is_stored_and_flagged(trio_of_stores):
    """Guards against a member skipping registration to write as an agent (issue 43: a replica
    stores and relays every authentic event; the verdict, not a refusal, says it moves nothing)."""
    a, b, _ = trio_of_stores
    append(a, from_agent="box-bot")  # b learns of a registry-aware origin
    sync(a, b, a, b)
    events = a.signed_events_of_origin(a.origin_id, 0, 10)
    last = events[-1]
    forged = seal_event(a.chain.key, origin=a.origin_id, origin_seq=last.origin_seq + 1, prev_hash=last.event_hash,
                        created_at="2026-12-01T10:00:00.000000Z", type="note", stream="s", room="r",
                        from_agent="mac-claude", body="as mac-claude, unregistered")
    verdict = _stored_and_flagged(a, b, forged)
    assert "never registered mac-claude" in verdict["reason"]


@pytest.mark.parametrize(("change", "why"), [
    ({"from_agent": "mac-claude"}, "must be written as palaced"),
    ({"metadata_json": "{}"}, "must name its agent"),
    ({"metadata_json": canonical_json({"agent": "x", "daemon": "SOMEONE-ELSE"})}, "names another daemon"),
])
def test_a_registry_event_must_be_the_daemons_own_word(trio_of_stores, change, why):
    """Stored and relayed, flagged, and it registers nothing."""
    a, b, _ = trio_of_stores
    append(a)
    sync(a, b, a, b)
    last = a.signed_events_of_origin(a.origin_id, 0, 10)[-1]
    fields = {"type": REGISTER, "stream": "palace", "room": "agents", "from_agent": SYSTEM_AGENT, "body": "r",
              "metadata_json": canonical_json(registry_metadata(REGISTER, "x", a.agents.daemon)), **change}
    forged = seal_event(a.chain.key, origin=a.origin_id, origin_seq=last.origin_seq + 1, prev_hash=last.event_hash,
                        created_at="2026-12-01T10:00:00.000000Z", **fields)
    assert why in _stored_and_flagged(a, b, forged)["reason"]
    assert "x" not in b.agents.records


def test_a_peers_palaced_writes_only_notices(trio_of_stores):
    a, b, _ = trio_of_stores
    append(a)
    sync(a, b, a, b)
    last = a.signed_events_of_origin(a.origin_id, 0, 10)[-1]
    forged = seal_event(a.chain.key, origin=a.origin_id, origin_seq=last.origin_seq + 1, prev_hash=last.event_hash,
                        created_at="2026-12-01T10:00:00.000000Z", type="task.request", stream="s", room="r",
                        from_agent=SYSTEM_AGENT, correlation_id="task_x_1", body="do this, says the daemon")
    assert "only the daemon's own notices" in _stored_and_flagged(a, b, forged)["reason"]
    # flagged: it holds no role, so it opens no task
    assert b.events_by_correlation("task_x_1") and derive_task("task_x_1", b.agents.annotate(
        b.events_by_correlation("task_x_1"))) is None


def test_registrations_of_a_rolled_back_job_leave_no_trace(trio_of_stores):
    a, _, _ = trio_of_stores

    def fails(w):
        append_event(w, request(from_agent="ghost"))
        raise ValidationError("no", field="x")

    outcomes = a.write_batch([fails, lambda w: append_event(w, request())]).outcomes
    assert outcomes[0][0] is False and outcomes[1][0] is True
    assert "ghost" not in a.agents.records and "mac-claude" in a.agents.records
    assert [e["metadata"].get("agent") for e in a.list_events(_query(types=[REGISTER]))] == ["mac-claude"]


def test_the_registry_is_derived_again_from_the_log_on_open(trio_of_stores, tmp_path):
    a, _, _ = trio_of_stores
    append(a)
    key = Ed25519PrivateKey.generate()
    first = Store(tmp_path / "d.sqlite3", key, LIMITS, parts=STORE_PARTS)
    try:
        sync(a, first, a, first)
    finally:
        first.close()
    again = Store(tmp_path / "d.sqlite3", key, LIMITS, parts=STORE_PARTS)
    try:
        assert again.agents.records["mac-claude"].current.daemon == a.agents.daemon
        again.agents.enforcing = True
        with pytest.raises(AgentElsewhere):
            append(again)
    finally:
        again.close()


def test_verdicts_attach_to_copies_and_leave_shared_events_alone(trio_of_stores):
    a, b, _ = trio_of_stores
    append(a)
    theirs = append(b, body="b's")
    sync(a, b, a, b)
    shared = dict(theirs)
    flagged = b.agents.annotate([shared])[0]
    assert "impersonation" in flagged and "impersonation" not in shared
    assert json.dumps(flagged)  # it speaks JSON


def test_history_of_another_palace_registers_nothing_here(trio_of_stores):
    a, b, _ = trio_of_stores
    append(a)
    events = a.signed_events_of_origin(a.origin_id, 0, 10)
    ok, result = b.write_batch([lambda w: import_history(w, events, {a.origin_id: a.public_key})]).outcomes[0]
    assert ok and result["imported"] == 2
    assert "mac-claude" not in b.agents.records
    append(b)  # b's own mac-claude
    assert b.agents.records["mac-claude"].current.daemon == b.agents.daemon
    assert dataclasses.is_dataclass(b.agents.records["mac-claude"])


def test_one_origin_registers_a_bounded_number_of_agents_here_and_on_arrival(trio_of_stores, monkeypatch):
    """Guards the registry's memory on every replica against a member inventing agent ids."""
    from palaced.store import identity as registry

    a, b, _ = trio_of_stores
    monkeypatch.setattr(registry, "MAX_AGENTS_PER_ORIGIN", 2)
    append(a, from_agent="one")
    append(a, from_agent="two")
    with pytest.raises(ValidationError, match="registered 2 agent ids already"):
        append(a, from_agent="three")
    append(a, from_agent="one")  # the ones it has go on
    sync(a, b, a, b)
    last = a.signed_events_of_origin(a.origin_id, 0, 50)[-1]
    forged = seal_event(a.chain.key, origin=a.origin_id, origin_seq=last.origin_seq + 1, prev_hash=last.event_hash,
                        created_at="2026-12-01T10:00:00.000000Z", type=REGISTER, stream="palace", room="agents",
                        from_agent=SYSTEM_AGENT, body="r",
                        metadata_json=canonical_json(registry_metadata(REGISTER, "three", a.agents.daemon)))
    ok, report = b.write_batch([lambda w: apply_remote(w, [forged], keys_of(a, b), source="test")]).outcomes[0]
    assert ok and report.refused == [] and len(report.applied) == 1  # stored: replicas converge
    assert "three" not in b.agents.records  # and void: beyond the bound it registers nothing


def _activity_as_the_log_counts_it(store):
    return sorted(store.db.reader().execute(
        "SELECT from_agent, origin, count(*), min(created_at), max(created_at) FROM events "
        "GROUP BY from_agent, origin").fetchall())


def test_agent_activity_counts_every_event_whichever_way_it_came(trio_of_stores, tmp_path):
    """Guards the table the roster reads instead of grouping the log (schema 0008) against drift:
    local appends, the daemon's own notices, a peer's events, a failed write rolled back, and a
    database reopened all leave it equal to what the log itself counts."""
    a, b, _ = trio_of_stores
    for agent in ("mac-claude", "mac-claude", "linux-codex"):
        append(a, from_agent=agent)
    append(b, from_agent="win-codex")
    sync(a, b, a, b)
    sync(a, b, a, b)  # the same events again: already held, counted once
    with pytest.raises(AgentElsewhere):
        append(b, from_agent="mac-claude")  # refused in its savepoint: nothing to count
    for store in (a, b):
        assert sorted(store.agent_activity()) == _activity_as_the_log_counts_it(store)
    rows = {(r[0], r[1]): r[2] for r in b.agent_activity()}
    assert rows[("mac-claude", a.origin_id)] == 2 and rows[("win-codex", b.origin_id)] == 1
    path = b.path
    b.close()
    reopened = Store(path, Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    try:
        assert sorted(reopened.agent_activity()) == _activity_as_the_log_counts_it(reopened)
    finally:
        reopened.close()


def test_agent_activity_folded_later_reads_the_same_before_during_and_after_the_fold(trio_of_stores):
    """Guards schema 0011: the counts are folded by a write job after the commits, in chunks;
    a read adds what is not folded yet, so it equals the log's own count at every step."""
    from palaced.store import follow

    a, _, _ = trio_of_stores
    for k in range(7):
        append(a, from_agent="early" if k < 4 else "late")
    assert sorted(a.agent_activity()) == _activity_as_the_log_counts_it(a)
    position, counted = a.write_batch([lambda w: follow.fold_activity(w, limit=3)]).outcomes[0][1]
    assert counted == 3 and sorted(a.agent_activity()) == _activity_as_the_log_counts_it(a)
    while counted:
        position, counted = a.write_batch([lambda w: follow.fold_activity(w, limit=3)]).outcomes[0][1]
    assert position == a.latest()[0]
    assert sorted(a.agent_activity()) == _activity_as_the_log_counts_it(a)
    folded = a.db.reader().execute("SELECT from_agent, events FROM agent_activity ORDER BY from_agent").fetchall()
    assert [(agent, n) for agent, n in folded if agent in ("early", "late")] == [("early", 4), ("late", 3)]
