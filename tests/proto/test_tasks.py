"""The task lifecycle, pure: claims every replica agrees on, release and reassign, stalls, the queue fields."""

from __future__ import annotations

import random

import pytest

from palace_proto.errors import ValidationError
from palace_proto.tasks import (
    CONFLICT,
    REASSIGN,
    RELEASE,
    REQUEST,
    check_blocked_by,
    check_priority,
    derive_task,
    queue_fields,
    ready_order,
)

CID = "task_demo_0001"


def at(seconds: int) -> str:
    minutes, secs = divmod(seconds, 60)
    return f"2026-12-01T10:{minutes:02d}:{secs:02d}.000000Z"


def ev(kind, who, t, *, status=None, to=None, eid=None, metadata=None, origin="o1"):
    return {"id": eid or f"evt_{kind}_{who}_{t}", "type": kind, "from_agent": who, "to_agent": to, "created_at": at(t),
            "status": status, "correlation_id": CID, "origin": origin, "metadata": metadata or {}}


def request(t=0, to="bob", **metadata):
    return ev(REQUEST, "alice", t, status="open", to=to, metadata=metadata)


def claim(who, t, **kw):
    return ev("event.ack", who, t, status="claimed", **kw)


def test_the_first_claim_by_time_holds_and_later_claimants_are_conflicts_whatever_the_order():
    """Guards convergence (issue 14): claims taken on both sides of a partition reach replicas in
    different orders; every replica must name the same claimant and the same losers."""
    events = [request(to="*"), claim("carol", 20, origin="o2"), claim("bob", 10), claim("dave", 30, origin="o3")]
    verdicts = set()
    for seed in range(20):
        shuffled = events[:]
        random.Random(seed).shuffle(shuffled)
        view = derive_task(CID, shuffled)
        verdicts.add((view["state"], view["claimed_by"], tuple(c["agent"] for c in view["conflicts"])))
    assert verdicts == {("claimed", "bob", ("carol", "dave"))}


def test_same_instant_claims_are_settled_by_event_id():
    view = derive_task(CID, [request(to="*"), claim("bob", 10, eid="evt_b"), claim("carol", 10, eid="evt_a")])
    assert view["claimed_by"] == "carol" and view["conflicts"][0]["agent"] == "bob"


def test_a_claimant_claiming_again_is_no_conflict_and_state_follows_the_latest_status():
    view = derive_task(CID, [request(), claim("bob", 10), claim("bob", 11), ev("patch.ready", "bob", 20, status="ready"),
                             ev("event.ack", "alice", 30, status="applied")])
    assert (view["state"], view["terminal"], view["conflicts"]) == ("applied", True, [])


def test_release_by_the_claimant_reopens_and_a_new_claim_is_no_conflict():
    view = derive_task(CID, [request(to="*"), claim("bob", 10), ev(RELEASE, "bob", 20, status="open"),
                             claim("carol", 30)])
    assert (view["state"], view["claimed_by"], view["conflicts"]) == ("claimed", "carol", [])


def test_a_release_or_reassign_by_someone_else_moves_nothing():
    view = derive_task(CID, [request(), claim("bob", 10), ev(RELEASE, "mallory", 20, status="open"),
                             ev(REASSIGN, "mallory", 21, status="open", to="mallory")])
    assert (view["state"], view["claimed_by"], view["assigned_to"]) == ("claimed", "bob", "bob")


def test_reassign_by_the_requester_readdresses_and_reopens():
    view = derive_task(CID, [request(), claim("bob", 10), ev(REASSIGN, "alice", 20, status="open", to="carol")])
    assert (view["state"], view["claimed_by"], view["assigned_to"]) == ("open", None, "carol")


def test_notices_move_nothing():
    view = derive_task(CID, [request(), claim("bob", 10), ev(CONFLICT, "palaced", 20, to="carol"),
                             ev("task.stalled", "palaced", 21, to="alice")])
    assert view["state"] == "claimed"


def test_a_claimant_silent_past_the_stall_time_is_stalled_until_it_speaks():
    events = [request(stall_after_s=600), claim("bob", 10)]
    assert derive_task(CID, events, now=at(600))["state"] == "claimed"
    stalled = derive_task(CID, events, now=at(611))
    assert stalled["state"] == "stalled" and stalled["stalled"] and stalled["stalls_at"] == at(610)
    events.append(ev("task.reply", "bob", 700))  # any word from the claimant on the task
    assert derive_task(CID, events, now=at(1000))["state"] == "claimed"
    assert derive_task(CID, events, now=at(1301), stall_after_s=60)["state"] == "stalled"  # its own 600 s count
    default = [request(), claim("bob", 10)]
    assert derive_task(CID, default, now=at(80), stall_after_s=60)["state"] == "stalled"


def test_queue_fields_from_metadata_and_hostile_values_fall_back():
    assert queue_fields({"blocked_by": ["task_a_1"], "priority": 0, "stall_after_s": 7200}) == (["task_a_1"], 0, 7200)
    assert queue_fields('{"priority": 9, "blocked_by": "nope", "stall_after_s": -1}') == ([], 2, None)
    assert queue_fields("{not json") == ([], 2, None)
    with pytest.raises(ValidationError, match="0 \\(urgent\\) to 3"):
        check_priority(4)
    with pytest.raises(ValidationError, match="not a task correlation id"):
        check_blocked_by(["evt_x"])
    assert check_blocked_by(["task_a_1", "task_a_1 "]) == ["task_a_1"]


