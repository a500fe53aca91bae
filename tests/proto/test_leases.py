"""Leases, the pure layer: durations, pattern overlap, and the derivation every replica agrees on."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palace_proto.errors import ValidationError
from palace_proto.leases import (
    ACQUIRE,
    RELEASE,
    RENEW,
    LeaseRequest,
    covers_path,
    derive_leases,
    lease_conflicts,
    normalize_path,
    normalize_pattern,
    patterns_overlap,
)
from palace_proto.stamps import add_seconds, format_duration, parse_duration

T0 = "2026-12-01T10:00:00.000000Z"


def at(seconds: int) -> str:
    return add_seconds(T0, seconds)


def acquire(lease_id, agent, patterns, *, t=0, ttl=3600, shared=False, forced=(), origin="o1", event_id=None):
    meta = {"patterns": patterns, "mode": "shared" if shared else "exclusive", "ttl_s": ttl}
    if forced:
        meta["forced"] = list(forced)
    return {"type": ACQUIRE, "id": event_id or f"evt_{lease_id}", "correlation_id": lease_id, "from_agent": agent,
            "origin": origin, "stream": "project/p", "created_at": at(t), "metadata": json.dumps(meta)}


def change(kind, lease_id, agent, *, t, ttl=None):
    meta = {"ttl_s": ttl} if ttl else {}
    return {"type": kind, "id": f"evt_{kind}_{lease_id}_{t}", "correlation_id": lease_id, "from_agent": agent,
            "created_at": at(t), "metadata": meta}


def lid(n: int) -> str:
    return f"lease_{n:016x}"


# -- durations ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("2h", 7200), ("7d", 604800), ("600", 600)])
def test_durations_take_seconds_minutes_hours_and_days(text, seconds):
    assert parse_duration(text, field="ttl") == seconds


@pytest.mark.parametrize("text", ["", "1w", "h", "-5m", "5", "31d", "1.5h"])
def test_bad_or_out_of_range_durations_are_refused_with_an_example(text):
    with pytest.raises(ValidationError, match="duration|between"):
        parse_duration(text, field="ttl")


def test_durations_print_in_their_largest_whole_unit():
    assert [format_duration(s) for s in (90, 1800, 7200, 86400, 61)] == ["90s", "30m", "2h", "1d", "61s"]


# -- patterns -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("given_", "stored"), [("./src/api/", "src/api"), ("/README.md", "README.md"),
                                                ("src//x.py", "src/x.py"), ("res:gpu0", "res:gpu0"), ("/", "**")])
def test_patterns_are_normalized(given_, stored):
    assert normalize_pattern(given_) == stored


@pytest.mark.parametrize("bad", ["", "  ", "../x", "a/../../b", "src\\api", "res:", "res:a/b", "x" * 600, "a\nb", 5])
def test_bad_patterns_are_refused(bad):
    with pytest.raises(ValidationError):
        normalize_pattern(bad)


@pytest.mark.parametrize(("a", "b", "overlap"), [
    ("src/api/**", "src/api/handlers.py", True),
    ("src/api", "src/api/deep/x.py", True),        # a directory covers what is under it
    ("src/api/**", "src/web/**", False),
    ("*.py", "src/deep/x.py", False),              # relative to the root, also without a slash
    ("**/*.py", "src/deep/x.py", True),
    ("README.md", "docs/README.md", False),
    ("x", "y", False),
    ("src/*.py", "src/*.md", False),
    ("src/[a-c]*.py", "src/b_test.py", True),
    ("src/[a-c]*.py", "src/d_test.py", False),
    ("src/[!a]x", "src/ax", False),
    ("src/[!a]x", "src/[!b]x", True),
    ("src/[a-c]x", "src/[!abc]x", False),
    ("src/**/test_*.py", "src/pkg/sub/test_x.py", True),
    ("src/**/test_*.py", "lib/test_x.py", False),
    ("res:gpu0", "res:gpu0", True),
    ("res:gpu*", "res:gpu1", True),
    ("res:gpu0", "res:gpu1", False),
    ("res:gpu0", "gpu0", False),                   # a resource is never a path
    ("**", "anything/at/all", True),
])
def test_overlap_is_whether_one_name_can_match_both(a, b, overlap):
    na, nb = normalize_pattern(a), normalize_pattern(b)
    assert patterns_overlap(na, nb) is overlap
    assert patterns_overlap(nb, na) is overlap


@pytest.mark.parametrize(("pattern", "path", "covered"), [
    ("src/api/**", "src/api/x.py", True), ("src/api", "src/api/x.py", True), ("src/api", "src/apix.py", False),
    ("*.md", "docs/a.md", False), ("**/*.md", "docs/a.md", True), ("src/*.py", "src/a/b.py", False),
    ("src/*.py", "src/a.py/b", True), ("res:db", "res:db", True), ("res:db", "db", False),
    ("src/[x]", "src/[x]", False), ("src/[x]", "src/x", True), ("src/*", "src/[x]", True),
])
def test_a_pattern_covers_concrete_paths_and_what_is_under_them(pattern, path, covered):
    assert covers_path(normalize_pattern(pattern), normalize_path(path)) is covered


_SEGMENT = st.text(alphabet="ab*?[]!-", min_size=1, max_size=6)


@given(st.lists(_SEGMENT, min_size=1, max_size=3), st.lists(_SEGMENT, min_size=1, max_size=3),
       st.lists(st.text(alphabet="ab-]", min_size=1, max_size=3), min_size=1, max_size=3))
def test_overlap_never_misses_a_path_both_patterns_cover(a, b, names):
    """Guards leases against a missed collision: whenever some concrete path is covered by two
    patterns, they are reported as overlapping (false positives only refuse a lease)."""
    pa, pb = "/".join(a), "/".join(b)
    try:
        na, nb = normalize_pattern(pa), normalize_pattern(pb)
        path = normalize_path("/".join(names))
    except ValidationError:
        return
    if covers_path(na, path) and covers_path(nb, path):
        assert patterns_overlap(na, nb)


def test_hostile_patterns_are_decided_conservatively_without_deep_work():
    """Guards the derivation against a peer's pathological globs: a test that would take more
    than MAX_CELLS steps answers "overlap" at once (the same verdict on every replica), and no
    pattern length can reach the interpreter's recursion limit."""
    nasty = normalize_pattern("*a" * 120)
    assert patterns_overlap(nasty, normalize_pattern("b" * 250)) is True  # conservative, undecided
    assert patterns_overlap(normalize_pattern("*a" * 20), normalize_pattern("b" * 60)) is False  # decided
    deep = normalize_pattern("/".join(["*"] * 120))
    assert patterns_overlap(deep, normalize_pattern("/".join(["x"] * 120))) is True


