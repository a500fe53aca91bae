"""The local API over loopback TCP (how Windows runs, and what ``--api tcp://…`` gives anywhere):
the daemon publishes its port and a random token in ``api.json`` (user-only), palacectl and the
MCP adapter find both by themselves, a hello without the right token is refused and the
connection closed, only loopback addresses are accepted, and the file goes away with the daemon.
The whole suite also runs in this mode (``PALACE_TEST_API=tcp``, see docs/development.md)."""

from __future__ import annotations

import json
import socket
import stat

import pytest

from palace_proto.framing import FrameBuffer, encode_frame
from tests.e2e.test_daemon_lifecycle import run_palaced
from tests.fleet import ctl_json
from tests.helpers import PeerClosed, RawClient, run_ctl

TCP = "tcp"
pytestmark = pytest.mark.transport_fixed  # each test picks its transport itself


def test_palacectl_finds_a_tcp_daemon_through_api_json(daemon_factory, home):
    daemon = daemon_factory(home, api=TCP)
    api = home / "api.json"
    info = json.loads(api.read_text())
    assert stat.S_IMODE(api.stat().st_mode) == 0o600 and len(info["token"]) >= 40
    assert info["host"] == "127.0.0.1" and info["port"] > 0 and not (home / "palaced.sock").exists()
    status = ctl_json(home, "status")
    assert status["api"] == f"tcp://127.0.0.1:{info['port']}" and status["socket"] is None
    event = ctl_json(home, "append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a",
                     "--body", "over tcp")
    assert ctl_json(home, "list", "--stream", "s")["events"][0]["id"] == event["id"]
    daemon.stop()
    assert not api.exists()  # gone with the daemon: a client then says it is not running
    gone = run_ctl(home, "status")
    assert gone.returncode == 3 and "not running" in gone.stderr


def _hello(sock: socket.socket, **args) -> dict:
    sock.sendall(encode_frame({"id": 1, "op": "hello", "args": {"version": 1, **args}}))
    buffer = FrameBuffer(1 << 20)
    while True:
        frame = buffer.next_frame()
        if isinstance(frame, dict):
            return frame
        data = sock.recv(65536)
        if not data:
            raise PeerClosed()
        buffer.feed(data)


@pytest.mark.parametrize("token", [None, "", "not-the-token", 12345])
def test_a_hello_without_the_right_token_is_refused_and_the_connection_closed(daemon_factory, home, token):
    daemon_factory(home, api=TCP)
    info = json.loads((home / "api.json").read_text())
    with socket.create_connection(("127.0.0.1", info["port"]), timeout=5) as sock:
        reply = _hello(sock, **({} if token is None else {"token": token}))
        assert reply["ok"] is False and reply["error"]["code"] == "unauthorized"
        try:
            sock.sendall(encode_frame({"id": 2, "op": "status", "args": {}}))
            after = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):  # closed with our request unread: a reset
            after = b""
        assert after == b""  # closed: nothing more is answered
    with socket.create_connection(("127.0.0.1", info["port"]), timeout=5) as sock:
        assert _hello(sock, token=info["token"])["ok"] is True


def test_a_stale_api_json_from_a_crash_is_replaced(daemon_factory, home):
    daemon = daemon_factory(home, api=TCP)
    old = json.loads((home / "api.json").read_text())
    daemon.kill9()
    assert (home / "api.json").exists()  # left behind by the crash
    daemon.start()
    new = json.loads((home / "api.json").read_text())
    assert new["token"] != old["token"] and ctl_json(home, "status")["api"].endswith(f":{new['port']}")
    with RawClient(home / "palaced.sock") as client:  # the test client reads api.json too
        assert client.call("hello", version=1)["version"] == 1


@pytest.mark.parametrize("api,fragment", [
    ("tcp://0.0.0.0:7000", "loopback only"),
    ("tcp://192.168.1.5:7000", "loopback only"),
    ("tcp://127.0.0.1", "needs a port"),
    ("http://127.0.0.1:80", "neither 'unix' nor"),
])
def test_the_api_listens_on_loopback_only(short_tmp, api, fragment):
    result = run_palaced("--home", str(short_tmp / "h"), "--no-mdns", "--api", api)
    assert result.returncode == 64 and fragment in result.stderr and "Traceback" not in result.stderr


def test_a_taken_api_port_stops_the_daemon_with_one_line(daemon_factory, home, short_tmp):
    daemon_factory(home, api=TCP)
    port = json.loads((home / "api.json").read_text())["port"]
    result = run_palaced("--home", str(short_tmp / "other"), "--no-mdns", "--listen", "127.0.0.1:0",
                         "--api", f"tcp://127.0.0.1:{port}")
    last = result.stderr.strip().splitlines()[-1]  # after the start-up log lines: one line saying why
    assert result.returncode == 1 and last.startswith("palaced: cannot listen for the local API")
    assert "Traceback" not in result.stderr


def test_the_api_transport_comes_from_the_config_file_too(daemon_factory, home):
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    (home / "config.toml").write_text('[api]\nlisten = "tcp://127.0.0.1:0"\n')
    daemon_factory(home, api="unix")  # no --api flag: the config decides
    assert (home / "api.json").exists() and ctl_json(home, "status")["api"].startswith("tcp://127.0.0.1:")
