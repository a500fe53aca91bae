"""palace_proto.identity: registrations, transfers and retirements derived into tenures the same way
whatever order they arrive in; the verdict on events written as an agent; the id rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palace_proto import identity as A
from palace_proto.agents import check_stale_after
from palace_proto.authority import written_as_daemon
from palace_proto.errors import ValidationError
from palace_proto.leases import CONFLICT as LEASE_CONFLICT
from palace_proto.pki import REVOKE_EVENT_TYPE
from palace_proto.tasks import CONFLICT as TASK_CONFLICT
from palace_proto.tasks import STALLED

MAC, BOX, NEW, CA = "MAC" * 8, "BOX" * 8, "NEW" * 8, "CAD" * 8


def stamp(minute: int, second: int = 0) -> str:
    return f"2026-12-01T10:{minute:02d}:{second:02d}.000000Z"


def claim(kind: str, daemon: str, minute: int, *, to: str | None = None, nonce: str | None = None,
          event_id: str | None = None, agent: str = "mac-claude") -> A.Claim:
    return A.Claim(event_id or f"evt_{kind}_{daemon}_{minute}", stamp(minute), kind, agent, daemon, to, nonce)


def test_the_first_registration_holds_and_a_later_one_elsewhere_is_void():
    record = A.derive_record("mac-claude", [claim(A.REGISTER, BOX, 5), claim(A.REGISTER, MAC, 1),
                                            claim(A.REGISTER, MAC, 7)])
    assert [(t.daemon, t.since) for t in record.tenures] == [(MAC, stamp(1))]  # MAC again: no change
    assert [(c.daemon, why) for c, why in record.void] == [(BOX, "mac-claude was registered to daemon MACMACM first")]
    assert record.current.daemon == MAC and not record.retired


def test_the_verdict_flags_only_events_of_a_daemon_that_did_not_hold_the_agent_then():
    record = A.derive_record("mac-claude", [claim(A.REGISTER, MAC, 1), claim(A.TRANSFER, MAC, 10, to=NEW),
                                            claim(A.RETIRE, NEW, 20)])
    assert A.judge(record, BOX, stamp(0), "evt_z") is None  # before any registration: history, not judged
    assert A.judge(record, MAC, stamp(5), "evt_a") is None
    flagged = A.judge(record, BOX, stamp(5), "evt_a")
    assert flagged is not None and (flagged.holder, flagged.since, flagged.by) == (MAC, stamp(1), BOX)
    assert "belongs to daemon MACMACM" in flagged.reason
    assert A.judge(record, MAC, stamp(11), "evt_b").holder == NEW  # moved away: the old holder may not
    assert A.judge(record, NEW, stamp(11), "evt_b") is None
    retired = A.judge(record, NEW, stamp(21), "evt_c")
    assert retired is not None and retired.holder is None and "after it was retired" in retired.reason
    assert A.judge(None, BOX, stamp(5), "evt_a") is None  # an agent nobody registered


def test_a_tie_in_time_is_broken_by_event_id_the_same_way_everywhere():
    first = claim(A.REGISTER, BOX, 3, event_id="evt_a")
    second = claim(A.REGISTER, MAC, 3, event_id="evt_b")
    assert A.derive_record("mac-claude", [second, first]).current.daemon == BOX


def test_only_the_holder_or_the_palace_ca_moves_or_retires_an_agent():
    taken = [claim(A.REGISTER, MAC, 1)]
    stolen = A.derive_record("mac-claude", [*taken, claim(A.TRANSFER, BOX, 2, to=BOX)])
    assert stolen.current.daemon == MAC and "did not hold" in stolen.void[0][1]
    by_ca = A.derive_record("mac-claude", [*taken, claim(A.TRANSFER, CA, 2, to=NEW, nonce="n1")])
    assert (by_ca.current.daemon, by_ca.current.by_ca) == (NEW, True)
    retired_by_other = A.derive_record("mac-claude", [*taken, claim(A.RETIRE, BOX, 2)])
    assert not retired_by_other.retired
    assert A.derive_record("mac-claude", [*taken, claim(A.RETIRE, CA, 2, nonce="n2")]).retired


def test_a_palace_ca_statement_counts_once():
    """Guards against a member copying the CA's signed transfer into an event of its own later."""
    record = A.derive_record("mac-claude", [
        claim(A.REGISTER, MAC, 1), claim(A.TRANSFER, CA, 2, to=NEW, nonce="n1"),
        claim(A.TRANSFER, NEW, 3, to=MAC), claim(A.TRANSFER, BOX, 4, to=NEW, nonce="n1")])
    assert record.current.daemon == MAC
    assert record.void[-1][1] == "a palace-CA statement already used by an earlier event"


