"""The link planners (palace_proto.sync_plan): what a peer holds and is owed (ServePlan), what we pull
from it and ask again (PullPlan) — every decision a replication link makes, without a socket, a
clock or a store (issue 27 §3)."""

from __future__ import annotations

import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from palace_proto.envelope import GENESIS_HASH, CommittedEvent, seal_event
from palace_proto.errors import RemoteProtocolError
from palace_proto.ids import artifact_id_for_sha256
from palace_proto.peer import (
    MAX_VECTOR_ENTRIES,
    MAX_WIRE_INT,
    ArtifactChunk,
    ArtifactWant,
    Have,
    Vector,
    VectorEntry,
    Want,
    from_wire,
)
from palace_proto.sync import OriginHead
from palace_proto.sync_plan import (
    FETCH_SLACK_BYTES,
    MAX_ARTIFACT_ASKS,
    MAX_FETCHES,
    SERVE_BURST_EVENTS,
    SERVE_PAGE,
    SERVE_RATE_EVENTS_S,
    ArtifactReceived,
    Chunk,
    Fetch,
    OwedPage,
    PullPlan,
    ServePlan,
    VectorPlan,
    receipts,
)

KEY = Ed25519PrivateKey.generate()
OA, OB, OC, OD = ("ori_" + c * 26 for c in "abcd")
HASH = b"\x07" * 32


def event(origin=OA, seq=1):
    """A signed event at ``origin``#``seq`` (the planners read only its origin and origin_seq)."""
    return seal_event(KEY, origin=origin, origin_seq=seq, prev_hash=GENESIS_HASH, created_at="2026-11-30T01:02:03.000004Z",
                      type="note", stream="s", room="r", from_agent="a", body=f"{origin}{seq}")


def committed(*positions, history=False):
    return [CommittedEvent(i + 1, event(o, s), history=history) for i, (o, s) in enumerate(positions)]


def heads(**held):
    """Our heads: heads(a=3) holds OA up to 3."""
    return {"ori_" + k * 26: OriginHead(v, HASH) for k, v in held.items()}


def vector(**theirs):
    return Vector(tuple(VectorEntry("ori_" + k * 26, v, HASH) for k, v in sorted(theirs.items())))


def any_key(origin, origin_seq):
    return b"k" * 32


def serve_all(plan, head_of, *, bus=None):
    """Drive ``plan`` as PeerLink's event sender does until nothing is owed: each page filled up to
    our head (``head_of``: origin -> max_seq; the bus holds nothing unless given), sent in one batch.
    Returns the pages sent, as (origin, first seq, last seq)."""
    sent = []
    for _ in range(10_000):
        if not plan.owes:
            return sent
        page = plan.next_page()
        if page is None:
            continue
        limit = page.limit
        if limit > 0 and (bus or {}).get(page.origin, 0) - page.after_seq < limit:
            limit = plan.bound_by_head(page, head_of.get(page.origin))
        if limit <= 0:
            plan.page_empty(page.origin)
            continue
        last = page.after_seq + limit
        plan.page_ready(page.origin)
        plan.sent([event(page.origin, last)])
        plan.page_sent(page.origin, last)
        sent.append((page.origin, page.after_seq + 1, last))
    raise AssertionError("the plan never ran out of pages")


# -- ServePlan: what the peer holds ----------------------------------------------------------------


def test_confirmations_only_rise_and_say_when_they_are_news():
    plan = ServePlan()
    assert plan.confirm([(OA, 5), (OB, 2)])
    assert not plan.confirm([(OA, 3), (OB, 2)])  # an older vector crossing a receipt says nothing new
    assert plan.confirmed == {OA: 5, OB: 2} and plan.peer_has == {OA: 5, OB: 2}
    assert plan.confirm([(OA, 6)])
    assert plan.confirmed[OA] == 6


def test_what_the_peer_says_of_origins_not_bound_here_is_not_kept():
    plan = ServePlan(verifiable=lambda origin: origin == OA)
    assert not plan.confirm([(OB, 5)])
    assert not plan.on_want(OB, 0)
    assert plan.confirmed == plan.peer_has == {} and not plan.owes
    assert plan.confirm([(OA, 1)]) and plan.peer_has == {OA: 1}


