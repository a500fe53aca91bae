"""The event stream's query, frames and heartbeat (palacectl/ui/sse.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
import trio

from palacectl.client import DaemonUnreachable
from palacectl.ui import sse
from palacectl.ui.http import HttpError


def test_filters_become_the_daemons_subscription_with_or_for_repeated_values():
    args = sse.stream_args({"type": ["task.request", "event.ack"], "to_agent": ["linux-codex"], "stream": [" "],
                            "secret": ["x"]}, None)
    assert args == {"limit": 500, "types": ["task.request", "event.ack"], "to_agents": ["linux-codex"], "start": "tip"}


def test_the_cursor_comes_from_the_query_else_from_last_event_id():
    assert sse.stream_args({}, "evt_a") == {"limit": 500, "start": "cursor", "since_event_id": "evt_a"}
    assert sse.stream_args({"since_event_id": ["evt_b"]}, "evt_a")["since_event_id"] == "evt_b"
    assert sse.stream_args({"since_event_id": [""]}, "  ")["start"] == "tip"


@pytest.mark.parametrize("query, words", [
    ({"limit": ["5"]}, "unknown query parameter 'limit'"),
    ({"order": ["desc"]}, "unknown query parameter 'order'"),
    ({"type": [f"t{i}" for i in range(17)]}, "at most 16"),
    ({"since_event_id": ["a", "b"]}, "more than once"),
])
def test_what_the_stream_does_not_take_is_a_400_naming_it(query, words):
    with pytest.raises(HttpError, match=words) as caught:
        sse.stream_args(query, None)
    assert caught.value.status == 400


def test_a_frame_is_three_lines_whatever_the_body_holds():
    event = {"id": "evt_1", "body": "a\nb\r\nc\n\ndata: forged\n\nid: evt_forged", "metadata": {"x": "\u2028"}}
    frame = sse.event_frame(event).decode()
    lines = frame.split("\n")
    assert lines[0] == "id: evt_1" and lines[1] == "event: logstream" and lines[2].startswith("data: ")
    assert lines[3:] == ["", ""]
    assert json.loads(lines[2][len("data: "):]) == event


class FakeSubscription:
    """Pushes, one per call, each ``delay`` seconds after the one before (a unit test of the pump:
    no daemon). Cancel-safe like the real subscription: a cancelled call loses nothing."""

    def __init__(self, script: list[tuple[float, Mapping[str, Any] | Exception]]) -> None:
        self.script = script
        self.due: float | None = None

    async def next_push(self) -> Mapping[str, Any]:
        if self.due is None:
            self.due = trio.current_time() + self.script[0][0]
        await trio.sleep_until(self.due)
        self.due = None
        push = self.script.pop(0)[1]
        if isinstance(push, Exception):
            raise push
        return push


async def test_the_pump_sends_frames_a_ping_after_each_quiet_15_s_and_nothing_for_progress(autojump_clock):
    sent: list[tuple[float, bytes]] = []

    async def send(message: Any) -> None:
        sent.append((trio.current_time(), message["body"]))

    subscription = FakeSubscription([
        (1, {"push": "batch", "events": [{"id": "evt_1"}, {"id": "evt_2"}], "cursor": "evt_2"}),
        (40, {"push": "cursor", "cursor": "evt_3"}),
        (0, DaemonUnreachable("gone")),
    ])
    with pytest.raises(DaemonUnreachable):
        await sse._pump(subscription, send, sse.HEARTBEAT_S)
    assert sent[0][1].count(b"event: logstream") == 2
    # 40 s of nothing after the batch: a ping at 15 s, then 15 s after that (the push arrived at 41).
    pings = [at for at, body in sent if body == sse.PING]
    assert len(pings) == 2 and pings[0] == pytest.approx(16) and pings[1] == pytest.approx(31)
    assert len(sent) == 3  # the cursor push said nothing


def test_stream_slots_refuse_beyond_the_cap_with_retry_after_and_count():
    slots = sse.StreamSlots(1)
    slots.take()
    with pytest.raises(HttpError) as caught:
        slots.take()
    assert caught.value.status == 503 and ("retry-after", "5") in caught.value.headers
    slots.give_back()
    slots.take()
    assert (slots.open, slots.served, slots.refused) == (1, 2, 1)
