"""Errors of the protocol core, each with a stable snake_case ``code``.

Owns: the exception hierarchy shared by the daemon and its clients, and the table of API error
codes (``API_ERROR_CODES``) that ``palacectl`` maps to exit codes. Imports nothing but the stdlib.

``ProtocolError`` splits as in h11: ``LocalProtocolError`` means *we* misused the protocol (a bug
on our side), ``RemoteProtocolError`` means the other side sent something we cannot accept
(garbage, an oversized frame, an unknown version). ``ValidationError`` is a request that is
well-formed on the wire but breaks a rule of the data model; its message names the field and the
rule, word for word what the user sees.
"""

from __future__ import annotations

__all__ = [
    "API_ERROR_CODES",
    "ApiError",
    "DiskFull",
    "FrameTooLarge",
    "LocalProtocolError",
    "NotFound",
    "ProtocolError",
    "RemoteProtocolError",
    "SignatureError",
    "NotPermitted",
    "ValidationError",
    "VersionMismatch",
]

#: Every error code the local API may return, with what it means. Clients map these to exit codes;
#: the list is part of the protocol (proto/PROTOCOL.md, "Error codes").
API_ERROR_CODES: dict[str, str] = {
    "invalid_argument": "a request field breaks a validation rule; nothing was written",
    "not_found": "an event, artifact or task named by the request does not exist",
    "bad_request": "the request is not a well-formed API message (wrong shape or field types)",
    "unknown_op": "the daemon does not know this operation",
    "frame_too_large": "a frame exceeds the size limit; the connection is closed",
    "version_mismatch": "client and daemon speak different protocol versions",
    "shutting_down": "the daemon is stopping and accepts no new work",
    "read_only": "this daemon is a read-only observer; it refuses every write",
    "not_member": "this daemon has not joined a palace (init or join first)",
    "not_permitted": "the authority table does not let this writer write this (the message names the rule), or only "
                     "the daemon holding the palace key (the one that ran init) may do this; nothing was written",
    "enrolment_failed": "joining failed: inviter unreachable, invite refused, or not the palace the invite names",
    "unauthorized": "the TCP API's hello did not carry the token from the home's api.json; the connection is closed",
    "disk_full": "the disk holding the daemon's database is full; nothing was written. Free some space and retry: "
                 "the daemon resumes writing by itself",
    "too_many_connections": "the daemon's connection limit, or this client's limit of connections not yet greeted, "
                            "is reached; the connection is closed: retry in a moment",
    "hello_timeout": "no successful hello within 10 s of connecting; the connection is closed",
    "lease_conflict": "another agent holds an overlapping lease; nothing was written (force takes it anyway, "
                      "and its holder is told)",
    "internal": "the daemon failed unexpectedly; see its log",
}


class ProtocolError(Exception):
    """Abstract base: the protocol was broken by one side or the other."""

    code = "bad_request"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class LocalProtocolError(ProtocolError):
    """We tried to do something the protocol forbids (a bug in the caller)."""


class RemoteProtocolError(ProtocolError):
    """The other side sent bytes or a message we cannot accept."""


class FrameTooLarge(RemoteProtocolError):
    """A frame header announced more bytes than the limit; detected before decoding."""

    code = "frame_too_large"


class VersionMismatch(RemoteProtocolError):
    """The hello named a protocol version we do not speak."""

    code = "version_mismatch"


class ApiError(Exception):
    """An error reply of the local API: ``code`` from ``API_ERROR_CODES`` plus a human message."""

    code = "internal"

    def __init__(self, message: str, *, code: str | None = None, detail: object = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.detail = detail

    def to_wire(self) -> dict:
        wire: dict = {"code": self.code, "message": self.message}
        if self.detail is not None:
            wire["detail"] = self.detail
        return wire


class ValidationError(ApiError, ValueError):
    """A request breaks a data-model rule. ``field`` names the offending field."""

    code = "invalid_argument"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message, detail={"field": field} if field else None)
        self.field = field


class NotFound(ApiError, LookupError):
    """An id named by the request does not exist on this replica."""

    code = "not_found"


class DiskFull(ApiError):
    """A write failed because the disk holding the database is full; nothing of it was written.
    Not a bug and not permanent: reads keep working, and writes succeed again once space is freed."""

    code = "disk_full"


class NotPermitted(ApiError):
    """A write the authority table does not allow this writer (``palace_proto.authority``): the
    message is the rule's own one line, the one every replica would flag the event with."""

    code = "not_permitted"


class SignatureError(Exception):
    """An event's signature, hash or chain link does not verify."""