def test_what_was_sent_counts_as_held_by_the_peer():
    plan = ServePlan()
    plan.confirm([(OA, 4)])
    plan.sent([event(OA, 2), event(OB, 3), event(OA, 6)])
    assert plan.peer_has == {OA: 6, OB: 3}
    assert plan.confirmed == {OA: 4}  # sent is not confirmed: the peer has not said it stored them


# -- ServePlan: pushing new commits ----------------------------------------------------------------


def test_new_commits_the_peer_lacks_are_owed_up_to_the_newest_of_each_origin():
    plan = ServePlan()
    plan.confirm([(OB, 9)])
    plan.owe_committed(committed((OA, 1), (OA, 2), (OB, 9), (OC, 4), (OA, 3)))
    assert plan.owed_origins() == [OA, OC]  # OB: the peer holds it already
    assert plan.owed(OA) == (0, 3, False)
    assert plan.owed(OC) == (0, 4, False)
    assert plan.owed(OB) is None


def test_lacks_any_says_whether_a_commit_holds_anything_for_the_peer():
    """Guards the link sender's wake (issue 27): events the peer sent us do not wake the sender
    that pushes to it (a turn ahead of the watchers they are for); one it lacks does."""
    plan = ServePlan()
    plan.confirm([(OA, 3)])
    assert not plan.lacks_any(committed((OA, 2), (OA, 3)))
    assert not plan.lacks_any(committed((OB, 1), history=True))  # imported history is never pushed
    assert plan.lacks_any(committed((OA, 3), (OA, 4)))
    assert plan.lacks_any(committed((OB, 1)))


def test_imported_history_is_never_pushed():
    plan = ServePlan()
    plan.owe_committed(committed((OA, 1), (OA, 2), history=True))
    assert not plan.owes


def test_a_push_starts_after_what_the_peer_holds_and_its_target_only_rises():
    plan = ServePlan()
    plan.confirm([(OA, 2)])
    plan.owe_committed(committed((OA, 3)))
    assert plan.owed(OA) == (2, 3, False)
    plan.owe_committed(committed((OA, 5)))
    assert plan.owed(OA) == (2, 5, False)
    plan.owe_committed(committed((OA, 4)))  # (a page may have lowered it to our head: never lowered here)
    assert plan.owed(OA) == (2, 5, False)


def test_new_commits_leave_a_pull_of_the_same_origin_alone():
    plan = ServePlan()
    assert plan.on_want(OA, 0)
    plan.owe_committed(committed((OA, 7)))
    assert plan.owed(OA) == (0, None, True)  # a pull goes up to our head anyway


def test_origins_the_peer_hears_first_hand_are_not_pushed():
    relayed = {OA}
    plan = ServePlan(relayed=lambda origin: origin in relayed)
    plan.owe_committed(committed((OA, 1), (OB, 1)))
    assert plan.owed_origins() == [OA]


def test_an_origin_no_longer_relayed_is_dropped_when_its_turn_comes():
    relayed = {OA, OB}
    plan = ServePlan(relayed=lambda origin: origin in relayed)
    plan.owe_committed(committed((OA, 1), (OB, 1)))
    relayed.discard(OA)  # the peer linked to OA's daemon meanwhile
    assert plan.next_page() is None
    assert plan.owed_origins() == [OB]
    assert plan.next_page() == OwedPage(OB, 0, 1)


# -- ServePlan: pages ----------------------------------------------------------------------------


def test_nothing_owed_means_no_page():
    plan = ServePlan()
    assert plan.next_page() is None and not plan.owes


def test_a_push_page_stops_at_its_target_and_the_origin_is_done():
    plan = ServePlan()
    plan.owe_committed(committed((OA, 1), (OA, 2)))
    page = plan.next_page()
    assert page == OwedPage(OA, 0, 2)
    assert not plan.page_ready(OA)  # a push: never throttled
    plan.sent([event(OA, 1), event(OA, 2)])
    plan.page_sent(OA, 2)
    assert not plan.owes and plan.peer_has == {OA: 2}


def test_pages_are_bounded_and_a_pull_goes_on_to_our_head():
    plan = ServePlan()
    plan.on_want(OA, 0)
    page = plan.next_page()
    assert page == OwedPage(OA, 0, SERVE_PAGE)
    assert plan.bound_by_head(page, 1200) == SERVE_PAGE  # the bus held less: now bounded by our head
    assert plan.owed(OA) == (0, 1200, True)
    assert serve_all(plan, {OA: 1200}) == [(OA, 1, 500), (OA, 501, 1000), (OA, 1001, 1200)]
    assert plan.peer_has == {OA: 1200} and not plan.owes


