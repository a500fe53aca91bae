"""A stand-in for palaced's answers, for tests of palacectl's commands without a daemon: what a
command asks for, how it renders the reply (human or ``--json``), and its exit code.

``FakeClient`` answers each op from a table; ``use_fake_client`` puts it where every command gets
its client (``loop.open_client``, and ``palacectl.client.Client`` for the few commands that open
one themselves). The replies in the tests are the daemon's shapes, copied from a real one; what the
daemon itself does with a request is tested against a real palaced in tests/e2e/.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from palacectl import client as client_module
from palacectl import loop
from tests.helpers import CtlResult, _build_palacectl_command_once

__all__ = ["EVENT", "FakeClient", "invoke", "use_fake_client"]

Answer = Any | Callable[[dict[str, Any]], Any] | Exception

#: an event as the daemon returns it (every field of the envelope)
EVENT: dict[str, Any] = {
    "id": "evt_20261206T035516_919b25cae06f57e42050", "seq": 1, "origin": "ori2_y2dcwxdnawnisdnzg7huybmoti",
    "origin_seq": 1, "type": "note", "stream": "project/test", "room": "general", "topic": None,
    "from_agent": "tester", "to_agent": "bob", "correlation_id": None, "branch": None, "base_commit": None,
    "status": "open", "ack_of": None, "artifact_ids": [], "body": "hi there", "metadata": {},
    "created_at": "2026-12-06T03:55:16.912588Z",
}


class FakeClient:
    """Stands in for ``palacectl.client.Client``: answers each op from ``answers`` (a value, a
    function of the request's arguments, or an exception to raise) and keeps every request."""

    def __init__(self) -> None:
        self.answers: dict[str, Answer] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.homes: list[Path] = []
        #: a real daemon's hello (commands read its limits)
        self.hello: dict[str, Any] = {
            "version": 1, "daemon": "0.1.0", "origin": EVENT["origin"],
            "limits": {"max_body_bytes": 262144, "max_metadata_bytes": 65536, "max_artifact_bytes": 67108864,
                       "max_frame_bytes": 83886080}}

    def __repr__(self) -> str:
        return f"<FakeClient requests={len(self.requests)}>"

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def call(self, op: str, **args: Any) -> Any:
        self.requests.append((op, args))
        answer = self.answers[op]
        if isinstance(answer, Exception):
            raise answer
        return answer(args) if callable(answer) else answer

    def ops(self) -> list[str]:
        """The ops asked for, in order."""
        return [op for op, _ in self.requests]


def use_fake_client(monkeypatch: pytest.MonkeyPatch, home: Path) -> FakeClient:
    """Every command on ``home`` ($PALACE_HOME) gets ``FakeClient`` instead of a connection."""
    monkeypatch.setenv("PALACE_HOME", str(home))
    fake = FakeClient()

    def open_client(home: Path, *args: Any, **kwargs: Any) -> FakeClient:
        fake.homes.append(home)
        return fake

    monkeypatch.setattr(loop, "open_client", open_client)
    monkeypatch.setattr(client_module, "Client", open_client)
    return fake


def invoke(*args: str, input: bytes | None = None, app: Any = None) -> CtlResult:
    """Run ``palacectl ARGS`` in this process as a real one runs it (``palacectl.cli.main``: exit
    64 for usage, 1 for a failure, 3 for no daemon), with its stdin, stdout and stderr swapped for
    buffers, as tests/helpers.py runs it against a real daemon. ``app``: another typer app than
    palacectl's (``cli.root.build_app`` with a test's features)."""
    from palacectl.cli import main

    if app is None:
        _build_palacectl_command_once()
    out, err = io.BytesIO(), io.BytesIO()
    streams = (io.TextIOWrapper(io.BytesIO(input or b""), encoding="utf-8"),
               io.TextIOWrapper(out, encoding="utf-8", write_through=True),
               io.TextIOWrapper(err, encoding="utf-8", write_through=True))
    saved = (sys.stdin, sys.stdout, sys.stderr)
    sys.stdin, sys.stdout, sys.stderr = streams
    try:
        code = main(list(args), app=app)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdin, sys.stdout, sys.stderr = saved
    data = out.getvalue()
    return CtlResult(code, data.decode("utf-8", "replace"), err.getvalue().decode("utf-8", "replace"), data)
