"""The local API's operations: one module per capability, registered in one explicit op table.

Owns: which function answers which operation (proto/PROTOCOL.md, "Operations"). Each module below
exports ``OPS``, a map from operation name to an async ``handler(ctx, args) -> result`` that
raises ``ApiError`` subclasses for the client; ``HANDLERS`` merges them once, at import, and
refuses a name defined twice or an operation of ``palace_proto.control.OPS`` left unanswered.
``op_table(ctx)`` binds the table to the daemon's one ``Context``; app.py builds both once and
hands them to ``api.serve_api``, which calls ``ops[name](args)``.

Two operations are the API layer's own, because they are not request → reply: ``hello`` (the
connection's handshake; ``hello_result`` says what it answers) and ``subscribe`` (a stream of
pushes: ``log.subscribe``, which api.py calls with its push callback).

    log          append, get_event, list, wait, ack, redact, digest (and subscribe)
    artifacts    artifact_put, artifact_get, patch_submit
    tasks        task_create, task_show, task_list, task_ready, task_claim, task_release, task_reassign
    leases       lease_acquire, lease_renew, lease_release, lease_list, lease_check
    agents       agent_register, agent_transfer, agent_retire, agents
    inbox        inbox, inbox_mark_read
    session      session_start
    memory       memory_add, search, drawer_get, kg_*, diary_*, tunnels, memory_rebuild
    fleet        init, invite, join, revoke, peers*, replicated, who, fleet, doctor
    maintenance  ping, status, backup, export_page, import_events
    questions    ask, answer, questions
    usage        usage
    notify       notify_test
    rooms        room_open, room_read, room_say, room_close, room_list, room_show

Must not import: ``palaced.api`` or ``palaced.app`` (they import this package).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, Final

from palace_proto import __version__
from palace_proto.control import PROTOCOL_VERSION
from palace_proto.features import OPS
from palace_proto.errors import ApiError

from . import (agents, artifacts, fleet, inbox, leases, log, maintenance, memory, notify, questions, rooms, session, tasks,
               usage)
from .context import Context, ReadOnly, Watcher
from .log import Push, subscribe

__all__ = [
    "API_LAYER_OPS", "HANDLERS", "BoundHandler", "Context", "Handler", "Push", "ReadOnly", "Watcher",
    "api_error_for", "hello_result", "merge_ops", "op_table", "subscribe",
]

#: an operation's handler: (the daemon's context, the request's args) -> the reply's result
Handler = Callable[[Context, Mapping[str, Any]], Awaitable[Any]]
#: a handler bound to the context, as api.py calls it
BoundHandler = Callable[[Mapping[str, Any]], Awaitable[Any]]

# Answered by the API layer itself (a handshake, and a stream rather than one reply).
API_LAYER_OPS: Final = frozenset({"hello", "subscribe"})
# The capabilities, in the order the table lists them.
MODULES: Final = (log, artifacts, tasks, leases, agents, inbox, session, memory, fleet, maintenance, questions, notify, usage,
                  rooms)


def merge_ops(modules: Iterable[ModuleType], expected: frozenset[str] = OPS - API_LAYER_OPS) -> dict[str, Handler]:
    """One table from the modules' ``OPS`` maps.

    Raises:
        ValueError: an operation is defined by two modules, or the table's names differ from
            ``expected`` (an operation of the protocol nobody answers, or one it does not name).
    """
    table: dict[str, Handler] = {}
    owner: dict[str, str] = {}
    for module in modules:
        for name, handler in module.OPS.items():
            if name in table:
                raise ValueError(f"operation {name!r} is defined twice: in {owner[name]} and in {module.__name__}")
            table[name], owner[name] = handler, module.__name__
    missing, unknown = expected - table.keys(), table.keys() - expected
    if missing or unknown:
        raise ValueError(f"the op table does not match palace_proto.control.OPS: unanswered {sorted(missing)}, "
                         f"not in the protocol {sorted(unknown)}")
    return table


#: every request/reply operation by name (checked once, when the daemon imports this package)
HANDLERS: Final[Mapping[str, Handler]] = merge_ops(MODULES)


def op_table(ctx: Context) -> dict[str, BoundHandler]:
    """The table bound to ``ctx``: what ``api.serve_api`` dispatches requests to."""
    return {name: functools.partial(handler, ctx) for name, handler in HANDLERS.items()}


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
