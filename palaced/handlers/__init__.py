"""The local API's core operations, and the op table the daemon answers requests from.

Owns: the core's operations — each module below exports ``OPS``, a map from operation name to an
async ``handler(ctx, args) -> result`` that raises ``ApiError`` subclasses for the client — merged
once into ``CORE_OPS`` (a name defined twice is refused at import), and ``op_table(ctx)``: the
core's and every feature's operations (``ctx.features``: palaced/feature.py, checked there against
``palace_proto.features.OPS``), bound to the daemon's one ``Context``; app.py builds it once and
hands it to ``api.serve_api``, which calls ``ops[name](args)``. The features' operations are in
``palaced/features/``: the core never imports them.

Two operations are the API layer's own, because they are not request → reply: ``hello`` (the
connection's handshake; ``hello_result`` says what it answers) and ``subscribe`` (a stream of
pushes: ``log.subscribe``, which api.py calls with its push callback).

    log          append, append_many, get_event, list, wait, ack, redact, digest, watch_update (and subscribe)
    maintenance  ping, status, backup, export_page, import_events
    inbox        inbox, inbox_mark_read
    session      session_start
    notify       notify_test

Must not import: ``palaced.api``, ``palaced.app``, ``palaced.features`` (they import this package).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, Final

from palace_proto import __version__
from palace_proto.control import PROTOCOL_VERSION
from palace_proto.errors import ApiError

from ..feature import Handler
from . import inbox, log, maintenance, notify, session
from .context import Context, ReadOnly, Watcher
from .log import Push, subscribe

__all__ = [
    "API_LAYER_OPS", "CORE_OPS", "BoundHandler", "Context", "Handler", "Push", "ReadOnly", "Watcher",
    "api_error_for", "hello_result", "merge_ops", "op_table", "subscribe",
]

#: a handler bound to the context, as api.py calls it
BoundHandler = Callable[[Mapping[str, Any]], Awaitable[Any]]

# Answered by the API layer itself (a handshake, and a stream rather than one reply).
API_LAYER_OPS: Final = frozenset({"hello", "subscribe"})
# The core's modules, in the order the table lists them.
MODULES: Final = (log, inbox, session, maintenance, notify)


def merge_ops(modules: Iterable[ModuleType]) -> dict[str, Handler]:
    """One table from the modules' ``OPS`` maps.

    Raises:
        ValueError: an operation is defined by two modules.
    """
    table: dict[str, Handler] = {}
    owner: dict[str, str] = {}
    for module in modules:
        for name, handler in module.OPS.items():
            if name in table:
                raise ValueError(f"operation {name!r} is defined twice: in {owner[name]} and in {module.__name__}")
            table[name], owner[name] = handler, module.__name__
    return table


#: the core's request/reply operations by name (the features add theirs: ``ctx.features.ops``)
CORE_OPS: Final[Mapping[str, Handler]] = merge_ops(MODULES)


def op_table(ctx: Context) -> dict[str, BoundHandler]:
    """Every operation the daemon answers (the core's and its features'), bound to ``ctx``: what
    ``api.serve_api`` dispatches requests to."""
    return {name: functools.partial(handler, ctx) for name, handler in ctx.features.ops.items()}


def hello_result(ctx: Context) -> dict[str, Any]:
    """What a successful ``hello`` answers: versions, this replica's origin and its size limits."""
    return {
        "version": PROTOCOL_VERSION, "daemon": __version__, "origin": ctx.store.origin_id,
        "limits": {"max_body_bytes": ctx.limits.max_body_bytes,
                   "max_metadata_bytes": ctx.limits.max_metadata_bytes,
                   "max_artifact_bytes": ctx.limits.max_artifact_bytes,
                   "max_frame_bytes": ctx.config.max_frame_bytes},
    }


def api_error_for(exc: BaseException) -> ApiError:
    """Map an unexpected handler exception to an ``internal`` error (the traceback goes to the log)."""
    return exc if isinstance(exc, ApiError) else ApiError(f"internal error: {type(exc).__name__}: {exc}", code="internal")