def test_retired_agents_can_be_registered_again_and_void_changes_are_explained():
    record = A.derive_record("mac-claude", [
        claim(A.REGISTER, MAC, 1), claim(A.RETIRE, MAC, 2), claim(A.RETIRE, MAC, 3),
        claim(A.TRANSFER, MAC, 4, to=NEW), claim(A.REGISTER, BOX, 5), claim(A.TRANSFER, BOX, 6, to=BOX)])
    assert [t.how for t in record.tenures] == ["registered", "retired", "registered"]
    assert record.current.daemon == BOX
    whys = [why for _, why in record.void]
    assert whys[0] == whys[1] == "only the palace CA may transfer or retire an agent nobody holds"
    assert whys[2] == "mac-claude is held by daemon BOXBOXB already"
    by_ca = A.derive_record("mac-claude", [claim(A.REGISTER, MAC, 1), claim(A.RETIRE, MAC, 2),
                                           claim(A.RETIRE, CA, 3, nonce="n")])
    assert by_ca.void[0][1] == "mac-claude is not held by anyone"


def test_claims_about_other_agents_and_duplicates_are_ignored():
    same = claim(A.REGISTER, MAC, 1)
    record = A.derive_record("mac-claude", [same, same, claim(A.REGISTER, BOX, 0, agent="someone-else")])
    assert len(record.tenures) == 1 and record.void == ()


@given(st.permutations(range(8)))
def test_the_order_of_arrival_never_changes_the_record(order):
    claims = [claim(A.REGISTER, BOX, 6), claim(A.REGISTER, MAC, 1), claim(A.TRANSFER, MAC, 2, to=NEW),
              claim(A.REGISTER, NEW, 3), claim(A.RETIRE, BOX, 4), claim(A.TRANSFER, CA, 5, to=BOX, nonce="x"),
              claim(A.RETIRE, BOX, 7), claim(A.REGISTER, MAC, 8)]
    expected = A.derive_record("mac-claude", claims)
    assert A.derive_record("mac-claude", [claims[i] for i in order]) == expected


def test_stamps_without_a_fraction_compare_in_time_order():
    assert A.order_key("2026-12-01T10:00:00Z", "b") < A.order_key("2026-12-01T10:00:00.5Z", "a")


def test_a_claim_is_read_from_its_event_and_an_unusable_one_is_nothing():
    event = {"id": "evt_1", "type": A.TRANSFER, "created_at": stamp(1),
             "metadata": A.registry_metadata(A.TRANSFER, "mac-claude", MAC, to_daemon=NEW, ca_nonce="n",
                                             ca_signature="ab")}
    assert A.claim_from_event(event, MAC, ca_verified=True) == A.Claim("evt_1", stamp(1), A.TRANSFER, "mac-claude",
                                                                       MAC, NEW, "n")
    assert A.claim_from_event(event, MAC, ca_verified=False).ca_nonce is None
    assert A.ca_signature_of(event) == ("n", "ab")
    for bad in ({**event, "type": "note"}, {**event, "metadata": "[]"}, {**event, "metadata": {"agent": ""}},
                {**event, "metadata": {"agent": "x"}}):  # a transfer must say where to
        assert A.claim_from_event(bad, MAC, ca_verified=False) is None
    assert A.ca_signature_of({"metadata": {"ca_nonce": "n" * 65, "ca_signature": "x"}}) is None


def test_the_ca_statement_names_everything_it_vouches_for():
    base = A.ca_statement("pal_1", A.TRANSFER, "mac-claude", NEW, "n")
    assert base != A.ca_statement("pal_2", A.TRANSFER, "mac-claude", NEW, "n")
    assert base != A.ca_statement("pal_1", A.RETIRE, "mac-claude", NEW, "n")
    assert base != A.ca_statement("pal_1", A.TRANSFER, "other", NEW, "n")
    assert base != A.ca_statement("pal_1", A.TRANSFER, "mac-claude", MAC, "n")
    assert base != A.ca_statement("pal_1", A.TRANSFER, "mac-claude", NEW, "m")
    assert A.new_ca_nonce(b"a") != A.new_ca_nonce(b"b") and len(A.new_ca_nonce(b"a")) == 32


