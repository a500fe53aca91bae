"""Origin bindings (palace_proto.bindings, ids): an origin is bound only to the key that proves it.

Regression tests for issue 11, finding 2: a member could bind any origin id — including the
origin of a daemon that joins later — to any valid certificate, and the first binding won."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from palace_proto.bindings import BindingProofError, check_binding_proof, legacy_binding_signature
from palace_proto.ids import ORIGIN_ID_RE, is_key_derived_origin, origin_id_for_key, origin_id_from_random

PALACE = "pal_" + "p" * 26


def raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


VICTIM, MALLORY = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()


def test_key_derived_origins_are_recognisable_and_deterministic():
    nonce = bytes(range(16))
    origin = origin_id_for_key(raw(VICTIM), nonce)
    assert ORIGIN_ID_RE.match(origin) and is_key_derived_origin(origin) and origin.startswith("ori2_")
    assert origin == origin_id_for_key(raw(VICTIM), nonce)
    assert origin != origin_id_for_key(raw(VICTIM), bytes(16)) != origin_id_for_key(raw(MALLORY), nonce)
    legacy = origin_id_from_random(bytes(16))
    assert ORIGIN_ID_RE.match(legacy) and not is_key_derived_origin(legacy)
    with pytest.raises(ValueError):
        origin_id_for_key(raw(VICTIM), b"short")


def test_a_derived_origin_binds_only_to_its_own_key():
    """The pre-claim attack: the victim's origin bound to the attacker's key is refused, whatever
    proof the attacker offers (the victim's nonce, another nonce, or a signature of its own)."""
    nonce = b"\x07" * 16
    origin = origin_id_for_key(raw(VICTIM), nonce)
    check_binding_proof(origin, raw(VICTIM), nonce, PALACE)
    for proof in (nonce, b"\x08" * 16, legacy_binding_signature(MALLORY, PALACE, origin), b""):
        with pytest.raises(BindingProofError):
            check_binding_proof(origin, raw(MALLORY), proof, PALACE)


def test_a_legacy_origin_needs_its_keys_signature_for_this_palace():
    origin = origin_id_from_random(b"\x01" * 16)
    proof = legacy_binding_signature(VICTIM, PALACE, origin)
    check_binding_proof(origin, raw(VICTIM), proof, PALACE)
    with pytest.raises(BindingProofError, match="not signed by the key it binds"):
        check_binding_proof(origin, raw(MALLORY), proof, PALACE)  # someone else's signature
    with pytest.raises(BindingProofError, match="not signed"):
        check_binding_proof(origin, raw(VICTIM), proof, "pal_" + "q" * 26)  # another palace
    with pytest.raises(BindingProofError, match="64-byte signature"):
        check_binding_proof(origin, raw(VICTIM), b"\x00" * 16, PALACE)  # a nonce proves nothing here


@pytest.mark.parametrize("origin", ["", "ori_short", "x" * 30, "ori2_" + "A" * 26, "ori_" + "1" * 26])
def test_malformed_origin_ids_are_refused(origin):
    with pytest.raises(BindingProofError, match="not an origin id"):
        check_binding_proof(origin, raw(VICTIM), b"\x00" * 16, PALACE)


def test_a_malformed_key_is_a_binding_error_not_a_crash():
    origin = origin_id_from_random(b"\x02" * 16)
    with pytest.raises(BindingProofError):
        check_binding_proof(origin, b"short", b"\x00" * 64, PALACE)
    with pytest.raises(BindingProofError):
        check_binding_proof(origin_id_for_key(raw(VICTIM), b"\x00" * 16), b"short", b"\x00" * 16, PALACE)
