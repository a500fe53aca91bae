"""The membership design holds up in a real TLS 1.3 handshake (stdlib ssl through trio): two
members of a palace authenticate each other mutually; a certificate of another palace is refused."""

from __future__ import annotations

import datetime
import ssl

import pytest
import trio
import trio.testing
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.pki import issue_certificate, new_palace, verify_member_certificate

NOW = datetime.datetime.now(datetime.UTC)


def member(tmp_path, name, ca_key, ca_pem):
    key = Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    cert = tmp_path / f"{name}.crt"
    cert.write_bytes(issue_certificate(ca_key, ca_pem, raw, role="member", name=name, now=NOW))
    key_path = tmp_path / f"{name}.key"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert, key_path


def context(server_side, cert, key, ca_pem):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server_side else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(cert, key)
    ctx.load_verify_locations(cadata=ca_pem.decode())
    ctx.verify_mode = ssl.CERT_REQUIRED
    if not server_side:
        ctx.check_hostname = False  # identity is the certificate's fingerprint, not a host name
    return ctx


async def handshake(server_ctx, client_ctx):
    left, right = trio.testing.memory_stream_pair()
    server = trio.SSLStream(left, server_ctx, server_side=True)
    client = trio.SSLStream(right, client_ctx, server_hostname=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.do_handshake)
        nursery.start_soon(client.do_handshake)
    await client.send_all(b"hello")  # TLS 1.3: a rejected client learns it on first use
    assert await server.receive_some(5) == b"hello"
    return server.getpeercert(binary_form=True), client.getpeercert(binary_form=True)


async def test_two_members_authenticate_each_other(tmp_path):
    ca_key, ca_pem, _ = new_palace("lab", NOW)
    a = member(tmp_path, "a", ca_key, ca_pem)
    b = member(tmp_path, "b", ca_key, ca_pem)
    seen_by_server, seen_by_client = await handshake(context(True, *a, ca_pem), context(False, *b, ca_pem))
    from cryptography import x509
    pem = lambda der: x509.load_der_x509_certificate(der).public_bytes(serialization.Encoding.PEM)  # noqa: E731
    assert verify_member_certificate(ca_pem, pem(seen_by_server), NOW).name == "b"
    assert verify_member_certificate(ca_pem, pem(seen_by_client), NOW).name == "a"


async def test_a_daemon_of_another_palace_cannot_connect(tmp_path):
    ca_key, ca_pem, _ = new_palace("lab", NOW)
    other_key, other_pem, _ = new_palace("elsewhere", NOW)
    a = member(tmp_path, "a", ca_key, ca_pem)
    stranger = member(tmp_path, "s", other_key, other_pem)
    with pytest.RaisesGroup(pytest.RaisesExc(trio.BrokenResourceError), allow_unwrapped=True, flatten_subgroups=True):
        await handshake(context(True, *a, ca_pem), context(False, *stranger, other_pem))
