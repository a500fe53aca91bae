"""A link that fails unexpectedly is released and dialled again (issue 11, finding 6), for real.

Before the fix, an unexpected failure while a link ran (a full disk, a lone surrogate in a peer's
event, an out-of-range integer, malformed stored metadata) left the link marked live: the dialler
spun, and the other side's dials were refused as duplicates — two daemons cut off until restart.
Here the failure is a real full disk on the receiving side (its home is a small tmpfs): its link
ends without a traceback, both sides keep dialling with back-off, and once the disk has room again
they converge with no restart.
"""

from __future__ import annotations

import pytest

from tests.fleet import Fleet, append, ctl_json, listen_address, peer_id, wait_converged, wait_until
from tests.helpers import RawClient
from tests.tmpfs import needs_tmpfs, small_tmpfs

pytestmark = [needs_tmpfs, pytest.mark.transport_fixed]

BODY = "z" * 200_000


def test_a_link_failing_on_a_full_disk_is_released_and_heals_when_space_returns(fleet, daemon_factory):
    alpha = fleet.found("alpha")
    with small_tmpfs("24m") as disk:
        on_disk = Fleet(daemon_factory, disk.path)
        on_disk.founder = alpha
        beta = on_disk.enrol_offline("beta")
        (beta.home / "config.toml").write_text("[memory]\nembed = false\n")
        beta.start()
        try:
            ctl_json(beta.home, "peers", "add", listen_address(alpha.home))
            append(alpha.home, "before the disk filled")
            wait_converged(alpha, beta)
            filler = disk.fill()
            with RawClient(alpha.socket_path) as client:
                client.hello()
                # 12 MB: more than the room beta's WAL keeps written in advance (8 MiB) and the disk has.
                for i in range(60):
                    client.call("append", type="note", stream="project/fleet", room="general", from_agent="alpha",
                                body=f"{i} {BODY}")
            beta_id = peer_id(beta.home)

            def failed_on_disk() -> bool:
                seen = [p for p in ctl_json(beta.home, "peers")["peers"] if p["peer_id"] == peer_id(alpha.home)]
                return bool(seen) and "full" in (seen[0]["last_error"] or "")

            wait_until(failed_on_disk, "beta's link to fail on its full disk")
            assert beta.running and alpha.running
            filler.unlink()
            wait_converged(alpha, beta, timeout=90)  # no restart: the dialler came back
            assert beta_id in ctl_json(alpha.home, "status")["network"]["connected"]
            for daemon in (alpha, beta):
                assert "Traceback" not in daemon.log(), daemon.log()[-4000:]
            assert "link with" in beta.log() and "reconnects with back-off" in beta.log()
        finally:
            beta.stop()