def test_a_page_the_bus_holds_whole_is_never_bounded_by_our_head():
    plan = ServePlan()
    plan.on_want(OA, 0)
    # The bus holds all 1200 (just committed): the pull's pages never look at our head.
    assert serve_all(plan, {}, bus={OA: 1200})[:2] == [(OA, 1, 500), (OA, 501, 1000)]
    assert plan.owed(OA) is None


def test_the_target_is_lowered_to_our_head_never_raised_by_it():
    plan = ServePlan()
    plan.owe_committed(committed((OA, 10)))
    page = plan.next_page()
    assert page.limit == 10
    assert plan.bound_by_head(page, 6) == 6  # (the page's later events were purged from the bus)
    assert plan.owed(OA) == (0, 6, False)
    assert plan.bound_by_head(page, 20) == 6


def test_an_origin_we_do_not_replicate_gets_an_empty_page():
    plan = ServePlan()
    plan.on_want(OA, 0)
    page = plan.next_page()
    assert plan.bound_by_head(page, None) == 0
    plan.page_empty(OA)
    assert not plan.owes


def test_a_peer_holding_everything_owed_gets_nothing():
    plan = ServePlan()
    plan.owe_committed(committed((OA, 3)))
    plan.confirm([(OA, 3)])  # its vector crossed the push
    page = plan.next_page()
    assert page == OwedPage(OA, 3, 0)
    plan.page_empty(OA)
    assert not plan.owes


def test_origins_take_turns_a_page_at_a_time():
    plan = ServePlan()
    plan.on_want(OA, 0)
    plan.on_want(OB, 0)
    plan.owe_committed(committed((OC, 1)))
    sent = serve_all(plan, {OA: 1100, OB: 600, OC: 1})
    assert sent == [(OA, 1, 500), (OB, 1, 500), (OC, 1, 1), (OA, 501, 1000), (OB, 501, 600), (OA, 1001, 1100)]


def test_a_live_push_is_not_held_up_by_a_long_pull():
    plan = ServePlan()
    plan.on_want(OA, 0)
    page = plan.next_page()
    plan.bound_by_head(page, 100_000)
    plan.page_ready(OA)
    plan.page_sent(OA, 500)
    plan.owe_committed(committed((OB, 1)))  # appended while the pull's first page was on the wire
    assert plan.owed_origins() == [OA, OB]
    plan.page_ready(OA)
    plan.page_sent(OA, 1000)
    assert plan.next_page() == OwedPage(OB, 0, 1)  # the push goes before the pull's third page


# -- ServePlan: wants ----------------------------------------------------------------------------


def test_a_want_says_exactly_what_the_peer_holds():
    plan = ServePlan()
    plan.confirm([(OA, 9)])
    assert plan.on_want(OA, 4)  # it could not apply what it was sent after 4: it re-asks
    assert plan.peer_has == {OA: 4} and plan.confirmed == {OA: 9}
    assert plan.owed(OA) == (4, None, True)
    assert plan.next_page() == OwedPage(OA, 4, SERVE_PAGE)


def test_a_want_resets_a_push_under_way():
    plan = ServePlan()
    plan.owe_committed(committed((OA, 5)))
    plan.on_want(OA, 2)
    assert plan.owed(OA) == (2, None, True)
    assert plan.owed_origins() == [OA]  # one entry per origin: never twice at once


def test_a_want_while_a_page_is_on_its_way_sets_where_to_go_on_from():
    plan = ServePlan()
    plan.on_want(OA, 0)
    page = plan.next_page()
    plan.bound_by_head(page, 800)
    assert plan.page_ready(OA)
    plan.sent([event(OA, 500)])
    plan.on_want(OA, 100)  # it arrived while the page was on the wire
    plan.page_sent(OA, 500)
    assert plan.owed(OA) == (100, None, True)  # the want's cursor stands, not the page's end
    assert plan.peer_has[OA] == 100
    assert plan.next_page() == OwedPage(OA, 100, SERVE_PAGE)


def test_a_want_while_an_empty_page_was_filled_keeps_the_origin_owed():
    plan = ServePlan()
    plan.owe_committed(committed((OA, 3)))
    page = plan.next_page()
    plan.on_want(OA, 0)  # arrived while the store was read
    assert plan.bound_by_head(page, None) == 0
    plan.page_empty(OA)
    assert plan.owed(OA) == (0, None, True)
    plan.page_empty(OA)  # the next empty page (the reset is spent) ends it
    assert not plan.owes


