"""Tests for palace_proto.envelope: canonical encoding, sealing, verification, chain links, public form."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import msgpack
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from palace_proto import envelope
from palace_proto.canonical import canonical_json
from palace_proto.envelope import (
    CANONICAL_VERSION,
    GENESIS_HASH,
    PREVIEW_BODY_CHARS,
    PUBLIC_KEYS,
    SignedEvent,
    body_sha256,
    preview_event,
    seal_event,
    seal_request,
    verify_chain_link,
    verify_event,
)
from palace_proto.errors import SignatureError
from palace_proto.ids import EVENT_ID_RE

# Fixed seeds so every run (and every replica) signs the same bytes.
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
PUBLIC = KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
CREATED_AT = "2026-11-30T01:33:49.123456Z"

FIELDS = {
    "origin": "ori_aaaaaaaaaaaaaaaaaaaaaaaaaa",
    "origin_seq": 1,
    "prev_hash": GENESIS_HASH,
    "created_at": CREATED_AT,
    "type": "task.claim",
    "stream": "work",
    "room": "backend",
    "from_agent": "mac-claude",
    "body": "please review the patch",
    "metadata_json": '{"priority":"high"}',
    "topic": "auth",
    "to_agent": "linux-codex",
    "correlation_id": "corr-1",
    "branch": "feature/x",
    "base_commit": "abc123",
    "status": "open",
    "ack_of": "evt_20261130T013300_00000000000000000000",
    "artifact_ids": ("art_" + "0" * 32, "art_" + "1" * 32),
}


def seal(key: Ed25519PrivateKey = KEY, **changes) -> SignedEvent:
    return seal_event(key, **{**FIELDS, **changes})


# Every field covered by the hash, with a different valid value of the same type.
SIGNED_FIELD_CHANGES = {
    "origin": "ori_bbbbbbbbbbbbbbbbbbbbbbbbbb",
    "origin_seq": 2,
    "prev_hash": b"\x01" * 32,
    "created_at": "2026-11-30T01:33:49.123457Z",
    "type": "task.done",
    "stream": "other",
    "room": "frontend",
    "topic": None,
    "from_agent": "mac-codex",
    "to_agent": "*",
    "correlation_id": "corr-2",
    "branch": "main",
    "base_commit": "def456",
    "status": "ready",
    "ack_of": None,
    "artifact_ids": ("art_" + "1" * 32, "art_" + "0" * 32),
    "body_sha256": hashlib.sha256(b"something else").digest(),
    "metadata_json": '{"priority":"low"}',
}


def test_seal_then_verify_passes():
    event = seal()
    verify_event(event, PUBLIC)
    verify_event(event, KEY.public_key())


def test_sealed_event_carries_every_field_and_the_body_hash():
    event = seal()
    for name, value in FIELDS.items():
        if name != "body":
            assert getattr(event, name) == value, name
    assert event.body == FIELDS["body"]
    assert event.body_sha256 == hashlib.sha256(FIELDS["body"].encode()).digest()
    assert len(event.event_hash) == 32
    assert len(event.signature) == 64


def test_seal_defaults_give_an_empty_body_and_empty_metadata():
    event = seal_event(
        KEY, origin="ori_x", origin_seq=1, prev_hash=GENESIS_HASH, created_at=CREATED_AT,
        type="note", stream="s", room="r", from_agent="a",
    )
    assert event.body == ""
    assert event.metadata_json == "{}"
    assert event.artifact_ids == ()
    assert (event.topic, event.to_agent, event.status) == (None, None, None)
    verify_event(event, PUBLIC)


def test_seal_turns_artifact_ids_into_a_tuple():
    event = seal(artifact_ids=["art_" + "2" * 32])
    assert event.artifact_ids == ("art_" + "2" * 32,)
    verify_event(event, PUBLIC)


def test_signed_field_changes_cover_every_canonical_field():
    """Guards this test table: a new signed field must get a tamper test too."""
    not_hashed = {"event_hash", "signature", "body"}
    signed = {f.name for f in dataclasses.fields(SignedEvent)} - not_hashed
    assert signed == set(SIGNED_FIELD_CHANGES)


@pytest.mark.parametrize(("field", "value"), SIGNED_FIELD_CHANGES.items(), ids=list(SIGNED_FIELD_CHANGES))
def test_tampering_any_signed_field_fails_verification(field, value):
    event = seal()
    assert getattr(event, field) != value
    tampered = dataclasses.replace(event, **{field: value})
    with pytest.raises(SignatureError):
        verify_event(tampered, PUBLIC)


@pytest.mark.parametrize(("field", "value"), SIGNED_FIELD_CHANGES.items(), ids=list(SIGNED_FIELD_CHANGES))
def test_tampering_a_signed_field_of_a_redacted_event_fails_verification(field, value):
    """Guards redaction: without the body, the hash still covers every other field."""
    redacted = dataclasses.replace(seal(), body=None)
    with pytest.raises(SignatureError, match="hash does not match"):
        verify_event(dataclasses.replace(redacted, **{field: value}), PUBLIC)


def test_tampering_the_body_fails_verification():
    event = dataclasses.replace(seal(), body="please review the patch!")
    with pytest.raises(SignatureError, match="body does not match its sha256"):
        verify_event(event, PUBLIC)


def test_tampering_the_event_hash_fails_verification():
    event = seal()
    with pytest.raises(SignatureError, match="hash does not match the canonical encoding"):
        verify_event(dataclasses.replace(event, event_hash=bytes(32)), PUBLIC)


@pytest.mark.parametrize("signature", [bytes(64), b"", b"\x01" * 10], ids=["zeros", "empty", "short"])
def test_tampering_the_signature_fails_verification(signature):
    with pytest.raises(SignatureError, match="signature does not verify"):
        verify_event(dataclasses.replace(seal(), signature=signature), PUBLIC)


def test_flipping_one_signature_bit_fails_verification():
    event = seal()
    flipped = bytes([event.signature[0] ^ 1]) + event.signature[1:]
    with pytest.raises(SignatureError, match="signature does not verify"):
        verify_event(dataclasses.replace(event, signature=flipped), PUBLIC)


def test_verifying_with_another_key_fails():
    with pytest.raises(SignatureError, match="signature does not verify with the origin's key"):
        verify_event(seal(), OTHER_KEY.public_key())


def test_event_signed_by_another_key_fails_with_ours():
    with pytest.raises(SignatureError):
        verify_event(seal(OTHER_KEY), PUBLIC)


def test_signature_error_names_the_event():
    event = seal()
    with pytest.raises(SignatureError, match=event.id):
        verify_event(dataclasses.replace(event, body="x"), PUBLIC)


def test_redacted_event_still_verifies():
    """Guards redaction: dropping the body keeps hash, signature and chain valid."""
    event = seal()
    redacted = dataclasses.replace(event, body=None)
    verify_event(redacted, PUBLIC)
    assert redacted.id == event.id
    assert redacted.canonical() == event.canonical()


def test_body_enters_only_through_its_hash():
    event = seal()
    assert FIELDS["body"].encode() not in event.canonical()
    assert event.body_sha256 in event.canonical()


def test_canonical_encoding_is_a_versioned_msgpack_array_in_fixed_order():
    event = seal()
    decoded = msgpack.unpackb(event.canonical(), raw=False)
    assert decoded == [
        CANONICAL_VERSION, event.origin, event.origin_seq, event.prev_hash, event.created_at,
        event.type, event.stream, event.room, event.topic, event.from_agent, event.to_agent,
        event.correlation_id, event.branch, event.base_commit, event.status, event.ack_of,
        list(event.artifact_ids), event.body_sha256, event.metadata_json,
    ]


def test_event_hash_is_domain_separated_sha256_of_canonical():
    """Guards the wire format: other replicas recompute exactly this hash."""
    event = seal()
    assert event.event_hash == hashlib.sha256(b"palace/event/v1\n" + event.canonical()).digest()
    KEY.public_key().verify(event.signature, event.event_hash)


def test_event_id_is_deterministic_and_well_formed():
    first, second = seal(), seal()
    assert first == second  # Ed25519 signatures are deterministic too
    assert first.id == second.id
    assert EVENT_ID_RE.match(first.id)
    assert first.id.startswith("evt_20261130T013349_")
    assert first.id.endswith(first.event_hash[:10].hex())


# seal_event takes the body, not its hash: the body stands in for body_sha256 here.
SEAL_ARG_CHANGES = {k: v for k, v in SIGNED_FIELD_CHANGES.items() if k != "body_sha256"} | {"body": "other body"}


@pytest.mark.parametrize(("field", "value"), SEAL_ARG_CHANGES.items(), ids=list(SEAL_ARG_CHANGES))
def test_event_id_changes_when_any_field_changes(field, value):
    assert seal(**{field: value}).id != seal().id


def test_event_id_does_not_depend_on_the_signing_key():
    """The id comes from the hash alone, so it names the content, not the signer."""
    assert seal(OTHER_KEY).id == seal().id


def test_unchanged_fields_with_none_versus_empty_string_hash_differently():
    """Guards the None-for-absent rule: '' and None must not collide in the canonical form."""
    assert seal(topic=None).event_hash != seal(topic="").event_hash


def test_genesis_event_links_to_nothing():
    verify_chain_link(None, seal())


@pytest.mark.parametrize(
    "changes",
    [{"origin_seq": 2}, {"prev_hash": b"\x01" * 32}, {"origin_seq": 0}],
    ids=["seq-2", "nonzero-prev-hash", "seq-0"],
)
def test_first_event_must_be_seq_1_with_genesis_hash(changes):
    with pytest.raises(SignatureError, match="is not the start of its chain"):
        verify_chain_link(None, seal(**changes))


def test_next_event_links_to_previous():
    first = seal()
    second = seal(origin_seq=2, prev_hash=first.event_hash)
    verify_chain_link(first, second)


def test_chain_link_survives_redaction_of_either_event():
    first = seal()
    second = seal(origin_seq=2, prev_hash=first.event_hash)
    verify_chain_link(dataclasses.replace(first, body=None), dataclasses.replace(second, body=None))


@pytest.mark.parametrize("seq", [1, 3, 4], ids=["repeat", "gap", "bigger-gap"])
def test_chain_link_refuses_a_gap_or_repeat(seq):
    first = seal()
    with pytest.raises(SignatureError, match=f"origin_seq {seq} does not follow 1"):
        verify_chain_link(first, seal(origin_seq=seq, prev_hash=first.event_hash))


def test_chain_link_refuses_wrong_prev_hash():
    first = seal()
    with pytest.raises(SignatureError, match="prev_hash does not match"):
        verify_chain_link(first, seal(origin_seq=2, prev_hash=bytes(32)))


def test_chain_link_refuses_another_origin():
    first = seal()
    other = seal(origin="ori_bbbbbbbbbbbbbbbbbbbbbbbbbb", origin_seq=2, prev_hash=first.event_hash)
    with pytest.raises(SignatureError, match="another origin"):
        verify_chain_link(first, other)


def test_to_public_key_order_equals_public_keys():
    public = seal().to_public(seq=7)
    assert tuple(public) == PUBLIC_KEYS


def test_to_public_shows_the_event_and_hides_signature_fields():
    event = seal()
    public = event.to_public(seq=7)
    assert public["id"] == event.id
    assert public["seq"] == 7
    assert public["body"] == FIELDS["body"]
    assert public["metadata"] == {"priority": "high"}
    assert public["artifact_ids"] == list(FIELDS["artifact_ids"])
    assert public["created_at"] == CREATED_AT
    for hidden in ("signature", "event_hash", "prev_hash", "metadata_json", "body_redacted", "body_sha256"):
        assert hidden not in public
    json.dumps(public)  # the public form is plain JSON


def test_to_public_of_redacted_event_marks_the_redaction():
    event = seal()
    public = dataclasses.replace(event, body=None).to_public(seq=7)
    assert tuple(public)[: len(PUBLIC_KEYS)] == PUBLIC_KEYS
    assert list(public)[len(PUBLIC_KEYS) :] == ["body_redacted", "body_sha256"]
    assert public["body"] == ""
    assert public["body_redacted"] is True
    assert public["body_sha256"] == event.body_sha256.hex()


def test_empty_body_is_not_a_redaction():
    public = seal(body="").to_public(seq=1)
    assert public["body"] == ""
    assert "body_redacted" not in public


def test_preview_cuts_long_bodies_at_200_chars_with_markers():
    body = "é" * 150 + "x" * 100  # counted in characters, not bytes
    public = seal(body=body).to_public(seq=1)
    preview = preview_event(public)
    assert PREVIEW_BODY_CHARS == 200
    assert preview["body"] == body[:200]
    assert preview["body_truncated"] is True
    assert preview["body_length"] == 250
    assert public["body"] == body, "preview must not modify its input"
    assert "body_truncated" not in public


def test_preview_leaves_a_body_of_exactly_200_chars_untouched():
    public = seal(body="x" * 200).to_public(seq=1)
    assert preview_event(public) == public
    assert "body_truncated" not in preview_event(public)


def test_preview_cuts_a_body_of_201_chars():
    preview = preview_event(seal(body="x" * 201).to_public(seq=1))
    assert preview["body"] == "x" * 200
    assert preview["body_length"] == 201


@pytest.mark.parametrize("body", ["", "short", None], ids=["empty", "short", "missing"])
def test_preview_leaves_short_bodies_without_marker_keys(body):
    public = {"id": "evt_x", "body": body}
    preview = preview_event(public)
    assert preview == public
    assert "body_truncated" not in preview and "body_length" not in preview


def test_preview_of_redacted_event_keeps_the_redaction_marker():
    public = dataclasses.replace(seal(body="y" * 500), body=None).to_public(seq=1)
    preview = preview_event(public)
    assert preview["body_redacted"] is True
    assert "body_truncated" not in preview


def test_canonical_json_sorts_keys_compactly_and_keeps_non_ascii():
    assert canonical_json({"b": 1, "a": [1, {"d": None, "c": "é✓"}]}) == '{"a":[1,{"c":"é✓","d":null}],"b":1}'


def test_envelope_signs_metadata_with_the_shared_canonical_json():
    """validation and envelope must agree on the metadata text that gets signed."""
    assert envelope.canonical_json is canonical_json


def test_canonical_json_is_independent_of_insertion_order():
    assert canonical_json({"x": 1, "y": 2}) == canonical_json({"y": 2, "x": 1})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {"a": float("-inf")}])
def test_canonical_json_refuses_non_finite_numbers(value):
    with pytest.raises(ValueError):
        canonical_json(value)


def test_body_sha256_hashes_utf8():
    assert body_sha256("é") == hashlib.sha256("é".encode()).digest()


def test_signed_event_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        seal().body = None  # type: ignore[misc]


def test_sealing_a_validated_request_is_sealing_its_fields():
    """Guards the append path (issue 27): ``seal_request`` reads an ``AppendRequest`` as it is, and
    signs exactly what ``seal_event`` signs for the same fields."""
    from palace_proto.validation import AppendRequest, Limits

    key = Ed25519PrivateKey.generate()
    req = AppendRequest.from_wire({"type": "task.reply", "stream": "s", "room": "r", "from_agent": "codex",
                                   "to_agent": "claude", "topic": "t", "correlation_id": "task_1", "branch": "b",
                                   "base_commit": "abc", "status": "applied", "ack_of": None, "body": "é applied",
                                   "metadata": {"k": [1, 2]}}, Limits())
    where = {"origin": "ori2_" + "a" * 26, "origin_seq": 7, "prev_hash": b"\x01" * 32,
             "created_at": "2026-12-04T00:00:00.000001Z"}
    sealed = seal_request(key, req, **where)
    assert sealed == seal_event(key, **where, type=req.type, stream=req.stream, room=req.room, topic=req.topic,
                                from_agent=req.from_agent, to_agent=req.to_agent, correlation_id=req.correlation_id,
                                branch=req.branch, base_commit=req.base_commit, status=req.status,
                                ack_of=req.ack_of, artifact_ids=req.artifact_ids, body=req.body,
                                metadata_json=req.metadata_json)
    verify_event(sealed, key.public_key())
