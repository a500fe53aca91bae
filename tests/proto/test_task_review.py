"""The review gate and the integrator's rows, pure (issue 46): who may approve a delivered patch,
who may land it, what a rework and a request for changes do. Every replica judges the same way
(``derive_task``), so these are the verdicts a hostile member meets everywhere."""

from __future__ import annotations

import random

import pytest

from palace_proto.errors import ValidationError
from palace_proto.tasks import (
    ANY_OTHER_AGENT,
    CHECK,
    REQUEST,
    REVIEW,
    REWORK,
    check_integrator,
    check_review_by,
    derive_task,
    review_fields,
)

CID = "task_review_0001"
BASE = "a" * 40
NEW_BASE = "b" * 40
# Daemons by origin: bob's worker runs on the box, alice and the integrator on the laptop.
DAEMONS = {"o-laptop": "laptop", "o-box": "box", "o-box2": "box", "o-third": "third"}


def at(seconds: int) -> str:
    minutes, secs = divmod(seconds, 60)
    return f"2026-12-01T10:{minutes:02d}:{secs:02d}.000000Z"


def ev(kind, who, t, *, status=None, origin="o-laptop", eid=None, ack_of=None, metadata=None, body=""):
    return {"id": eid or f"evt_{kind}_{who}_{t}", "type": kind, "from_agent": who, "to_agent": None,
            "created_at": at(t), "status": status, "correlation_id": CID, "origin": origin, "ack_of": ack_of,
            "metadata": metadata or {}, "body": body, "base_commit": None}


def request(t=0, **metadata):
    event = ev(REQUEST, "alice", t, status="open", metadata=metadata)
    return {**event, "to_agent": "bob", "base_commit": BASE, "branch": "main"}


def claim(t=10):
    return ev("event.ack", "bob", t, status="claimed", origin="o-box")


def patch(t=20, eid="evt_patch"):
    return ev("patch.ready", "bob", t, status="ready", origin="o-box", eid=eid)


def review(who, t, verdict="approve", *, origin="o-laptop", of="evt_patch"):
    return ev(REVIEW, who, t, origin=origin, ack_of=of, metadata={"verdict": verdict}, body=f"{who}: {verdict}")


def derive(events):
    return derive_task(CID, events, daemon_of=lambda origin: DAEMONS.get(origin, origin))


def flagged(view):
    return {f["event_id"]: f["rule"] for f in view["out_of_role"]}


def test_nobody_approves_their_own_patch_under_any_name():
    """The author's own approval, and one by another agent of the daemon that wrote the patch (the
    same party under a second name), are flagged and approve nothing; another daemon's reviewer and a
    person on the author's own machine do approve."""
    base = [request(review_by=ANY_OTHER_AGENT, integrator="lander"), claim(), patch()]
    own = review("bob", 30, origin="o-box")
    sibling = review("bob-2", 31, origin="o-box2")  # another agent of bob's daemon
    view = derive([*base, own, sibling])
    assert flagged(view) == {own["id"]: "task.review", sibling["id"]: "task.review"}
    assert view["review"]["state"] == "waiting" and view["state"] == "ready"
    assert "never the patch's author" in next(f["why"] for f in view["out_of_role"])
    other = review("carol", 32, origin="o-third")
    view = derive([*base, own, other])
    assert (view["review"]["state"], view["review"]["approved_by"]) == ("approved", "carol")
    person = review("human:ana", 33, origin="o-box")  # a person's id is the CA's grant, not the daemon's
    assert derive([*base, person])["review"]["approved_by"] == "human:ana"


def test_a_named_reviewer_is_the_only_one_whose_review_counts():
    base = [request(review_by="human:ana", integrator="lander"), claim(), patch()]
    carol = review("carol", 30, origin="o-third")
    view = derive([*base, carol])
    assert flagged(view) == {carol["id"]: "task.review"} and view["review"]["state"] == "waiting"
    assert view["out_of_role"][0]["why"].endswith("carol is none of them")
    view = derive([*base, carol, review("human:ana", 31)])
    assert view["review"]["approved_by"] == "human:ana"


def test_without_review_by_the_requester_reviews():
    base = [request(integrator="lander"), claim(), patch()]
    assert derive([*base, review("alice", 30)])["review"] == {
        "by": None, "state": "not_required", "approved_by": "alice", "approval_event_id": "evt_task.review_alice_30"}
    carol = review("carol", 31, "changes_requested", origin="o-third")
    view = derive([*base, carol])
    assert flagged(view) == {carol["id"]: "task.review"} and view["state"] == "ready"


def test_only_the_integrator_after_the_review_checks_and_lands():
    """With a review required, ``applied`` counts from the integrator only after the approval, and
    never from the claimant (its own say-so); the check is the integrator's and moves nothing."""
    base = [request(review_by=ANY_OTHER_AGENT, integrator="lander"), claim(), patch()]
    early_check = ev(CHECK, "lander", 25, ack_of="evt_patch", metadata={"result": "passed"})
    early = ev("event.ack", "lander", 26, status="applied", ack_of="evt_patch")
    own_say = ev("event.ack", "bob", 27, status="applied", origin="o-box")
    stranger = ev(CHECK, "mallory", 28, origin="o-third", ack_of="evt_patch", metadata={"result": "passed"})
    view = derive([*base, early_check, early, own_say, stranger])
    assert view["state"] == "ready"
    assert flagged(view) == {early_check["id"]: "task.check", early["id"]: "task.close", own_say["id"]: "task.close",
                             stranger["id"]: "task.check"}
    approve = review("carol", 40, origin="o-third")
    check = ev(CHECK, "lander", 41, ack_of="evt_patch", metadata={"result": "passed", "commit": "c" * 40,
                                                                   "duration_s": 1.5})
    landed = ev("event.ack", "lander", 42, status="applied", ack_of="evt_patch")
    view = derive([*base, approve, check, landed])
    assert (view["state"], view["out_of_role"]) == ("applied", [])
    assert view["checks"] == [{"event_id": check["id"], "by": "lander", "result": "passed",
                               "patch_event_id": "evt_patch", "commit": "c" * 40, "duration_s": 1.5,
                               "created_at": check["created_at"], "artifact_ids": []}]