def test_calls_for_an_origin_no_longer_owed_change_nothing():
    plan = ServePlan()
    page = OwedPage(OA, 0, 10)
    assert plan.bound_by_head(page, 5) == 0
    assert not plan.page_ready(OA)
    plan.page_empty(OA)
    plan.page_sent(OA, 5)
    assert not plan.owes and plan.peer_has == {}


# -- ServePlan: hostile wants ----------------------------------------------------------------------


def test_a_want_for_an_absurd_seq_costs_one_empty_page():
    plan = ServePlan()
    assert plan.on_want(OA, MAX_WIRE_INT)
    page = plan.next_page()
    assert page == OwedPage(OA, MAX_WIRE_INT, SERVE_PAGE)
    assert plan.bound_by_head(page, 10) < 0
    plan.page_empty(OA)
    assert not plan.owes


def test_wants_for_more_origins_than_a_vector_holds_are_not_recorded():
    plan = ServePlan()
    origins = [f"ori_{i:026d}" for i in range(MAX_VECTOR_ENTRIES + 1)]
    assert all(plan.on_want(o, 0) for o in origins[:-1])
    assert not plan.on_want(origins[-1], 0)
    assert plan.on_want(origins[0], 3)  # an origin already owed is still re-asked
    assert len(plan.owed_origins()) == MAX_VECTOR_ENTRIES and origins[-1] not in plan.peer_has


@pytest.mark.parametrize("wire", [
    {"t": "want", "origin": OA, "after_seq": -1},
    {"t": "want", "origin": OA, "after_seq": MAX_WIRE_INT + 1},
    {"t": "want", "origin": OA, "after_seq": 1.5},
    {"t": "want", "origin": "not-an-origin", "after_seq": 0},
    {"t": "have", "entries": [[OA, -3]]},
    {"t": "vector", "entries": [[OA, -3, HASH]]},
])
def test_negative_absurd_or_malformed_numbers_never_reach_the_planners(wire):
    """Refused where they are decoded, as today: the planners see only integers from 0 to 2**62."""
    with pytest.raises(RemoteProtocolError):
        from_wire(wire)


def test_decoded_messages_feed_the_planner():
    plan = ServePlan()
    want = from_wire({"t": "want", "origin": OA, "after_seq": 3})
    have = from_wire({"t": "have", "entries": [[OB, 2]]})
    assert isinstance(want, Want) and isinstance(have, Have)
    assert plan.on_want(want.origin, want.after_seq) and plan.confirm(have.entries)
    assert plan.peer_has == {OA: 3, OB: 2}


# -- ServePlan: the serve budget -----------------------------------------------------------------