# -- requests -----------------------------------------------------------------------------------


def test_a_request_checks_and_deduplicates_patterns():
    r = LeaseRequest.from_wire({"patterns": ["src/", "./src", "res:gpu0"], "ttl_s": "30m", "reason": " fix "})
    assert (r.patterns, r.exclusive, r.ttl_s, r.reason) == (("src", "res:gpu0"), True, 1800, "fix")
    assert LeaseRequest.from_wire({"patterns": "x", "shared": True}).exclusive is False
    for bad in ({"patterns": []}, {"patterns": [f"x{i}" for i in range(33)]}, {"patterns": ["x"], "ttl_s": 5},
                {"patterns": ["x"], "shared": "yes"}, {"patterns": ["x"], "reason": "a\nb"}):
        with pytest.raises(ValidationError):
            LeaseRequest.from_wire(bad)


# -- derivation ---------------------------------------------------------------------------------


def states(leases, now):
    return {lease.id: lease.state(now) for lease in leases}


def test_ttl_expiry_renewal_and_release():
    events = [acquire(lid(1), "a", ["src/**"], ttl=600), acquire(lid(2), "b", ["docs/**"], t=10, ttl=600),
              change(RENEW, lid(2), "b", t=500, ttl=600), change(RELEASE, lid(1), "a", t=100)]
    leases = derive_leases(events)
    assert states(leases, at(50)) == {lid(1): "active", lid(2): "active"}
    assert states(leases, at(200)) == {lid(1): "released", lid(2): "active"}
    assert states(leases, at(1099)) == {lid(1): "released", lid(2): "active"}  # renewed at 500 for 600 s
    assert states(leases, at(1100)) == {lid(1): "released", lid(2): "expired"}


def test_only_the_holder_renews_or_releases_and_never_after_the_end():
    events = [acquire(lid(1), "a", ["x"], ttl=600), change(RELEASE, lid(1), "mallory", t=10),
              change(RENEW, lid(1), "a", t=700, ttl=3600)]  # too late: it had expired at 600
    (lease,) = derive_leases(events)
    assert lease.state(at(650)) == "expired" and lease.renewals == 0


def test_the_earlier_of_two_colliding_leases_wins_and_the_later_ends_at_its_start():
    events = [acquire(lid(2), "b", ["src/api/x.py"], t=5, origin="o2"), acquire(lid(1), "a", ["src/**"], t=0)]
    leases = derive_leases(events)
    assert states(leases, at(10)) == {lid(1): "active", lid(2): "lost"}
    loser = next(lease for lease in leases if lease.id == lid(2))
    assert (loser.ended_by, loser.ended_by_agent, loser.ended_at) == (lid(1), "a", at(5))


def test_same_instant_collisions_are_settled_by_event_id():
    events = [acquire(lid(1), "a", ["x"], event_id="evt_b"), acquire(lid(2), "b", ["x"], event_id="evt_a")]
    assert states(derive_leases(events), at(1)) == {lid(1): "lost", lid(2): "active"}


