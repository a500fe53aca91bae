"""The agent reviewer's pure parts and its refusals (palacectl/features/integrate/reviewer.py): the
verdict read from a run's answer (the last VERDICT line; none means no verdict, never an
approval), and bad options refused in one line before anything starts."""

from __future__ import annotations

import pytest

from palacectl.features.integrate.reviewer import verdict_of
from tests.helpers import run_ctl


def test_the_verdict_is_the_last_verdict_line_and_nothing_else_counts():
    assert verdict_of("looks fine\nVERDICT: approve\n") == "approve"
    assert verdict_of("VERDICT: approve\non second thought\n  verdict: CHANGES_REQUESTED  \n") == "changes_requested"
    assert verdict_of("I would say VERDICT: approve here") is None  # not a line of its own
    assert verdict_of("VERDICT: approved") is None and verdict_of("") is None


@pytest.mark.parametrize(("args", "code", "words"), [
    (["--agent", "human:ana", "--runner", "claude", "--workspace", "."], 64, "a person reviews with palacectl review"),
    (["--agent", "rev", "--runner", "claude", "--workspace", ".", "--timeout", "soon"], 64, "--timeout"),
    (["--agent", "rev", "--runner", "nope", "--workspace", "."], 1, "nope"),
])
def test_bad_reviewer_options_are_refused_in_one_line(tmp_path, args, code, words):
    result = run_ctl(tmp_path / "home", "reviewer", *args)
    assert result.returncode == code and words in result.stderr, result
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_a_patch_is_used_only_if_its_bytes_are_the_ones_its_id_names():
    """``fetch_patch`` (the integrator's and the reviewer's): a record whose bytes do not hash to the
    id the event names is refused, a missing one is "not here yet", a delivery without a patch is None."""
    import hashlib

    from palace_proto.errors import NotFound
    from palace_proto.ids import artifact_id_for_sha256
    from palacectl.features.integrate.integrator import PatchUnusable, fetch_patch

    good = b"diff --git a/x b/x\n"
    digest = hashlib.sha256(good).hexdigest()
    good_id = artifact_id_for_sha256(digest)
    records = {good_id: {"kind": "patch", "content": good, "sha256": digest},
               "art_log": {"kind": "log", "content": b"log", "sha256": "x"},
               "art_" + "0" * 32: {"kind": "patch", "content": b"other bytes", "sha256": digest}}

    def call(op, artifact_id, with_content):
        if artifact_id not in records:
            raise NotFound(f"no {artifact_id}")
        return records[artifact_id]

    assert fetch_patch(call, ["art_log", good_id]) == good
    assert fetch_patch(call, ["art_log"]) is None
    with pytest.raises(PatchUnusable, match="does not match its sha256"):
        fetch_patch(call, ["art_" + "0" * 32])
    with pytest.raises(PatchUnusable, match="has not reached this daemon yet"):
        fetch_patch(call, ["art_" + "1" * 32])


def test_a_skipped_task_waits_for_news_and_the_memory_is_bounded():
    from palacectl.features.worker.skipped import Skipped

    skipped = Skipped(limit=2)
    skipped.skip("task_a", "t1")
    assert skipped.leaves("task_a", "t1") and not skipped.leaves("task_a", "t2")  # something happened on it
    skipped.skip("task_b", "t1")
    skipped.skip("task_a", "t1")  # left again: the newest now
    skipped.skip("task_c", "t1")  # over the bound: the oldest (task_b) goes
    assert len(skipped) == 2 and not skipped.leaves("task_b", "t1") and skipped.leaves("task_a", "t1")