def test_a_whole_catch_up_goes_at_full_speed_then_pulls_are_throttled():
    plan = ServePlan()
    now = 100.0
    for _ in range(SERVE_BURST_EVENTS // SERVE_PAGE):
        assert plan.throttle(SERVE_PAGE, now) == 0.0
    wait = plan.throttle(SERVE_PAGE, now)
    assert wait == pytest.approx(SERVE_PAGE / SERVE_RATE_EVENTS_S)
    assert plan.throttle(SERVE_PAGE, now) == wait  # nothing was spent by asking
    plan.throttled(now + wait)
    assert plan.throttle(1, now + wait) == pytest.approx(1 / SERVE_RATE_EVENTS_S)


def test_the_budget_refills_at_the_serve_rate_up_to_the_burst():
    plan = ServePlan()
    assert plan.throttle(SERVE_BURST_EVENTS, 10.0) == 0.0
    assert plan.throttle(12_500, 10.5) == 0.0  # half a second refilled 12,500 events
    assert plan.throttle(1, 10.5) > 0
    assert plan.throttle(SERVE_BURST_EVENTS, 10_000.0) == 0.0  # refilled to the burst, not beyond
    assert plan.throttle(1, 10_000.0) > 0


def test_the_budget_counts_no_refill_from_the_clocks_zero():
    """Kept as PeerLink always had it (``if at``): a spend stamped 0.0 reads as never spent."""
    plan = ServePlan()
    assert plan.throttle(SERVE_BURST_EVENTS, 0.0) == 0.0
    assert plan.throttle(1, 5.0) == pytest.approx(1 / SERVE_RATE_EVENTS_S)


def test_a_wait_is_exactly_what_is_missing():
    plan = ServePlan()
    assert plan.throttle(SERVE_BURST_EVENTS - 100, 1.0) == 0.0
    assert plan.throttle(500, 1.0) == pytest.approx(400 / SERVE_RATE_EVENTS_S)


# -- ServePlan: artifact requests ------------------------------------------------------------------


def test_artifact_requests_are_served_oldest_first_and_a_new_ask_replaces_one_waiting():
    plan = ServePlan()
    plan.on_artifact_want("art_1", 0)
    plan.on_artifact_want("art_2", 0)
    plan.on_artifact_want("art_1", 4096)
    assert plan.next_artifact_ask() == ArtifactWant("art_1", 4096)
    assert plan.next_artifact_ask() == ArtifactWant("art_2", 0)
    assert plan.next_artifact_ask() is None


def test_more_artifact_requests_than_an_honest_peer_has_open_are_a_protocol_error():
    plan = ServePlan()
    for i in range(MAX_ARTIFACT_ASKS):
        plan.on_artifact_want(f"art_{i}", 0)
    plan.on_artifact_want("art_0", 10)  # re-asking one already waiting is fine
    with pytest.raises(RemoteProtocolError, match="more than 64 artifacts"):
        plan.on_artifact_want("art_x", 0)
    assert len([plan.next_artifact_ask() for _ in range(MAX_ARTIFACT_ASKS)]) == MAX_ARTIFACT_ASKS
    assert plan.next_artifact_ask() is None


def test_serve_plan_repr_shows_its_state():
    plan = ServePlan()
    plan.on_want(OA, 0)
    plan.owe_committed(committed((OB, 1)))
    plan.on_artifact_want("art_1", 0)
    assert repr(plan) == "<ServePlan owed=2 pulled=1 peer_has=1 budget=250000 artifact_asks=1>"


# -- ServePlan: whatever the peer does, it gets each event once, in order, up to our head ----------


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("commit"), st.sampled_from([OA, OB, OC]), st.integers(1, 700)),
    st.tuples(st.just("want"), st.sampled_from([OA, OB, OC]), st.integers(0, 1500)),
    st.tuples(st.just("confirm"), st.sampled_from([OA, OB, OC]), st.integers(0, 1500)),
    st.tuples(st.just("page"), st.just(OA), st.just(0)),
), max_size=40))
def test_pages_are_contiguous_bounded_and_end_at_our_head(steps):
    ours: dict[str, int] = {}
    plan = ServePlan(relayed=lambda origin: origin != OC or ours.get(OC, 0) < 1000)
    seq = 0

    def one_page():
        page = plan.next_page()
        if page is None:
            return
        limit = plan.bound_by_head(page, ours.get(page.origin)) if page.limit > 0 else page.limit
        assert limit <= SERVE_PAGE
        if limit <= 0:
            plan.page_empty(page.origin)
            return
        last = page.after_seq + limit
        assert page.after_seq >= 0 and last <= ours[page.origin]
        plan.page_ready(page.origin)
        plan.sent([event(page.origin, last)])
        plan.page_sent(page.origin, last)

    for kind, origin, n in steps:
        if kind == "commit":
            records = []
            for _ in range(n % 50 + 1):
                ours[origin] = ours.get(origin, 0) + 1
                seq += 1
                records.append(CommittedEvent(seq, event(origin, ours[origin])))
            plan.owe_committed(records)
        elif kind == "want":
            plan.on_want(origin, n)
        elif kind == "confirm":
            plan.confirm([(origin, min(n, ours.get(origin, 0)))])
        else:
            one_page()
        assert len(plan.owed_origins()) <= 3
    for _ in range(1000):
        if not plan.owes:
            break
        one_page()
    assert not plan.owes
    for origin, head in ours.items():
        if origin != OC or head < 1000:
            # Pushed or pulled, the peer ends up holding all we hold (or told us it held more).
            assert plan.peer_has.get(origin, 0) >= head


# -- PullPlan: the peer's vector -------------------------------------------------------------------


def pull_plan(key_for=any_key):
    return PullPlan(key_for, max_artifact_bytes=1 << 20)


def test_a_vector_ahead_of_us_is_pulled_from_our_head():
    plan = pull_plan()
    result = plan.on_vector(vector(a=5, b=2, c=1), heads(a=3, c=1), [], refused_next={}, now=7.0)
    assert result == VectorPlan((), (Want(OA, 3), Want(OB, 0)))
    assert plan.their_heads == {OA: 5, OB: 2, OC: 1}
    assert plan.pulling == 2 and plan.progress_at == 7.0


