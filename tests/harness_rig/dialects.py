"""The four provider APIs the harnesses speak, as far as a scripted model needs them (pure).

For each: which requests are generations (the rest are side endpoints answered with a fixed
document: token counts, model lists, probes), what a generation request offers (tool names),
carries (tool results, the text of its system prompt and messages), and how a turn is written
back, streamed or not. Written from each provider's API reference:

* Anthropic Messages (Claude Code): ``POST /v1/messages``, SSE ``message_start`` →
  ``content_block_start/delta/stop`` (``input_json_delta`` for a ``tool_use``) → ``message_delta``
  (``stop_reason``) → ``message_stop``; ``POST /v1/messages/count_tokens``.
* OpenAI Responses (Codex): ``POST /v1/responses``, SSE ``response.created`` →
  ``response.output_item.added/done`` (a ``function_call`` or ``message`` item) → ``response.completed``;
  tool results come back as ``function_call_output`` input items.
* OpenAI Chat Completions (OpenCode's ``@ai-sdk/openai-compatible``): ``POST /v1/chat/completions``,
  ``chat.completion.chunk`` records with ``tool_calls`` deltas, then ``finish_reason`` and ``data: [DONE]``;
  results are ``role: tool`` messages.
* Gemini (Gemini CLI): ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` and
  ``:generateContent``, ``functionCall`` parts out, ``functionResponse`` parts back; ``:countTokens``.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from . import sse
from .script import Text, ToolCall, ToolResult, Turn

__all__ = ["DIALECTS", "Anthropic", "ChatCompletions", "Dialect", "Gemini", "Reply", "Responses"]

JSON = "application/json"
EVENT_STREAM = "text/event-stream"
#: between a Responses namespace and a tool in it, in the names the rig gives them
NAMESPACE_JOIN = "__"


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: bytes

    @classmethod
    def json(cls, document: Any, status: int = 200) -> Reply:
        return cls(status, JSON, json.dumps(document).encode())

    @classmethod
    def stream(cls, data: bytes) -> Reply:
        return cls(200, EVENT_STREAM, data)


def _texts(value: Any) -> list[str]:
    """Every string under ``text`` keys (and plain string contents) in a message structure."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [t for item in value for t in _texts(item)]
    if isinstance(value, dict):
        out = []
        for key in ("text", "content", "parts"):
            if key in value:
                out += _texts(value[key])
        return out
    return []


def schema_example(schema: Any) -> Any:
    """The simplest value a JSON schema (OpenAPI-style type names in any case) accepts."""
    if not isinstance(schema, dict):
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: schema_example(properties.get(name)) for name in schema.get("required") or properties}
    if kind == "array":
        return [schema_example(schema["items"])] * int(schema.get("minItems") or 0) if "items" in schema else []
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    return ""


class Dialect:
    """One provider API. ``route`` says what a request is: "generate", a fixed ``Reply``, or None (unknown)."""

    name: ClassVar[str]

    def route(self, method: str, path: str, body: Any) -> str | Reply | None:
        raise NotImplementedError

    def tools(self, body: Any) -> list[str]:
        raise NotImplementedError

    def results(self, body: Any) -> list[ToolResult]:
        raise NotImplementedError

    def prompt_text(self, body: Any) -> str:
        """The system prompt / instructions and every message's text, joined (tool results too)."""
        raise NotImplementedError

    def render(self, turn: Turn, body: Any, path: str) -> Reply:
        raise NotImplementedError

    def side_text(self, body: Any) -> str:
        """The answer to a generation without tools (a title, a routing decision): short words, or
        the least JSON its schema allows when it asks for JSON (so the harness does not retry)."""
        return "OK"


