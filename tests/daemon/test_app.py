"""The daemon's wiring (palaced/app.py), in-process: ``serve`` builds one handlers ``Context`` with
its collaborators, the API answers from that same context, ``init`` starts the network into it,
and a cancelled daemon closes its database and releases its home for the next one."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from palace_proto.paths import socket_path
from palacectl.aclient import AsyncDaemon
from palaced.app import serve
from palaced.config import Config
from palaced.features.memory import MemoryState
from palaced.handlers import Context, log


@pytest.fixture
def short_home(short_tmp: Path) -> Path:
    """A home whose socket path fits in sun_path (pytest's tmp_path may not)."""
    return short_tmp / "h"


def _config(home: Path) -> Config:
    # As every test daemon in the root network namespace: no multicast, loopback only.
    return Config(home=home, mdns=False, memory_embed=False, listen="127.0.0.1:0")


async def test_serve_builds_one_context_and_the_api_answers_from_it(short_home):
    daemon = AsyncDaemon(short_home, client_name="test")
    async with trio.open_nursery() as nursery:
        ctx: Context = await nursery.start(serve, _config(short_home))
        assert ctx.api_address == str(socket_path(short_home)) and ctx.api_statistics is not None
        assert ctx.start_network is not None and ctx.network is None and ctx.directory is None
        assert ctx.state(MemoryState).indexer is None and ctx.membership is None
        event = await daemon.call("append", type="note", stream="s", room="r", from_agent="a", body="hi")
        assert (await log.get_event(ctx, {"event_id": event["id"]}))["body"] == "hi"
        status = await daemon.call("status")
        assert (status["api"], status["origin"], status["network"]) == (ctx.api_address, ctx.store.origin_id, None)
        assert status["api_connections"]["accepted"] >= 2  # the statistics serve_api put into the context

        await daemon.call("init", name="p", daemon_name="d")
        assert ctx.membership is not None and ctx.network is not None and ctx.directory is not None
        status = await daemon.call("status")
        assert status["palace"]["palace_id"] == ctx.membership.palace_id
        assert status["network"]["listen"] == ctx.network.listen_addresses != []
        nursery.cancel_scope.cancel(reason="test done")
    assert not socket_path(short_home).exists()

    # The home lock was released and the database closed: a second daemon starts on the same home,
    # with a context of its own, and finds the palace and the event.
    async with trio.open_nursery() as nursery:
        again: Context = await nursery.start(serve, _config(short_home))
        assert again is not ctx and again.store.origin_id == ctx.store.origin_id
        assert again.membership is not None and again.network is not None  # a member starts its network at once
        # The agent it wrote as before belonging to a palace was registered to it by ``init``.
        events = (await log.list_events(again, {"order": "asc"}))["events"]
        assert [(e["type"], e["metadata"].get("agent")) for e in events] == [("note", None), ("agent.register", "a")]
        nursery.cancel_scope.cancel(reason="test done")
