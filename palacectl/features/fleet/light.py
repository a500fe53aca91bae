"""The fleet feature's light verb on ``palace_coordinate``: ``PEERS`` (``mempalace_peers``).

Owns its first words, its ``Verb`` and its word in the tool's description, as
``palacectl.light.Tables`` reads them. Pure.
"""

from __future__ import annotations

from typing import Any, Final

from ...light import Verb

__all__ = ["USAGE", "VERBS", "WORDS"]


def _peers_words(tokens: list[str]) -> tuple[str, dict[str, Any]]:
    """``PEERS``, ``MESH PEERS``, ``MESH_PEERS``: whatever follows is ignored."""
    return "peers", {}


WORDS: Final = {"PEERS": _peers_words, "MESH": _peers_words, "MESH_PEERS": _peers_words}
VERBS: Final = (Verb("peers", ("mesh_peers", "peers"), infer=(frozenset({"peers"}), frozenset({"mesh"}))),)
USAGE: Final = ("'PEERS'",)
