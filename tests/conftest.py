"""Shared fixtures: real palaced processes on temporary homes, and palacectl run as a subprocess.

Homes live under a short /tmp directory because a Unix socket path is limited to ~107 bytes and
pytest's tmp_path can be longer. Daemons run in the root network namespace unless a test puts them
in namespaces it created, so by default they run with mDNS off and listen on loopback only.

Every test that starts daemons through ``daemon_factory`` (and so ``daemon`` and ``ctl``) runs
twice: with the local API on the Unix socket, and over loopback TCP with a token (how Windows
runs: README "Windows"). ``PALACE_TEST_API=unix`` or ``=tcp`` runs one of them only. A test of a
palace of several daemons (the ``fleet`` fixture: the peer network, not the local API) and a test
marked ``transport_fixed`` (about the Unix socket itself, or choosing its transport itself) run
once, on the Unix socket unless it passes ``api=``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fleet import Fleet
from tests.helpers import CtlResult, Daemon, run_ctl

@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temporary directory (socket paths must stay under ~107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="pal", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def home(short_tmp: Path) -> Path:
    return short_tmp / "home"


API_TRANSPORTS = [os.environ["PALACE_TEST_API"]] if os.environ.get("PALACE_TEST_API") else ["unix", "tcp"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "api_transport" in metafunc.fixturenames:
        # A palace of several daemons (the ``fleet`` fixture) is a test of the peer network: its
        # daemons talk to each other over TLS whatever their local API is, and the local API's
        # two transports are covered by every single-daemon test. So such tests run once.
        fixed = (metafunc.definition.get_closest_marker("transport_fixed") is not None
                 or "fleet" in metafunc.fixturenames)
        modes = [API_TRANSPORTS[0]] if fixed else API_TRANSPORTS
        metafunc.parametrize("api_transport", modes, ids=[f"api-{m}" for m in modes])


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
