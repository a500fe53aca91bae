"""The inbox handlers (palaced/handlers/inbox.py) on a real store: bad arguments named, the
cursor table bounded against a client inventing agent ids, text refused where it cannot apply."""

from __future__ import annotations

import pytest

from palace_proto.errors import ApiError, ValidationError
from palaced.handlers import inbox, log
from palaced.store import inbox as store_inbox
from tests.daemon.handler_context import note, open_context


@pytest.mark.parametrize(("args", "field"), [
    ({"agent": "a", "limit": 0}, "limit"), ({"agent": "a", "limit": 501}, "limit"), ({"agent": "a", "limit": "5"}, "limit"),
    ({"agent": "a", "preview": "yes"}, "preview"), ({}, "agent"), ({"agent": ""}, "agent"),
])
async def test_bad_inbox_arguments_name_their_field(tmp_path, args, field):
    async with open_context(tmp_path) as ctx:
        with pytest.raises(ValidationError) as refused:
            await inbox.inbox(ctx, args)
        assert refused.value.field == field


async def test_the_cursor_table_is_bounded(tmp_path, monkeypatch):
    """Guards the inbox_cursors table against a client inventing agent ids without end."""
    monkeypatch.setattr(store_inbox, "MAX_INBOX_CURSORS", 2)
    async with open_context(tmp_path) as ctx:
        for agent in ("a", "b", "c"):
            await log.append(ctx, note(from_agent="boss", to_agent=agent))
        await inbox.inbox(ctx, {"agent": "a"})
        await inbox.inbox(ctx, {"agent": "b"})
        with pytest.raises(ApiError, match="keeps inbox cursors for 2 agents already") as full:
            await inbox.inbox(ctx, {"agent": "c"})
        assert full.value.code == "limit_reached"
        assert (await inbox.inbox(ctx, {"agent": "a"}))["count"] == 1  # the ones it keeps go on


async def test_text_is_for_list_only(tmp_path):
    async with open_context(tmp_path) as ctx:
        with pytest.raises(ValidationError, match="text searches the log as it is"):
            await log.wait(ctx, {"text": "deploy", "timeout_ms": 10})
        for bad in ("", "x" * 251, " ".join(["w"] * 17), "a\x07b", 5):
            with pytest.raises(ValidationError) as refused:
                await log.list_events(ctx, {"text": bad})
            assert refused.value.field == "text"
