"""Shared fixtures: real palaced processes on temporary homes, and palacectl run as a subprocess.

Homes live under a short /tmp directory because a Unix socket path is limited to ~107 bytes and
pytest's tmp_path can be longer. Daemons run in the root network namespace unless a test puts them
in namespaces it created, so by default they run with mDNS off and listen on loopback only.
"""

from __future__ import annotations

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


@pytest.fixture
def daemon_factory(short_tmp: Path) -> Iterator[Any]:
    started: list[Daemon] = []

    def make(home: Path | None = None, *, extra_args: Sequence[str] = (), start: bool = True, **kwargs: Any) -> Daemon:
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
