"""Which records need a person: a trigger's shape, the core's triggers, and who among the people is told.

Owns: ``Thing`` (one thing a person may be told of: its kind, a one-line title, a body preview,
the event it comes from), ``Trigger`` (a row of the table from a committed event's public dict to
a thing: each feature declares its own, ``palaced.feature.Feature.triggers``; the features'
rows come first, in their order, then the core's ``CORE_TRIGGERS``, and the first row that matches
wins), ``thing_for`` (the thing an event is, by the table), ``fork_thing`` (a fork is a row of the
store's forks table, not an event), and ``wants``: whether a person's settings ask for a thing.

Theory of operation
-------------------
Every daemon sees every event, so every daemon could tell every person: the one-per-palace rule
is that only the daemon *holding* the person's id (the agent registry, ``palace_proto.identity``)
tells them — the notifier asks ``wants`` only for the people held here. A thing is either
*addressed* (``to_agent`` is the person, or ``human:*``: each holder tells its own people) or
*palace-wide* (a task failed, a stall, a lost lease: a person in charge of the fleet wants those
whoever they were addressed to; ``scope = "addressed"`` in a person's settings turns that off).
A question and a message are only ever addressed (``Trigger.addressed_only``). Nobody is told of
what they wrote themselves.

A redacted event is never a thing (its body is gone, and what it said must not leave by mail);
bodies are cut to a preview. To add a trigger, give the feature's ``Feature`` a ``Trigger`` of a
new kind (``usage.budget`` is the example: palaced/features/usage.py).

Pure: stdlib and palace_proto only; no trio, no clock.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from palace_proto.event_fields import PublicEvent
from palace_proto.identity import HUMAN_PREFIX, is_human

__all__ = ["ANYONE", "CORE_KINDS", "CORE_TRIGGERS", "Thing", "Trigger", "fork_thing", "preview", "thing_for", "wants"]

#: ``to_agent`` of a question or message to every person
ANYONE: Final = HUMAN_PREFIX + "*"
# Why 200: a notification is a pointer, not the content: enough to judge whether to look now.
DEFAULT_PREVIEW_CHARS: Final = 200
_SPACE_RE: Final = re.compile(r"\s+")
_CONTROL_RE: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


@dataclasses.dataclass(frozen=True, slots=True)
class Thing:
    """One thing a person may be told of."""

    #: one of ``KINDS``
    kind: str
    #: one line naming it ("Question from agent-7")
    title: str
    #: the body, cut to a preview on one line ("" when there is none)
    preview: str
    #: what makes it one thing: the event id (or ``fork:ORIGIN:SEQ``); two sightings are one
    key: str
    event_id: str | None = None
    created_at: str | None = None
    from_agent: str | None = None
    to_agent: str | None = None
    correlation_id: str | None = None
    #: what to run to act on it ("palacectl answer EVENT_ID ...")
    hint: str = ""
    #: only ever told to the person it is addressed to (or every person, for ``human:*``)
    addressed_only: bool = False

    def to_wire(self) -> dict[str, Any]:
        return {"kind": self.kind, "title": self.title, "preview": self.preview, "event_id": self.event_id,
                "created_at": self.created_at, "from_agent": self.from_agent, "to_agent": self.to_agent,
                "correlation_id": self.correlation_id, "hint": self.hint}


def preview(text: Any, limit: int = DEFAULT_PREVIEW_CHARS) -> str:
    """``text`` on one line, without control or direction-changing characters, cut to ``limit``
    characters (an ellipsis marks the cut)."""
    if not isinstance(text, str):
        return ""
    flat = _SPACE_RE.sub(" ", _CONTROL_RE.sub("", text)).strip()
    return flat if len(flat) <= limit else flat[: max(0, limit - 1)].rstrip() + "…"


def _since_hint(event: Mapping[str, Any]) -> str:
    return f"palacectl list --since-event-id {event.get('id')}"


@dataclasses.dataclass(frozen=True, slots=True)
class Trigger:
    """A row of the table: ``kind`` when ``matches(event)``; ``title(event)`` names it."""

    kind: str
    matches: Callable[[PublicEvent], bool]
    title: Callable[[PublicEvent], str]
    hint: Callable[[PublicEvent], str] = _since_hint
    #: only ever told to the person it is addressed to (``Thing.addressed_only``)
    addressed_only: bool = False


#: the core's rows, after every feature's: words to a person are a message
CORE_TRIGGERS: Final[tuple[Trigger, ...]] = (
    Trigger("message", lambda e: is_human(e.get("to_agent")), lambda e: f"Message from {e.get('from_agent')}",
            lambda e: f"palacectl inbox --agent {e.get('to_agent')}", addressed_only=True),
)
#: the core's kinds: its triggers' and a fork (``fork_thing``)
CORE_KINDS: Final = ("message", "fork")


def thing_for(event: PublicEvent, triggers: tuple[Trigger, ...], *,
              preview_chars: int = DEFAULT_PREVIEW_CHARS) -> Thing | None:
    """The thing ``event`` (a public event object) is, or None (most events are none; a redacted
    event never is)."""
    if event.get("body_redacted"):
        return None
    for trigger in triggers:
        if trigger.matches(event):
            title = trigger.title(event)
            if event.get("impersonation"):
                title = f"[unproven sender] {title}"
            return Thing(kind=trigger.kind, title=preview(title, 120), preview=preview(event.get("body"), preview_chars),
                         key=str(event.get("id")), event_id=event.get("id"), created_at=event.get("created_at"),
                         from_agent=event.get("from_agent"), to_agent=event.get("to_agent"),
                         correlation_id=event.get("correlation_id"), hint=trigger.hint(event),
                         addressed_only=trigger.addressed_only)
    return None


def fork_thing(fork: Mapping[str, Any]) -> Thing:
    """A row of the store's forks table (``origin, origin_seq, detected_at, source``) as a thing."""
    origin, seq = fork.get("origin"), fork.get("origin_seq")
    return Thing(kind="fork", title=f"Fork: two versions of {origin} #{seq}",
                 preview=preview(f"Two different events claim the same place in one daemon's chain (a restored "
                                 f"backup or a cloned machine writing as it); detected from {fork.get('source')}."),
                 key=f"fork:{origin}:{seq}", created_at=fork.get("detected_at"), hint="palacectl peers")


def wants(person: str, on: frozenset[str], scope: str, thing: Thing) -> bool:
    """Whether ``person`` (held here; ``on`` and ``scope`` from their settings) is told of ``thing``."""
    if thing.kind not in on or thing.from_agent == person:
        return False
    addressed = thing.to_agent == person or thing.to_agent == ANYONE
    if thing.addressed_only:
        return addressed
    return addressed or scope == "palace"
