"""Our origin's chain: the one log this replica writes, and where its head stands.

Owns: our origin id and its key pair, and the head (``seq``, ``head_hash``) as the running batch
sees it, its appends included (the committed vector takes it once per batch, batch.py; the origins
row only when the store opens, origins.catch_up_own_head); sealing the next event (``seal``), and
the position a job or batch goes back to when it fails (``mark`` / ``rewind``). Writer thread
only. Must not import trio.
"""

from __future__ import annotations

from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from palace_proto.envelope import SignedEvent, seal_event, seal_request
from palace_proto.validation import AppendRequest

from ..clock import utc_now

__all__ = ["Chain"]


class Chain:
    """Our origin ``origin``, signed with ``key``, whose head is ``seq`` / ``head_hash``.

    ``seal`` signs the next event without moving the head: the writer moves it (``seq``,
    ``head_hash``) once the event is stored, so an event that failed to store leaves no gap.
    """

    __slots__ = ("head_hash", "key", "origin", "public_key", "seq")

    def __init__(self, origin: str, key: Ed25519PrivateKey, seq: int, head_hash: bytes) -> None:
        self.origin = origin
        self.key = key
        #: ``key``'s public half (raw bytes): what our origin's events verify with
        self.public_key = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.seq = seq
        self.head_hash = head_hash

    def __repr__(self) -> str:
        return f"<Chain {self.origin} seq={self.seq}>"

    def seal(self, **fields: Any) -> SignedEvent:
        """``fields`` signed as the event after the head, stamped with the daemon's clock."""
        return seal_event(self.key, origin=self.origin, origin_seq=self.seq + 1, prev_hash=self.head_hash,
                          created_at=utc_now(), **fields)

    def seal_request(self, req: AppendRequest) -> SignedEvent:
        """A validated append signed as the event after the head (the append path: the request
        is read as it is)."""
        return seal_request(self.key, req, origin=self.origin, origin_seq=self.seq + 1, prev_hash=self.head_hash,
                            created_at=utc_now())

    def mark(self) -> tuple[int, bytes]:
        """The head as it stands (to ``rewind`` to)."""
        return self.seq, self.head_hash

    def rewind(self, mark: tuple[int, bytes]) -> None:
        """Put the head back where ``mark`` was: what was sealed since was not committed."""
        self.seq, self.head_hash = mark
