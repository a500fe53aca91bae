"""The invites this daemon issued (the ``invites`` table of schema 0003): the two writes.

Owns: recording an invite as it is issued (``issue``: ``palacectl invite`` on the CA's daemon) and
spending it (``spend``: once, in the durable write that precedes the joiner's certificate, so an
invite admits one daemon even across a crash). Both are steps of a write job and take its
``WriteContext`` (writer thread, inside a batch). The reads (``invite``, ``pending_invites``) are
in queries.py with every other read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .state import WriteContext

__all__ = ["issue", "spend"]


def issue(ctx: WriteContext, invite_id: str, secret: bytes, role: str, expires_at: int, created_at: str) -> None:
    """Record an invite issued now (``expires_at`` in Unix seconds, ``created_at`` a stamp)."""
    ctx.conn.execute("INSERT INTO invites (invite_id, secret, role, expires_at, created_at) VALUES (?,?,?,?,?)",
                     (invite_id, secret, role, expires_at, created_at))


def spend(ctx: WriteContext, invite_id: str, used_by: str, used_at: str) -> bool:
    """Mark the invite used by the peer ``used_by``; False if it was used already (or is unknown)."""
    return bool(ctx.conn.execute(
        "UPDATE invites SET used_by=?, used_at=? WHERE invite_id=? AND used_by IS NULL RETURNING 1",
        (used_by, used_at, invite_id)).fetchall())
