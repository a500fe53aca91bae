"""The export file: a palace log as NDJSON, for moving logs between palaces and for audits.

Pure: encoding and decoding of lines; the daemon reads and stores, palacectl writes and reads
files. One JSON object per line, in this order:

* ``{"palace_export": 1, "exported_at", "source": {...}, "filters": {...}}`` — the first line;
* ``{"origin": ORIGIN, "public_key": HEX}`` — before the first event of that origin (the key its
  events verify with: an export proves it was not altered, not who wrote it — trust comes from
  knowing the key);
* ``{"artifact": {id, sha256, kind, size_bytes, created_by, created_at, metadata, content_base64}}``
  — with ``--with-artifacts``, before the first event that names it;
* ``{"event": {...}}`` — a signed event: every signed field (bytes as hex), its ``id`` and the
  body (null when redacted: the signature still verifies through ``body_sha256``).

Events keep their origin and signatures, so an importer verifies each one; a filtered export
(streams, a starting event) leaves gaps in an origin's sequence, which is why imported events
are history, not replication (see palaced/store: imported origins never enter the vector).

``verify_export_event`` and ``verify_export_artifact`` are the one definition of "this line
verifies": palacectl runs them over a whole file before it sends anything, and the daemon runs
them again over every ``import_events`` request (it must hold the rule for any client).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from .envelope import SignedEvent
from .errors import RemoteProtocolError, SignatureError
from .ids import artifact_id_for_sha256
from .peer import event_from_wire, event_to_wire
from .sync import verify_incoming

__all__ = ["EXPORT_VERSION", "ExportError", "artifact_line", "event_from_export", "event_line", "header_line",
           "origin_line", "parse_line", "verify_export_artifact", "verify_export_event"]

EXPORT_VERSION: Final = 1
_BYTES_FIELDS: Final = ("prev_hash", "body_sha256", "event_hash", "signature")


class ExportError(ValueError):
    """A line is not what an export holds; the message says what is wrong."""


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def header_line(exported_at: str, source: dict[str, Any], filters: dict[str, Any]) -> str:
    return _dumps({"palace_export": EXPORT_VERSION, "exported_at": exported_at, "source": source, "filters": filters})


def origin_line(origin: str, public_key: bytes) -> str:
    return _dumps({"origin": origin, "public_key": public_key.hex()})


def artifact_line(record: dict[str, Any], content: bytes) -> str:
    fields = {k: record[k] for k in ("id", "sha256", "kind", "size_bytes", "created_by", "created_at", "metadata")}
    return _dumps({"artifact": {**fields, "content_base64": base64.b64encode(content).decode("ascii")}})


def event_to_export(event: SignedEvent) -> dict[str, Any]:
    wire = event_to_wire(event)
    for name in _BYTES_FIELDS:
        wire[name] = wire[name].hex()
    return {"id": event.id, **wire}


def event_line(event: SignedEvent) -> str:
    return _dumps({"event": event_to_export(event)})


def event_from_export(data: Any) -> SignedEvent:
    """The signed event an ``event`` line carries (shape checked; signatures are the importer's)."""
    if not isinstance(data, dict):
        raise ExportError("an event must be an object")
    wire = dict(data)
    for name in _BYTES_FIELDS:
        value = wire.get(name)
        try:
            wire[name] = bytes.fromhex(value) if isinstance(value, str) else value
        except ValueError:
            raise ExportError(f"event field {name!r} is not hex") from None
    try:
        event = event_from_wire(wire)
    except RemoteProtocolError as exc:
        raise ExportError(str(exc).replace("peer message field", "event field")) from None
    if "id" in data and data["id"] != event.id:
        raise ExportError(f"event {data['id']!r}: its id does not match its content (it was altered)")
    return event


def verify_export_event(data: Any, keys: Mapping[str, bytes]) -> SignedEvent:
    """The signed event an ``event`` line carries, verified: its shape, its id, its hash, its body
    hash (unless redacted) and its signature against ``keys[origin]``, the key the file gives.

    Raises:
        ExportError: naming the first check that failed (without repeating the event id).
    """
    event = event_from_export(data)
    key = keys.get(event.origin)
    if key is None:
        raise ExportError(f"no public key for its origin {event.origin} (an origin line must come before its events)")
    try:
        verify_incoming(event, key)
    except SignatureError as exc:
        reason = str(exc).removeprefix(f"event {event.id}: ")
        raise ExportError(f"does not verify: {reason}") from None
    return event


_ARTIFACT_TEXT_FIELDS: Final = ("kind", "created_by", "created_at")


def verify_export_artifact(record: Any, content: bytes) -> None:
    """Check an ``artifact`` line: a record of the right shape whose bytes hash to its ``sha256``
    (and whose ``id`` and ``size_bytes``, when present, agree with them).

    Raises:
        ExportError: naming what does not match.
    """
    if not isinstance(record, Mapping):
        raise ExportError("an artifact record must be an object")
    digest = record.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64 or digest.strip("0123456789abcdef"):
        raise ExportError("artifact sha256 must be 64 lowercase hex digits")
    for name in _ARTIFACT_TEXT_FIELDS:
        if name in record and not isinstance(record[name], str):
            raise ExportError(f"artifact field {name!r} must be a string")
    if "metadata" in record and record["metadata"] is not None and not isinstance(record["metadata"], dict):
        raise ExportError("artifact field 'metadata' must be an object")
    if "id" in record and record["id"] != artifact_id_for_sha256(digest):
        raise ExportError("artifact id does not match its sha256")
    if "size_bytes" in record and record["size_bytes"] != len(content):
        raise ExportError(f"artifact size_bytes {record['size_bytes']!r} is not the {len(content)} bytes it carries")
    if hashlib.sha256(content).hexdigest() != digest:
        raise ExportError("artifact content does not match its sha256 (it was altered)")


def parse_line(text: str) -> tuple[str, Any]:
    """(kind, payload) of one line: ``header`` (the object), ``origin`` ((origin, key bytes)),
    ``artifact`` ((record, content bytes)), ``event`` (the export dict). Raises ExportError."""
    try:
        obj = json.loads(text)
    except ValueError:
        raise ExportError("not JSON") from None
    if not isinstance(obj, dict):
        raise ExportError("not a JSON object")
    if "palace_export" in obj:
        if obj["palace_export"] != EXPORT_VERSION:
            raise ExportError(f"export format {obj['palace_export']!r}; this palace reads format {EXPORT_VERSION}")
        return "header", obj
    if "event" in obj:
        return "event", obj["event"]
    if "origin" in obj:
        origin, key = obj.get("origin"), obj.get("public_key")
        try:
            raw = bytes.fromhex(key) if isinstance(key, str) else b""
        except ValueError:
            raw = b""
        if not isinstance(origin, str) or len(raw) != 32:
            raise ExportError("an origin line needs an origin id and a 32-byte public key in hex")
        return "origin", (origin, raw)
    if "artifact" in obj:
        record = obj["artifact"]
        if not isinstance(record, dict) or not isinstance(record.get("content_base64"), str):
            raise ExportError("an artifact line needs its record and content_base64")
        try:
            content = base64.b64decode(record["content_base64"], validate=True)
        except (binascii.Error, ValueError):
            raise ExportError("artifact content_base64 is not base64") from None
        return "artifact", ({k: v for k, v in record.items() if k != "content_base64"}, content)
    raise ExportError("neither a header, an origin, an artifact nor an event")
