"""The dashboard's request parsing and response headers (palacectl/ui/http.py), and who it
writes as (palacectl/ui/server.py ``human_id``)."""

from __future__ import annotations

from typing import Any

import pytest

from palace_proto.errors import ValidationError
from palacectl.features.dashboard.cli import human_id
from palacectl.ui.http import HttpError, Request, send_json


def request(query: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None, body: list[bytes] | None = None) -> Request:
    chunks = list(body or [b""])

    async def receive() -> dict[str, Any]:
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    return Request({"method": "GET", "path": "/x", "query_string": query, "headers": headers or []}, receive)


def test_query_parameters_are_read_once_each_and_bounded():
    r = request(b"a=1&b=&b=2&c=%E2%9C%93")
    assert r.one("a") == "1" and r.one("c") == "\u2713" and r.one("missing", "d") == "d"
    with pytest.raises(HttpError, match="given 2 times"):
        r.one("b")
    with pytest.raises(HttpError) as caught:
        request(b"&".join(b"k%d=v" % i for i in range(40)))
    assert caught.value.status == 400
    with pytest.raises(HttpError) as caught:
        request(b"x=" + b"a" * 5000)
    assert caught.value.status == 414
    with pytest.raises(HttpError, match="not UTF-8"):
        request(b"x=%ff")


def test_headers_are_case_insensitive_and_a_malformed_cookie_counts_as_none():
    r = request(headers=[(b"Host", b"127.0.0.1:1"), (b"Cookie", b"a=1; b=2")])
    assert r.headers["host"] == "127.0.0.1:1" and r.cookies == {"a": "1", "b": "2"}
    assert request(headers=[(b"cookie", b'a="unterminated; =;;')]).cookies in ({}, {"a": '"unterminated'})
    doubled = request(headers=[(b"host", b"a"), (b"host", b"b")])
    assert doubled.headers["host"] == "a, b"  # never equal to a single allowed host


async def test_a_body_over_the_limit_is_refused_whether_announced_or_not():
    with pytest.raises(HttpError) as caught:
        await request(headers=[(b"content-length", b"100")]).body(10)
    assert caught.value.status == 413
    with pytest.raises(HttpError) as caught:
        await request(body=[b"12345", b"67890", b"x"]).body(10)
    assert caught.value.status == 413
    assert await request(body=[b"12345", b"67890"]).body(10) == b"1234567890"


async def test_every_answer_carries_the_security_headers():
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await send_json(send, 200, {"x": b"bytes never go into JSON"}, headers=[("cache-control", "no-cache")])
    headers = dict(sent[0]["headers"])
    assert headers[b"content-security-policy"].startswith(b"default-src 'none'")
    assert headers[b"x-content-type-options"] == b"nosniff" and headers[b"x-frame-options"] == b"DENY"
    assert headers[b"referrer-policy"] == b"no-referrer"
    assert headers[b"cache-control"] == b"no-cache"  # a route may replace a default, not drop the others
    assert [k for k, _ in sent[0]["headers"]].count(b"cache-control") == 1
    assert sent[1]["body"] == b'{"x":null}'


def test_the_dashboard_writes_as_a_person():
    assert human_id("ana", {}) == "human:ana"
    assert human_id("human:ana", {}) == "human:ana"
    assert human_id(None, {"USER": "ana.lopez"}) == "human:ana.lopez"
    assert human_id(None, {"USERNAME": "DOMAIN\\Ana Lopez"}) == "human:DOMAIN-Ana-Lopez"
    assert human_id(None, {}) == "human:operator"
    for bad in ("two words", "human:", "human:a/b", "*"):
        with pytest.raises(ValidationError):
            human_id(bad, {})


def test_a_browser_is_opened_only_where_there_is_a_screen():
    """Guards a terminal over SSH: without X11 or Wayland, Python's webbrowser would start lynx or
    w3m in the very terminal the dashboard prints to."""
    from palacectl.ui.server import _has_a_screen

    assert _has_a_screen({}, "darwin") and _has_a_screen({}, "win32")
    assert _has_a_screen({"DISPLAY": ":0"}, "linux") and _has_a_screen({"WAYLAND_DISPLAY": "wayland-0"}, "linux")
    assert not _has_a_screen({}, "linux") and not _has_a_screen({"DISPLAY": ""}, "linux")
