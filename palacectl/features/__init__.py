"""palacectl's features: one package each, each declaring itself (``FEATURE``), put together here.

Owns: ``FEATURES`` — every feature, in the order they answer the core's questions (the order of
their tools in an MCP group, their resources, their light verbs, their routes) — the orders of
what people and models see (``HELP_ORDER``: ``palacectl --help``; ``NAV_ORDER``: the dashboard's
pages; ``TOOL_GROUPS``: the MCP groups), and ``features()``: them together, checked
(``palacectl.feature.Features``), with ``extra`` ones a test adds. Adding a feature is adding its
package (``features/<name>/``: its declaration, and the modules it names) and naming it here;
the core — the command line's root, the MCP server, ``tool_sets``, ``light``, the loop, the
dashboard — asks ``features()`` and imports no feature.

The daemon's features keep the protocol's names (``palace_proto.features``); palacectl's own:

    approvals   approve-hook, the approve tool: a launched run's permission requests
    worker      worker, task launch: runs of a headless harness on tasks
    integrate   integrate, review, reviewer: delivered patches reviewed and landed on a branch, each checked
    guard       the guard group: git hooks under other agents' leases
    service     the service group (its folder: palacectl/service/)
    archive     backup, restore, export, import: the palace's data out and back in
    dashboard   ui, and the dashboard's own pages: Now, Timeline, a person's message and answer

Standard library only: every declaration is, and so is this (``tool_sets`` and the loop read it
before anything heavy is imported).
"""

from __future__ import annotations

from typing import Final

from .. import service
from ..feature import Feature, Features
from . import (
    agents,
    approvals,
    archive,
    artifacts,
    dashboard,
    fleet,
    guard,
    integrate,
    leases,
    memory,
    questions,
    rooms,
    tasks,
    usage,
    worker,
)

__all__ = ["FEATURES", "HELP_ORDER", "NAV_ORDER", "TOOL_GROUPS", "features"]

#: every feature, in the order they answer the core's questions
FEATURES: Final[tuple[Feature, ...]] = (
    artifacts.FEATURE, tasks.FEATURE, memory.FEATURE, leases.FEATURE, fleet.FEATURE, questions.FEATURE,
    usage.FEATURE, rooms.FEATURE, agents.FEATURE,
    approvals.FEATURE, worker.FEATURE, integrate.FEATURE, guard.FEATURE, service.FEATURE, archive.FEATURE, dashboard.FEATURE,
)
#: ``palacectl --help``: the top-level commands (the loop's first, then people, the palace, the
#: harness, data, memory, runs), then the groups
HELP_ORDER: Final = (
    "status", "append", "list", "wait", "watch", "ack", "redact", "ask", "answer", "questions", "usage", "init",
    "invite", "join", "revoke", "doctor", "digest", "who", "rules", "mcp", "backup", "restore", "export", "import",
    "remember", "search", "agents", "tunnels", "worker", "integrate", "review", "reviewer", "ui",
    "artifact", "patch", "task", "agent", "inbox", "session", "lease", "guard", "peers", "bench", "kg", "diary",
    "memory", "service", "notify", "room",
)
#: the dashboard's nav: what needs the person first
NAV_ORDER: Final = ("now", "timeline", "tasks", "merge", "fleet", "leases", "usage", "rooms", "memory")
#: the MCP groups, in the order ``tools/list`` gives their tools: the default set first
TOOL_GROUPS: Final = ("core", "log", "memory", "leases", "people", "rooms", "light", "approvals")

_FEATURES: Final = Features(FEATURES, help_order=HELP_ORDER, nav_order=NAV_ORDER, tool_groups=TOOL_GROUPS)


def features(extra: tuple[Feature, ...] = ()) -> Features:
    """palacectl's features (and ``extra`` ones, a test's), checked.

    Raises:
        ValueError: see ``Features``.
    """
    if not extra:
        return _FEATURES
    return Features((*FEATURES, *extra), help_order=HELP_ORDER, nav_order=NAV_ORDER, tool_groups=TOOL_GROUPS)
