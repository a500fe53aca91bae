"""What a client may append: the event types reserved to the daemon's operations, and bulk appends.

Owns: ``RESERVED_TYPES`` (the types the authority table, ``palace_proto.authority``, says an
operation of the daemon writes, never ``append``: redactions, revocations, memory, the registry,
questions, rooms, leases, palace's notices — each with the command that writes it), the refusal of
a type in palace's namespaces the table does not name, the rules of one
``append_many`` request (proto/PROTOCOL.md, "Operations"): a list of 1..``MAX_APPEND_MANY`` maps,
each exactly what ``append`` takes (without ``replicated``), validated as a whole before anything
is written, and the slim reply (``SLIM_REPLY_FIELDS``: what ``append_many`` answers per event, and
``append`` when asked with ``reply: "slim"``). palacectl checks a bulk file with these same rules before it sends a line, so the
daemon and the client never disagree on what is valid. Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from .authority import RULES, unnamed_type
from .errors import ValidationError
from .features import APPEND_CHECKS
from .validation import AppendRequest, Limits

__all__ = ["MAX_APPEND_MANY", "REPLY_SHAPES", "RESERVED_TYPES", "SLIM_REPLY_FIELDS", "append_many_requests",
           "append_request", "reply_shape"]

#: types only the daemon's operations write (the authority table's ``written_by``), with why append refuses them
RESERVED_TYPES: Final = {kind: why for rule in RULES for kind in rule.types if (why := unnamed_type(kind)) is not None}
# Why 1,000: one commit of a thousand events takes tens of milliseconds, which bounds how long
# other writers wait behind a bulk writer; a bigger file is sent as several requests.
MAX_APPEND_MANY: Final = 1000
#: what ``append`` answers: the whole public event (the default), or the slim reply
REPLY_SHAPES: Final = ("event", "slim")
#: the slim reply's fields: what a writer that sent the event does not know yet. Why slim at all: the
#: whole event is most of an append's reply (its body sent back, ~15 fields to encode and decode),
#: which a bulk writer or a busy agent loop only throws away.
SLIM_REPLY_FIELDS: Final = ("id", "seq", "origin_seq", "created_at")


def append_request(args: Mapping[str, Any], limits: Limits) -> AppendRequest:
    """One client append, validated: the event rules, then the reserved types.

    Raises:
        ValidationError: naming the field and the rule.
    """
    request = AppendRequest.from_wire(args, limits)
    refused = unnamed_type(request.type)
    if refused is not None:
        raise ValidationError(refused, field="type")
    check = APPEND_CHECKS.get(request.type)
    if check is not None:  # what its feature asks of its content (a usage report's figures)
        check(request.type, request.body, request.metadata_json)
    return request


def reply_shape(args: Mapping[str, Any]) -> str:
    """``append``'s ``reply`` argument: ``"event"`` (absent: the whole public event) or ``"slim"``
    (``SLIM_REPLY_FIELDS`` only).

    Raises:
        ValidationError: any other value.
    """
    shape = args.get("reply")
    if shape is None:
        return "event"
    if not isinstance(shape, str) or shape not in REPLY_SHAPES:
        raise ValidationError(f"reply must be one of {', '.join(REPLY_SHAPES)} (got {shape!r})", field="reply")
    return shape


def append_many_requests(events: Any, limits: Limits) -> list[AppendRequest]:
    """Validate every event of an ``append_many`` request, in order; the first broken rule is
    reported with its index (``events[3].type``), and nothing is accepted.

    Raises:
        ValidationError: ``events`` is not a list of 1..MAX_APPEND_MANY maps, or one breaks a rule.
    """
    if not isinstance(events, Sequence) or isinstance(events, (str, bytes)):
        raise ValidationError("events must be a list of events (maps of append's fields)", field="events")
    if not 1 <= len(events) <= MAX_APPEND_MANY:
        raise ValidationError(f"events must hold 1 to {MAX_APPEND_MANY} events (got {len(events)}); send more "
                              "in several requests", field="events")
    requests = []
    for index, event in enumerate(events):
        if not isinstance(event, Mapping):
            raise ValidationError(f"events[{index}] must be a map of append's fields", field=f"events[{index}]")
        if "replicated" in event:
            raise ValidationError(f"events[{index}]: replicated is not taken per event in append_many",
                                  field=f"events[{index}].replicated")
        try:
            requests.append(append_request(event, limits))
        except ValidationError as exc:
            raise ValidationError(f"events[{index}]: {exc.message}",
                                  field=f"events[{index}].{exc.field}" if exc.field else f"events[{index}]") from None
    return requests
