"""The peer network's rows (``static_peers`` and ``peer_addresses`` of schema 0003): the writes.

Owns: adding and removing a static peer (``palacectl peers add`` / ``remove``) and remembering
the address a peer was last reached at, keeping only its most recent few (so a restart redials
them before mDNS says anything). Each is a step of a write job and takes its ``WriteContext``
(writer thread, inside a batch); the time comes from the caller, as the peer network writes it.
The reads (``static_peers``, ``peer_addresses``) are in queries.py with every other read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .state import WriteContext

__all__ = ["add_static_peer", "remember_address", "remove_static_peer"]


def add_static_peer(ctx: WriteContext, address: str, added_at: str) -> None:
    """Dial ``address`` from now on (nothing changes if it is a static peer already)."""
    ctx.conn.execute("INSERT OR IGNORE INTO static_peers VALUES (?, ?)", (address, added_at))


def remove_static_peer(ctx: WriteContext, address: str) -> bool:
    """Stop dialling ``address`` as a static peer; False if it was not one."""
    return bool(ctx.conn.execute("DELETE FROM static_peers WHERE address=? RETURNING 1", (address,)).fetchall())


def remember_address(ctx: WriteContext, peer_id: str, address: str, source: str, last_ok: str, keep: int) -> None:
    """Peer ``peer_id`` was reached at ``address`` (found by ``source``) at ``last_ok``; of its
    addresses only the ``keep`` most recently working ones stay."""
    ctx.conn.execute(
        "INSERT INTO peer_addresses VALUES (?, ?, ?, ?) ON CONFLICT(peer_id, address) "
        "DO UPDATE SET last_ok=excluded.last_ok, source=excluded.source", (peer_id, address, source, last_ok))
    ctx.conn.execute(
        "DELETE FROM peer_addresses WHERE peer_id=? AND address NOT IN (SELECT address FROM peer_addresses "
        "WHERE peer_id=? ORDER BY last_ok DESC LIMIT ?)", (peer_id, peer_id, keep))
