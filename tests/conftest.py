"""Shared fixtures: real palaced processes on temporary homes, and palacectl run as a subprocess.

Homes live under a short /tmp directory because a Unix socket path is limited to ~107 bytes and
pytest's tmp_path can be longer. Daemons run in the root network namespace unless a test puts them
in namespaces it created, so by default they run with mDNS off and listen on loopback only.

Every test that starts daemons through ``daemon_factory`` (and so ``daemon`` and ``ctl``) runs
with the local API on the Unix socket or over loopback TCP with a token (how Windows runs): the
tests of the local API itself (``BOTH_TRANSPORTS``) run in both modes, every other test in one,
chosen by a stable hash of its name, so about half the suite exercises each transport on every
run at the cost of one. ``PALACE_TEST_API=both`` runs every such test in both modes;
``PALACE_TEST_API=unix`` or ``=tcp`` runs them all in that one. A test of a palace of several
daemons (the ``fleet`` fixture: the peer network, not the local API) and a test marked
``transport_fixed`` (about the Unix socket itself, or choosing its transport itself) run once,
on the Unix socket unless it passes ``api=``.
"""

from __future__ import annotations

import compileall
import importlib
import os
import shutil
import signal
import sys
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import pytest

from tests.fleet import Fleet
from tests.helpers import CtlResult, Daemon, run_ctl

# A suite started in the background by a shell without job control (`cmd &` in a script) inherits
# SIGINT ignored, and so would every palacectl it starts: the tests of Ctrl-C (exit 130) would
# wait for an exit that never comes. Handled here, it is back to its default in every child.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temporary directory (socket paths must stay under ~107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="pal", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# The agent the suite's memory commands file as when a test names none (palacectl has no shared
# default id: an id belongs to one daemon). A test of the refusal sets it empty.
os.environ.setdefault("PALACE_AGENT", "suite-agent")


@pytest.fixture
def home(short_tmp: Path) -> Path:
    return short_tmp / "home"


API_TRANSPORTS: Final = ("unix", "tcp")
TEST_API: Final = os.environ.get("PALACE_TEST_API", "")
# The modules about the local API and the daemon's life as a process: every test in both modes.
BOTH_TRANSPORTS: Final = frozenset({
    "tests.e2e.test_api_hostile", "tests.e2e.test_api_pipelining", "tests.e2e.test_api_tcp",
    "tests.e2e.test_daemon_lifecycle", "tests.e2e.test_mcp", "tests.e2e.test_smoke",
})


def transports_for(module: str, test_name: str, *, fixed: bool, choice: str = TEST_API) -> list[str]:
    """The local API modes one test runs in (see the module docstring)."""
    if choice in API_TRANSPORTS:
        return [choice]
    if fixed:
        return ["unix"]
    if choice == "both" or module in BOTH_TRANSPORTS:
        return list(API_TRANSPORTS)
    # Stable across runs and machines (not Python's salted hash): a failure reproduces.
    return [API_TRANSPORTS[zlib.crc32(f"{module}::{test_name}".encode()) % 2]]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "api_transport" in metafunc.fixturenames:
        # A palace of several daemons (the ``fleet`` fixture) is a test of the peer network: its
        # daemons talk to each other over TLS whatever their local API is. So such tests run once.
        fixed = (metafunc.definition.get_closest_marker("transport_fixed") is not None
                 or "fleet" in metafunc.fixturenames)
        modes = transports_for(metafunc.module.__name__, metafunc.definition.originalname, fixed=fixed)
        metafunc.parametrize("api_transport", modes, ids=[f"api-{m}" for m in modes])


REPO: Final = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile palace's own packages once, before any daemon starts. Where
    PYTHONDONTWRITEBYTECODE is set (as on the CI machines here) nothing else writes them, and
    every palaced and palacectl process the suite starts — well over a thousand — compiled its
    sources again: 45 % of a daemon's start-up CPU, the suite's largest single cost. Python still
    reads bytecode it is told not to write. Up-to-date files are skipped (mtime check)."""
    if hasattr(config, "workerinput"):
        return  # xdist workers: the controller did it before starting them
    for package in ("palaced", "palacectl", "proto"):
        compileall.compile_dir(REPO / package, quiet=2, force=False)
    if config.getoption("dist", "no") != "no":
        _rewrite_test_modules_once(config)


def _rewrite_test_modules_once(config: pytest.Config) -> None:
    """Import the test modules the run collects once, in the xdist controller, with bytecode
    writing on: pytest then caches each module's assertion-rewritten code beside it
    (tests/**/__pycache__), and every worker loads that instead of rewriting all of them itself.
    Under PYTHONDONTWRITEBYTECODE nothing was cached, and each of the six workers spent ~7 s of
    CPU on it in every run (the controller's one pass costs as much as one worker's; later runs
    find it done)."""
    modules: set[Path] = set()
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if path.is_dir():
            modules.update(path.rglob("test_*.py"))
        elif path.name.startswith("test_") and path.suffix == ".py":
            modules.add(path)
    writes = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        for path in sorted(modules):
            if path.is_relative_to(REPO / "tests"):
                try:
                    importlib.import_module(".".join(path.relative_to(REPO).with_suffix("").parts))
                except (Exception, pytest.skip.Exception):
                    pass  # the workers' collection reports it, as it would have
    finally:
        sys.dont_write_bytecode = writes


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked ``slow`` first (a stable sort: the same order in every xdist worker): they
    then run alongside the quick ones instead of forming the tail of the run, which, on two
    cores, was a minute of one worker busy and three idle. They are spread over the workers only
    because xdist hands out one test at a time (``--maxschedchunk 1`` in addopts): by default its
    first hand-out is a block of consecutive tests per worker, and one worker got all of them
    (842 s of tests in a run of 890 s, while another ran 402 s)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def daemon_factory(short_tmp: Path, api_transport: str) -> Iterator[Any]:
    started: list[Daemon] = []

    def make(home: Path | None = None, *, extra_args: Sequence[str] = (), start: bool = True, **kwargs: Any) -> Daemon:
        kwargs.setdefault("api", api_transport)
        d = Daemon(home or short_tmp / f"home{len(started)}", extra_args=extra_args, **kwargs)
        started.append(d)
        return d.start() if start else d

    yield make
    for d in started:
        if d.running:
            code = d.stop()
            assert code == 0, f"palaced exited {code} on SIGTERM: {d.log()}"


@pytest.fixture
def fleet(daemon_factory: Any, short_tmp: Path) -> Fleet:
    """Daemons that join one palace (tests/fleet.py), on loopback with mDNS off."""
    return Fleet(daemon_factory, short_tmp)


@pytest.fixture
def daemon(daemon_factory: Any, home: Path) -> Daemon:
    """A running palaced on ``home``; stopped with SIGTERM (and required to exit 0) afterwards."""
    return daemon_factory(home)


@pytest.fixture
def ctl(daemon: Daemon) -> Any:
    """``ctl(*args, input=b"...")`` → CtlResult, against the running ``daemon``."""

    def call(*args: str, **kwargs: Any) -> CtlResult:
        return run_ctl(daemon.home, *args, **kwargs)

    return call
