"""What an author writes: ``EventContent``, an event before its daemon places it in a chain.

Owns: ``EventContent``, the typed shape of the author's fields (``event_fields``' rows of role
``author``, checked against them at import), the base of ``validation.AppendRequest`` (a checked
append) and of ``envelope.SignedEvent`` (the content placed in its chain, hashed and signed); and
``draft_public``, the public object an append would have once written (what the authority table
judges a write by). Pure: stdlib only. Not on a client's quick path (it needs dataclasses).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping
from typing import Any, Final

from .event_fields import AUTHOR_FIELDS, EVENT_FIELDS, PublicEvent, blank_public

__all__ = ["EventContent", "content_of", "draft_public"]


@dataclasses.dataclass(frozen=True, slots=True)
class EventContent:
    """What an author writes: an event before its daemon places it in a chain and signs it.

    ``body`` is None only in a ``SignedEvent`` whose body was redacted.
    """

    type: str
    stream: str
    room: str
    from_agent: str
    topic: str | None = None
    to_agent: str | None = None
    correlation_id: str | None = None
    branch: str | None = None
    base_commit: str | None = None
    status: str | None = None
    ack_of: str | None = None
    artifact_ids: tuple[str, ...] = ()
    metadata_json: str = "{}"
    body: str | None = ""


_content_names: Final = tuple(f.name for f in dataclasses.fields(EventContent))
_content_values: Final[Callable[[Any], tuple[Any, ...]]] = operator.attrgetter(*_content_names)


def content_of(event: Any) -> tuple[Any, ...]:
    """An event's content (an ``EventContent``, a ``SignedEvent``: anything with its fields), as
    ``EventContent``'s positional arguments."""
    return _content_values(event)


def draft_public(content: EventContent, *, event_id: str, origin: str, created_at: str,
                 metadata: Mapping[str, Any]) -> PublicEvent:
    """The public object ``content`` would have once written (its ``seq`` and ``origin_seq``
    unknown yet: 0), for judging an append before it is signed."""
    view: dict[str, Any] = dict(blank_public())
    for field in AUTHOR_FIELDS:
        if field.public is not None:
            view[field.public] = getattr(content, field.name)
    view["artifact_ids"] = list(content.artifact_ids)
    view["body"] = content.body or ""
    view["metadata"] = dict(metadata)
    view.update(id=event_id, seq=0, origin=origin, origin_seq=0, created_at=created_at)
    return view  # type: ignore[return-value]  # every key of PublicEvent is set


def _check_content() -> None:
    """EventContent's fields are the table's author fields, a default exactly where an author may
    leave one out (raises at import when a field is added to one only)."""
    content = {f.name: f.default is not dataclasses.MISSING for f in dataclasses.fields(EventContent)}
    author = {f.name: f.optional for f in EVENT_FIELDS if f.role == "author"}
    if content != author:
        raise AssertionError(f"EventContent's fields (with a default: optional) {content} are not the table's "
                             f"author fields {author}")


_check_content()
