"""The artifacts feature's MCP tools: deliver a patch, get an artifact (``core``), store one (``log``).

Each is declared with ``mcp_tools.tool`` in the group this package's declaration lists it in;
``mcp_tools.build_registry`` puts them together with the core's. Must not import trio or typer.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from palace_proto.errors import ApiError

from ...mcp_tools import Palace, Result, drop_none, field_parameters, offering, rare_options, tool
from .patch import PATCH_FIELDS

__all__ = ["mempalace_artifact_get", "mempalace_artifact_put", "mempalace_patch_submit"]


def _content(text: str | None, encoded: str | None) -> bytes | str:
    if (text is None) == (encoded is None):
        raise ApiError("pass exactly one of content (text) or content_base64 (bytes)", code="invalid_argument")
    if text is not None:
        return text
    try:
        return base64.b64decode(encoded or "", validate=True)
    except ValueError:
        raise ApiError("content_base64 is not valid base64", code="invalid_argument") from None


@tool("core", mutating=True, returns={"artifact": "object", "event": "object"},
      extras=rare_options(PATCH_FIELDS, also=("stream", "room")), description=(
          "Deliver a diff (byte-exact, with its final newline): stores it and appends patch.ready in one step; "
          "with correlation_id, stream and to_agent come from its task. Returns {success, artifact, event}."))
@offering(field_parameters(PATCH_FIELDS, defaults={"stream": None, "room": "patches"}), after=1)
async def mempalace_patch_submit(palace: Palace, /, content: str, **fields: Any) -> Result:
    return await palace.daemon.call("patch_submit", **drop_none(
        content=content, **{**fields, "from_agent": palace.speaks_as("from_agent", fields["from_agent"])}))


@tool("core", returns={"artifact": "object"}, description=(
    "Get an artifact by art_ id or sha256, verified: {artifact: {id, kind, sha256, created_by, metadata, "
    "content, …}}; bytes that are not UTF-8 come as content_base64 (content_is_base64=true)."))
async def mempalace_artifact_get(palace: Palace, /, artifact_id: str) -> Result:
    record = dict(await palace.daemon.call("artifact_get", artifact_id=artifact_id))
    raw: bytes = record.pop("content")
    if hashlib.sha256(raw).hexdigest() != record["sha256"]:
        raise ApiError(f"artifact {record['id']} failed sha256 verification", code="internal")
    try:
        record["content"] = raw.decode("utf-8")
    except UnicodeDecodeError:
        record["content_base64"] = base64.b64encode(raw).decode("ascii")
        record["content_is_base64"] = True
    return {"artifact": record}  # MemPalace's shape: skills read result["artifact"]["content"]


# The same content is the same artifact (its id is its sha256's): storing it again changes nothing.
@tool("log", mutating=True, idempotent=True, returns={"artifact": "object"}, extras=("metadata", "created_by"),
      description=(
    "Store an artifact by content (sha256). kind: patch, file, log, json or note. Text in content, or bytes "
    "in content_base64. Returns {success, artifact} (artifact.warnings for suspicious patches)."))
async def mempalace_artifact_put(
    palace: Palace, /, kind: str, content: str | None = None, content_base64: str | None = None,
    metadata: dict[str, Any] | None = None, created_by: str | None = None,
) -> Result:
    data = _content(content, content_base64)
    record = await palace.daemon.call("artifact_put", **drop_none(
        kind=kind, content=data, metadata=metadata, created_by=palace.speaks_as("created_by", created_by)))
    return {"artifact": record}