def test_ready_order_is_priority_then_age():
    views = [derive_task(f"task_{i}", [{**request(t, **({"priority": p} if p is not None else {})),
                                        "correlation_id": f"task_{i}", "id": f"evt_{i}"}])
             for i, (t, p) in enumerate([(5, None), (1, 3), (9, 0), (2, None)])]
    assert [v["correlation_id"] for v in ready_order(views)] == ["task_2", "task_3", "task_0", "task_1"]



# -- roles (issue 25, finding 7) -----------------------------------------------------------------


def test_a_bystander_can_neither_reopen_a_delivered_task_nor_supersede_nor_block_a_running_one():
    """Regression (finding 7): any agent could re-open a delivered task with status open (a worker
    ran it again: a second patch), stop a running job with superseded, or block it for good with a
    second task.request. Each is now flagged and moves nothing."""
    delivered = [request(), claim("bob", 10), ev("patch.ready", "bob", 20, status="ready")]
    view = derive_task(CID, [*delivered, ev("event.ack", "mallory", 30, status="open")])
    assert (view["state"], view["claimed_by"]) == ("ready", "bob")
    assert [(f["agent"], f["status"]) for f in view["out_of_role"]] == [("mallory", "open")]
    running = [request(), claim("bob", 10)]
    for status in ("superseded", "blocked", "applied", "failed", "ready"):
        view = derive_task(CID, [*running, ev("task.reply", "mallory", 30, status=status)])
        assert (view["state"], view["claimed_by"]) == ("claimed", "bob"), status
        assert view["out_of_role"][0]["agent"] == "mallory"
    second = derive_task(CID, [*running, ev(REQUEST, "mallory", 40, status="open", to="mallory")])
    assert (second["state"], second["requested_by"], second["assigned_to"]) == ("claimed", "alice", "bob")
    assert second["out_of_role"][0]["why"] == "a request on another's task"


def test_the_requester_reopens_supersedes_and_closes():
    delivered = [request(), claim("bob", 10), ev("patch.ready", "bob", 20, status="ready")]
    reopened = derive_task(CID, [*delivered, ev("event.ack", "alice", 30, status="open")])
    assert (reopened["state"], reopened["claimed_by"]) == ("open", None)  # a new round: anyone addressed may claim
    for status in ("applied", "failed", "superseded"):
        view = derive_task(CID, [*delivered, ev("event.ack", "alice", 30, status=status)])
        assert (view["state"], view["terminal"], view["out_of_role"]) == (status, True, [])


def test_the_claimant_reports_and_delivers_but_does_not_close():
    running = [request(), claim("bob", 10)]
    for status in ("ready", "blocked", "failed", "in_progress"):
        assert derive_task(CID, [*running, ev("task.reply", "bob", 20, status=status)])["state"] == status
    for status in ("applied", "superseded", "open"):
        view = derive_task(CID, [*running, ev("task.reply", "bob", 20, status=status)])
        assert view["state"] == "claimed" and view["out_of_role"], status


def test_the_addressee_may_decline_or_deliver_a_task_nobody_holds():
    declined = derive_task(CID, [request(), ev("task.reply", "bob", 10, status="blocked")])
    assert (declined["state"], declined["out_of_role"]) == ("blocked", [])
    delivered = derive_task(CID, [request(), ev("patch.ready", "bob", 10, status="ready")])
    assert (delivered["state"], delivered["claimed_by"]) == ("ready", "bob")
    not_addressed = derive_task(CID, [request(), ev("patch.ready", "carol", 10, status="ready"), claim("carol", 11)])
    assert (not_addressed["state"], len(not_addressed["out_of_role"])) == ("open", 2)


@pytest.mark.parametrize("seed", range(30))
def test_roles_give_the_same_verdict_whatever_order_the_events_arrive_in(seed):
    """Property: replicas receive a task's events in any order (partitions, relays); the state, the
    claimant and what is flagged are the same on every one of them."""
    rng = random.Random(seed)
    agents = ["alice", "bob", "carol", "mallory"]
    kinds = [("event.ack", "claimed"), ("patch.ready", "ready"), ("task.reply", "blocked"), ("event.ack", "open"),
             ("event.ack", "applied"), ("event.ack", "superseded"), (RELEASE, "open"), (REQUEST, "open"),
             ("task.reply", None)]
    events = [request(to=rng.choice(["bob", "*"]))]
    for i in range(rng.randint(1, 12)):
        kind, status = rng.choice(kinds)
        events.append(ev(kind, rng.choice(agents), rng.randint(1, 50), status=status, eid=f"evt_{i:03d}"))
    verdicts = set()
    for _ in range(8):
        rng.shuffle(events)
        view = derive_task(CID, events)
        verdicts.add((view["state"], view["claimed_by"], tuple(f["event_id"] for f in view["out_of_role"]),
                      tuple(c["agent"] for c in view["conflicts"])))
    assert len(verdicts) == 1, verdicts
