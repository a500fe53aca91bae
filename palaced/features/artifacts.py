"""Operations on artifacts: content-addressed files, and patches that answer a task.

Owns: ``artifact_put``, ``artifact_get`` and ``patch_submit`` (proto/PROTOCOL.md, "Operations").
An artifact is stored by the hash of its bytes, exactly as given; a patch is an artifact plus the
``patch.ready`` event that announces it, written in one transaction, so a watcher never sees the
event without its bytes. Advisory warnings (no trailing newline, CRLF) are MemPalace's wording.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from palace_proto.errors import ValidationError
from palace_proto.event_fields import author_args
from palace_proto.tasks import review_fields
from palace_proto.validation import (
    AppendRequest,
    ListQuery,
    clean_optional,
    clean_required,
    validate_artifact_ids,
    validate_artifact_kind,
    validate_metadata,
)

from ..feature import Feature
from ..handlers.context import Context
from ..store import WriteContext, append_event, put_artifact
from ..store.aio import HEAVY_ARTIFACT_BYTES

__all__ = ["FEATURE", "OPS"]


def _patch_warnings(content: bytes) -> list[str]:
    """Advisory warnings for patch artifacts (MemPalace wording, reference §2); bytes stay as given."""
    warnings = []
    if not content.endswith(b"\n"):
        warnings.append(
            "patch content does not end with a trailing newline; git apply will reject the final hunk "
            "as corrupt — store the diff byte-exactly including its trailing newline"
        )
    if b"\r" in content:
        warnings.append(
            "patch content contains carriage returns (CRLF line endings); git apply often rejects CRLF "
            "diffs — generate the diff with LF endings"
        )
    return warnings


def _artifact_args(ctx: Context, args: Mapping[str, Any], *, kind: str | None = None) -> dict[str, Any]:
    content = args.get("content")
    if isinstance(content, str):
        content = content.encode("utf-8", "surrogatepass")
    if not isinstance(content, (bytes, bytearray)):
        raise ValidationError("content must be bytes or a string", field="content")
    if len(content) == 0:
        raise ValidationError("content must not be empty", field="content")
    if len(content) > ctx.limits.max_artifact_bytes:
        raise ValidationError(
            f"content is {len(content)} bytes; maximum is {ctx.limits.max_artifact_bytes} bytes", field="content"
        )
    return {
        "kind": validate_artifact_kind(kind or args.get("kind")),
        "created_by": clean_required("created_by", args.get("created_by")),
        "content": bytes(content),
        "metadata_json": validate_metadata(args.get("metadata"), ctx.limits),
    }


async def artifact_put(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    fields = _artifact_args(ctx, args)
    record = await ctx.store.write(lambda w: put_artifact(w, **fields), heavy=len(fields["content"]) > HEAVY_ARTIFACT_BYTES)
    record.pop("metadata", None)
    if fields["kind"] == "patch" and (warnings := _patch_warnings(fields["content"])):
        record["warnings"] = warnings
    return record


async def artifact_get(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    key = clean_required("artifact_id", args.get("artifact_id"))
    with_content = args.get("with_content", True) is not False
    return await ctx.store.get_artifact(key, with_content=with_content)


async def patch_submit(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Store a patch and append its ``patch.ready`` in one transaction.

    Only ``content`` and ``from_agent`` are required (MemPalace also requires ``stream``;
    routing is optional there too). What is missing is taken from the work being answered,
    so that the patch lands beside its task and wakes its requester:

    * ``stream``: the stream of the first event on ``correlation_id``; with no correlation,
      or none of its events held here, ``stream must be a non-empty string``.
    * ``to_agent``: the ``from_agent`` of the ``task.request`` on ``correlation_id`` (a
      ``watch --agent`` of the requester only sees events addressed to it); without such a
      request the event has no ``to_agent``.
    """
    ctx.require_writer()
    from_agent = clean_required("from_agent", args.get("from_agent"))
    fields = _artifact_args(ctx, {**args, "created_by": from_agent}, kind="patch")
    correlation_id = clean_optional("correlation_id", args.get("correlation_id"))
    stream = clean_optional("stream", args.get("stream"))
    to_agent = clean_optional("to_agent", args.get("to_agent"))
    if stream is None:
        if correlation_id is None:
            raise ValidationError(
                "stream must be a non-empty string (or pass the correlation_id of the task this patch answers, "
                "to take its stream)", field="stream")
        # Default to the stream of the work being answered, so the patch lands beside its task.
        related = await ctx.store.events_by_correlation(correlation_id, 1)
        if not related:
            raise ValidationError(
                f"stream must be a non-empty string (no event on correlation {correlation_id!r} to take it from)",
                field="stream",
            )
        stream = related[0]["stream"]
    review_by = None
    if correlation_id is not None:
        query = ListQuery.from_wire({"types": ["task.request"], "correlation_ids": [correlation_id], "limit": 1})
        requests = await ctx.store.list_events(query)
        if requests:
            to_agent = to_agent if to_agent is not None else requests[0]["from_agent"]
            review_by = review_fields(requests[0].get("metadata"))[0]
    # The author's fields as given (from_agent, topic, the git base, body, metadata…), but those
    # the patch sets itself.
    wire = {**author_args(args), "type": "patch.ready", "stream": stream, "room": args.get("room") or "patches",
            "to_agent": to_agent, "correlation_id": correlation_id, "status": "ready", "ack_of": None}
    if review_by is not None:
        # Said on the patch too, so the person asked is told it waits for them (the "review" trigger).
        metadata = wire.get("metadata")
        wire["metadata"] = {**(metadata if isinstance(metadata, dict) else {}), "review_by": review_by}
    # Other artifacts the event names (a run's log): they travel with it to every replica.
    also = list(validate_artifact_ids(args.get("artifact_ids")))
    AppendRequest.from_wire({**wire, "artifact_ids": also}, ctx.limits)  # validate before writing

    def job(w: WriteContext) -> dict[str, Any]:
        artifact = put_artifact(w, **fields)
        ids = list(dict.fromkeys([artifact["id"], *also]))
        event = append_event(w, AppendRequest.from_wire({**wire, "artifact_ids": ids}, ctx.limits))
        return {"artifact": artifact, "event": event}

    result = await ctx.store.write(job, heavy=len(fields["content"]) > HEAVY_ARTIFACT_BYTES)
    result["artifact"].pop("metadata", None)
    if warnings := _patch_warnings(fields["content"]):
        result["artifact"]["warnings"] = warnings
    return result


OPS: Final = {
    "artifact_put": artifact_put,
    "artifact_get": artifact_get,
    "patch_submit": patch_submit,
}


# -- the feature's declaration --------------------------------------------------------------------

FEATURE: Final = Feature(name="artifacts", ops=OPS, builds_on=("tasks",), inline_ops=frozenset({"artifact_get"}))
