"""The one event-row mapping (palaced/store/rows.py): a signed event's insert parameters, read back
as a row, are the same signed event and the same public object as ``SignedEvent.to_public`` —
with and without a body, with and without every optional field."""

from __future__ import annotations

import dataclasses

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.envelope import GENESIS_HASH, seal_event
from palace_proto.validation import AppendRequest, Limits
from palaced.features import STORE_PARTS
from palaced.store import Store, append_event
from palaced.store.rows import SIGNED_COLUMNS, insert_params, row_to_public, row_to_signed

LIMITS = Limits()
KEY = Ed25519PrivateKey.generate()

BARE = seal_event(KEY, origin="ori2_x", origin_seq=1, prev_hash=GENESIS_HASH, created_at="2026-01-02T03:04:05.000006Z",
                  type="note", stream="s", room="r", from_agent="a", body="hello")
FULL = seal_event(KEY, origin="ori2_x", origin_seq=2, prev_hash=BARE.event_hash,
                  created_at="2026-01-02T03:04:05.000007Z", type="task", stream="s", room="r", from_agent="a",
                  body="do it", metadata_json='{"k":[1,2]}', topic="t", to_agent="b", correlation_id="c",
                  branch="main", base_commit="abc", status="open", ack_of="evt_1", artifact_ids=("art_1", "art_2"))


@pytest.mark.parametrize("event", [BARE, FULL, dataclasses.replace(FULL, body=None)], ids=["bare", "full", "redacted"])
def test_insert_parameters_read_back_as_the_same_event(event):
    row = (7, *insert_params(event))  # a row as selected with SIGNED_COLUMNS: seq first, then the insert's columns
    assert len(row) == len(SIGNED_COLUMNS.split(", "))
    assert row_to_signed(row) == event
    assert row_to_public(row) == event.to_public(7)


def test_a_stored_event_reads_back_as_signed_and_as_public(tmp_path):
    store = Store(tmp_path / "p.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    try:
        req = AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": "a", "body": "x",
                                       "topic": "t", "metadata": {"k": 1}}, LIMITS)
        result = store.write_batch([lambda ctx: append_event(ctx, req)])
        (record,) = result.events
        public, kept = record.public, record.signed
        assert store.signed_events_of_origin(store.origin_id, 0, 10) == [kept]
        assert store.get_event(public["id"]) == public == kept.to_public(public["seq"])
    finally:
        store.close()
