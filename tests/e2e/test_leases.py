"""Leases end to end on real daemons: refusal and force, shared and exclusive, renewal and expiry,
the git guard in a real repository, and a partition that heals to one winner on every replica."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.fleet import api, ctl_json, peer_id, wait_converged, wait_until
from tests.helpers import RawClient, init_repo, run_ctl, run_ctl_process, run_git


def acquire(home, agent, *patterns, **flags):
    args = ["lease", "acquire", *patterns, "--agent", agent, "--project", flags.pop("project", "demo")]
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    return run_ctl(home, *args)


def conflicts_for(home, agent):
    return api(home, "list", types=["lease.conflict"], to_agents=[agent], limit=50)


def test_an_overlapping_lease_is_refused_naming_its_holder_and_force_tells_the_holder(ctl, daemon):
    taken = acquire(daemon.home, "alice", "src/api/**", reason="refactoring the API", ttl="2h", json=True)
    assert taken.returncode == 0, taken
    alice_lease = taken.json()["lease"]
    assert (alice_lease["state"], alice_lease["mode"], alice_lease["patterns"]) == ("active", "exclusive", ["src/api/**"])

    refused = acquire(daemon.home, "bob", "src/api/handlers.py")
    assert refused.returncode == 1
    assert "alice holds src/api/** exclusively (refactoring the API)" in refused.stderr
    assert "--force" in refused.stderr and refused.stderr.count("\n") == 1  # one line
    assert acquire(daemon.home, "bob", "src/web/**").returncode == 0  # no overlap, no problem
    assert acquire(daemon.home, "alice", "src/api/x.py").returncode == 0  # her own leases never collide

    forced = acquire(daemon.home, "bob", "src/api/handlers.py", force=True)
    assert forced.returncode == 0 and "Forced out" in forced.stderr and "alice" in forced.stderr
    # The holder is told, once, by an event addressed to her (it wakes her watcher).
    told = wait_until(lambda: conflicts_for(daemon.home, "alice")["events"], "alice to be told")
    assert len(told) == 1 and told[0]["correlation_id"] == alice_lease["id"]
    assert "forced out" in told[0]["body"] and "bob" in told[0]["body"]
    states = {lease["id"]: lease["state"] for lease in ctl_json(daemon.home, "lease", "list", "--all")["leases"]}
    assert states[alice_lease["id"]] == "forced"
    # And only once: another forcing makes the daemon look at its lost leases again (it tells
    # carol); a second notice for alice, were one due, is written by then.
    api(daemon.home, "lease_acquire", patterns=["docs/**"], agent="carol", project="demo")
    api(daemon.home, "lease_acquire", patterns=["docs/**"], agent="dave", project="demo", force=True)
    wait_until(lambda: conflicts_for(daemon.home, "carol")["events"], "carol to be told")
    assert len(conflicts_for(daemon.home, "alice")["events"]) == 1


def test_shared_leases_coexist_and_an_exclusive_one_over_them_is_refused(ctl, daemon):
    assert acquire(daemon.home, "alice", "res:staging-db", shared=True).returncode == 0
    assert acquire(daemon.home, "bob", "res:staging-db", shared=True).returncode == 0
    refused = acquire(daemon.home, "carol", "res:staging-db")
    assert refused.returncode == 1 and "alice" in refused.stderr and "bob" in refused.stderr
    check = run_ctl(daemon.home, "lease", "check", "res:staging-db", "--agent", "carol")
    assert check.returncode == 0  # shared leases block no one's work


def test_renew_release_check_and_list(ctl, daemon):
    lease = acquire(daemon.home, "alice", "docs/", ttl="30m", json=True).json()["lease"]
    renewed = ctl_json(daemon.home, "lease", "renew", lease["id"], "--ttl", "2h")["lease"]
    assert renewed["expires_at"] > lease["expires_at"] and renewed["renewals"] == 1
    blocked = run_ctl(daemon.home, "lease", "check", "docs/guide.md", "README.md", "--agent", "bob")
    assert blocked.returncode == 1 and blocked.stdout.startswith("docs/guide.md: " + lease["id"])
    assert run_ctl(daemon.home, "lease", "check", "docs/guide.md", "--agent", "alice").returncode == 0
    assert [x["id"] for x in ctl_json(daemon.home, "lease", "list", "--path", "docs/a/b.md")["leases"]] == [lease["id"]]
    assert ctl_json(daemon.home, "lease", "list", "--agent", "bob")["count"] == 0
    refused = run_ctl(daemon.home, "lease", "release", lease["id"], "--agent", "bob")
    assert refused.returncode == 1 and "held by alice" in refused.stderr
    assert ctl_json(daemon.home, "lease", "release", "--all", "--agent", "alice")["released"] == [lease["id"]]
    assert run_ctl(daemon.home, "lease", "check", "docs/guide.md", "--agent", "bob").returncode == 0
    assert ctl_json(daemon.home, "lease", "list")["count"] == 0
    assert ctl_json(daemon.home, "lease", "list", "--all")["leases"][0]["state"] == "released"


@pytest.mark.slow
def test_a_lease_nobody_renews_expires(ctl, daemon):
    lease = acquire(daemon.home, "alice", "res:gpu0", ttl="10s", json=True).json()["lease"]
    assert acquire(daemon.home, "bob", "res:gpu0").returncode == 1
    wait_until(lambda: acquire(daemon.home, "bob", "res:gpu0").returncode == 0, "alice's lease to expire", timeout=30)
    assert {x["id"]: x["state"] for x in ctl_json(daemon.home, "lease", "list", "--all")["leases"]}[lease["id"]] == "expired"


@pytest.mark.parametrize(("args", "message"), [
    (["lease", "acquire", "../etc", "--agent", "a", "--project", "p"], "leaves the repository"),
    (["lease", "acquire", "src", "--agent", "a", "--project", "p", "--ttl", "1w"], "is not a duration"),
    (["lease", "acquire", "src", "--agent", "a", "--project", "p", "--ttl", "90d"], "between 10s and 30d"),
    (["lease", "acquire", "src\\api", "--agent", "a", "--project", "p"], "use / between directories"),
    (["lease", "renew", "lease_0000000000000000"], "no lease"),
    (["lease", "release", "--agent", "a"], "name one lease id"),
    (["lease", "check", *[f"f{i}" for i in range(501)], "--agent", "a"], "at most 500 paths per call"),
    (["lease", "acquire", *[f"p{i}" for i in range(17)], "--agent", "a", "--project", "p"], "at most 16 patterns"),
    (["lease", "acquire", "x" * 300, "--agent", "a", "--project", "p"], "longer than 256 characters"),
])
def test_bad_lease_input_is_one_clear_line(ctl, daemon, args, message):
    result = run_ctl(daemon.home, *args)
    assert result.returncode in (1, 64) and message in result.stderr and result.stderr.count("\n") == 1, result


# -- the git guard ------------------------------------------------------------------------------


@pytest.fixture
def repo(short_tmp: Path) -> Path:
    path = short_tmp / "repo"
    init_repo(path)
    return path


def commit(repo: Path, relative: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    target = repo / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f"{time.time()}\n")
    run_git(repo, "add", relative)
    return run_git(repo, "commit", "-q", "-m", f"change {relative}", env=env)


@pytest.mark.transport_fixed
def test_the_guard_refuses_commits_under_another_agents_lease_and_passes_its_own(daemon, repo):
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho existing-hook-ran >&2\n")
    hook.chmod(0o755)
    installed = run_ctl_process(daemon.home, "guard", "install", "--repo", str(repo), "--agent", "alice",
                                "--project", "demo")
    assert installed.returncode == 0 and "still runs first" in installed.stderr, installed
    again = run_ctl_process(daemon.home, "guard", "install", "--repo", str(repo), "--agent", "alice", "--project", "demo")
    assert again.returncode == 0  # idempotent: the chained hook is kept, not chained twice
    bob = acquire(daemon.home, "bob", "src/**", reason="moving files", json=True).json()["lease"]

    refused = commit(repo, "src/app.py")
    assert refused.returncode != 0
    assert "existing-hook-ran" in refused.stderr  # the hook that was there still runs
    assert "src/app.py" in refused.stderr and "bob" in refused.stderr and bob["id"] in refused.stderr
    assert "moving files" in refused.stderr and "PALACE_GUARD=warn" in refused.stderr
    run_git(repo, "reset", "-q", "src/app.py")  # still staged after the refusal: set it aside

    assert commit(repo, "docs/notes.md").returncode == 0  # not under anyone's lease
    warned = commit(repo, "src/app.py", env={"PALACE_GUARD": "warn"})
    assert warned.returncode == 0 and "would be refused" in warned.stderr

    # The holder herself commits freely under her own lease.
    run_ctl_process(daemon.home, "guard", "install", "--repo", str(repo), "--agent", "bob", "--project", "demo")
    assert commit(repo, "src/other.py").returncode == 0

    # A daemon that is down never blocks a commit.
    run_ctl_process(daemon.home, "guard", "install", "--repo", str(repo), "--agent", "alice", "--project", "demo")
    assert daemon.stop() == 0
    down = commit(repo, "src/third.py")
    assert down.returncode == 0 and "leases not checked" in down.stderr

    removed = run_ctl_process(daemon.home, "guard", "uninstall", "--repo", str(repo), "--json")
    assert removed.returncode == 0 and sorted(removed.json()["removed"]) == ["pre-commit", "pre-push"]
    assert hook.read_text() == "#!/bin/sh\necho existing-hook-ran >&2\n"  # put back as it was
    assert not (repo / ".git" / "hooks" / "pre-push").exists()


@pytest.mark.transport_fixed
def test_the_guard_never_imports_a_palacectl_planted_in_the_repository(daemon, repo):
    """Guards the authority of a worktree's content: git runs the guard hook at the top of the
    worktree, where a task's patch may have put a `palacectl/` package; `python -m palacectl`
    would import it from there and run its code on every commit."""
    planted = repo / "palacectl"
    planted.mkdir()
    (planted / "__init__.py").write_text("")
    (planted / "__main__.py").write_text("import pathlib; pathlib.Path('PWNED').write_text('x')\n")
    run_git(repo, "add", "palacectl")
    run_git(repo, "commit", "-q", "-m", "a patch that plants a package")
    run_ctl_process(daemon.home, "guard", "install", "--repo", str(repo), "--agent", "alice", "--project", "demo")
    acquire(daemon.home, "bob", "src/**", reason="moving files")
    refused = commit(repo, "src/app.py")
    assert refused.returncode != 0 and "bob" in refused.stderr, refused  # palace's guard ran, not the plant
    assert not (repo / "PWNED").exists()


@pytest.mark.transport_fixed
def test_the_guard_and_lease_list_show_a_members_reason_escaped(daemon, repo):
    """Guards issue 25 finding 10: a lease reason with a bidi override and a C1 control (both
    accepted by the daemon: they are not line breaks) reaches the committer's terminal escaped."""
    run_ctl_process(daemon.home, "guard", "install", "--repo", str(repo), "--agent", "alice", "--project", "demo")
    acquire(daemon.home, "bob", "src/**", reason="tests \u202egnissap\x85 all", json=True)
    refused = commit(repo, "src/app.py")
    assert refused.returncode != 0 and "bob" in refused.stderr
    assert "\u202e" not in refused.stderr and "\x85" not in refused.stderr
    assert "\\u202egnissap\\x85 all" in refused.stderr
    listed = run_ctl_process(daemon.home, "lease", "list", "--project", "demo")
    assert listed.returncode == 0 and "\u202e" not in listed.stdout and "\\u202e" in listed.stdout


