"""The trio client's reading (palacectl/aclient.py) against a scripted daemon on a real Unix socket.

Guards issue 27 §3: a frame that is not a message map is the protocol error the blocking client
gives (tests/ctl/test_client.py), not a frame skipped on the way to the next one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from palacectl.aclient import AsyncDaemon
from palacectl.client import DaemonProtocolError
from tests.ctl.scripted_daemon import NOT_A_MAP, UNDECODABLE, push, reply, scripted_daemon

NOT_A_MAP_SAID = "palaced sent a malformed reply: a frame from the daemon is not a message map"


async def test_a_frame_that_is_not_a_message_is_a_protocol_error_not_skipped(short_tmp: Path):
    """It used to be skipped, and the reply behind it taken for the answer."""
    home = short_tmp / "home"
    with scripted_daemon(home, lambda r: [NOT_A_MAP, reply(r.id, {"fine": True})]):
        with pytest.raises(DaemonProtocolError) as caught:
            await AsyncDaemon(home).call("status")
    assert str(caught.value) == NOT_A_MAP_SAID


async def test_an_undecodable_frame_is_the_same_protocol_error(short_tmp: Path):
    home = short_tmp / "home"
    with scripted_daemon(home, lambda r: [UNDECODABLE]):
        with pytest.raises(DaemonProtocolError, match=r"^palaced sent a malformed reply: "):
            await AsyncDaemon(home).call("status")


async def test_a_malformed_frame_in_a_subscription_is_a_protocol_error(short_tmp: Path):
    home = short_tmp / "home"

    def script(r):
        return [push(r.id, "started", cursor=None), NOT_A_MAP, push(r.id, "batch", events=[], cursor="evt_2")]

    with scripted_daemon(home, script):
        async with AsyncDaemon(home).subscribe(start="tip") as subscription:
            assert subscription.started["push"] == "started"
            with pytest.raises(DaemonProtocolError, match=NOT_A_MAP_SAID):
                await subscription.next_push()


async def test_a_reply_where_only_pushes_may_come_is_a_protocol_error(short_tmp: Path):
    home = short_tmp / "home"
    with scripted_daemon(home, lambda r: [push(r.id, "started", cursor=None), reply(r.id, {})]):
        async with AsyncDaemon(home).subscribe(start="tip") as subscription:
            with pytest.raises(DaemonProtocolError, match="answered a subscription with a reply"):
                await subscription.next_push()
