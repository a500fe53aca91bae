"""The maintenance handlers (palaced/handlers/maintenance.py) without a socket: ``status`` reads
every part of the context (and says ``None`` for the parts not up yet), ``backup`` refuses
every path that would lose data or cannot work, and an export imports into another replica as
history, all or nothing unless ``partial``."""

from __future__ import annotations

import os

import pytest

from palace_proto.errors import ApiError, ValidationError
from palaced.handlers import Watcher, log, maintenance
from tests.daemon.handler_context import note, open_context


async def test_status_reports_the_context_and_the_parts_not_up_yet(tmp_path):
    async with open_context(tmp_path) as ctx:
        await log.append(ctx, note())
        status = await maintenance.status(ctx, {})
        assert (status["events"], status["origin"], status["fingerprint"], status["home"]) == (
            1, ctx.store.origin_id, ctx.fingerprint, str(tmp_path))
        assert (status["api"], status["api_connections"], status["network"], status["palace"]) == (
            None, None, None, None)
        assert status["peers"] == {"live": 0, "total": 0} and status["watchers"] == 0
        assert status["memory"]["embedding"] is None and status["health"]["ok"] is True
        ctx.api_address = "/somewhere/palaced.sock"
        ctx.api_statistics = lambda: {"open": 1}
        ctx.watchers[1] = Watcher(conn_id=1, agent="a", filters="all", cursor=None, since="2024-01-01T00:00:00Z",
                                  pid=None)
        status = await maintenance.status(ctx, {})
        assert (status["api"], status["api_connections"], status["watchers"]) == (
            "/somewhere/palaced.sock", {"open": 1}, 1)
        assert await maintenance.ping(ctx, {}) == {"pong": True}


@pytest.mark.parametrize(("target", "message"), [
    ("relative.sqlite3", "must be absolute"),
    ("{tmp}/missing/b.sqlite3", "does not exist; create it first"),
    ("{tmp}/palace.sqlite3", "is the live database itself"),
    ("{tmp}/palace.sqlite3-wal", "is the live database itself"),
    ("{tmp}", "is a folder"),
    ("{tmp}/exists.sqlite3", "already exists; pass --force"),
])
async def test_backup_refuses_paths_that_would_lose_data(tmp_path, target, message):
    (tmp_path / "exists.sqlite3").write_bytes(b"keep me")
    async with open_context(tmp_path) as ctx:
        with pytest.raises(ValidationError, match=message):
            await maintenance.backup(ctx, {"path": target.format(tmp=tmp_path)})
    assert (tmp_path / "exists.sqlite3").read_bytes() == b"keep me"


async def test_a_backup_holds_every_committed_event(tmp_path):
    target = tmp_path / "backups" / "copy.sqlite3"
    target.parent.mkdir()
    async with open_context(tmp_path / "home") as ctx:
        for body in ("one", "two", "three"):
            await log.append(ctx, note(body=body))
        copied = await maintenance.backup(ctx, {"path": str(target)})
        assert (copied["events"], copied["origin"], copied["path"]) == (3, ctx.store.origin_id, str(target))
        assert os.stat(target).st_mode & 0o777 == 0o600
        again = await maintenance.backup(ctx, {"path": str(target), "overwrite": True})
        assert again["events"] == 3


async def test_an_export_imports_into_another_replica_as_history(tmp_path):
    async with open_context(tmp_path / "a") as source:
        for body in ("one", "two"):
            await log.append(source, note(body=body))
        page = await maintenance.export_page(source, {"with_total": True})
    assert page["done"] is True and page["total"] == 2 and len(page["events"]) == 2
    events = [{k: v for k, v in e.items() if k != "seq"} for e in page["events"]]
    async with open_context(tmp_path / "b") as target:
        tampered = [{**events[0], "body": "forged"}, events[1]]
        with pytest.raises(ApiError) as refused:
            await maintenance.import_events(target, {"events": tampered, "origins": page["origins"]})
        assert refused.value.code == "invalid_argument" and refused.value.detail["failures"][0]["index"] == 0
        assert (await log.list_events(target, {}))["count"] == 0  # all or nothing
        result = await maintenance.import_events(target, {"events": events, "origins": page["origins"]})
        assert (result["imported"], result["refused"], result["failed"]) == (2, [], [])
        assert [e["body"] for e in (await log.list_events(target, {"order": "asc"}))["events"]] == ["one", "two"]
        again = await maintenance.import_events(target, {"events": events, "origins": page["origins"]})
        assert again["imported"] == 0


async def test_import_and_export_arguments_are_bounded(tmp_path):
    async with open_context(tmp_path) as ctx:
        for op, args, field in (
            (maintenance.export_page, {"limit": 1001}, "limit"),
            (maintenance.export_page, {"after_seq": -1}, "after_seq"),
            (maintenance.export_page, {"streams": "s"}, "streams"),
            (maintenance.import_events, {"events": [{}] * 1001}, "events"),
            (maintenance.import_events, {"events": [], "origins": []}, "origins"),
            (maintenance.import_events, {"events": [], "partial": "yes"}, "partial"),
        ):
            with pytest.raises(ValidationError) as refused:
                await op(ctx, args)
            assert refused.value.field == field
