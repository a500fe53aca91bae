"""Whose task this is: the daemon a task's request came from, judged by a ``WorkerPolicy``.

Owns ``Requesters``: for a task's view, the daemon (peer id and name) that wrote its request —
from the local daemon's ``status`` and ``fleet``, looked up again when an origin is new — and
whether the policy accepts its requester. The worker, the integrator and the reviewer each hold
one. Talks to the daemon only through the ``call`` it is given (``palacectl.client``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from .worker_policy import WorkerPolicy

__all__ = ["Requesters"]

# Why 4096: the origins it remembers (a palace has a few dozen daemons; a table fed from outside
# is bounded all the same).
MAX_ORIGINS: Final = 4096


class Requesters:
    """See the module docstring."""

    def __init__(self, policy: WorkerPolicy, call: Callable[..., Any]) -> None:
        self.policy = policy
        self._call = call
        self.own_peer_id: str | None = None
        self._daemons: dict[str, tuple[str | None, str | None]] = {}

    def __repr__(self) -> str:
        return f"<Requesters {self.policy.describe()}>"

    def daemon_of(self, origin: Any) -> tuple[str | None, str | None]:
        """(peer id, name) of the daemon that writes ``origin`` ((None, None): unknown here)."""
        if not isinstance(origin, str):
            return None, None
        if origin not in self._daemons:
            status = self._call("status")
            self.own_peer_id = status["fingerprint"]
            known: dict[str, tuple[str | None, str | None]] = {
                o["origin"]: (o.get("peer_id"), o.get("name")) for o in self._call("fleet").get("origins", [])
                if isinstance(o, dict) and isinstance(o.get("origin"), str)}
            if len(known) > MAX_ORIGINS:
                known = dict(list(known.items())[:MAX_ORIGINS])
            # This daemon's own origin, whether or not it has joined a palace yet.
            known[status["origin"]] = (self.own_peer_id, (status.get("palace") or {}).get("name"))
            self._daemons = known
        return self._daemons.get(origin, (None, None))

    def accepts(self, view: Mapping[str, Any]) -> bool:
        """Does the policy take the task of ``view`` (its request's writer and daemon)?"""
        peer_id, name = self.daemon_of(view["request"].get("origin"))
        return self.policy.accepts(view.get("requested_by"), peer_id, name, self.own_peer_id or "")
