"""The dashboard's ASGI application in-process (palacectl/ui/app.py): the order of its checks and
its bounds, where no daemon is needed to see them. Everything with a daemon is tests/e2e/test_ui.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from palacectl.aclient import AsyncDaemon
from palacectl.ui.app import MAX_CONCURRENT_REQUESTS, Dashboard
from palacectl.ui.security import Gate

SECRET = "0123456789abcdef0123456789abcdef"
PORT = 4000


def dashboard(tmp_path: Path) -> Dashboard:
    return Dashboard(AsyncDaemon(tmp_path / "no-daemon-here"), Gate(SECRET, PORT), human="human:ana")


async def call(app: Dashboard, path: str, *, method: str = "GET", headers: dict[str, str] | None = None,
               query: bytes = b"", body: bytes = b"") -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": method, "path": path, "query_string": query,
             "headers": [(k.lower().encode(), v.encode()) for k, v in
                         {"host": f"127.0.0.1:{PORT}", **(headers or {})}.items()]}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], dict(sent[0]["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


BEARER = {"authorization": f"Bearer {SECRET}"}


async def test_requests_beyond_the_cap_are_answered_503_at_once_and_the_cap_is_given_back(tmp_path):
    app = dashboard(tmp_path)
    holders = [object() for _ in range(MAX_CONCURRENT_REQUESTS)]
    for holder in holders:
        app.busy.acquire_on_behalf_of_nowait(holder)
    status, headers, body = await call(app, "/api/session", headers=BEARER)
    assert status == 503 and headers[b"retry-after"] == b"1" and b"answering 32 requests" in body
    for holder in holders:
        app.busy.release_on_behalf_of(holder)
    # With room again, the request reaches the daemon (here: none), and the cap is whole afterwards.
    status, _, body = await call(app, "/api/session", headers=BEARER)
    assert status == 503 and b"palaced is not running" in body
    assert app.busy.borrowed_tokens == 0


async def test_the_gate_comes_before_the_cap_the_route_and_the_daemon(tmp_path):
    app = dashboard(tmp_path)
    for holder in [object() for _ in range(MAX_CONCURRENT_REQUESTS)]:
        app.busy.acquire_on_behalf_of_nowait(holder)
    assert (await call(app, "/api/session"))[0] == 401
    assert (await call(app, "/api/nope"))[0] == 401
    assert (await call(app, "/api/session", headers={**BEARER, "host": "evil.example"}))[0] == 421
    assert (await call(app, "/api/nope", headers=BEARER))[0] == 404
    assert (await call(app, "/api/now", method="PUT", headers=BEARER))[0] == 405
    status, _, _ = await call(app, "/api/message", method="POST", headers=BEARER, body=b"{}")
    assert status == 403  # no CSRF token: refused before the body or the daemon is looked at


async def test_a_failing_route_ends_that_request_with_500_and_is_counted(tmp_path, monkeypatch, caplog):
    app = dashboard(tmp_path)

    async def broken(op: str, **args: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(app.views, "call", broken)  # the tasks page's view asks the daemon through it
    for _ in range(2):
        status, _, body = await call(app, "/api/tasks", headers=BEARER)
        assert status == 500 and b"a bug" not in body
    assert app.counters["failed"] == 2
    assert sum("request GET /api/tasks failed" in r.getMessage() for r in caplog.records) == 1  # logged once
    assert (await call(app, "/healthz"))[0] == 200  # and the app goes on


async def test_lifespan_is_acknowledged(tmp_path):
    app = dashboard(tmp_path)
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    with trio.fail_after(5):
        await app({"type": "lifespan"}, receive, send)
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
