"""What a feature keeps in the store beside the log, moved in the transaction of each write.

Owns: ``StorePart`` — one feature's state kept in step with the log (the task threads, the usage
totals, the memory views, ...) declared by its store module: what it does when an event is stored
(a local append, a peer's event, an import alike), when a redaction purges a body, before a batch
commits, when the agent registry's verdicts change, and when the store opens; and how a local
write of its subject (a task, a room, a question) is judged by the authority table — and
``StoreParts``, the store's parts together, their hooks gathered once so the write path loops over
tuples, and checked (one judge per subject, no part twice).

The write path (writes.py, batch.py, authority.py, agents.py) asks ``ctx.parts`` and names no
feature. The parts come from the daemon's features (``palaced.features.STORE_PARTS``): a store
opened without one would leave its state behind the log, so ``Store`` takes them explicitly.
Writer thread only, inside a batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from palace_proto.authority import Rule
from palace_proto.envelope import SignedEvent
from palace_proto.event_fields import PublicEvent
from palace_proto.validation import AppendRequest

if TYPE_CHECKING:
    from .state import WriteContext

__all__ = ["Judge", "StorePart", "StoreParts"]

#: why this daemon may not write ``req`` (None: it may), judged by ``rule`` on the subject's events
#: with ``draft`` (the event ``req`` would be) as the newest: ``judge(ctx, req, rule, draft)``
Judge = Callable[["WriteContext", AppendRequest, Rule, PublicEvent], "str | None"]


@dataclasses.dataclass(frozen=True, slots=True)
class StorePart:
    """One feature's state in the store (see the module docstring)."""

    name: str
    #: an event was just inserted as local ``seq``: ``stored(ctx, event, seq)``
    stored: Callable[[WriteContext, SignedEvent, int], None] | None = None
    #: an event's body was just purged (a redaction): ``redacted(ctx, event_id)``
    redacted: Callable[[WriteContext, str], None] | None = None
    #: the batch's jobs have run: settle what they moved, before the commit: ``settle(ctx)``
    settle: Callable[[WriteContext], None] | None = None
    #: the registry's records of these agents changed (its verdicts on their events may have)
    agents_changed: Callable[[WriteContext, set[str]], None] | None = None
    #: a write job run when the store opens: bring the part up to date with the log
    opened: Callable[[WriteContext], Any] | None = None
    #: judges of a local write, by the subject of its rule (``Rule.subject``: "task", "room", ...)
    judges: Mapping[str, Judge] = dataclasses.field(default_factory=dict)


class StoreParts:
    """The store's parts, their hooks gathered in the order the parts are given."""

    __slots__ = ("agents_changed", "judges", "names", "opened", "redacted", "settle", "stored")

    def __init__(self, parts: Sequence[StorePart]) -> None:
        """Raises ``ValueError``: a part given twice, or two judges of one subject."""
        names = [part.name for part in parts]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"store parts given twice: {twice}")
        judges: dict[str, Judge] = {}
        for part in parts:
            for subject, judge in part.judges.items():
                if subject in judges:
                    raise ValueError(f"two store parts judge the writes of subject {subject!r}")
                judges[subject] = judge
        self.names: tuple[str, ...] = tuple(names)
        self.stored = _hooks(part.stored for part in parts)
        self.redacted = _hooks(part.redacted for part in parts)
        self.settle = _hooks(part.settle for part in parts)
        self.agents_changed = _hooks(part.agents_changed for part in parts)
        self.opened = _hooks(part.opened for part in parts)
        self.judges: Mapping[str, Judge] = judges

    def __repr__(self) -> str:
        return f"<StoreParts {', '.join(self.names)}>"


def _hooks(hooks: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(hook for hook in hooks if hook is not None)
