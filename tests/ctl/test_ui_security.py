"""The dashboard's gate (palacectl/ui/security.py): Host, secret, cookie, CSRF. Pure, no server."""

from __future__ import annotations

import pytest

from palacectl.ui.security import Gate, Verdict, new_secret

SECRET = "s3cr3t-s3cr3t-s3cr3t-s3cr3t"


def check(gate: Gate, *, host: str | None = "127.0.0.1:8000", headers: dict[str, str] | None = None,
          cookies: dict[str, str] | None = None, url_secret: str | None = None) -> Verdict:
    return gate.check(host=host, headers=headers or {}, cookies=cookies or {}, url_secret=url_secret)


def test_the_secret_is_accepted_from_the_cookie_a_bearer_header_or_the_address():
    gate = Gate(SECRET, 8000)
    assert check(gate, cookies={"palace_ui_8000": SECRET}) is Verdict.ALLOW
    assert check(gate, headers={"authorization": f"Bearer {SECRET}"}) is Verdict.ALLOW
    assert check(gate, headers={"authorization": f"bearer   {SECRET}"}) is Verdict.ALLOW
    assert check(gate, url_secret=SECRET) is Verdict.ALLOW_FROM_URL
    assert check(gate, host="localhost:8000", url_secret=SECRET) is Verdict.ALLOW_FROM_URL


@pytest.mark.parametrize("kwargs", [
    {},
    {"cookies": {"palace_ui_8000": "wrong"}},
    {"cookies": {"palace_ui_8001": SECRET}},  # another dashboard's cookie (cookies ignore ports)
    {"headers": {"authorization": SECRET}},  # no scheme
    {"headers": {"authorization": f"Basic {SECRET}"}},
    {"headers": {"authorization": "Bearer "}},
    {"url_secret": ""},
    {"url_secret": SECRET[:-1]},
    {"url_secret": SECRET + "x"},
    {"url_secret": "\udcff" * 8},  # not encodable: never an exception
])
def test_anything_but_the_secret_is_unauthorized(kwargs):
    assert check(Gate(SECRET, 8000), **kwargs) is Verdict.UNAUTHORIZED


@pytest.mark.parametrize("host", [None, "", "evil.example", "evil.example:8000", "127.0.0.1", "127.0.0.1:8001",
                                  "127.0.0.2:8000", "[::1]:8000", "localhost.evil:8000",
                                  "127.0.0.1:8000, evil.example"])
def test_a_foreign_host_is_refused_even_with_the_secret(host):
    """Guards against DNS rebinding: the Host is checked first, whatever credentials come."""
    gate = Gate(SECRET, 8000)
    assert check(gate, host=host, cookies={"palace_ui_8000": SECRET}) is Verdict.BAD_HOST


def test_host_names_are_case_insensitive():
    assert check(Gate(SECRET, 8000), host="LOCALHOST:8000", url_secret=SECRET) is Verdict.ALLOW_FROM_URL


def test_a_write_needs_this_servers_origin_and_the_csrf_token_which_is_not_the_secret():
    gate = Gate(SECRET, 8000)
    good = {"origin": "http://127.0.0.1:8000", "x-csrf-token": gate.csrf_token}
    assert gate.check_write(good) is Verdict.ALLOW
    assert gate.check_write({**good, "origin": "http://localhost:8000"}) is Verdict.ALLOW
    for bad in ({**good, "origin": "http://evil.example"}, {**good, "origin": "null"}, {"x-csrf-token": gate.csrf_token},
                {**good, "x-csrf-token": SECRET}, {**good, "x-csrf-token": ""}, {"origin": good["origin"]},
                {**good, "origin": "http://127.0.0.1:8001"}, {**good, "origin": "https://127.0.0.1:8000"}):
        assert gate.check_write(bad) is Verdict.FORBIDDEN, bad
    assert gate.csrf_token != SECRET and SECRET not in gate.csrf_token
    assert Gate(SECRET + "x", 8000).csrf_token != gate.csrf_token


def test_the_cookie_is_named_after_the_port_http_only_and_same_site_strict():
    header = Gate(SECRET, 4321).cookie_header()
    assert header.startswith(f"palace_ui_4321={SECRET};")
    assert "HttpOnly" in header and "SameSite=Strict" in header and "Path=/" in header
    assert "Expires" not in header and "Max-Age" not in header  # a session cookie: gone with the browser


def test_secrets_are_long_random_and_short_ones_are_refused():
    first, second = new_secret(), new_secret()
    assert first != second and len(first) >= 43
    with pytest.raises(ValueError, match="at least 16"):
        Gate("short", 8000)
    assert repr(Gate(SECRET, 8000)) == "<Gate port=8000>"  # the secret never in a repr or a log line


def test_a_one_time_code_lets_in_once_and_only_a_code_given():
    """Guards issue 25 finding 9: the code the browser is opened with is spent on first use."""
    gate = Gate(SECRET, 8000)
    code = "c" * 43
    assert gate.check(host="127.0.0.1:8000", headers={}, cookies={}, url_secret=None, url_code=code) \
        is Verdict.UNAUTHORIZED  # not given out
    gate.allow_once(code)
    assert gate.check(host="127.0.0.1:8000", headers={}, cookies={}, url_secret=None, url_code=code[:-1]) \
        is Verdict.UNAUTHORIZED
    assert gate.check(host="127.0.0.1:8000", headers={}, cookies={}, url_secret=None, url_code=code) \
        is Verdict.ALLOW_FROM_URL
    assert gate.check(host="127.0.0.1:8000", headers={}, cookies={}, url_secret=None, url_code=code) \
        is Verdict.UNAUTHORIZED
    with pytest.raises(ValueError):
        gate.allow_once("short")