class Anthropic(Dialect):
    name = "anthropic"

    def route(self, method: str, path: str, body: Any) -> str | Reply | None:
        if method != "POST":  # reachability probes (HEAD /, GET /v1/models …)
            return Reply.json({"data": [], "has_more": False})
        if path == "/v1/messages":
            return "generate"
        if path == "/v1/messages/count_tokens":
            return Reply.json({"input_tokens": 1000})
        return None

    def tools(self, body: Any) -> list[str]:
        return [t["name"] for t in body.get("tools") or [] if isinstance(t, dict) and "name" in t]

    def results(self, body: Any) -> list[ToolResult]:
        found = []
        for message in body.get("messages") or []:
            content = message.get("content")
            if isinstance(content, list):
                found += [ToolResult(b.get("tool_use_id"), b.get("content"), bool(b.get("is_error")))
                          for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        return found

    def prompt_text(self, body: Any) -> str:
        return "\n".join(_texts(body.get("system") or []) + _texts(body.get("messages") or []))

    def render(self, turn: Turn, body: Any, path: str) -> Reply:
        model = body.get("model", "scripted")
        message_id = f"msg_rig_{time.monotonic_ns()}"
        usage = {"input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        if isinstance(turn, ToolCall):
            block: dict[str, Any] = {"type": "tool_use", "id": turn.call_id, "name": turn.name, "input": turn.args}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": turn.text}
            stop = "end_turn"
        if not body.get("stream"):
            return Reply.json({"id": message_id, "type": "message", "role": "assistant", "model": model,
                               "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage})
        start = {**block, "input": {}} if isinstance(turn, ToolCall) else {**block, "text": ""}
        delta = ({"type": "input_json_delta", "partial_json": json.dumps(turn.args)} if isinstance(turn, ToolCall)
                 else {"type": "text_delta", "text": turn.text})
        return Reply.stream(sse.frames([
            ("message_start", {"type": "message_start", "message": {
                "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": None, "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 10}}),
            ("message_stop", {"type": "message_stop"}),
        ]))


class Responses(Dialect):
    """Codex groups each MCP server's tools in a ``namespace`` tool (``mcp__palace``); the rig names
    them ``mcp__palace__mempalace_…``, as Codex does internally, and calls them by both parts."""

    name = "responses"
    MODELS: ClassVar[dict[str, Any]] = {"object": "list", "data": [], "models": []}

    def route(self, method: str, path: str, body: Any) -> str | Reply | None:
        if method == "POST" and path.rstrip("/").endswith("/responses"):
            return "generate"
        if method in ("GET", "HEAD"):
            return Reply.json(self.MODELS)
        return None

    def tools(self, body: Any) -> list[str]:
        names = []
        for tool in body.get("tools") or []:
            if not isinstance(tool, dict):
                continue
            if tool.get("type") == "namespace":  # MCP tools grouped under their server's name
                names += [f"{tool.get('name', '')}{NAMESPACE_JOIN}{t['name']}" for t in tool.get("tools") or [] if "name" in t]
            elif "name" in tool:
                names.append(tool["name"])
        return names

    def results(self, body: Any) -> list[ToolResult]:
        items = body.get("input") if isinstance(body.get("input"), list) else []
        return [ToolResult(i.get("call_id"), i.get("output"), i.get("status") == "failed") for i in items
                if isinstance(i, dict) and i.get("type") in ("function_call_output", "custom_tool_call_output")]

    def prompt_text(self, body: Any) -> str:
        items = body.get("input") if isinstance(body.get("input"), list) else [body.get("input") or ""]
        texts = _texts(body.get("instructions") or [])
        for item in items:
            if isinstance(item, str):
                texts.append(item)
            elif isinstance(item, dict):
                texts += _texts(item.get("content") or []) + _texts(item.get("output") or [])
        return "\n".join(texts)

    def render(self, turn: Turn, body: Any, path: str) -> Reply:
        response_id = f"resp_rig_{time.monotonic_ns()}"
        if isinstance(turn, ToolCall):
            # Codex's MCP tools are namespaced: the call names the namespace and the tool apart.
            item: dict[str, Any] = {"type": "function_call", "id": f"fc_{turn.call_id}", "call_id": turn.call_id,
                                    "name": turn.name, "arguments": json.dumps(turn.args), "status": "completed"}
            namespace = self._namespace_of(turn.name, body)
            if namespace is not None:
                item["namespace"], item["name"] = namespace, turn.name[len(namespace) + len(NAMESPACE_JOIN):]
            elif any(t.get("type") == "custom" and t.get("name") == turn.name for t in body.get("tools") or []):
                # a freeform tool (Codex's apply_patch): its one argument is its text input
                item = {"type": "custom_tool_call", "id": f"ctc_{turn.call_id}", "call_id": turn.call_id,
                        "name": turn.name, "input": turn.args["input"], "status": "completed"}
        else:
            item = {"type": "message", "id": f"msg_rig_{time.monotonic_ns()}", "role": "assistant",
                    "status": "completed", "content": [{"type": "output_text", "text": turn.text, "annotations": []}]}
        usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 110}
        response = {"id": response_id, "object": "response", "created_at": int(time.time()), "status": "completed",
                    "model": body.get("model", "scripted"), "output": [item], "usage": usage}
        if not body.get("stream"):
            return Reply.json(response)
        records: list[tuple[str | None, Any]] = [
            ("response.created", {"type": "response.created", "sequence_number": 0,
                                  "response": {**response, "status": "in_progress", "output": []}}),
            ("response.output_item.added", {"type": "response.output_item.added", "sequence_number": 1,
                                            "output_index": 0, "item": item}),
        ]
        if isinstance(turn, Text):
            records.append(("response.output_text.delta", {
                "type": "response.output_text.delta", "sequence_number": 2, "item_id": item["id"], "output_index": 0,
                "content_index": 0, "delta": turn.text}))
        records += [
            ("response.output_item.done", {"type": "response.output_item.done", "sequence_number": 3,
                                           "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed", "sequence_number": 4, "response": response}),
        ]
        return Reply.stream(sse.frames(records))

    @staticmethod
    def _namespace_of(name: str, body: Any) -> str | None:
        for tool in body.get("tools") or []:
            if isinstance(tool, dict) and tool.get("type") == "namespace":
                prefix = tool.get("name", "")
                if any(f"{prefix}{NAMESPACE_JOIN}{t.get('name', '')}" == name for t in tool.get("tools") or []):
                    return prefix
        return None


class ChatCompletions(Dialect):
    name = "chat"

    def route(self, method: str, path: str, body: Any) -> str | Reply | None:
        if method == "POST" and path.rstrip("/").endswith("/chat/completions"):
            return "generate"
        if method in ("GET", "HEAD"):
            return Reply.json({"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "rig"}]})
        return None

    def tools(self, body: Any) -> list[str]:
        return [t["function"]["name"] for t in body.get("tools") or []
                if isinstance(t, dict) and isinstance(t.get("function"), dict) and "name" in t["function"]]

    def results(self, body: Any) -> list[ToolResult]:
        return [ToolResult(m.get("tool_call_id"), m.get("content")) for m in body.get("messages") or []
                if isinstance(m, dict) and m.get("role") == "tool"]

    def prompt_text(self, body: Any) -> str:
        return "\n".join(_texts(body.get("messages") or []))

    def render(self, turn: Turn, body: Any, path: str) -> Reply:
        base = {"id": f"chatcmpl-rig-{time.monotonic_ns()}", "created": int(time.time()),
                "model": body.get("model", "scripted")}
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        if isinstance(turn, ToolCall):
            call = {"id": turn.call_id, "type": "function",
                    "function": {"name": turn.name, "arguments": json.dumps(turn.args)}}
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": turn.text}, "stop"
        if not body.get("stream"):
            return Reply.json({**base, "object": "chat.completion", "usage": usage,
                               "choices": [{"index": 0, "message": message, "finish_reason": finish}]})
        delta = dict(message)
        if isinstance(turn, ToolCall):
            delta["tool_calls"] = [{"index": 0, **call}]
        chunk = {**base, "object": "chat.completion.chunk"}
        return Reply.stream(sse.frames([
            (None, {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}),
            (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage}),
            (None, "[DONE]"),
        ]))


class Gemini(Dialect):
    name = "gemini"
    _PATH: ClassVar = re.compile(r"^/v1(?:beta|alpha)?/models/(?P<model>[^:/]+):(?P<method>\w+)$")

    def route(self, method: str, path: str, body: Any) -> str | Reply | None:
        match = self._PATH.match(path)
        if method == "POST" and match:
            if match["method"] in ("streamGenerateContent", "generateContent"):
                return "generate"
            if match["method"] == "countTokens":
                return Reply.json({"totalTokens": 1000})
            if match["method"] in ("embedContent", "batchEmbedContents"):
                return Reply.json({"embedding": {"values": [0.0] * 8}, "embeddings": []})
        if method in ("GET", "HEAD"):
            return Reply.json({"models": []})
        return None

    def tools(self, body: Any) -> list[str]:
        return [d["name"] for t in body.get("tools") or [] if isinstance(t, dict)
                for d in t.get("functionDeclarations") or t.get("function_declarations") or [] if "name" in d]

    def results(self, body: Any) -> list[ToolResult]:
        found = []
        for content in body.get("contents") or []:
            for part in content.get("parts") or []:
                response = part.get("functionResponse") if isinstance(part, dict) else None
                if isinstance(response, dict):
                    raw = response.get("response")
                    error = isinstance(raw, dict) and "error" in raw and len(raw) == 1
                    found.append(ToolResult(response.get("id"), raw, error))
        return found

    def prompt_text(self, body: Any) -> str:
        system = body.get("systemInstruction") or body.get("system_instruction") or {}
        return "\n".join(_texts(system) + _texts(body.get("contents") or []))

    def side_text(self, body: Any) -> str:
        config = body.get("generationConfig") or {}
        if config.get("responseMimeType") == "application/json":
            return json.dumps(schema_example(config.get("responseJsonSchema") or config.get("responseSchema") or {}))
        return super().side_text(body)

    def render(self, turn: Turn, body: Any, path: str) -> Reply:
        if isinstance(turn, ToolCall):
            part: dict[str, Any] = {"functionCall": {"id": turn.call_id, "name": turn.name, "args": turn.args}}
        else:
            part = {"text": turn.text}
        document = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
                    "modelVersion": match["model"] if (match := self._PATH.match(path)) else "scripted"}
        if ":streamGenerateContent" in path:
            return Reply.stream(sse.frames([(None, document)]))
        return Reply.json(document)


DIALECTS: dict[str, type[Dialect]] = {d.name: d for d in (Anthropic, Responses, ChatCompletions, Gemini)}
