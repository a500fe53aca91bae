"""Tests for palace_proto.ids: event, artifact and origin ids, and key fingerprints."""

from __future__ import annotations

import base64
import hashlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palace_proto.ids import (
    ARTIFACT_ID_RE,
    EVENT_ID_RE,
    ORIGIN_ID_RE,
    SHA256_HEX_RE,
    artifact_id_for_sha256,
    event_id_for,
    fingerprint,
    fingerprint_is_valid,
    origin_id_from_random,
)

B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
FINGERPRINT_RE = re.compile(r"^[A-Z2-7]{7}(-[A-Z2-7]{7}){7}$")
KEYS = [bytes(32), bytes(range(32)), b"\xff" * 32, hashlib.sha256(b"palace").digest()]

# Syncthing device ids from its own test suite (lib/config tests): same Luhn-32 scheme.
SYNCTHING_IDS = [
    "P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2",
    "GYRZZQB-IRNPV4Z-T7TC52W-EQYJ3TT-FDQW6MW-DFLMU42-SSSU6EM-FBK2VAY",
    "LGFPDIT-7SKNNJL-VJZA4FC-7QNCRKA-CE753K7-2BW5QDK-2FOZ7FR-FEP57QJ",
]


# --- event ids -------------------------------------------------------------------------------


def test_event_id_uses_the_created_at_second_and_80_hash_bits():
    event_hash = bytes(range(32))
    eid = event_id_for("2026-11-30T01:33:49.123456Z", event_hash)
    assert eid == "evt_20261130T013349_" + bytes(range(10)).hex()
    assert EVENT_ID_RE.match(eid)


def test_event_id_ignores_the_fraction_of_a_second():
    h = hashlib.sha256(b"x").digest()
    assert event_id_for("2026-11-30T01:33:49Z", h) == event_id_for("2026-11-30T01:33:49.999999Z", h)


@pytest.mark.parametrize(
    "text",
    ["evt_20261130T013349_0123456789abcdef012", "evt_20261130T013349_0123456789ABCDEF0123",
     "evt_2026113T013349_0123456789abcdef0123", "art_20261130T013349_0123456789abcdef0123"],
    ids=["short-hex", "uppercase-hex", "short-date", "wrong-prefix"],
)
def test_event_id_re_refuses_malformed_ids(text):
    assert not EVENT_ID_RE.match(text)


# --- artifact ids ----------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"", b"hello", bytes(range(256))])
def test_artifact_id_is_the_first_128_bits_of_the_sha256(content):
    digest = hashlib.sha256(content).hexdigest()
    assert SHA256_HEX_RE.match(digest)
    aid = artifact_id_for_sha256(digest)
    assert aid == "art_" + digest[:32]
    assert ARTIFACT_ID_RE.match(aid)


def test_identical_content_gets_the_identical_artifact_id():
    one = artifact_id_for_sha256(hashlib.sha256(b"patch").hexdigest())
    assert one == artifact_id_for_sha256(hashlib.sha256(b"patch").hexdigest())
    assert one != artifact_id_for_sha256(hashlib.sha256(b"patch!").hexdigest())


@pytest.mark.parametrize("text", ["art_" + "A" * 32, "art_" + "a" * 31, "art_" + "a" * 33, "evt_" + "a" * 32])
def test_artifact_id_re_refuses_malformed_ids(text):
    assert not ARTIFACT_ID_RE.match(text)


# --- origin ids ------------------------------------------------------------------------------


@pytest.mark.parametrize("random16", [bytes(16), b"\xff" * 16, bytes(range(16))])
def test_origin_id_is_lowercase_base32_of_16_bytes(random16):
    oid = origin_id_from_random(random16)
    assert ORIGIN_ID_RE.match(oid)
    assert len(oid) == 4 + 26
    assert base64.b32decode(oid[4:].upper() + "======") == random16


def test_different_random_bytes_give_different_origin_ids():
    assert origin_id_from_random(bytes(16)) != origin_id_from_random(bytes(15) + b"\x01")


@pytest.mark.parametrize("size", [0, 15, 17, 32])
def test_origin_id_requires_exactly_16_bytes(size):
    with pytest.raises(ValueError, match="exactly 16 random bytes"):
        origin_id_from_random(bytes(size))


# --- fingerprints ----------------------------------------------------------------------------


@pytest.mark.parametrize("key", KEYS)
def test_fingerprint_is_8_dash_separated_groups_of_7(key):
    fp = fingerprint(key)
    assert FINGERPRINT_RE.match(fp), fp
    assert [len(g) for g in fp.split("-")] == [7] * 8


@pytest.mark.parametrize("key", KEYS)
def test_fingerprint_is_deterministic_and_valid(key):
    assert fingerprint(key) == fingerprint(key)
    assert fingerprint_is_valid(fingerprint(key))


def test_fingerprint_carries_the_sha256_in_base32_between_check_characters():
    key = bytes(range(32))
    compact = fingerprint(key).replace("-", "")
    data = "".join(compact[i : i + 13] for i in range(0, 56, 14))
    assert data == base64.b32encode(hashlib.sha256(key).digest()).decode().rstrip("=")


def test_different_keys_give_different_fingerprints():
    assert len({fingerprint(k) for k in KEYS}) == len(KEYS)


@pytest.mark.parametrize("device_id", SYNCTHING_IDS)
def test_syncthing_device_ids_are_valid_fingerprints(device_id):
    """Guards the Luhn-32 variant against Syncthing's (factors 1, 2 from the left)."""
    assert fingerprint_is_valid(device_id)


def test_fingerprint_validation_ignores_case_and_dashes():
    fp = fingerprint(bytes(range(32)))
    assert fingerprint_is_valid(fp.lower())
    assert fingerprint_is_valid(fp.replace("-", ""))


# Positions in the 56-character compact form: first, middle and last data characters of
# several groups, and check characters (13, 27, 41, 55).
POSITIONS = [0, 1, 6, 12, 13, 14, 20, 27, 30, 41, 50, 54, 55]


@pytest.mark.parametrize("key", KEYS[:2])
@pytest.mark.parametrize("position", POSITIONS)
def test_changing_any_single_character_invalidates_the_fingerprint(key, position):
    """Guards the check characters: every one-character typo at these positions is caught."""
    compact = fingerprint(key).replace("-", "")
    for replacement in B32:
        if replacement == compact[position]:
            continue
        typo = compact[:position] + replacement + compact[position + 1 :]
        assert not fingerprint_is_valid(typo), (position, replacement)


@settings(max_examples=200, deadline=None)
@given(key=st.binary(min_size=1, max_size=64), position=st.integers(0, 55), shift=st.integers(1, 31))
def test_any_single_substitution_is_caught(key, position, shift):
    compact = fingerprint(key).replace("-", "")
    replacement = B32[(B32.index(compact[position]) + shift) % 32]
    assert not fingerprint_is_valid(compact[:position] + replacement + compact[position + 1 :])


FP = fingerprint(bytes(32))


@pytest.mark.parametrize(
    "text",
    ["", "ABC", FP[:-1], FP + "A", FP[:3] + "1" + FP[4:], FP[:-1] + "0", FP[:-1] + "é", FP.replace("-", "_")],
    ids=["empty", "short", "one-short", "one-long", "digit-1", "digit-0", "non-ascii", "underscores"],
)
def test_malformed_fingerprints_are_invalid(text):
    assert not fingerprint_is_valid(text)
