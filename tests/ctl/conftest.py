"""The fake client's fixture for the command line's unit tests (tests/ctl/fake_client.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ctl.fake_client import FakeClient, use_fake_client


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    """palacectl's commands on a home of their own ($PALACE_HOME), answered by a ``FakeClient``."""
    return use_fake_client(monkeypatch, tmp_path)
