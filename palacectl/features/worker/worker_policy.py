"""Whose words a worker runs: its acceptance policy (issue 25, finding 2).

Owns: ``WorkerPolicy`` — which requesters a ``palacectl worker`` takes tasks from — parsed from
``--accept-from`` (or ``[worker] accept_from`` in ``config.toml``), judged per task, and described
in one line for the log and for ``who``. Pure: no IO, no clock.

Why it exists: a worker runs a task's request, verbatim, as the prompt of a harness running with
your account on your machine, and sends what the run wrote to every member. So a task is taken
only from someone the machine's owner chose. The default, ``local``, is the agents and people
who write through this very daemon (on this machine, with your account already); anyone else is
named: an agent id (``mac-claude``; its requests count only from the daemon it is bound to, which
palace checks for every event), a person (``human:ana``), every agent of another daemon
(``daemon:NAME`` or ``daemon:PEER_ID``), or everyone in the palace (``*``, said to be unsafe).
A request from anyone else is declined, in words on the task, never run and never silent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final

__all__ = ["DEFAULT_ACCEPT", "PolicyError", "WorkerPolicy"]

DEFAULT_ACCEPT: Final = ("local",)
# Why 64 entries of at most 256 characters: a policy names a few agents and daemons; the bound
# keeps the line `who` shows (and the presence record that carries it) small.
MAX_ENTRIES: Final = 64
MAX_ENTRY_CHARS: Final = 256


class PolicyError(ValueError):
    """An ``--accept-from`` entry that is not one; the message says which and what is expected."""


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerPolicy:
    """Which requesters a worker takes tasks from."""

    local: bool = True
    anyone: bool = False
    agents: frozenset[str] = frozenset()
    daemons: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> WorkerPolicy:
        """From ``--accept-from`` values: ``local``, ``*``, ``daemon:NAME_OR_PEER_ID``, or an agent
        id (``human:NAME`` included).

        Raises:
            PolicyError: an empty, over-long or malformed entry, or too many.
        """
        local = anyone = False
        agents: set[str] = set()
        daemons: set[str] = set()
        items = list(entries)
        if len(items) > MAX_ENTRIES:
            raise PolicyError(f"--accept-from takes at most {MAX_ENTRIES} entries")
        for raw in items:
            entry = raw.strip() if isinstance(raw, str) else ""
            if not entry or len(entry) > MAX_ENTRY_CHARS or not entry.isprintable():
                raise PolicyError(f"--accept-from {str(raw)[:40]!r} is not a requester: use local, *, "
                                  "daemon:NAME, an agent id or human:NAME")
            if entry == "local":
                local = True
            elif entry == "*":
                anyone = True
            elif entry.startswith("daemon:"):
                name = entry[len("daemon:"):].strip()
                if not name:
                    raise PolicyError("--accept-from daemon: needs a daemon name or peer id (daemon:mac)")
                daemons.add(name)
            else:
                agents.add(entry)
        return cls(local=local, anyone=anyone, agents=frozenset(agents), daemons=frozenset(daemons))

    def accepts(self, requester: str | None, daemon_peer_id: str | None, daemon_name: str | None,
                own_peer_id: str) -> bool:
        """Does the worker take a task requested by agent ``requester``, written by the daemon
        ``daemon_peer_id`` (named ``daemon_name``)? ``own_peer_id``: the worker's own daemon.
        An unknown daemon (None) is no daemon of the policy's."""
        if self.anyone:
            return True
        if self.local and daemon_peer_id is not None and daemon_peer_id == own_peer_id:
            return True
        if requester is not None and requester in self.agents:
            return True
        return bool(self.daemons and ({daemon_peer_id, daemon_name} - {None}) & self.daemons)

    def describe(self) -> str:
        """One line: whom it takes tasks from (the log, ``who``)."""
        if self.anyone:
            return "anyone in the palace (unsafe: any member's words run with this account)"
        parts = ["this daemon's agents and people"] if self.local else []
        parts += sorted(self.agents)
        parts += [f"daemon:{d}" for d in sorted(self.daemons)]
        return ", ".join(parts) if parts else "nobody"
