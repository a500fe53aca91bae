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
