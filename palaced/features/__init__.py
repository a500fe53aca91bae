"""The features the daemon runs: one module each, each declaring itself (``FEATURE``).

Owns: ``FEATURES`` — the daemon's features in the order they answer the core's questions (the
order of ``session_start``'s parts, of the services started, of the ops listed) — and
``features()``: them together with the core's operations, checked (palaced/feature.py:
``Features``) against the protocol's operations (``palace_proto.features.OPS``). Adding a feature
is adding its module here and naming it in ``FEATURES``; app.py runs whatever this says.

    artifacts   artifact_put, artifact_get, patch_submit
    questions   ask, answer, questions
    tasks       task_create, task_show, task_list, task_ready, task_claim, task_release, task_reassign
    usage       usage
    leases      lease_acquire, lease_renew, lease_release, lease_list, lease_check
    agents      agent_register, agent_transfer, agent_retire, agents
    memory      memory_add, search, drawer_get, kg_*, diary_*, tunnels, memory_rebuild
    rooms       room_open, room_read, room_say, room_close, room_list, room_show
    fleet       init, invite, join, revoke, peers*, replicated, who, fleet, doctor

Must not import: ``palaced.api`` or ``palaced.app`` (they import this package).
"""

from __future__ import annotations

from typing import Final

from palace_proto.features import OPS as PROTOCOL_OPS

from ..feature import Feature, Features
from ..handlers import API_LAYER_OPS, CORE_OPS
from . import agents, artifacts, fleet, leases, memory, questions, rooms, tasks, usage

__all__ = ["FEATURES", "STORE_PARTS", "features"]

#: the daemon's features, in the order they answer the core's questions
FEATURES: Final[tuple[Feature, ...]] = (
    artifacts.FEATURE, questions.FEATURE, tasks.FEATURE, usage.FEATURE, leases.FEATURE, agents.FEATURE,
    memory.FEATURE, rooms.FEATURE, fleet.FEATURE,
)

#: what the features keep in the store beside the log (``Store``'s ``parts``), in their order
STORE_PARTS: Final = tuple(feature.store for feature in FEATURES if feature.store is not None)


def features(extra: tuple[Feature, ...] = ()) -> Features:
    """The daemon's features (and ``extra`` ones, a test's), checked against the protocol.

    Raises:
        ValueError: two features answer one operation, a feature builds on one that is not there, or
            an operation of the protocol is answered by nobody.
    """
    extra_ops = frozenset(op for feature in extra for op in feature.ops)
    return Features((*FEATURES, *extra), CORE_OPS, (PROTOCOL_OPS | extra_ops) - API_LAYER_OPS)