def test_shared_leases_coexist_but_exclusive_and_shared_collide():
    shared = [acquire(lid(1), "a", ["res:db"], shared=True), acquire(lid(2), "b", ["res:db"], t=1, shared=True)]
    assert set(states(derive_leases(shared), at(2)).values()) == {"active"}
    mixed = [*shared, acquire(lid(3), "c", ["res:db"], t=2)]
    assert states(derive_leases(mixed), at(3))[lid(3)] == "lost"


def test_an_agent_never_collides_with_itself_and_a_lease_that_ended_blocks_nobody():
    events = [acquire(lid(1), "a", ["x"]), acquire(lid(2), "a", ["x"], t=1), acquire(lid(3), "b", ["x"], t=700, ttl=60),
              change(RELEASE, lid(1), "a", t=300), change(RELEASE, lid(2), "a", t=600)]
    assert states(derive_leases(events), at(710)) == {lid(1): "released", lid(2): "released", lid(3): "active"}


def test_a_forced_lease_ends_the_leases_it_names():
    events = [acquire(lid(1), "a", ["src/**"]), acquire(lid(2), "b", ["src/x"], t=60, forced=[lid(1)])]
    leases = derive_leases(events)
    assert states(leases, at(61)) == {lid(1): "forced", lid(2): "active"}
    assert (leases[0].ended_by, leases[0].ended_by_agent) == (lid(2), "b")


def test_a_force_that_did_not_name_an_earlier_rival_loses_to_it():
    events = [acquire(lid(1), "a", ["src/**"]), acquire(lid(9), "c", ["src/**"], t=1, origin="o2"),
              acquire(lid(2), "b", ["src/x"], t=60, forced=[lid(9)])]
    assert states(derive_leases(events), at(61)) == {lid(1): "active", lid(9): "lost", lid(2): "lost"}


def test_a_revoked_daemons_leases_end_with_it():
    events = [acquire(lid(1), "a", ["x"], origin="bad"), acquire(lid(2), "b", ["y"], origin="good")]
    leases = derive_leases(events, revoked={"bad": at(100)})
    assert states(leases, at(50)) == {lid(1): "active", lid(2): "active"}
    assert states(leases, at(150)) == {lid(1): "revoked", lid(2): "active"}


def test_malformed_lease_events_are_ignored():
    good = acquire(lid(1), "a", ["x"])
    bad = [dict(good, correlation_id="lease_x"), dict(good, created_at="yesterday", correlation_id=lid(2)),
           dict(good, metadata="{not json", correlation_id=lid(3)),
           dict(good, metadata=json.dumps({"patterns": ["../x"], "ttl_s": 60}), correlation_id=lid(4)),
           dict(good, metadata=json.dumps({"patterns": ["x"], "ttl_s": 60, "forced": "all"}), correlation_id=lid(5))]
    assert [lease.id for lease in derive_leases([good, *bad])] == [lid(1)]


def test_every_order_of_the_same_events_gives_the_same_verdicts():
    """Guards convergence: replicas receive events in different orders; the derivation must not care."""
    events = [acquire(lid(1), "a", ["src/**"], t=0), acquire(lid(2), "b", ["src/api/**"], t=5, origin="o2"),
              acquire(lid(3), "c", ["docs/**"], t=7), acquire(lid(4), "d", ["docs/x"], t=9, forced=[lid(3)]),
              change(RENEW, lid(1), "a", t=3000, ttl=3600), change(RELEASE, lid(3), "c", t=8)]
    expected = None
    rng = random.Random(7)
    for _ in range(30):
        shuffled = events[:]
        rng.shuffle(shuffled)
        verdict = [(lease.id, lease.state(at(4000)), lease.ended_by, lease.expires_at) for lease in derive_leases(shuffled)]
        expected = expected or verdict
        assert verdict == expected
    assert dict((i, s) for i, s, *_ in expected) == {lid(1): "active", lid(2): "lost", lid(3): "released",
                                                     lid(4): "expired"}


def test_conflicts_for_a_new_lease_name_the_active_rivals_only():
    leases = derive_leases([acquire(lid(1), "a", ["src/**"]), acquire(lid(2), "b", ["docs/**"], ttl=60),
                            acquire(lid(3), "c", ["res:db"], shared=True)])
    now = at(100)
    want = LeaseRequest.from_wire({"patterns": ["src/x", "docs/y", "res:db"]})
    assert [lease.id for lease in lease_conflicts(leases, want, "z", now)] == [lid(1), lid(3)]
    assert lease_conflicts(leases, want, "a", now)[0].id == lid(3)  # its own lease is no rival
    shared = LeaseRequest.from_wire({"patterns": ["res:db"], "shared": True})
    assert lease_conflicts(leases, shared, "z", now) == []


def test_pairs_of_patterns_overlap_symmetrically():
    pats = [normalize_pattern(p) for p in ["a/**", "a/b", "*.c", "/x.c", "a/*/c", "res:q", "res:*"]]
    for x, y in itertools.product(pats, repeat=2):
        assert patterns_overlap(x, y) == patterns_overlap(y, x)
