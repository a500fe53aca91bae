"""The fleet feature: the palace's members, links and reports as operations.

Owns: the feature's declaration (``OPS``: founding and joining a palace, inviting and revoking a
daemon, the peers, what is replicated where, who is on, the fleet view, doctor). Its events are the
membership's (``palace.revoke``: palace_proto.pki, the core's) and its reports the network's
(palace_proto.reports); and how daemons are named apart (``derived_daemon_name``, ``daemon_labels``:
cloned machines share a hostname). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .authority import Rule

__all__ = ["NAMESPACE", "OPS", "RULES", "daemon_labels", "derived_daemon_name"]

#: the local API's operations of the fleet: the palace, its members, links and reports
OPS: Final = frozenset({"init", "invite", "join", "revoke", "peers", "peers_add", "peers_remove", "replicated",
                        "who", "fleet", "doctor"})
#: its events are the membership's (palace_proto.pki)
NAMESPACE: Final = None
RULES: Final[tuple[Rule, ...]] = ()


# -- naming daemons apart ------------------------------------------------------------------------

# Why 4: the suffix only has to tell apart the few daemons of one palace that share a hostname
# (32**4 ~ a million values); `peers` shows the whole peer id beside it anyway.
DERIVED_SUFFIX_CHARS: Final = 4
# Why 7: the short peer id every other message shows (the fingerprint's first group).
SHORT_PEER_ID_CHARS: Final = 7


def derived_daemon_name(name: str, peer_id: str) -> str:
    """A distinct name for a daemon whose default name (its hostname) another daemon of the palace
    already holds: the name, a dash and the first characters of its own peer id, lowercased
    (``vm`` on the daemon ``MFZWI3D-…`` becomes ``vm-mfzw``). Stable for that daemon, so a retried
    join derives the same name."""
    return f"{name}-{peer_id.replace('-', '')[:DERIVED_SUFFIX_CHARS].lower()}"


def daemon_labels(names: Mapping[str, str]) -> dict[str, str]:
    """How a person tells the palace's daemons apart, from ``names`` (peer id -> its name): its
    name, or, when another daemon bears the same name, ignoring case as hostnames do (palaces joined
    before names were made distinct), its name and short peer id (``vm (MFZWI3D)``). A daemon with no name
    is its short peer id."""
    counts: dict[str, int] = {}
    for name in names.values():
        key = name.strip().casefold()
        counts[key] = counts.get(key, 0) + 1
    labels = {}
    for peer_id, name in names.items():
        short = peer_id[:SHORT_PEER_ID_CHARS]
        if not name.strip():
            labels[peer_id] = short
        elif counts[name.strip().casefold()] > 1:
            labels[peer_id] = f"{name} ({short})"
        else:
            labels[peer_id] = name
    return labels
