"""Where a home lives and how its daemon is reached: the pure rules both sides share."""

from __future__ import annotations

from pathlib import Path

import pytest

from palace_proto.paths import ApiEndpoint, api_file_text, default_home, parse_api_file, parse_api_listen


def test_default_home_per_platform_and_palace_home_overrides_everything():
    user = Path("/u")
    assert default_home({}, user) == Path("/u/.palace")
    assert default_home({}, user, "darwin") == Path("/u/.palace")
    assert default_home({"LOCALAPPDATA": "C:/Users/a/AppData/Local"}, user, "win32") == \
        Path("C:/Users/a/AppData/Local/palace")
    assert default_home({}, user, "win32") == Path("/u/AppData/Local/palace")
    assert default_home({"PALACE_HOME": "/srv/p", "LOCALAPPDATA": "x"}, user, "win32") == Path("/srv/p")


@pytest.mark.parametrize("text,expected", [
    ("unix", ApiEndpoint("unix")),
    ("tcp://127.0.0.1:0", ApiEndpoint("tcp", "127.0.0.1", 0)),
    ("tcp://localhost:7438", ApiEndpoint("tcp", "127.0.0.1", 7438)),
    ("tcp://127.3.2.1:9", ApiEndpoint("tcp", "127.3.2.1", 9)),
    ("tcp://[::1]:7438", ApiEndpoint("tcp", "::1", 7438)),
])
def test_api_listen_accepts_unix_and_loopback_tcp(text, expected):
    assert parse_api_listen(text) == expected


@pytest.mark.parametrize("text,fragment", [
    ("tcp://0.0.0.0:7438", "loopback only"), ("tcp://10.0.0.1:7438", "loopback only"),
    ("tcp://example.com:7438", "loopback only"), ("tcp://127.0.0.1", "needs a port"),
    ("tcp://127.0.0.1:99999", "needs a port"), ("tcp://127.0.0.1:-1", "needs a port"),
    ("unix:/tmp/x", "neither"), ("", "neither"),
])
def test_api_listen_refuses_anything_else_saying_why(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_api_listen(text)


def test_api_file_round_trip_and_damage():
    text = api_file_text("127.0.0.1", 7438, "tok", 42)
    assert parse_api_file(text) == ApiEndpoint("tcp", "127.0.0.1", 7438, "tok")
    assert parse_api_file(api_file_text("::1", 1, "t", 1)).describe() == "tcp://[::1]:1"
    for damaged, fragment in (("{", "not JSON"), ("[]", "TCP endpoint"), ('{"transport": "tcp", "host": "h"}', "lacks"),
                              ('{"transport": "tcp", "host": "h", "port": 1, "token": ""}', "lacks")):
        with pytest.raises(ValueError, match=fragment):
            parse_api_file(damaged)
