"""The tasks a loop leaves alone until something happens on them.

Owns ``Skipped``: a task's correlation id with its ``last_activity`` when it was left; it is taken
up again once its last activity differs (a new event on it). Bounded, oldest out first: the ids
come from other members' tasks. The worker, the integrator and the reviewer each hold one (the
worker behind its own lock).
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_SKIPPED", "Skipped"]

# Why 4096: the tasks a loop remembers leaving; past that the oldest is looked at again, which
# costs a look, never a wrong run.
MAX_SKIPPED: Final = 4096


class Skipped:
    """See the module docstring."""

    def __init__(self, limit: int = MAX_SKIPPED) -> None:
        self._limit = limit
        self._left: dict[str, str] = {}  # correlation id -> its last activity when left

    def __repr__(self) -> str:
        return f"<Skipped {len(self._left)} of at most {self._limit}>"

    def __len__(self) -> int:
        return len(self._left)

    def skip(self, correlation_id: str, last_activity: str) -> None:
        """Leave the task until its last activity is another than ``last_activity``."""
        self._left.pop(correlation_id, None)  # a task left again goes to the back of the line
        if len(self._left) >= self._limit:
            self._left.pop(next(iter(self._left)))
        self._left[correlation_id] = last_activity

    def leaves(self, correlation_id: str, last_activity: str) -> bool:
        """Whether the task is still left (nothing happened on it since)."""
        return self._left.get(correlation_id) == last_activity
