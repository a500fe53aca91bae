"""A feature's part of the store (palaced/store/parts.py), on real SQLite files: the write path
calls each part's hooks — an event stored (appended here or applied from a peer), a body redacted,
a batch about to commit, the registry's verdicts changed, the store opened — and a local write is
judged by the part judging its rule's subject; the write path names no feature."""

from __future__ import annotations

import dataclasses

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.errors import ApiError, NotPermitted
from palace_proto.rooms import ROOM_MESSAGE, keyed_room_id
from palace_proto.validation import AppendRequest, Limits
from palaced.features import STORE_PARTS
from palaced.store import Store, append_event, apply_remote, redact
from palaced.store.parts import StorePart, StoreParts

LIMITS = Limits()


class Recorder:
    """A store part that notes every hook the write path calls, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def part(self, name: str = "recorder") -> StorePart:
        return StorePart(name, stored=lambda ctx, ev, seq: self.calls.append(("stored", (ev.body, seq))),
                         redacted=lambda ctx, event_id: self.calls.append(("redacted", event_id)),
                         settle=lambda ctx: self.calls.append(("settle", len(ctx.batch.events))),
                         agents_changed=lambda ctx, agents: self.calls.append(("agents_changed", sorted(agents))),
                         opened=lambda ctx: self.calls.append(("opened", ctx.chain.origin)))


def _req(**fields: object) -> AppendRequest:
    return AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": "a", **fields}, LIMITS)


def _append(store: Store, **fields: object) -> dict:
    ok, value = store.write_batch([lambda ctx: append_event(ctx, _req(**fields))]).outcomes[0]
    assert ok, value
    return value


def test_every_hook_is_called_where_the_write_path_moves(tmp_path):
    recorder = Recorder()
    store = Store(tmp_path / "a.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=(*STORE_PARTS, recorder.part()))
    peer = Store(tmp_path / "b.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    try:
        assert recorder.calls == [("opened", store.origin_id), ("settle", 0)]  # opening is a write batch
        recorder.calls.clear()
        first = _append(store, body="one")
        assert recorder.calls == [("stored", ("one", first["seq"])), ("settle", 1)]
        recorder.calls.clear()
        theirs = _append(peer, body="from a peer")
        ok, _ = store.write_batch([lambda ctx: apply_remote(ctx,
            peer.signed_events_of_origin(peer.origin_id, 0, 10), lambda origin, seq: peer.public_key,
            source="test")]).outcomes[0]
        assert ok and recorder.calls[0][0] == "stored" and recorder.calls[0][1][0] == "from a peer"
        assert theirs["id"] not in [c[1] for c in recorder.calls]
        recorder.calls.clear()
        ok, _ = store.write_batch([lambda ctx: redact(ctx, first["id"], "evt_redactor")]).outcomes[0]
        assert ok and ("redacted", first["id"]) in recorder.calls
        recorder.calls.clear()
        ok, _ = store.write_batch([store.agents.reload_ca]).outcomes[0]
        assert ok and recorder.calls[0] == ("agents_changed", [])
    finally:
        store.close()
        peer.close()


def test_a_failing_opened_hook_fails_the_open(tmp_path):
    def broken(ctx: object) -> None:
        raise RuntimeError("cannot derive")

    with pytest.raises(ApiError, match="RuntimeError: cannot derive"):  # a write job's failure, in one line
        Store(tmp_path / "a.sqlite3", Ed25519PrivateKey.generate(), LIMITS,
              parts=(*STORE_PARTS, StorePart("broken", opened=broken)))


def test_a_local_write_is_judged_by_the_part_judging_its_subject(tmp_path):
    """The rooms' judge is the store part's: swapped for one that refuses, a room turn is refused
    with its words, and nothing is written."""
    refusing = StorePart("rooms", judges={"room": lambda ctx, req, rule, draft: f"{rule.name}: refused by the test"})
    parts = tuple(refusing if part.name == "rooms" else part for part in STORE_PARTS)
    store = Store(tmp_path / "a.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=parts)
    try:
        room_id = keyed_room_id("talk", origin=store.origin_id, opener="a", nonce="0" * 32)
        ok, refusal = store.write_batch([lambda ctx: append_event(ctx, _req(type=ROOM_MESSAGE, correlation_id=room_id,
                                                                      room="rooms"))]).outcomes[0]
        assert not ok and isinstance(refusal, NotPermitted) and "room.message: refused by the test" in str(refusal)
        assert store.counts()["events"] == 0
    finally:
        store.close()


def test_parts_are_checked_when_the_store_is_made():
    with pytest.raises(ValueError, match="given twice"):
        StoreParts((StorePart("x"), StorePart("x")))
    judge = dataclasses.replace(StorePart("y"), judges={"task": lambda *a: None})
    with pytest.raises(ValueError, match="subject 'task'"):
        StoreParts((judge, dataclasses.replace(judge, name="z")))
    with pytest.raises(TypeError):
        Store("unused", Ed25519PrivateKey.generate(), LIMITS)  # type: ignore[call-arg]  # parts are not optional