def test_without_a_review_required_the_claimant_still_closes_its_work():
    """The protocol's own flow stays: the claimant acks applied when no review was asked for."""
    view = derive([request(), claim(), patch(), ev("event.ack", "bob", 30, status="applied", origin="o-box")])
    assert (view["state"], view["out_of_role"]) == ("applied", [])
    view = derive([request(integrator="lander"), claim(), patch(),
                   ev("event.ack", "lander", 30, status="failed", ack_of="evt_patch")])
    assert (view["state"], view["out_of_role"]) == ("failed", [])


def test_an_approval_is_of_one_patch_and_a_new_delivery_needs_its_own():
    base = [request(review_by=ANY_OTHER_AGENT, integrator="lander"), claim(), patch()]
    second = patch(50, eid="evt_patch_2")
    late = ev("event.ack", "lander", 60, status="applied", ack_of="evt_patch_2")
    view = derive([*base, review("carol", 40, origin="o-third"), second, late])
    assert view["state"] == "ready" and view["review"]["state"] == "waiting"
    assert view["delivery"]["event_id"] == "evt_patch_2" and flagged(view) == {late["id"]: "task.close"}
    stale = review("carol", 70, origin="o-third")  # still names the first patch
    view = derive([*base, second, stale])
    assert flagged(view) == {stale["id"]: "task.review"} and "ack_of evt_patch_2" in view["out_of_role"][0]["why"]


def test_changes_requested_send_the_task_back_to_its_addressee():
    base = [request(review_by="human:ana", integrator="lander"), claim(), patch()]
    view = derive([*base, review("human:ana", 30, "changes_requested")])
    assert (view["state"], view["claimed_by"], view["assigned_to"], view["delivery"]) == ("open", None, "bob", None)
    assert view["review"]["state"] == "changes_requested"
    assert [(r["kind"], r["by"], r["base"], r["said"]) for r in view["reworks"]] == [
        ("changes_requested", "human:ana", BASE, "human:ana: changes_requested")]
    # The author redoes it: a new claim is no conflict, and its new patch waits for review again.
    again = derive([*base, review("human:ana", 30, "changes_requested"), claim(40), patch(50, eid="evt_patch_2")])
    assert (again["state"], again["conflicts"], again["review"]["state"]) == ("ready", [], "waiting")


def test_a_rework_reopens_the_task_on_its_new_base_for_its_addressee():
    base = [request(integrator="lander"), claim(), patch()]
    rework = ev(REWORK, "lander", 30, metadata={"base": NEW_BASE}, body="rebase onto " + NEW_BASE)
    view = derive([*base, rework])
    assert (view["state"], view["base"], view["claimed_by"]) == ("open", NEW_BASE, None)
    assert view["reworks"][0]["kind"] == "rework" and view["reworks"][0]["said"] == "rebase onto " + NEW_BASE
    hostile = ev(REWORK, "mallory", 31, origin="o-third", metadata={"base": NEW_BASE})
    bad = ev(REWORK, "lander", 32, metadata={"base": "main"})
    view = derive([*base, hostile, bad])
    assert view["state"] == "ready" and view["base"] == BASE
    assert flagged(view) == {hostile["id"]: "task.rework", bad["id"]: "task.rework"}
    assert "metadata.base" in {f["event_id"]: f["why"] for f in view["out_of_role"]}[bad["id"]]


def test_the_verdicts_are_the_same_whatever_order_the_events_arrive_in():
    events = [request(review_by=ANY_OTHER_AGENT, integrator="lander"), claim(), patch(),
              review("bob", 30, origin="o-box"), review("carol", 31, origin="o-third"),
              ev(CHECK, "lander", 32, ack_of="evt_patch", metadata={"result": "passed"}),
              ev("event.ack", "lander", 33, status="applied", ack_of="evt_patch")]
    seen = set()
    for seed in range(20):
        shuffled = events[:]
        random.Random(seed).shuffle(shuffled)
        view = derive(shuffled)
        seen.add((view["state"], view["review"]["approved_by"], tuple(sorted(flagged(view)))))
    assert seen == {("applied", "carol", ("evt_task.review_bob_30",))}


def test_the_request_fields_are_checked_and_hostile_values_give_no_role():
    assert check_review_by(None) is None and check_review_by(" any-other-agent ") == ANY_OTHER_AGENT
    assert check_review_by("human:ana") == "human:ana" and check_integrator("lander") == "lander"
    with pytest.raises(ValidationError, match="review_by"):
        check_review_by("two words")
    with pytest.raises(ValidationError, match="is a person"):
        check_integrator("human:ana")
    assert review_fields({"review_by": ["x"], "integrator": "human:ana"}) == (None, None)
    assert review_fields('{"review_by": "carol", "integrator": "lander"}') == ("carol", "lander")
    # A request whose integrator is a person's id names no integrator: nobody lands it but the requester.
    view = derive([request(integrator="human:ana"), claim(), patch(),
                   ev("event.ack", "human:ana", 30, status="applied", ack_of="evt_patch")])
    assert view["integrator"] is None and view["state"] == "ready"
