"""Palace CA, member certificates and invites (pure: time is passed in)."""

from __future__ import annotations

import dataclasses
import datetime
import ssl

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.ids import fingerprint, fingerprint_is_valid
from palace_proto.pki import (
    CertificateError,
    Invite,
    InviteError,
    Revocation,
    RevocationError,
    ca_fingerprint,
    enrolment_proof,
    issue_certificate,
    new_palace,
    palace_id_for,
    verify_enrolment_proof,
    verify_member_certificate,
)

NOW = datetime.datetime(2026, 11, 30, 3, 0, tzinfo=datetime.UTC)


def raw_of(cert_path):
    """The raw public key a PEM certificate file certifies."""
    from cryptography import x509

    return x509.load_pem_x509_certificate(cert_path.read_bytes()).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def raw(key):
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@pytest.fixture(scope="module")
def palace():
    return new_palace("home lab", NOW)


def test_member_certificate_round_trip(palace):
    ca_key, ca_pem, palace_id = palace
    assert palace_id == palace_id_for(raw(ca_key)) and palace_id.startswith("pal_")
    member = Ed25519PrivateKey.generate()
    pem = issue_certificate(ca_key, ca_pem, raw(member), role="observer", name="mac", now=NOW)
    cert = verify_member_certificate(ca_pem, pem, NOW + datetime.timedelta(days=30))
    assert cert.public_key == raw(member) and cert.role == "observer" and cert.name == "mac"
    assert cert.peer_id == fingerprint(raw(member)) and fingerprint_is_valid(cert.peer_id)
    assert cert.palace_id == palace_id


def test_certificates_of_another_palace_or_expired_or_ca_are_refused(palace):
    ca_key, ca_pem, _ = palace
    other_key, other_pem, _ = new_palace("other", NOW)
    member = raw(Ed25519PrivateKey.generate())
    foreign = issue_certificate(other_key, other_pem, member, role="member", name="x", now=NOW)
    with pytest.raises(CertificateError, match="not issued by this palace"):
        verify_member_certificate(ca_pem, foreign, NOW)
    short = issue_certificate(ca_key, ca_pem, member, role="member", name="x", now=NOW, days=1)
    with pytest.raises(CertificateError, match="not valid now"):
        verify_member_certificate(ca_pem, short, NOW + datetime.timedelta(days=2))
    with pytest.raises(CertificateError, match="CA certificate"):
        verify_member_certificate(ca_pem, ca_pem, NOW)
    with pytest.raises(CertificateError):
        verify_member_certificate(ca_pem, b"garbage", NOW)
    with pytest.raises(CertificateError, match="role"):
        issue_certificate(ca_key, ca_pem, member, role="admin", name="x", now=NOW)


