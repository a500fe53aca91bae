"""The link outbox (palace_proto.outbox): what a link owes its peer besides events, coalesced so
that recording it never blocks and never grows with what the peer sends (issue 30)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from palace_proto.ids import origin_id_from_random
from palace_proto.outbox import HAVE_ENTRIES_PER_MESSAGE, LinkOutbox
from palace_proto.peer import ArtifactWant, Have, Neighbours, Seen, Want, from_wire, to_wire

OA, OB = "ori_" + "a" * 26, "ori_" + "b" * 26


def test_an_empty_outbox_owes_nothing():
    outbox = LinkOutbox()
    assert not outbox and not outbox.awaits_sync and not outbox.vector_due
    assert outbox.take() == [] and outbox.take_after_sync() == (False, [])


def test_everything_owed_comes_out_once_in_the_order_that_serves_the_peer_best():
    outbox = LinkOutbox()
    outbox.artifact_want("art_1", 0)
    outbox.want(OB, 4)
    outbox.have(OA, 9)
    outbox.vector()
    outbox.neighbours(("peer-c",))
    assert outbox
    assert repr(outbox) == "<LinkOutbox vector=True haves=1 wants=1 artifacts=1 neighbours=True>"
    assert outbox.take() == [Neighbours(("peer-c",)), Want(OB, 4), ArtifactWant("art_1", 0)]
    assert outbox and outbox.awaits_sync and outbox.vector_due  # receipts and the vector wait for a sync
    assert outbox.take_after_sync() == (True, [Have(((OA, 9),))])
    assert not outbox and outbox.take() == [] and outbox.take_after_sync() == (False, [])


def test_what_is_recorded_after_the_sync_was_taken_waits_for_the_next_one():
    """A receipt names what the next sync covers: one recorded while a sync runs is not taken with
    the ones that sync was started for."""
    outbox = LinkOutbox()
    outbox.have(OA, 1)
    assert outbox.take_after_sync() == (False, [Have(((OA, 1),))])
    outbox.have(OA, 2)
    assert outbox.awaits_sync and outbox.take() == []
    assert outbox.take_after_sync() == (False, [Have(((OA, 2),))])


def test_receipts_only_rise_and_the_newest_pull_and_neighbour_set_win():
    outbox = LinkOutbox()
    outbox.have(OA, 9)
    outbox.have(OA, 3)  # an older receipt crossing a newer one says nothing new
    outbox.want(OA, 5)
    outbox.want(OA, 2)  # asked again from a head a pull reset: the newest pull is what counts
    outbox.neighbours(("x",))
    outbox.neighbours(())
    assert outbox.take() == [Neighbours(()), Want(OA, 2)]
    assert outbox.take_after_sync() == (False, [Have(((OA, 9),))])


def test_many_receipts_are_split_into_messages_the_codec_accepts():
    outbox = LinkOutbox()
    origins = [origin_id_from_random(i.to_bytes(16, "big")) for i in range(HAVE_ENTRIES_PER_MESSAGE + 5)]
    for i, origin in enumerate(origins):
        outbox.have(origin, i + 1)
    _, messages = outbox.take_after_sync()
    assert [len(m.entries) for m in messages] == [HAVE_ENTRIES_PER_MESSAGE, 5]
    assert all(from_wire(to_wire(m)) == m for m in messages)


@given(st.lists(st.tuples(st.sampled_from(["have", "want", "artifact", "vector"]), st.sampled_from([OA, OB]),
                          st.integers(0, 100)), max_size=200))
def test_whatever_is_recorded_the_outbox_holds_one_entry_per_origin_and_kind(records):
    """However many receipts and pulls the reader records between two sends, the outbox holds at
    most one of each per origin (its size is bounded by the origins, not by the traffic)."""
    outbox = LinkOutbox()
    for kind, origin, value in records:
        {"have": lambda: outbox.have(origin, value), "want": lambda: outbox.want(origin, value),
         "artifact": lambda: outbox.artifact_want(origin, value), "vector": outbox.vector}[kind]()
    messages = outbox.take()
    vector_due, receipts = outbox.take_after_sync()
    messages += receipts
    assert vector_due == any(kind == "vector" for kind, _, _ in records)
    haves = [entry for m in messages if isinstance(m, Have) for entry in m.entries]
    assert len({origin for origin, _ in haves}) == len(haves) <= 2
    assert len([m for m in messages if isinstance(m, Want)]) <= 2
    for origin in (OA, OB):
        expected = [v for kind, o, v in records if kind == "have" and o == origin]
        assert dict(haves).get(origin) == (max(expected) if expected else None)


def test_where_the_peer_came_from_is_told_once_ahead_of_the_rest():
    outbox = LinkOutbox()
    outbox.seen("203.0.113.7")
    outbox.neighbours(("peer-c",))
    assert outbox
    assert outbox.take() == [Seen("203.0.113.7"), Neighbours(("peer-c",))]
    assert not outbox and outbox.take() == []
