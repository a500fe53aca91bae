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
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Final

from .envelope import SignedEvent
from .errors import RemoteProtocolError
from .peer import event_from_wire, event_to_wire

__all__ = ["EXPORT_VERSION", "ExportError", "artifact_line", "event_from_export", "event_line", "header_line",
           "origin_line", "parse_line"]

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
