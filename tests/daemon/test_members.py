"""MemberDirectory: which events a replica accepts — members only, observers never, revoked
members up to their cutoff only — revocations that take effect the moment they are seen, origin
bindings that must be proven by the key they bind, and who may redact."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.bindings import OriginBinding, legacy_binding_signature
from palace_proto.ids import fingerprint, origin_id_for_key, origin_id_from_random
from palace_proto.pki import REVOKE_EVENT_TYPE, Revocation, issue_certificate, new_palace, sign_redaction
from palaced.members import MAX_ORIGINS_PER_KEY, BindingError, MemberDirectory
from tests.hostile_peer import sealed

NOW = datetime.datetime.now(datetime.UTC)


def raw(key):
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def setup():
    ca_key, ca_pem, palace_id = new_palace("lab", NOW)
    directory = MemberDirectory(ca_pem, lambda: NOW)
    return ca_key, ca_pem, palace_id, directory


def member(ca_key, ca_pem, role="member", name="m"):
    """(key, certificate PEM, a binding of a fresh key-derived origin of that key)."""
    key = Ed25519PrivateKey.generate()
    cert = issue_certificate(ca_key, ca_pem, raw(key), role=role, name=name, now=NOW)
    nonce = os.urandom(16)
    return key, cert, OriginBinding(origin_id_for_key(raw(key), nonce), cert, nonce)


def test_members_are_accepted_observers_and_strangers_are_not():
    ca_key, ca_pem, _, directory = setup()
    m_key, _, m = member(ca_key, ca_pem, name="m")
    _, _, o = member(ca_key, ca_pem, role="observer", name="o")
    directory.bind(m)
    directory.bind(o)
    assert directory.key_for(m.origin, 1) == raw(m_key)
    assert directory.key_for(o.origin, 1) is None
    assert directory.key_for("ori_" + "u" * 26, 1) is None
    assert sorted(c.name for c in directory.certificates()) == ["m", "o"]
    assert [row[0] for row in directory.take_unsaved()] == [m.origin, o.origin] and directory.take_unsaved() == []


def test_an_origin_never_changes_keys_and_foreign_certificates_are_refused():
    ca_key, ca_pem, _, directory = setup()
    one_key, _, one = member(ca_key, ca_pem, name="a")
    legacy = origin_id_from_random(os.urandom(16))
    directory.bind(OriginBinding(legacy, one.certificate, legacy_binding_signature(one_key, directory.palace_id, legacy)))
    two_key, two_cert, _ = member(ca_key, ca_pem, name="b")
    with pytest.raises(BindingError, match="another key"):
        directory.bind(OriginBinding(legacy, two_cert, legacy_binding_signature(two_key, directory.palace_id, legacy)))
    other_key, other_pem, _ = new_palace("elsewhere", NOW)
    _, _, foreign = member(other_key, other_pem, name="b")
    with pytest.raises(BindingError):
        directory.bind(foreign)


def test_a_member_cannot_claim_another_daemons_origin():
    """Regression (issue 11, finding 2): the origin of a daemon that has not joined yet, bound by
    a member to its own (or anyone's) certificate, is refused — so the real daemon is never
    locked out when it arrives."""
    ca_key, ca_pem, _, directory = setup()
    mallory_key, mallory_cert, _ = member(ca_key, ca_pem, name="mallory")
    victim_key, victim_cert, victim = member(ca_key, ca_pem, name="victim")
    attempts = [
        OriginBinding(victim.origin, mallory_cert, victim.proof),  # the victim's nonce, the attacker's key
        OriginBinding(victim.origin, mallory_cert, os.urandom(16)),
        OriginBinding(victim.origin, mallory_cert, legacy_binding_signature(mallory_key, directory.palace_id,
                                                                            victim.origin)),
        OriginBinding(victim.origin, victim_cert, os.urandom(16)),  # the victim's certificate, a made-up proof
        OriginBinding(origin_id_from_random(os.urandom(16)), victim_cert, b""),  # an unproven origin
    ]
    for attempt in attempts:
        with pytest.raises(BindingError):
            directory.bind(attempt)
    assert not directory.is_bound(victim.origin)
    directory.bind(victim)  # the victim arrives: its own proof binds
    assert directory.key_for(victim.origin, 1) == raw(victim_key)


def test_one_key_binds_a_bounded_number_of_origins():
    """Regression (issue 11, finding 2): thousands of junk bindings per message grew every
    replica's bindings table and every link's members message without bound."""
    ca_key, ca_pem, _, directory = setup()
    key, cert, _ = member(ca_key, ca_pem)
    for _ in range(MAX_ORIGINS_PER_KEY):
        nonce = os.urandom(16)
        directory.bind(OriginBinding(origin_id_for_key(raw(key), nonce), cert, nonce))
    nonce = os.urandom(16)
    with pytest.raises(BindingError, match="limit"):
        directory.bind(OriginBinding(origin_id_for_key(raw(key), nonce), cert, nonce))
    assert len(directory.entries()) == MAX_ORIGINS_PER_KEY


def test_bindings_stored_before_proofs_are_trusted_here_but_not_relayed_until_proven():
    ca_key, ca_pem, _, directory = setup()
    key, cert, _ = member(ca_key, ca_pem)
    legacy = origin_id_from_random(os.urandom(16))
    directory.bind(OriginBinding(legacy, cert, b""), stored=True)
    assert directory.key_for(legacy, 1) == raw(key)
    assert directory.entries() == () and directory.binding(legacy) is None and directory.take_unsaved() == []
    with pytest.raises(BindingError):
        directory.bind(OriginBinding(legacy, cert, b""))  # unproven from a peer: refused
    proof = legacy_binding_signature(key, directory.palace_id, legacy)
    directory.bind(OriginBinding(legacy, cert, proof))  # its owner's signature arrives
    assert directory.binding(legacy) == OriginBinding(legacy, cert, proof)
    assert directory.take_unsaved() == [(legacy, cert, proof)]


def test_a_revocation_keeps_history_up_to_its_cutoff_and_refuses_the_rest():
    ca_key, ca_pem, palace_id, directory = setup()
    key, _, m = member(ca_key, ca_pem)
    directory.bind(m)
    dropped = []
    directory.on_revoke = dropped.append
    revocation = Revocation(palace_id, fingerprint(raw(key)), raw(key), ((m.origin, 5),),
                            "2026-11-30T03:00:00Z").signed(ca_key)
    # Observed as an event (as replication applies it): effective at once.
    # (observe trusts the CA signature inside, not the event's: the store verified the event.)
    event = dataclasses.replace(sealed(Ed25519PrivateKey.generate(), "ori_" + "c" * 26, body="revoke"),
                                type=REVOKE_EVENT_TYPE, metadata_json=json.dumps(revocation.to_metadata()))
    directory.observe(event)
    assert directory.is_revoked(fingerprint(raw(key))) and [r.peer_id for r in dropped] == [revocation.peer_id]
    assert directory.key_for(m.origin, 5) == raw(key)
    assert directory.key_for(m.origin, 6) is None
    assert directory.revoke(revocation) is False  # idempotent


def test_a_revocation_not_signed_by_the_ca_is_ignored():
    ca_key, ca_pem, palace_id, directory = setup()
    key, _, m = member(ca_key, ca_pem)
    directory.bind(m)
    forged = Revocation(palace_id, fingerprint(raw(key)), raw(key), (), "2026-11-30T03:00:00Z").signed(key)
    directory.observe_metadata(forged.to_metadata())
    assert not directory.is_revoked(fingerprint(raw(key))) and directory.key_for(m.origin, 99) == raw(key)


def test_only_the_events_own_origin_or_the_palace_ca_may_redact_it():
    ca_key, _ca_pem, palace_id, directory = setup()
    author, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    a_origin, o_origin = "ori_" + "a" * 26, "ori_" + "o" * 26

    def redaction(key, origin, **metadata):
        return dataclasses.replace(sealed(key, origin, body="redact"), type="event.redact",
                                   metadata_json=json.dumps({"redacts": "evt_target", **metadata}, sort_keys=True))

    assert directory.redaction_authorized(redaction(author, a_origin), a_origin)
    assert not directory.redaction_authorized(redaction(other, o_origin), a_origin)
    signed = sign_redaction(ca_key, palace_id, "evt_target")
    assert directory.redaction_authorized(redaction(other, o_origin, ca_signature=signed), a_origin)
    assert directory.redaction_authorized(redaction(other, o_origin, ca_signature=signed), "")
    wrong_target = sign_redaction(ca_key, palace_id, "evt_other")
    assert not directory.redaction_authorized(redaction(other, o_origin, ca_signature=wrong_target), a_origin)
    by_member = other.sign(b"palace/redact/v1\n" + palace_id.encode() + b"\nevt_target").hex()
    assert not directory.redaction_authorized(redaction(other, o_origin, ca_signature=by_member), a_origin)
    assert not directory.redaction_authorized(redaction(other, o_origin, ca_signature="zz"), a_origin)
