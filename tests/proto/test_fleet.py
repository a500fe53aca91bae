"""How daemons are named apart (palace_proto.fleet, issue 47 §1.5): cloned machines share a hostname."""

from __future__ import annotations

from palace_proto.fleet import daemon_labels, derived_daemon_name


def test_a_name_two_daemons_share_is_shown_with_each_ones_short_id():
    names = {"AAAAAAA-1": "vm", "BBBBBBB-2": "VM", "CCCCCCC-3": "box", "DDDDDDD-4": ""}
    assert daemon_labels(names) == {"AAAAAAA-1": "vm (AAAAAAA)", "BBBBBBB-2": "VM (BBBBBBB)", "CCCCCCC-3": "box",
                                    "DDDDDDD-4": "DDDDDDD"}
    assert daemon_labels({}) == {}


def test_a_derived_name_is_the_name_and_a_piece_of_the_daemons_own_peer_id():
    assert derived_daemon_name("vm", "MFZWI3D-BONSGYC") == "vm-mfzw"
    assert derived_daemon_name("vm", "MFZWI3D-BONSGYC") == derived_daemon_name("vm", "MFZWI3D-XXXXXXX")