def test_a_pull_under_way_that_advanced_is_not_asked_again():
    plan = pull_plan()
    plan.on_vector(vector(a=900), heads(), [], refused_next={}, now=1.0)
    # The next vector: we hold 500 of it now, the rest is on its way.
    result = plan.on_vector(vector(a=900), heads(a=500), [], refused_next={}, now=11.0)
    assert result.wants == () and plan.pulling == 1
    assert plan.progress_at == 1.0  # progress is what arrives (events_arrived), not what is asked


def test_a_stalled_pull_is_asked_again():
    plan = pull_plan()
    plan.on_vector(vector(a=900), heads(a=100), [], refused_next={}, now=1.0)
    result = plan.on_vector(vector(a=900), heads(a=100), [], refused_next={}, now=11.0)
    assert result.wants == (Want(OA, 100),)


def test_a_pull_caught_up_ends_and_with_it_the_progress_watch():
    plan = pull_plan()
    plan.on_vector(vector(a=9, b=3), heads(), [], refused_next={}, now=1.0)
    plan.events_arrived(4.0)
    assert plan.progress_at == 4.0
    plan.on_vector(vector(a=9, b=3), heads(a=9), [], refused_next={}, now=5.0)
    assert plan.pulling == 1
    plan.on_vector(vector(a=9), heads(a=9), [], refused_next={}, now=6.0)  # b left its vector
    assert plan.pulling == 0 and plan.progress_at is None
    plan.events_arrived(7.0)  # events that come when we pull nothing are no progress to watch
    assert plan.progress_at is None


def test_origins_we_could_not_accept_are_not_asked_for():
    plan = pull_plan(lambda origin, origin_seq: None if origin == OB else b"k")
    assert plan.on_vector(vector(a=2, b=2), heads(), [], refused_next={}, now=0.0).wants == (Want(OA, 0),)


def test_an_origin_whose_next_event_this_replica_refused_is_never_asked_again():
    plan = pull_plan()
    refused = {OA: (4, HASH, "breaks a rule")}
    assert plan.on_vector(vector(a=9), heads(a=3), [], refused_next=refused, now=0.0).wants == ()
    # Until our head moves past it (another peer filled it with an event we could accept).
    assert plan.on_vector(vector(a=9), heads(a=5), [], refused_next=refused, now=0.0).wants == (Want(OA, 5),)


def test_an_origin_whose_next_event_this_peer_sent_and_we_rejected_is_not_asked_of_it_again():
    plan = pull_plan()
    assert plan.on_vector(vector(a=9), heads(a=3), [], refused_next={}, now=0.0).wants == (Want(OA, 3),)
    plan.rejected([event(OA, 4), event(OA, 5)], heads(a=3))
    for now in (10.0, 20.0, 30.0):
        assert plan.on_vector(vector(a=9), heads(a=3), [], refused_next={}, now=now).wants == ()
    # Another peer filled it: our head moved, so this peer may be asked again — once the pull
    # stalls (it advanced since the last ask: what it asks for next may be on its way).
    assert plan.on_vector(vector(a=9), heads(a=4), [], refused_next={}, now=40.0).wants == ()
    assert plan.on_vector(vector(a=9), heads(a=4), [], refused_next={}, now=50.0).wants == (Want(OA, 4),)
    fresh = pull_plan()
    fresh.rejected([event(OA, 4)], heads(a=3))
    assert fresh.on_vector(vector(a=9), heads(a=3), [], refused_next={}, now=0.0).wants == ()
    assert fresh.on_vector(vector(a=9), heads(a=4), [], refused_next={}, now=1.0).wants == (Want(OA, 4),)


def test_origins_pulled_on_another_link_are_not_pulled_here():
    plan = pull_plan()
    plan.on_vector(vector(a=9, b=9), heads(), [], refused_next={}, now=0.0)
    asked = []

    def elsewhere(origin, max_seq):
        asked.append((origin, max_seq))
        return origin == OA

    result = plan.on_vector(vector(a=9, b=9, c=0), heads(c=0), [], refused_next={}, now=10.0, elsewhere=elsewhere)
    assert result.wants == (Want(OB, 0),) and plan.pulling == 1
    assert sorted(asked) == [(OA, 9), (OB, 9), (OC, 0)]


