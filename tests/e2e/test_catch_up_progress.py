"""Joining shows the catch-up: on a terminal a progress bar until the new replica holds what
its peers hold; with ``--wait`` (scripts) plain lines and a return only once caught up; without
either, ``join`` returns at once and says the catch-up goes on in the background."""

from __future__ import annotations

from tests.fleet import ctl_json, event_count, seed_bulk
from tests.helpers import run_ctl, run_ctl_on_terminal


def test_join_on_a_terminal_draws_the_catch_up_until_it_is_done(fleet):
    alpha = fleet.found("alpha")
    seed_bulk(alpha, 2_000)
    beta = fleet.start("beta")
    code, out, terminal = run_ctl_on_terminal(beta.home, "join", fleet.invite(), "--name", "beta")
    assert code == 0, (out, terminal)
    assert "Joined palace" in out and "Caught up:" in out
    assert "catching up [" in terminal and "100%" in terminal
    assert event_count(beta.home) == event_count(alpha.home)


def test_join_wait_returns_once_caught_up_and_plain_join_returns_at_once(fleet):
    alpha = fleet.found("alpha")
    seed_bulk(alpha, 1_000)
    beta = fleet.start("beta")
    joined = ctl_json(beta.home, "join", fleet.invite(), "--name", "beta", "--wait")
    assert joined["events"] == event_count(alpha.home) and event_count(beta.home) == joined["events"]
    gamma = fleet.start("gamma")
    quick = run_ctl(gamma.home, "join", fleet.invite(), "--name", "gamma")
    assert quick.returncode == 0 and "Catching up in the background" in quick.stdout and "\r" not in quick.stderr
