"""The ``origins`` table: this replica's own origin and every chain's head.

Owns: minting the local origin (with a new database, a changed identity key, or to retire a
legacy ``ori_`` origin), the nonce each key-derived origin was minted with (its binding proof),
the chain heads (``max_seq``, ``head_hash``: the version vector, kept in memory as committed:
``Vector``) and each origin's key. Minting runs when the store opens; every other function takes
whichever connection the caller is on (the writer's inside a batch, a reader's otherwise), and
``head_in`` is ``head`` for a write job outside the store (it takes the job's ``WriteContext``).

Our current origin's row is not written by our own appends (schema 0015: a page less in every
commit): its head is the last event of its chain, which ``catch_up_own_head`` writes into the row
when the store opens, and which the store keeps in memory meanwhile (``Chain``, ``Vector``). Every
other origin's row (a peer's, our retired ones) moves with its events, in their transaction.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import apsw

from palace_proto.envelope import GENESIS_HASH
from palace_proto.ids import ORIGIN_NONCE_BYTES, is_key_derived_origin, origin_id_for_key
from palace_proto.sync import OriginHead

from ..clock import utc_now
from .fetch import all_rows, one_row

if TYPE_CHECKING:
    from .state import WriteContext

__all__ = ["catch_up_own_head", "chain_head", "chain_tip", "ensure_origin", "head", "head_in", "nonce", "origin_key",
           "origins_of_key", "own_origins", "read_heads", "save_bindings"]

_LOGGER: Final = logging.getLogger("palaced.store")
#: meta key prefix of the nonce each key-derived origin of this replica was minted with
_NONCE_KEY: Final = "origin_nonce/"


def catch_up_own_head(conn: apsw.Connection) -> None:
    """The store opening: our current origin's row takes the head of its chain as stored (its last
    event), which our appends do not write there (schema 0015). Before anything reads the row:
    the chain's next number, the version vector, a legacy origin retired by ``ensure_origin``."""
    row = conn.execute("SELECT value FROM meta WHERE key='origin'").fetchone()
    if row is None:
        return
    (origin,) = row
    last = chain_tip(conn, origin)
    if last is None:
        return
    with conn:
        conn.execute("UPDATE origins SET max_seq=?, head_hash=? WHERE origin=? AND max_seq < ?",
                     (last.max_seq, last.head_hash, origin, last.max_seq))


def chain_tip(conn: apsw.Connection, origin: str) -> OriginHead | None:
    """The last event of ``origin``'s chain as stored (one seek in the (origin, origin_seq) index);
    None before its first."""
    row = conn.execute("SELECT origin_seq, event_hash FROM events WHERE origin=? ORDER BY origin_seq DESC LIMIT 1",
                       (origin,)).fetchone()
    return OriginHead(row[0], bytes(row[1])) if row else None


def ensure_origin(conn: apsw.Connection, public_key: bytes) -> tuple[str, bool]:
    """The local origin id, and whether it was minted now: minted with the database, and again if
    the identity key changed or the origin is a legacy one.

    A new database always gets a fresh origin id (never reused: p2p-lessons, SSB forks). If the
    identity key no longer matches the origin's recorded key, continuing that chain would make
    it unverifiable, so a new origin is minted and the old one stays as signed history. A
    legacy (random, ``ori_``) origin is retired the same way on the first start of a release
    that speaks protocol 2: new events go to a key-derived origin (``ori2_``) that no other
    member can claim for its own key (palace_proto.bindings).
    """
    row = conn.execute("SELECT value FROM meta WHERE key='origin'").fetchone()
    if row is not None:
        (origin,) = row
        key_row = conn.execute("SELECT public_key FROM origins WHERE origin=?", (origin,)).fetchone()
        if key_row is not None and bytes(key_row[0]) == public_key:
            if is_key_derived_origin(origin) and nonce(conn, origin) is not None:
                return origin, False
            _LOGGER.info("retiring legacy origin %s: its events stay as signed history; new events get a "
                         "key-derived origin", origin)
    minted_nonce = os.urandom(ORIGIN_NONCE_BYTES)
    origin = origin_id_for_key(public_key, minted_nonce)
    with conn:
        conn.execute("INSERT INTO origins (origin, public_key, max_seq, head_hash) VALUES (?, ?, 0, ?)",
                     (origin, public_key, GENESIS_HASH))
        conn.execute("INSERT INTO meta VALUES ('origin', ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                     (origin,))
        conn.execute("INSERT INTO meta VALUES (?, ?)", (_NONCE_KEY + origin, minted_nonce.hex()))
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('created_at', ?)", (utc_now(),))
    return origin, True


def nonce(conn: apsw.Connection, origin: str) -> bytes | None:
    """The nonce our key-derived ``origin`` was minted with (None: not one of ours, or legacy)."""
    row = conn.execute("SELECT value FROM meta WHERE key=?", (_NONCE_KEY + origin,)).fetchone()
    return bytes.fromhex(row[0]) if row else None


def chain_head(conn: apsw.Connection, origin: str) -> tuple[int, bytes]:
    """(max_seq, head_hash) of an origin we hold a row for (0 and the genesis hash before its first event)."""
    max_seq, head_hash = one_row(conn.execute("SELECT max_seq, head_hash FROM origins WHERE origin=?", (origin,)))
    return max_seq, bytes(head_hash)


def head(conn: apsw.Connection, origin: str) -> OriginHead | None:
    """The replicated head of ``origin`` (None: none of its chain held, or only as history)."""
    row = conn.execute("SELECT max_seq, head_hash FROM origins WHERE origin=?", (origin,)).fetchone()
    return OriginHead(row[0], bytes(row[1])) if row and row[0] > 0 else None


def head_in(ctx: WriteContext, origin: str) -> OriginHead | None:
    """``head`` as a write job's transaction sees it."""
    return head(ctx.conn, origin)


def origin_key(conn: apsw.Connection, origin: str) -> bytes | None:
    row = conn.execute("SELECT public_key FROM origins WHERE origin=?", (origin,)).fetchone()
    return bytes(row[0]) if row else None


def own_origins(conn: apsw.Connection, public_key: bytes) -> list[tuple[str, bytes | None]]:
    """Every origin written with ``public_key`` (this replica's), with the nonce it was minted with
    (its binding proof; None for a legacy origin, whose proof is a signature made on demand)."""
    rows = all_rows(conn.execute("SELECT origin FROM origins WHERE public_key=? ORDER BY origin", (public_key,)))
    return [(origin, nonce(conn, origin)) for (origin,) in rows]


def origins_of_key(conn: apsw.Connection, public_key: bytes) -> dict[str, int]:
    """{origin: max_seq held} for every origin written with ``public_key``."""
    return dict(conn.execute("SELECT origin, max_seq FROM origins WHERE public_key=?", (public_key,)))


def read_heads(conn: apsw.Connection) -> dict[str, OriginHead]:
    """The version vector with head hashes as the database holds it (once, when the store opens)."""
    return {o: OriginHead(m, bytes(h)) for o, m, h in
            conn.execute("SELECT origin, max_seq, head_hash FROM origins WHERE max_seq > 0")}


def save_bindings(ctx: WriteContext, bindings: Sequence[tuple[str, bytes, bytes | None]]) -> None:
    """Keep (origin, certificate PEM, proof) bindings; a proof fills in one stored without."""
    ctx.conn.executemany(
        "INSERT INTO bindings (origin, certificate, proof) VALUES (?, ?, ?) ON CONFLICT(origin) DO UPDATE "
        "SET proof=excluded.proof WHERE bindings.proof IS NULL AND excluded.proof IS NOT NULL", bindings)