@pytest.mark.transport_fixed
def test_the_pre_push_guard_checks_what_the_push_would_change(daemon, repo, short_tmp):
    remote = short_tmp / "remote.git"
    assert subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=False).returncode == 0
    run_git(repo, "remote", "add", "origin", str(remote))
    assert run_git(repo, "push", "-q", "origin", "main").returncode == 0
    commit(repo, "lib/core.py")  # committed before any guard or lease
    run_ctl_process(daemon.home, "guard", "install", "--repo", str(repo), "--agent", "alice")
    acquire(daemon.home, "bob", "lib/")
    pushed = run_git(repo, "push", "-q", "origin", "main")
    assert pushed.returncode != 0 and "lib/core.py" in pushed.stderr and "bob" in pushed.stderr
    assert run_git(repo, "push", "-q", "origin", "main", env={"PALACE_GUARD": "off"}).returncode == 0


def test_guard_install_outside_a_repository_says_so(ctl, daemon, short_tmp):
    result = run_ctl(daemon.home, "guard", "install", "--repo", str(short_tmp), "--agent", "a")
    assert result.returncode == 1 and "not inside a git repository" in result.stderr


# -- a partition --------------------------------------------------------------------------------


def test_colliding_leases_taken_across_a_partition_heal_to_one_winner_told_once(fleet):
    a, b, c = fleet.ends_through_middle()
    wait_converged(a, b, c)
    with fleet.partitioned(b):  # alpha and gamma cannot see each other meanwhile
        first = acquire(a.home, "alice", "src/**", json=True).json()["lease"]
        time.sleep(0.01)
        second = acquire(c.home, "carol", "src/core/*.py", json=True).json()["lease"]
        assert first["state"] == second["state"] == "active"  # each side saw no rival

    def verdicts(home):
        return {x["id"]: (x["state"], x["ended_by"]) for x in ctl_json(home, "lease", "list", "--all")["leases"]}

    expected = {first["id"]: ("active", None), second["id"]: ("lost", first["id"])}
    for d in (a, b, c):
        wait_until(lambda d=d: verdicts(d.home) == expected, f"{d.home.name} to agree on the winner")
    # Carol is told by her own daemon, exactly once, and every replica holds that one event.
    told = wait_until(lambda: conflicts_for(c.home, "carol")["events"], "carol to be told")
    wait_converged(a, b, c)
    for d in (a, b, c):
        events = conflicts_for(d.home, "carol")["events"]
        assert len(events) == 1 and events[0]["correlation_id"] == second["id"], d.home
        assert conflicts_for(d.home, "alice")["events"] == []
    assert json.loads(json.dumps(told[0]["metadata"]))["winner_agent"] == "alice"
    # Carol now sees who holds the path.
    check = run_ctl(c.home, "lease", "check", "src/core/x.py", "--agent", "carol")
    assert check.returncode == 1 and "alice" in check.stdout


