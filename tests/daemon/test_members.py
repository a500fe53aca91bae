"""MemberDirectory: which events a replica accepts — members only, observers never, revoked
members up to their cutoff only — and revocations that take effect the moment they are seen."""

from __future__ import annotations

import dataclasses
import datetime
import json

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.ids import fingerprint
from palace_proto.pki import REVOKE_EVENT_TYPE, Revocation, issue_certificate, new_palace
from palaced.members import BindingError, MemberDirectory
from tests.peer_stub import sealed

NOW = datetime.datetime.now(datetime.UTC)


def raw(key):
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def setup():
    ca_key, ca_pem, palace_id = new_palace("lab", NOW)
    directory = MemberDirectory(ca_pem, lambda: NOW)
    return ca_key, ca_pem, palace_id, directory


def test_members_are_accepted_observers_and_strangers_are_not():
    ca_key, ca_pem, _, directory = setup()
    member, observer = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    directory.bind("ori_m", issue_certificate(ca_key, ca_pem, raw(member), role="member", name="m", now=NOW))
    directory.bind("ori_o", issue_certificate(ca_key, ca_pem, raw(observer), role="observer", name="o", now=NOW))
    assert directory.key_for("ori_m", 1) == raw(member)
    assert directory.key_for("ori_o", 1) is None
    assert directory.key_for("ori_unknown", 1) is None
    assert sorted(c.name for c in directory.certificates()) == ["m", "o"]
    assert [o for o, _ in directory.take_unsaved()] == ["ori_m", "ori_o"] and directory.take_unsaved() == []


def test_an_origin_never_changes_keys_and_foreign_certificates_are_refused():
    ca_key, ca_pem, _, directory = setup()
    one, two = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    directory.bind("ori_x", issue_certificate(ca_key, ca_pem, raw(one), role="member", name="a", now=NOW))
    try:
        directory.bind("ori_x", issue_certificate(ca_key, ca_pem, raw(two), role="member", name="b", now=NOW))
        raise AssertionError("rebinding must fail")
    except BindingError as exc:
        assert "another key" in str(exc)
    other_key, other_pem, _ = new_palace("elsewhere", NOW)
    try:
        directory.bind("ori_y", issue_certificate(other_key, other_pem, raw(two), role="member", name="b", now=NOW))
        raise AssertionError("a foreign certificate must fail")
    except BindingError:
        pass


def test_a_revocation_keeps_history_up_to_its_cutoff_and_refuses_the_rest():
    ca_key, ca_pem, palace_id, directory = setup()
    member = Ed25519PrivateKey.generate()
    directory.bind("ori_m", issue_certificate(ca_key, ca_pem, raw(member), role="member", name="m", now=NOW))
    dropped = []
    directory.on_revoke = dropped.append
    revocation = Revocation(palace_id, fingerprint(raw(member)), raw(member), (("ori_m", 5),),
                            "2026-11-30T03:00:00Z").signed(ca_key)
    # Observed as an event (as replication applies it): effective at once.
    # (observe trusts the CA signature inside, not the event's: the store verified the event.)
    event = dataclasses.replace(sealed(Ed25519PrivateKey.generate(), "ori_ca", body="revoke"), type=REVOKE_EVENT_TYPE,
                                metadata_json=json.dumps(revocation.to_metadata()))
    directory.observe(event)
    assert directory.is_revoked(fingerprint(raw(member))) and [r.peer_id for r in dropped] == [revocation.peer_id]
    assert directory.key_for("ori_m", 5) == raw(member)
    assert directory.key_for("ori_m", 6) is None
    assert directory.revoke(revocation) is False  # idempotent


def test_a_revocation_not_signed_by_the_ca_is_ignored():
    ca_key, ca_pem, palace_id, directory = setup()
    member = Ed25519PrivateKey.generate()
    directory.bind("ori_m", issue_certificate(ca_key, ca_pem, raw(member), role="member", name="m", now=NOW))
    forged = Revocation(palace_id, fingerprint(raw(member)), raw(member), (), "2026-11-30T03:00:00Z").signed(member)
    directory.observe_metadata(forged.to_metadata())
    assert not directory.is_revoked(fingerprint(raw(member))) and directory.key_for("ori_m", 99) == raw(member)
