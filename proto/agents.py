"""The agents feature: the operations that manage agent ids and list them, and when an agent is stale.

Owns: the feature's declaration (``OPS``: registering, transferring and retiring an id, the roster;
no types of its own: the registry's events and rows are the core's identity, palace_proto.identity)
and ``[agents] stale_after`` (``check_stale_after``: how long an agent may be silent before the
roster marks it stale). Pure.
"""

from __future__ import annotations

from typing import Any, Final

from .authority import Rule
from .errors import ValidationError
from .stamps import duration_seconds

__all__ = ["DEFAULT_STALE_AFTER_S", "MAX_STALE_AFTER_S", "MIN_STALE_AFTER_S", "NAMESPACE", "OPS", "RULES",
           "check_stale_after"]

# Why 14 days: an agent nobody has heard from in two weeks is most likely a dead identity (a
# finished experiment, a renamed harness); `agents` marks it so the roster stays readable.
DEFAULT_STALE_AFTER_S: Final = 14 * 86400

# Why 1 hour .. 1 year: shorter would mark agents stale between two working sessions; longer is
# as good as never.
MIN_STALE_AFTER_S: Final = 3600
MAX_STALE_AFTER_S: Final = 365 * 86400


def check_stale_after(value: Any, *, field: str = "agents.stale_after") -> int:
    """``[agents] stale_after`` (``14d``, ``72h``, or seconds) in seconds, from 1 hour to 1 year.

    Raises:
        ValidationError: not a duration, or out of that range.
    """
    seconds = value if isinstance(value, int) and not isinstance(value, bool) else duration_seconds(value, field=field)
    if not MIN_STALE_AFTER_S <= seconds <= MAX_STALE_AFTER_S:
        raise ValidationError(f"{field} must be from 1h to 365d", field=field)
    return seconds


# -- the feature's declaration (palace_proto.features puts every feature's together) ----------------

#: the local API's operations of agents and people's ids
OPS: Final = frozenset({"agent_register", "agent_transfer", "agent_retire", "agents"})
#: its events are the registry's, the core's (palace_proto.identity)
NAMESPACE: Final = None
RULES: Final[tuple[Rule, ...]] = ()