def test_origins_not_to_ask_for_are_not_offered_to_another_link_either():
    plan = pull_plan(lambda origin, origin_seq: None)
    asked = []
    plan.on_vector(vector(a=9), heads(), [], refused_next={}, now=0.0, elsewhere=lambda o, s: asked.append(o))
    assert asked == []


def test_a_fork_is_pulled_once_for_evidence_and_never_otherwise():
    plan = pull_plan()
    result = plan.on_vector(vector(a=7, b=4), heads(a=5, b=4), [OA], refused_next={}, now=0.0)
    assert result == VectorPlan((OA,), (Want(OA, 6),))
    assert plan.forks == [OA]
    again = plan.on_vector(vector(a=7, b=4), heads(a=5, b=4), [OA], refused_next={}, now=10.0)
    assert again == VectorPlan((), ())
    assert plan.pulling == 0


def test_pull_plan_repr_shows_its_state():
    plan = pull_plan()
    plan.on_vector(vector(a=3), heads(), [], refused_next={}, now=0.0)
    plan.fetch("art_1", OA)
    assert repr(plan) == "<PullPlan pulling=1 forks=0 rejected=0 fetches=1>"


# -- PullPlan: after applying ----------------------------------------------------------------------


def test_receipts_name_what_we_now_hold_of_each_origin_in_a_batch():
    batch = [event(OB, 2), event(OA, 1), event(OB, 3), event(OC, 1)]
    assert receipts(batch, heads(a=1, b=3)) == [(OA, 1), (OB, 3)]  # OC: not ours to confirm


def test_a_gap_pulls_again_from_our_head():
    plan = pull_plan()
    assert plan.gap_wants([event(OB, 9), event(OA, 5), event(OB, 10)], heads(a=3), {}) == [Want(OA, 3), Want(OB, 0)]


def test_a_gap_is_not_pulled_when_the_next_event_cannot_be_accepted():
    plan = pull_plan()
    plan.rejected([event(OB, 1)], heads())
    refused = {OA: (4, HASH, "breaks a rule")}
    gaps = [event(OA, 6), event(OB, 3), event(OC, 2)]
    assert plan.gap_wants(gaps, heads(a=3), refused) == [Want(OC, 0)]


def test_the_first_rejection_of_an_origin_is_the_one_remembered():
    plan = pull_plan()
    plan.rejected([event(OA, 4)], heads(a=3))
    plan.rejected([event(OA, 4)], heads(a=8))
    assert plan.gap_wants([event(OA, 9)], heads(a=3), {}) == []
    assert plan.gap_wants([event(OA, 9)], heads(a=8), {}) == [Want(OA, 8)]


def test_a_gap_waiting_for_an_artifact_is_pulled_when_it_arrives_instead():
    plan = pull_plan()
    assert plan.fetch("art_1", OA) is Fetch.ASK
    assert plan.gap_wants([event(OA, 5)], heads(a=3), {}) == []


def test_pull_from_head():
    assert PullPlan.pull_from_head(OA, heads(a=4)) == Want(OA, 4)
    assert PullPlan.pull_from_head(OB, heads(a=4)) == Want(OB, 0)


# -- PullPlan: artifacts we receive ----------------------------------------------------------------


def chunks_of(content, size=4):
    sha = hashlib.sha256(content).hexdigest()
    artifact_id = artifact_id_for_sha256(sha)
    pieces = [content[i:i + size] for i in range(0, len(content), size)] or [b""]
    offsets = list(range(0, len(content), size)) or [0]
    return artifact_id, [ArtifactChunk(artifact_id, off, len(content), sha, "file", "alice", "2026-11-30T01:02:03Z",
                                       "{}", piece) for off, piece in zip(offsets, pieces, strict=True)]


def test_an_artifact_arrives_in_chunks_and_its_origins_are_pulled_again():
    plan = pull_plan()
    artifact_id, chunks = chunks_of(b"0123456789")
    assert plan.fetch(artifact_id, OB) is Fetch.ASK
    assert plan.fetch(artifact_id, OA) is Fetch.WAIT
    assert plan.fetching
    assert [plan.on_chunk(c) for c in chunks[:-1]] == [Chunk.PARTIAL, Chunk.PARTIAL]
    assert plan.on_chunk(chunks[-1]) == ArtifactReceived(artifact_id, b"0123456789", (OA, OB))
    assert not plan.fetching
    assert plan.resume((OA, OB), heads(a=2)) == [Want(OA, 2), Want(OB, 0)]
    assert plan.on_chunk(chunks[0]) is Chunk.IGNORED  # not asked for (any more)


