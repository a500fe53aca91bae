"""A real handlers ``Context`` for the tests of palaced/handlers and palaced/features: a real SQLite store in a temporary
home, the real event bus and the real group-commit writer, and no socket.

Not a test module: ``tests/daemon/test_handlers_*.py`` import ``open_context``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.validation import Limits
from palaced.bus import EventBus
from palaced.config import Config
from palaced.features import features
from palaced.handlers import Context
from palaced.store import DB_FILENAME, Store
from palaced.store.aio import AsyncStore


@asynccontextmanager
async def open_context(home: Path, *, limits: Limits | None = None, **fields: Any) -> AsyncIterator[Context]:
    """A context over a new replica in ``home`` with its writer running; ``fields`` go to ``Context``
    (``membership``, ``start_network``...). The writer is cancelled and the store closed on exit."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    config = Config(home=home, mdns=False, memory_embed=False, limits=limits or Limits())
    key = Ed25519PrivateKey.generate()
    daemon_features = fields.pop("features", None) or features()
    store = Store(home / DB_FILENAME, key, config.limits, parts=daemon_features.store_parts)
    try:
        bus = EventBus(store.latest()[0])
        astore = AsyncStore(store, bus.publish, on_purged=bus.scrub)
        ctx = Context(config, astore, bus, key, daemon_features, **fields)
        ctx.features.start(ctx)
        async with trio.open_nursery() as nursery:
            await nursery.start(astore.serve_writer)
            yield ctx
            nursery.cancel_scope.cancel(reason="test done")
    finally:
        store.close()


def note(**fields: Any) -> dict[str, Any]:
    """The arguments of an ordinary ``append``, with ``fields`` changed."""
    return {"type": "note", "stream": "s", "room": "r", "from_agent": "alice", "body": "hello", **fields}