@pytest.mark.parametrize(("value", "message"), [
    ("", "must be an agent id"), ("   ", "must be an agent id"), (None, "must be an agent id"),
    ("a b", "one token"), ("a\x1b[2J", "one token"), ("*", "everyone"), (A.SYSTEM_AGENT, "the daemon"),
    ("x" * 201, "at most 200"), ("human:", "a person's id"), ("human:a b", "one token"),
    ("human:ali/ce", "a person's id"),
])
def test_bad_agent_ids_say_what_is_wrong(value, message):
    with pytest.raises(ValidationError, match=message):
        A.check_agent_id(value)


def test_agent_ids_and_people():
    assert A.check_agent_id(" mac-claude ") == "mac-claude"
    assert A.check_agent_id("human:alice") == "human:alice" and A.is_human("human:alice")
    assert not A.is_human("alice") and not A.is_human(None)


@pytest.mark.parametrize(("value", "seconds"), [("14d", 14 * 86400), ("72h", 72 * 3600), (7200, 7200), ("3600", 3600)])
def test_stale_after_takes_a_duration(value, seconds):
    assert check_stale_after(value) == seconds


@pytest.mark.parametrize("value", ["soon", "30m", "400d", True, None, -5])
def test_stale_after_outside_its_range_is_refused(value):
    with pytest.raises(ValidationError, match=r"agents.stale_after"):
        check_stale_after(value)


def test_the_types_palaced_writes_as_itself_are_the_rows_that_say_so():
    """The notices, the registry and a revocation: each feature's row says ``as_daemon``."""
    assert {REVOKE_EVENT_TYPE, LEASE_CONFLICT, TASK_CONFLICT, STALLED} | A.REGISTRY_TYPES == written_as_daemon()


def test_a_record_speaks_wire():
    record = A.derive_record("mac-claude", [claim(A.REGISTER, MAC, 1), claim(A.REGISTER, BOX, 2)])
    wire = record.to_wire()
    assert (wire["daemon"], wire["since"], wire["retired"]) == (MAC, stamp(1), False)
    assert wire["void"][0]["daemon"] == BOX and wire["tenures"][0]["how"] == "registered"
    assert record.daemons() == frozenset({MAC})


def test_a_persons_id_counts_only_when_the_palace_ca_grants_it():
    """Guards issue 25 finding 8: a member registered human:root before the operator; its message
    showed as genuine and the operator's was refused. Taking a person's id first proves nothing:
    only a registration or transfer carrying the palace CA's statement grants it, and every event
    written as it without a grant is flagged unproven, the same way on every replica."""
    squatter = claim(A.REGISTER, BOX, 1, agent="human:root")
    record = A.derive_record("human:root", [squatter])
    assert record.tenures == () and "only the palace CA grants it" in record.void[0][1]
    verdict = A.judge(record, BOX, stamp(2), "evt_b")
    assert verdict is not None and verdict.unproven and "unproven" in verdict.reason
    assert verdict.to_wire()["unproven"] is True
    granted = A.derive_record("human:root", [squatter, claim(A.REGISTER, CA, 3, agent="human:root", nonce="n1")])
    assert granted.current.daemon == CA and granted.current.since == stamp(3)
    assert A.judge(granted, CA, stamp(4), "evt_a") is None  # the operator, granted
    assert A.judge(granted, BOX, stamp(2), "evt_b").unproven  # before the grant: still unproven
    assert A.judge(granted, BOX, stamp(5), "evt_c").holder == CA  # after it: an impersonation
    # Granted to the daemon a person uses elsewhere: a CA transfer, nobody holding it before.
    moved = A.derive_record("human:ana", [claim(A.TRANSFER, CA, 1, to=MAC, nonce="n2", agent="human:ana")])
    assert moved.current.daemon == MAC and A.judge(moved, MAC, stamp(2), "evt_m") is None
    # Agents' ids are unchanged: the first registration holds, no CA needed.
    assert A.derive_record("mac-claude", [claim(A.REGISTER, BOX, 1)]).current.daemon == BOX
