"""palace_proto.export: what "this line of an export verifies" means — the one definition palacectl
import and the daemon's ``import_events`` both apply (issue 11, finding 10)."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from palace_proto.envelope import GENESIS_HASH, seal_event
from palace_proto.export import (
    ExportError,
    artifact_line,
    event_line,
    parse_line,
    verify_export_artifact,
    verify_export_event,
)
from palace_proto.ids import artifact_id_for_sha256

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
PUBLIC = KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
ORIGIN = "ori_aaaaaaaaaaaaaaaaaaaaaaaaaa"


def _exported(**changes) -> dict:
    event = seal_event(KEY, origin=ORIGIN, origin_seq=1, prev_hash=GENESIS_HASH,
                       created_at="2026-11-30T01:33:49.123456Z", type="note", stream="s", room="r",
                       from_agent="a", body="the words")
    kind, payload = parse_line(event_line(event))
    assert kind == "event"
    return {**payload, **changes}


def test_a_sound_event_verifies_and_a_redacted_one_too() -> None:
    assert verify_export_event(_exported(), {ORIGIN: PUBLIC}).body == "the words"
    assert verify_export_event(_exported(body=None), {ORIGIN: PUBLIC}).body is None  # via body_sha256


@pytest.mark.parametrize(("change", "keys", "reason"), [
    ({"body": "other words"}, {ORIGIN: PUBLIC}, "does not verify: body does not match its sha256"),
    ({"room": "elsewhere"}, {ORIGIN: PUBLIC}, "does not verify: hash does not match the canonical encoding"),
    ({"signature": "00" * 64}, {ORIGIN: PUBLIC}, "does not verify: signature does not verify"),
    ({}, {ORIGIN: bytes(32)}, "does not verify"),
    ({}, {}, "no public key for its origin"),
    ({"id": "evt_20261130T013349_00000000000000000000"}, {ORIGIN: PUBLIC}, "does not match its content"),
    ({"origin_seq": "1"}, {ORIGIN: PUBLIC}, "origin_seq"),
    ({"event_hash": "not hex"}, {ORIGIN: PUBLIC}, "not hex"),
])
def test_every_kind_of_damage_is_an_export_error_naming_it(change: dict, keys: dict, reason: str) -> None:
    with pytest.raises(ExportError, match=reason):
        verify_export_event(_exported(**change), keys)


def _artifact(content: bytes = b"patch bytes\n", **changes) -> tuple[dict, bytes]:
    digest = hashlib.sha256(content).hexdigest()
    record = {"id": artifact_id_for_sha256(digest), "sha256": digest, "kind": "patch", "size_bytes": len(content),
              "created_by": "a", "created_at": "2026-11-30T01:33:49Z", "metadata": {}}
    kind, (parsed, raw) = parse_line(artifact_line(record, content))
    assert kind == "artifact" and raw == content
    return {**parsed, **changes}, raw


def test_a_sound_artifact_verifies() -> None:
    verify_export_artifact(*_artifact())


@pytest.mark.parametrize(("change", "reason"), [
    ({"sha256": hashlib.sha256(b"other").hexdigest(), "id": artifact_id_for_sha256(hashlib.sha256(b"other").hexdigest())},
     "content does not match its sha256"),
    ({"id": "art_" + "0" * 32}, "id does not match"),
    ({"size_bytes": 3}, "size_bytes"),
    ({"sha256": "XYZ"}, "64 lowercase hex"),
    ({"kind": 7}, "'kind' must be a string"),
    ({"metadata": []}, "'metadata' must be an object"),
])
def test_an_artifact_that_does_not_match_its_record_is_an_export_error(change: dict, reason: str) -> None:
    record, content = _artifact(**change)
    with pytest.raises(ExportError, match=reason):
        verify_export_artifact(record, content)


def test_altered_bytes_in_an_artifact_line_are_caught() -> None:
    record, content = _artifact()
    line = json.loads(artifact_line(record, content))
    line["artifact"]["content_base64"] = base64.b64encode(b"patch bytez\n").decode()
    _kind, (parsed, altered) = parse_line(json.dumps(line))
    with pytest.raises(ExportError, match="it was altered"):
        verify_export_artifact(parsed, altered)
