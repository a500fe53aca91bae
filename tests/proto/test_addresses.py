"""Address records (issue 45 §1): what a daemon offers, what of another's is dialled, when one is
too old, and the record on the wire (pure: no daemon)."""

from __future__ import annotations

import pytest

from palace_proto.addresses import ADDRESS_TTL_S, MAX_DIALED_PER_DAEMON, dialable, is_stale, observed, offered
from palace_proto.errors import RemoteProtocolError
from palace_proto.framing import FrameBuffer, encode_frame
from palace_proto.peer import (
    MAX_ADDRESSES,
    Addresses,
    Seen,
    addresses_signing_bytes,
    from_wire,
    report_signing_bytes,
    to_wire,
)


def test_a_daemon_offers_its_listen_addresses_and_a_wildcard_as_its_interfaces():
    assert offered(["127.0.0.1:7437"], ["10.0.0.5"]) == ("127.0.0.1:7437",)
    assert offered(["0.0.0.0:7437"], ["10.0.0.5", "192.168.1.9"]) == ("10.0.0.5:7437", "192.168.1.9:7437")
    assert offered(["[::]:7437"], ["10.0.0.5"]) == ("10.0.0.5:7437",)
    # The hosts peers saw it come from follow, on its first listen port; each address once.
    assert offered(["0.0.0.0:7437"], ["10.0.0.5"], ["203.0.113.7", "10.0.0.5", "198.51.100.1"]) == (
        "10.0.0.5:7437", "203.0.113.7:7437")
    assert offered([], ["10.0.0.5"], ["203.0.113.7"]) == ()


def test_an_offer_is_cut_to_what_a_record_may_carry():
    many = [f"10.0.{i // 250}.{i % 250 + 1}" for i in range(40)]
    assert len(offered(["0.0.0.0:7437"], many)) == MAX_ADDRESSES


def test_only_ip_addresses_other_than_ours_are_dialled_a_few_per_daemon():
    record = ["not an address", "printer.local:7437", "0.0.0.0:7437", "[::]:7437", "224.0.0.251:5353",
              "10.0.0.5:0", "127.0.0.1:7437", "10.0.0.5:7437", "10.0.0.5:7437", "[2001:db8::1]:7437",
              "192.168.1.9:7437", "172.16.0.1:7437", "172.16.0.2:7437"]
    assert dialable(record, own=["127.0.0.1:7437"]) == [
        "10.0.0.5:7437", "[2001:db8::1]:7437", "192.168.1.9:7437", "172.16.0.1:7437"]
    assert len(dialable([f"10.1.0.{i}:7437" for i in range(1, 9)], own=[])) == MAX_DIALED_PER_DAEMON
    # The same IPv6 address however it is written is one target.
    assert dialable(["[2001:0db8:0:0::1]:7437", "[2001:db8::1]:7437"], own=[]) == ["[2001:db8::1]:7437"]


def test_the_hosts_offered_as_seen_are_those_most_peers_agree_on():
    seen_by = {"p1": "203.0.113.7", "p2": "203.0.113.7", "p3": "198.51.100.1", "p4": "not an ip",
               "p5": "0.0.0.0", "p6": "224.0.0.251", "p7": "192.0.2.9"}
    assert observed(seen_by) == ["203.0.113.7", "192.0.2.9"]
    # One peer is one vote, however hostile: it cannot outvote two that agree.
    assert observed({"honest1": "203.0.113.7", "honest2": "203.0.113.7", "mallory": "192.0.2.66"})[0] == "203.0.113.7"
    assert observed({}) == []


def test_a_record_unannounced_for_an_hour_is_stale():
    now = 10_000_000_000_000
    assert not is_stale(now - int(ADDRESS_TTL_S * 1_000_000), now)
    assert is_stale(now - int(ADDRESS_TTL_S * 1_000_000) - 1, now)
    assert not is_stale(now + 5_000_000, now)  # a clock a little ahead: still fresh


def _through_the_wire(message):
    buffer = FrameBuffer(max_frame_bytes=1 << 20)
    buffer.feed(encode_frame(to_wire(message)))
    return from_wire(buffer.next_frame())


def test_an_address_record_and_a_sighting_travel_unchanged():
    record = Addresses("PEER", 17, ("10.0.0.5:7437", "[2001:db8::1]:7437"), b"s" * 64)
    assert _through_the_wire(record) == record
    assert _through_the_wire(Seen("203.0.113.7")) == Seen("203.0.113.7")
    with pytest.raises(RemoteProtocolError, match="host"):
        from_wire({"t": "seen", "host": "x" * 65})


@pytest.mark.parametrize("addresses", [
    [f"10.0.0.{i}:7437" for i in range(MAX_ADDRESSES + 1)], ["x" * 263], [""], [7437], "10.0.0.5:7437",
])
def test_a_record_out_of_bounds_is_refused_whole(addresses):
    wire = {"t": "addresses", "peer_id": "PEER", "serial": 1, "addresses": addresses, "signature": b"s" * 64}
    with pytest.raises(RemoteProtocolError, match="addresses"):
        from_wire(wire)


def test_the_signature_covers_every_field_and_no_other_kind_of_record():
    base = addresses_signing_bytes("PEER", 1, ("10.0.0.5:7437",))
    assert base.startswith(b"palace/addresses/v1\n")
    assert base != addresses_signing_bytes("PEER", 2, ("10.0.0.5:7437",))
    assert base != addresses_signing_bytes("OTHER", 1, ("10.0.0.5:7437",))
    assert base != addresses_signing_bytes("PEER", 1, ("10.0.0.6:7437",))
    assert base != report_signing_bytes("PEER", "", 1, b"")