def test_member_certificates_work_for_mutual_tls_with_unique_subjects(palace, tmp_path):
    """The stdlib ssl module accepts our Ed25519 CA and leaf certificates (what the transport uses)."""
    ca_key, ca_pem, _ = palace
    paths = []
    for i in range(2):
        key = Ed25519PrivateKey.generate()
        cert = issue_certificate(ca_key, ca_pem, raw(key), role="member", name=f"n{i}", now=datetime.datetime.now(datetime.UTC))
        (tmp_path / f"{i}.crt").write_bytes(cert)
        (tmp_path / f"{i}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                              serialization.NoEncryption()))
        paths.append((tmp_path / f"{i}.crt", tmp_path / f"{i}.key"))
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    for ctx, (cert, key) in ((server_ctx, paths[0]), (client_ctx, paths[1])):
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(cert, key)
        ctx.load_verify_locations(cadata=ca_pem.decode())
        ctx.verify_mode = ssl.CERT_REQUIRED
    # A real handshake, in memory: each side must accept the other's leaf under the palace CA.
    pipes = [(ssl.MemoryBIO(), ssl.MemoryBIO()) for _ in range(2)]
    server = server_ctx.wrap_bio(pipes[0][0], pipes[0][1], server_side=True)
    client = client_ctx.wrap_bio(pipes[1][0], pipes[1][1], server_hostname=None)
    done = {"server": False, "client": False}
    for _ in range(20):
        for name, side in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        pipes[0][0].write(pipes[1][1].read())  # client -> server
        pipes[1][0].write(pipes[0][1].read())  # server -> client
        if all(done.values()):
            break
    assert all(done.values()), "the TLS 1.3 handshake with Ed25519 member certificates did not complete"
    subjects = [dict(part[0] for part in side.getpeercert()["subject"])["commonName"] for side in (server, client)]
    assert subjects[0] != subjects[1]  # unique subjects: OpenSSL tells the two certificates apart
    assert subjects == [fingerprint(raw_key) for raw_key in (raw_of(paths[1][0]), raw_of(paths[0][0]))]


def test_invite_codes_round_trip_and_expire():
    invite = Invite("pal_abcdefghijklmnopqrstuvwxyz", "10.0.0.5:7600", "FP", b"s" * 16, "member", 1_000)
    code = invite.encode()
    assert code.startswith("palace1-") and " " not in code
    assert Invite.decode(code) == invite
    invite.check_not_expired(999)
    with pytest.raises(InviteError, match="expired"):
        invite.check_not_expired(1_001)
    assert invite.invite_id != code and len(invite.invite_id) == 32


@pytest.mark.parametrize("bad", ["", "hello", "palace1-", "palace1-!!!!", "palace1-" + "QUFB"])
def test_damaged_invites_are_refused_with_a_hint(bad):
    with pytest.raises(InviteError):
        Invite.decode(bad)


def test_enrolment_proof_is_bound_to_key_name_and_palace():
    secret, key = b"k" * 16, raw(Ed25519PrivateKey.generate())
    proof = enrolment_proof(secret, key, "mac", "pal_x")
    verify_enrolment_proof(secret, key, "mac", "pal_x", proof)
    for args in [(b"j" * 16, key, "mac", "pal_x"), (secret, raw(Ed25519PrivateKey.generate()), "mac", "pal_x"),
                 (secret, key, "pc", "pal_x"), (secret, key, "mac", "pal_y")]:
        with pytest.raises(InviteError):
            verify_enrolment_proof(*args, proof)
    assert dataclasses.is_dataclass(Invite)


def test_a_changed_character_in_an_invite_is_caught_by_its_check_value():
    code = Invite("pal_abcdefghijklmnopqrstuvwxyz", "10.0.0.5:7600", "FP", b"s" * 16, "member", 1_000).encode()
    assert Invite.decode(code)
    with pytest.raises(InviteError, match="damaged"):
        Invite.decode(code[:-3])
    with pytest.raises(InviteError, match="damaged"):
        Invite.decode(code[:20] + ("A" if code[20] != "A" else "B") + code[21:])


def test_revocations_are_valid_only_with_the_palace_ca_signature(palace):
    ca_key, ca_pem, palace_id = palace
    member = raw(Ed25519PrivateKey.generate())
    draft = Revocation(palace_id, fingerprint(member), member, (("ori_a", 7),), "2026-11-30T03:00:00Z")
    signed = draft.signed(ca_key)
    parsed = Revocation.from_metadata(signed.to_metadata(), ca_pem)
    assert parsed == signed and parsed.cutoff_for("ori_a") == 7 and parsed.cutoff_for("ori_other") == 0
    other_key, other_pem, _ = new_palace("elsewhere", NOW)
    forged = draft.signed(other_key)
    with pytest.raises(RevocationError, match="not signed"):
        Revocation.from_metadata(forged.to_metadata(), ca_pem)
    stretched = {**signed.to_metadata(), "cutoffs": {"ori_a": 9}}
    with pytest.raises(RevocationError, match="not signed"):
        Revocation.from_metadata(stretched, ca_pem)
    with pytest.raises(RevocationError, match="another palace"):
        Revocation.from_metadata(signed.to_metadata(), other_pem)
    with pytest.raises(RevocationError, match="malformed"):
        Revocation.from_metadata({"peer_id": "x"}, ca_pem)
    assert len(ca_fingerprint(ca_pem)) == 64 and ca_fingerprint(ca_pem) != ca_fingerprint(other_pem)
