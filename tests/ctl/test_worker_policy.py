"""palacectl.features.worker.worker_policy: whose tasks a worker runs (issue 25, finding 2), judged per task."""

from __future__ import annotations

import pytest

from palacectl.features.worker.worker_policy import MAX_ENTRIES, PolicyError, WorkerPolicy

OWN, OTHER = "OWNPEER-1", "OTHERPEER-2"


def test_the_default_takes_only_what_this_daemon_wrote():
    policy = WorkerPolicy()
    assert policy.accepts("mac-claude", OWN, "mac", OWN)
    assert not policy.accepts("mac-claude", OTHER, "linux", OWN)
    assert not policy.accepts("mac-claude", None, None, OWN)  # a daemon unknown here is not ours
    assert policy.describe() == "this daemon's agents and people"


def test_agents_people_and_daemons_are_named():
    policy = WorkerPolicy.parse(["local", "mac-claude", "human:ana", "daemon:linux", f"daemon:{OTHER}"])
    assert policy.accepts("mac-claude", "ELSEWHERE", "x", OWN)
    assert policy.accepts("human:ana", "ELSEWHERE", "x", OWN)
    assert policy.accepts("anyone", "SOMEPEER", "linux", OWN)  # by daemon name
    assert policy.accepts("anyone", OTHER, "renamed", OWN)  # by peer id
    assert not policy.accepts("mallory", "MALLORYPEER", "mallory", OWN)
    assert policy.describe() == f"this daemon's agents and people, human:ana, mac-claude, daemon:{OTHER}, daemon:linux"


def test_without_local_even_this_daemons_agents_must_be_named():
    policy = WorkerPolicy.parse(["mac-claude"])
    assert not policy.accepts("other-agent", OWN, "mac", OWN)
    assert policy.accepts("mac-claude", OWN, "mac", OWN)


def test_anyone_is_said_to_be_unsafe():
    policy = WorkerPolicy.parse(["*"])
    assert policy.accepts("mallory", "MALLORYPEER", None, OWN)
    assert "unsafe" in policy.describe()


@pytest.mark.parametrize("entries", [[""], ["  "], ["daemon:"], ["a\nb"], ["x" * 257], ["a"] * (MAX_ENTRIES + 1)])
def test_a_bad_entry_says_what_is_expected(entries):
    with pytest.raises(PolicyError, match="accept-from"):
        WorkerPolicy.parse(entries)