def test_the_leases_of_a_revoked_daemon_end_with_it(fleet):
    a = fleet.found("alpha")
    b = fleet.join("beta")
    held = acquire(b.home, "beta-agent", "src/**", json=True).json()["lease"]
    wait_until(lambda: any(x["id"] == held["id"] for x in ctl_json(a.home, "lease", "list")["leases"]),
               "beta's lease at alpha")
    assert acquire(a.home, "alpha-agent", "src/x.py").returncode == 1
    ctl_json(a.home, "revoke", peer_id(b.home))
    states = {x["id"]: x["state"] for x in ctl_json(a.home, "lease", "list", "--all")["leases"]}
    assert states[held["id"]] == "revoked"
    assert acquire(a.home, "alpha-agent", "src/x.py").returncode == 0  # the path is free again


def test_the_worst_leases_a_member_may_write_never_stall_the_daemon(daemon):
    """Guards issue 25 finding 6: nine hostile agents forcing in the costliest leases the bounds
    allow (16 patterns of 16 segments and 8 wildcards, no literal prefix) cost the daemon a bounded
    amount each, off its event loop: pings keep answering, and lease check still answers exactly.
    Before, nine such leases made every ping and every lease operation wait 5-12 s."""
    import threading

    from palace_bench.leases import worst_patterns

    home = daemon.home
    assert api(home, "lease_acquire", agent="honest", project="demo", patterns=["src/api/**"])["lease"]
    pings: list[float] = []
    stop = threading.Event()

    def ping_forever() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            api(home, "ping")
            pings.append(time.monotonic() - t0)
            time.sleep(0.01)

    pinger = threading.Thread(target=ping_forever, daemon=True)
    pinger.start()
    try:
        for agent in range(9):
            taken = api(home, "lease_acquire", agent=f"mallory{agent}", project="demo",
                        patterns=worst_patterns(agent), force=True)
            assert taken["lease"]["patterns"] == worst_patterns(agent)
        for _ in range(5):
            check = api(home, "lease_check", agent="bob", project="demo",
                        paths=["src/api/x.py", "docs/readme.md", "a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p"])
            assert [b["path"] for b in check["blocked"]] == ["src/api/x.py"]
            assert {lease["agent"] for lease in check["blocked"][0]["leases"]} == {"honest"}
            assert api(home, "lease_list", project="demo")["count"] >= 2
    finally:
        stop.set()
        pinger.join()
    # A stall would be seconds; one second is far above a loaded CI machine's scheduling noise.
    assert pings and max(pings) < 1.0, f"slowest ping {max(pings):.2f} s"
    with RawClient(home / "palaced.sock") as client:
        client.hello()
        refused = client.request("lease_acquire", agent="mallory0", project="demo", patterns=["/".join(["d"] * 17)])
    assert refused["ok"] is False and "at most 16" in refused["error"]["message"]