def test_an_origin_waiting_for_another_artifact_too_is_pulled_when_the_last_arrives():
    plan = pull_plan()
    first, (chunk,) = chunks_of(b"one", size=16)
    plan.fetch(first, OA)
    plan.fetch("art_" + "f" * 32, OA)
    assert isinstance(plan.on_chunk(chunk), ArtifactReceived)
    assert plan.resume((OA,), heads()) == []


def test_an_artifact_the_peer_does_not_have_is_given_up():
    plan = pull_plan()
    artifact_id, _ = chunks_of(b"x")
    plan.fetch(artifact_id, OA)
    assert plan.on_chunk(ArtifactChunk(artifact_id, 0, -1, "", "", "", "", "{}", b"")) is Chunk.ABSENT
    assert not plan.fetching


def test_at_most_max_fetches_are_on_their_way():
    plan = pull_plan()
    for i in range(MAX_FETCHES):
        assert plan.fetch(f"art_{i:032d}", OA) is Fetch.ASK
    assert plan.fetch("art_" + "f" * 32, OB) is Fetch.FULL
    assert plan.fetch("art_" + "0" * 32, OB) is Fetch.WAIT  # joining one on its way is always fine
    assert plan.gap_wants([event(OB, 3)], heads(), {}) == []  # OB waits for art_0…0


def test_an_artifact_over_our_limit_ends_the_fetch_and_the_link():
    plan = PullPlan(any_key, max_artifact_bytes=8)
    artifact_id, chunks = chunks_of(b"0123456789")
    plan.fetch(artifact_id, OA)
    with pytest.raises(RemoteProtocolError, match="over this daemon's limit of 8"):
        plan.on_chunk(chunks[0])
    assert not plan.fetching


@pytest.mark.parametrize("tamper", ["offset", "artifact"])
def test_a_chunk_out_of_order_or_for_another_artifact_is_a_protocol_error(tamper):
    plan = pull_plan()
    artifact_id, chunks = chunks_of(b"0123456789")
    plan.fetch(artifact_id, OA)
    chunk = chunks[1] if tamper == "offset" else chunks[0]
    if tamper == "artifact":
        chunk = ArtifactChunk(artifact_id, 0, 10, "ab" * 32, "file", "a", "2026-11-30T01:02:03Z", "{}", b"0123")
    with pytest.raises(RemoteProtocolError, match="out of order or for another artifact"):
        plan.on_chunk(chunk)


def test_artifacts_in_flight_are_bounded_in_memory():
    plan = PullPlan(any_key, max_artifact_bytes=8)
    big = 8 + FETCH_SLACK_BYTES + 1
    artifact_id = artifact_id_for_sha256("ab" * 32)
    plan.fetch(artifact_id, OA)
    chunk = ArtifactChunk(artifact_id, 0, 8, "ab" * 32, "file", "a", "2026-11-30T01:02:03Z", "{}", b"x" * big)
    with pytest.raises(RemoteProtocolError, match="exceed what one link may hold"):
        plan.on_chunk(chunk)


def test_an_artifact_that_does_not_match_its_sha256_is_a_protocol_error():
    plan = pull_plan()
    artifact_id, chunks = chunks_of(b"0123")
    plan.fetch(artifact_id, OA)
    forged = ArtifactChunk(artifact_id, 0, 4, chunks[0].sha256, "file", "a", "2026-11-30T01:02:03Z", "{}", b"9999")
    with pytest.raises(RemoteProtocolError, match="does not match its sha256"):
        plan.on_chunk(forged)


# -- determinism ---------------------------------------------------------------------------------


def test_the_same_calls_give_the_same_answers():
    def run():
        serve, pull = ServePlan(), pull_plan()
        serve.on_want(OB, 0)
        serve.owe_committed(committed((OA, 3), (OC, 2)))
        out = serve_all(serve, {OA: 3, OB: 900, OC: 2})
        waits = [serve.throttle(SERVE_PAGE, t) for t in (1.0, 1.0, 2.0)]
        wants = pull.on_vector(vector(a=5, b=5, c=5), heads(a=1), [OC], refused_next={}, now=3.0)
        return out, waits, wants, repr(serve), repr(pull)

    assert run() == run()
