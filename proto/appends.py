"""What a client may append: the event types reserved to the daemon, and bulk appends.

Owns: ``RESERVED_TYPES`` (types that change how other events are shown — redactions, revocations,
memory — written only by the daemon's own operations, never by ``append``), and the rules of one
``append_many`` request (proto/PROTOCOL.md, "Operations"): a list of 1..``MAX_APPEND_MANY`` maps,
each exactly what ``append`` takes (without ``replicated``), validated as a whole before anything
is written. palacectl checks a bulk file with these same rules before it sends a line, so the
daemon and the client never disagree on what is valid. Pure: no IO.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .agents import REGISTER, RETIRE, TRANSFER
from .errors import ValidationError
from .memory import DIARY_EVENT, DRAWER_EVENT, KG_ADD_EVENT, KG_INVALIDATE_EVENT
from .pki import REVOKE_EVENT_TYPE
from .rooms import ROOM_CLOSE, ROOM_MESSAGE, ROOM_OPEN
from .usage import USAGE_TYPE, check_usage_metadata
from .validation import AppendRequest, Limits

__all__ = ["MAX_APPEND_MANY", "RESERVED_TYPES", "append_many_requests", "append_request"]

#: types only the daemon may write, with the command that writes them
RESERVED_TYPES: Final = {
    "event.redact": "use `palacectl redact`",
    REVOKE_EVENT_TYPE: "use `palacectl revoke`",
    DRAWER_EVENT: "use `palacectl remember`",
    DIARY_EVENT: "use `palacectl diary write`",
    KG_ADD_EVENT: "use `palacectl kg add`",
    KG_INVALIDATE_EVENT: "use `palacectl kg invalidate`",
    REGISTER: "agents register with their first write, or `palacectl agent register`",
    TRANSFER: "use `palacectl agent transfer`",
    RETIRE: "use `palacectl agent retire`",
    "lease.conflict": "palaced writes it to a lease's loser (`palacectl lease list` shows who holds what)",
    "task.conflict": "palaced writes it to a claim's loser (`palacectl task show` shows the claims)",
    "task.stalled": "palaced writes it to a stalled task's requester (`palacectl task list --stalled`)",
    "question.ask": "use `palacectl ask` (it waits for the answer)",
    "question.answer": "use `palacectl answer QUESTION_ID TEXT`",
    # A room's close is checked against its turns in the transaction that writes them.
    ROOM_OPEN: "use `palacectl room open` (MCP mempalace_room_open)",
    ROOM_MESSAGE: "use `palacectl room say` (MCP mempalace_room_say)",
    ROOM_CLOSE: "use `palacectl room close` (MCP mempalace_room_close)",
}
# Why 1,000: one commit of a thousand events takes tens of milliseconds, which bounds how long
# other writers wait behind a bulk writer; a bigger file is sent as several requests.
MAX_APPEND_MANY: Final = 1000


def append_request(args: Mapping[str, Any], limits: Limits) -> AppendRequest:
    """One client append, validated: the event rules, then the reserved types.

    Raises:
        ValidationError: naming the field and the rule.
    """
    request = AppendRequest.from_wire(args, limits)
    if request.type in RESERVED_TYPES:
        raise ValidationError(f"type {request.type!r} is reserved; {RESERVED_TYPES[request.type]}", field="type")
    if request.type == USAGE_TYPE:
        # What every replica sums: a usage report is checked field by field (palace_proto.usage).
        check_usage_metadata(json.loads(request.metadata_json))
    return request


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
