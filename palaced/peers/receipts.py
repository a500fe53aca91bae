"""Replication receipts: which peers confirmed holding which events (``append --replicated K``).

Owns: the highest sequence each peer confirmed per origin (kept after it disconnects: it still
holds them), fed by the registry's "progress" changes; ``holders`` of one event and
``wait_replicated``, which waits until enough peers hold it or the time is up.

Imports only the registry (its change type).
"""

from __future__ import annotations

import trio

from .registry import LinkChange, LinkRegistry

__all__ = ["Receipts"]


class Receipts:
    """What each peer confirmed holding, and waits on it."""

    def __init__(self, registry: LinkRegistry) -> None:
        #: what each peer confirmed holding (kept after it disconnects: it still holds it)
        self.confirmed: dict[str, dict[str, int]] = {}
        self._progress = trio.Event()
        registry.subscribe(self._on_change)

    def __repr__(self) -> str:
        return f"<Receipts peers={len(self.confirmed)}>"

    def _on_change(self, change: LinkChange) -> None:
        if change.kind != "progress" or change.link is None or change.peer_id is None:
            return
        held = self.confirmed.setdefault(change.peer_id, {})
        for origin, seq in change.link.machine.confirmed.items():
            if seq > held.get(origin, 0):
                held[origin] = seq
        self._progress.set()
        self._progress = trio.Event()

    def holders(self, origin: str, origin_seq: int) -> list[str]:
        return sorted(p for p, held in self.confirmed.items() if held.get(origin, 0) >= origin_seq)

    async def wait_replicated(self, origin: str, origin_seq: int, count: int, timeout_s: float) -> list[str]:
        with trio.move_on_after(timeout_s):
            while True:
                progress = self._progress
                if len(self.holders(origin, origin_seq)) >= count:
                    break
                await progress.wait()
        return self.holders(origin, origin_seq)
