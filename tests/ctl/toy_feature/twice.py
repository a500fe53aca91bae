"""What a careless feature might declare: the core's ``status`` command, and its light word ``EVENT``."""

from __future__ import annotations

from typing import Any, Final


def status() -> None:
    """Not palacectl's status."""


def _event_words(tokens: list[str]) -> tuple[str, dict[str, Any]] | None:
    return None


COMMANDS: Final = {"status": status}
GROUPS: Final = {}
WORDS: Final = {"EVENT": _event_words}
