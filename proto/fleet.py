"""The fleet feature: the palace's members, links and reports as operations.

Owns: the feature's declaration (``OPS``: founding and joining a palace, inviting and revoking a
daemon, the peers, what is replicated where, who is on, the fleet view, doctor). Its events are the
membership's (``palace.revoke``: palace_proto.pki, the core's) and its reports the network's
(palace_proto.reports). Pure.
"""

from __future__ import annotations

from typing import Final

from .authority import Rule

__all__ = ["NAMESPACE", "OPS", "RULES"]

#: the local API's operations of the fleet: the palace, its members, links and reports
OPS: Final = frozenset({"init", "invite", "join", "revoke", "peers", "peers_add", "peers_remove", "replicated",
                        "who", "fleet", "doctor"})
#: its events are the membership's (palace_proto.pki)
NAMESPACE: Final = None
RULES: Final[tuple[Rule, ...]] = ()
