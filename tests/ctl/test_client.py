"""The blocking client's reading (palacectl/client.py) against a scripted daemon on a real Unix
socket: replies, a subscription's pushes, and what the local API does not allow.

Guards issue 27 §3: a malformed frame from the daemon is a protocol error that names it, the same
in both clients (tests/ctl/test_aclient.py), never a traceback and never skipped (the blocking
client said it, the trio client skipped the frame and read on).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from palace_proto.errors import ApiError
from palace_proto.framing import encode_frame
from palacectl import loop
from palacectl.client import Client, DaemonProtocolError, DaemonUnreachable
from palacectl.watch import WatchOptions, run_watch
from tests.ctl.scripted_daemon import NOT_A_MAP, UNDECODABLE, push, reply, scripted_daemon

NOT_A_MAP_SAID = "palaced sent a malformed reply: a frame from the daemon is not a message map"


def test_a_frame_that_is_not_a_message_is_a_protocol_error_not_skipped(short_tmp: Path):
    """The reply right behind it is not taken for the answer."""
    home = short_tmp / "home"
    with scripted_daemon(home, lambda r: [NOT_A_MAP, reply(r.id, {"fine": True})]) as seen, Client(home) as client:
        with pytest.raises(DaemonProtocolError) as caught:
            client.call("status")
    assert str(caught.value) == NOT_A_MAP_SAID
    assert isinstance(caught.value, DaemonUnreachable)  # every caller already ends (or retries) on that
    assert [r.op for r in seen] == ["status"]


def test_an_undecodable_frame_is_the_same_protocol_error(short_tmp: Path):
    home = short_tmp / "home"
    with scripted_daemon(home, lambda r: [UNDECODABLE]), Client(home) as client:
        with pytest.raises(DaemonProtocolError, match=r"^palaced sent a malformed reply: "):
            client.call("status")


def test_the_command_line_says_it_in_one_line_without_a_traceback(short_tmp: Path, capsys: pytest.CaptureFixture[str]):
    home = short_tmp / "home"
    with scripted_daemon(home, lambda r: [NOT_A_MAP]):
        code = loop.guarded(lambda: loop.list_events(home, {}), as_json=False)
    out, err = capsys.readouterr()
    assert (code, out, err) == (3, "", f"palacectl: {NOT_A_MAP_SAID}\n")


def test_a_subscription_gives_its_pushes_in_order(short_tmp: Path):
    home = short_tmp / "home"
    event = {"id": "evt_1", "type": "note"}

    def script(r):
        return [push(r.id, "started", cursor=None, start="tip"), push(r.id + 1, "batch", events=[]),
                push(r.id, "batch", events=[event], count=1, cursor="evt_1"), push(r.id, "cursor", cursor="evt_2")]

    with scripted_daemon(home, script) as seen, Client(home) as client:
        subscription = client.subscribe(start="tip", to_agents=["bob"])
        assert subscription.started == {"id": 2, "push": "started", "cursor": None, "start": "tip"}
        assert repr(subscription).endswith("cursor=None>")
        pushes = iter(subscription)
        batch = next(pushes)  # the push of another id is not this subscription's
        assert (batch["push"], batch["events"], batch["cursor"]) == ("batch", [event], "evt_1")
        assert subscription.next_push(timeout=5)["cursor"] == "evt_2"
    args = seen[0].args
    assert (seen[0].op, args["start"], args["to_agents"], type(args["pid"])) == ("subscribe", "tip", ["bob"], int)


def test_a_refused_subscription_raises_the_daemons_error_before_anything_is_read(short_tmp: Path):
    home = short_tmp / "home"
    refusal = {"code": "not_found", "message": "no event evt_x in this palace"}
    with scripted_daemon(home, lambda r: [encode_frame({"id": r.id, "ok": False, "error": refusal})]), \
            Client(home) as client, pytest.raises(ApiError) as caught:
        client.subscribe(start="cursor", since_event_id="evt_x")
    assert (caught.value.code, caught.value.message) == ("not_found", "no event evt_x in this palace")


def test_a_malformed_frame_in_a_subscription_is_a_protocol_error(short_tmp: Path):
    home = short_tmp / "home"

    def script(r):
        return [push(r.id, "started", cursor=None), NOT_A_MAP, push(r.id, "cursor", cursor="evt_2")]

    with scripted_daemon(home, script), Client(home) as client:
        subscription = client.subscribe(start="tip")
        with pytest.raises(DaemonProtocolError, match=NOT_A_MAP_SAID):
            subscription.next_push(timeout=5)


def test_a_reply_where_only_pushes_may_come_is_a_protocol_error(short_tmp: Path):
    home = short_tmp / "home"
    with scripted_daemon(home, lambda r: [push(r.id, "started", cursor=None), reply(r.id, {})]), Client(home) as client:
        subscription = client.subscribe(start="tip")
        with pytest.raises(DaemonProtocolError, match="answered a subscription with a reply"):
            subscription.next_push(timeout=5)


def test_a_watch_ends_on_a_protocol_error_instead_of_reconnecting(short_tmp: Path,
                                                                  capsys: pytest.CaptureFixture[str]):
    """Reconnecting would say "palaced went away" about a daemon that sent garbage (and the
    scripted daemon takes one connection: a watch that reconnected would idle out, exit 2)."""
    home = short_tmp / "home"
    opts = WatchOptions(home=home, filters={"to_agents": ["bob"]}, agent=None, since_event_id=None, state_file=None,
                        from_start=False, follow=True, idle_exit_ms=3000, announce=False, limit=50, as_json=True)
    with scripted_daemon(home, lambda r: [push(r.id, "started", cursor="evt_1"), NOT_A_MAP]):
        with pytest.raises(DaemonProtocolError, match=NOT_A_MAP_SAID):
            run_watch(opts)
    assert "reconnecting" not in capsys.readouterr().err
