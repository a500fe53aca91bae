"""The WAL stays bounded: the daemon copies it back while writes go on and keeps the file at its
working size (``KEEP_BYTES``, written so that commits overwrite it), with watchers connected the
whole time; a reader that keeps a transaction open makes it grow and blocks its truncation, which
``status`` reports, and once it lets go the WAL shrinks back to its working size."""

from __future__ import annotations

import apsw
import pytest

from palaced.store.wal import KEEP_BYTES
from palaced.store.wal_keeper import IDLE_WAL_BYTES
from tests.fleet import ctl_json, seed, wait_until
from tests.helpers import RawClient

# What the WAL may hold at rest: its working size (and the frames past it a copy had not reached).
BOUNDED = IDLE_WAL_BYTES


def _storage(home):
    status = ctl_json(home, "status")
    return status["storage"], status["writer"]


@pytest.mark.slow
def test_the_wal_is_truncated_after_a_burst_while_watchers_stay_connected(daemon):
    watchers = []
    try:
        for k in range(3):
            client = RawClient(daemon.socket_path)
            client.call("hello", version=1)
            client.send_message({"id": 1, "op": "subscribe", "args": {"to_agents": [f"w{k}"], "start": "tip",
                                                                       "agent": f"w{k}"}})
            watchers.append(client)
        seed(daemon, 6_000, padding=4_000)  # ~24 MiB through the WAL
        storage, writer = _storage(daemon.home)
        assert storage["database_bytes"] > 20 << 20
        # Back at its working size: written in advance (a truncation refills it, so a status taken
        # in between may see less for a moment), and no bigger.
        storage, writer = wait_until(
            lambda: (s := _storage(daemon.home)) and KEEP_BYTES <= s[0]["wal_bytes"] <= BOUNDED and s,
            "the WAL back at its working size", timeout=60)
        assert writer["wal_blocked_s"] is None, (storage, writer)
        assert writer["wal_copies"] >= 1, writer  # ~24 MiB went through: copied back during the burst
        assert ctl_json(daemon.home, "who")["count"] == 3  # the watchers were never disturbed
    finally:
        for client in watchers:
            client.close()


def test_a_reader_holding_a_transaction_blocks_truncation_and_status_says_so(daemon):
    seed(daemon, 500, padding=4_000)
    pin = apsw.Connection(str(daemon.home / "palace.sqlite3"))
    try:
        pin.execute("BEGIN")
        assert pin.execute("SELECT count(*) FROM events").fetchone()[0] >= 500  # holds a read snapshot
        seed(daemon, 1_500, padding=4_000)  # grows the WAL past its working size: it cannot start over
        writer = wait_until(lambda: (w := _storage(daemon.home)[1])["wal_blocked_s"] is not None and w,
                            "the blocked checkpoint to be reported", timeout=60)
        assert _storage(daemon.home)[0]["wal_bytes"] > BOUNDED
        assert writer["wal_blocked_s"] >= 0
    finally:
        pin.execute("ROLLBACK")
        pin.close()
    # The file shrinks on the checkpoint's thread a moment before the writer clears its report.
    wait_until(lambda: (s := _storage(daemon.home))[0]["wal_bytes"] <= BOUNDED and s[1]["wal_blocked_s"] is None,
               "the WAL to shrink and the blocked checkpoint to be cleared once released", timeout=60)
