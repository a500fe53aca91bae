"""A small MCP server on stdio: JSON-RPC 2.0, one message per line, for ``palacectl mcp``.

Owns: the protocol around palace's tools and resources — the handshake of both generations of
MCP (``initialize`` with ``notifications/initialized``, as Claude Code, Codex, Gemini CLI and
OpenCode speak it, and ``server/discover`` with the version in every request's ``_meta``, as the
2026 SDKs do), ``tools/list`` with schemas built from the tools' signatures (and the results' schemas and the
annotations each declares), ``tools/call`` with
their arguments checked (and coerced the lax way models need: ``"5"`` for 5), resources and
their templates, ``ping``, cancellation, batches, and errors by JSON-RPC code; the client's
capabilities (``initialize``) and the requests this server sends it (``request_client``: an
``elicitation/create``, answered by the person at the client, never by its model), with what a
server runs beside the requests for the session (``serve_background``); and the
``Registry`` tools and resources are declared into by decorator (a module's: palace's tools are
module-level functions in ``mcp_tools.py`` and the features' tools modules, put together by
``mcp_tools.build_registry``; or a server's own). It knows nothing of palace, and
imports nothing but the stdlib (trio only once it serves asynchronously; never the ``mcp`` SDK).

Why not the ``mcp`` SDK: importing it takes ~0.5-0.8 s here, and harnesses give a server about
a second (Codex) or nothing at all (Claude Code's ``--print``) before the first turn: palace's
tools went missing with no error (issue 26). The first answers here (``initialize``,
``tools/list``) are given by blocking reads and writes before trio is even imported (a thread
imports it meanwhile); the server goes async at the first request that needs the daemon.

Nothing but protocol messages goes to stdout.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import sys
import threading
import types
import typing
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

__all__ = ["LEGACY_VERSIONS", "MODERN_VERSIONS", "McpError", "Registry", "ResourceSpec", "Route", "StdioServer",
           "ToolSpec"]

#: the handshake generation of ``initialize`` (the newest first)
LEGACY_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
#: the generation of ``server/discover``, the version named in every request's ``_meta``
MODERN_VERSIONS: Final = ("2026-07-28",)
_META_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
_META_SERVER: Final = "io.modelcontextprotocol/serverInfo"
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
# Why 64 MiB: an artifact of the daemon's largest size, base64-encoded, in one line; a longer line
# is refused (and skipped to its end), never held whole.
MAX_LINE_BYTES: Final = 64 * 1024 * 1024
# Why 64: requests a harness may have in flight at once (waits included); more wait their turn.
MAX_IN_FLIGHT: Final = 64
# Why 5 s: how long telling the client a request of ours is cancelled may take (a stuck pipe must
# not hold up what cancelled it).
_CANCEL_NOTICE_S: Final = 5.0
# The methods answered before trio is imported: they need nothing but what is defined here.
# What a line longer than MAX_LINE_BYTES is read as (its bytes are not kept).
_OVERSIZED: Final = b"\0oversized"
_STATIC: Final = frozenset({"initialize", "server/discover", "ping", "tools/list", "resources/list",
                            "resources/templates/list", "prompts/list", "logging/setLevel"})


class McpError(Exception):
    """A JSON-RPC error answer (``code`` from the JSON-RPC and MCP ranges)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def to_wire(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


@dataclasses.dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    fn: Callable[..., Awaitable[dict[str, Any]]]
    input_schema: dict[str, Any]
    annotations: dict[str, Any]
    #: Arguments accepted but, in a compact listing, only named in the description (their
    #: schemas cost every agent tokens on every turn; issue 26).
    extras: tuple[str, ...] = ()
    #: ``fn`` takes the server calling it first, positional-only (no argument of the tool).
    takes_server: bool = False
    #: its result goes out as one text block only, with no ``structuredContent`` (Claude Code's
    #: permission prompt tool must answer exactly one text block holding its JSON)
    text_only: bool = False
    #: a front tool: ``fn`` gets every argument as sent (none refused, none coerced) and answers
    #: with the ``Route`` to the tool that does the work, or with a result of its own
    routes: bool = False
    #: the JSON schema its ``structuredContent`` validates against (MCP 2025-06-18's
    #: ``outputSchema``: a client may refuse a result that does not); None: not declared
    output_schema: dict[str, Any] | None = None

    @property
    def read_only(self) -> bool:
        return bool(self.annotations.get("readOnlyHint"))

    def to_wire(self, full: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "description": self.description, "inputSchema": self.input_schema}
        if not full and self.extras:
            out["inputSchema"] = {**self.input_schema, "properties": {
                k: v for k, v in self.input_schema["properties"].items() if k not in self.extras}}
            out["description"] = f"{self.description} Also: {', '.join(self.extras)}."
        # What the client reads and the model is not given (harnesses hand a model the name, the
        # description and the input schema): the result's schema and the hints.
        if self.output_schema is not None and not self.text_only:
            out["outputSchema"] = self.output_schema
        out["annotations"] = self.annotations
        return out


@dataclasses.dataclass(frozen=True)
class Route:
    """Where a front tool sends a call: another registered tool, with its arguments. The call then
    goes that tool's way (its checks, its gates, its result); arguments it does not take are
    dropped."""

    tool: str
    arguments: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ResourceSpec:
    uri: str
    name: str
    description: str
    mime_type: str
    fn: Callable[..., Awaitable[str]]
    #: ``fn`` takes the server reading it first, positional-only (no variable of the URI).
    takes_server: bool = False

    @property
    def template(self) -> bool:
        return "{" in self.uri

    def to_wire(self) -> dict[str, Any]:
        key = "uriTemplate" if self.template else "uri"
        return {key: self.uri, "name": self.name, "description": self.description, "mimeType": self.mime_type}

    def match(self, uri: str) -> dict[str, str] | None:
        """The template's variables in ``uri`` (each one path segment), or None."""
        if not self.template:
            return {} if uri == self.uri else None
        head, _, rest = self.uri.partition("{")
        var, _, tail = rest.partition("}")
        if not uri.startswith(head) or not uri.endswith(tail) or len(uri) <= len(head) + len(tail):
            return None
        value = uri[len(head):len(uri) - len(tail)]
        return {var: value} if "/" not in value else None


# -- schemas from signatures --------------------------------------------------------------------


def _schema_of(hint: Any) -> dict[str, Any]:
    """The JSON schema of a parameter's type (the optional ``None`` half left out)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        parts = [_schema_of(a) for a in typing.get_args(hint) if a is not type(None)]
        return parts[0] if len(parts) == 1 else {"anyOf": parts}
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if origin is list:
        (item,) = typing.get_args(hint) or (str,)
        return {"type": "array", "items": _schema_of(item)}
    if origin is dict or hint is dict:
        return {"type": "object", "additionalProperties": True}
    raise TypeError(f"no JSON schema for {hint!r}")


def _takes_server(fn: Callable[..., Any]) -> bool:
    """Does ``fn`` take the server first, as its one positional-only parameter?"""
    kinds = [p.kind for p in inspect.signature(fn).parameters.values()]
    if kinds.count(inspect.Parameter.POSITIONAL_ONLY) > 1:
        raise TypeError(f"{fn.__name__}: only the server may be positional-only")
    return bool(kinds) and kinds[0] is inspect.Parameter.POSITIONAL_ONLY


def _signature_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The input schema of a tool: its parameters but the server."""
    hints = typing.get_type_hints(fn)
    properties: dict[str, Any] = {}
    required = []
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            continue  # the server calling it (_takes_server)
        schema = _schema_of(hints[name])
        if param.default is inspect.Parameter.empty:
            required.append(name)
        elif param.default is not None:
            schema = {**schema, "default": param.default}
        properties[name] = schema
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    return out


def _coerce(name: str, value: Any, schema: dict[str, Any]) -> Any:
    """``value`` as ``schema`` wants it, the lax way a model's JSON needs ("5" for 5, "true" for
    true); a value that cannot be is refused, naming the argument."""
    if "anyOf" in schema:
        for option in schema["anyOf"]:
            try:
                return _coerce(name, value, option)
            except ValueError:
                continue
        raise ValueError(f"{name} must be {' or '.join(_kind(o) for o in schema['anyOf'])}")
    kind = schema.get("type")
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.strip().lower() in ("true", "1", "yes")
    if kind == "integer" and not isinstance(value, bool):
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value.strip())
    if kind == "number" and not isinstance(value, bool):
        if isinstance(value, (int, float)):
            return value
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    if kind == "array" and isinstance(value, list):
        return [_coerce(f"{name}[]", item, schema.get("items", {})) for item in value]
    if kind == "object" and isinstance(value, dict):
        return value
    if not kind:
        return value
    raise ValueError(f"{name} must be {_kind(schema)}, not {json.dumps(value)[:60]}")


def _kind(schema: dict[str, Any]) -> str:
    kind = schema.get("type", "a value")
    if kind == "array":
        return f"a list of {_kind(schema.get('items', {}))}s"
    return {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
            "object": "an object"}.get(kind, kind)


# -- the registry -------------------------------------------------------------------------------


class Registry:
    """Tools and resources registered by decorator, in the order they were.

    A tool or resource is an async function. Its signature is its input schema (a resource's are
    the variables of its URI); a module-level one takes the server calling it as its first,
    positional-only parameter (``async def who(server, /) -> dict``), which is no argument.
    """

    def __init__(self) -> None:
        self.tools: dict[str, ToolSpec] = {}
        self.resources: list[ResourceSpec] = []

    def __repr__(self) -> str:
        return f"<Registry tools={len(self.tools)} resources={len(self.resources)}>"

    def tool(self, description: str, *, read_only: bool, idempotent: bool | None = None, destructive: bool = False,
             open_world: bool = False, extras: tuple[str, ...] = (), text_only: bool = False, routes: bool = False,
             schema: dict[str, Any] | None = None, output_schema: dict[str, Any] | None = None,
             ) -> Callable[[Callable[..., Awaitable[dict[str, Any]]]], Any]:
        """Register an async function as a tool named as it is. ``read_only``, ``idempotent``
        (default: as ``read_only``), ``destructive``, ``open_world``: its annotations (MCP's
        hints); ``extras``: optional arguments a compact listing names in the description instead
        of the schema; ``text_only``, ``routes``, ``output_schema``: see ToolSpec; ``schema``: the
        input schema, when not the signature's (a front tool's)."""
        def register(fn: Callable[..., Awaitable[dict[str, Any]]]) -> Any:
            if read_only and (destructive or idempotent is False):
                raise TypeError(f"{fn.__name__}: a read-only tool neither destroys nor differs when called again")
            # Every hint said, each deliberately: MCP's defaults (absent) say the opposite of what
            # holds for most of palace's tools (that a tool may destroy, and reach the world).
            annotations: dict[str, Any] = {
                "readOnlyHint": read_only, "destructiveHint": destructive,
                "idempotentHint": read_only if idempotent is None else idempotent, "openWorldHint": open_world}
            input_schema = schema if schema is not None else _signature_schema(fn)
            if not set(extras) <= set(input_schema["properties"]) - set(input_schema.get("required", ())):
                raise TypeError(f"{fn.__name__}: extras must be optional parameters of it")
            if fn.__name__ in self.tools:
                raise TypeError(f"{fn.__name__}: a tool of that name is registered already")
            self.tools[fn.__name__] = ToolSpec(fn.__name__, description, fn, input_schema, annotations, extras,
                                               _takes_server(fn), text_only, routes, output_schema)
            return fn
        return register

    def resource(self, uri: str, *, name: str, mime_type: str,
                 description: str) -> Callable[[Callable[..., Awaitable[str]]], Any]:
        def register(fn: Callable[..., Awaitable[str]]) -> Any:
            self.resources.append(ResourceSpec(uri, name, description, mime_type, fn, _takes_server(fn)))
            return fn
        return register


# -- the server ---------------------------------------------------------------------------------


class StdioServer:
    """Tools and resources, and the protocol to serve them on stdin/stdout."""

    def __init__(self, name: str, version: str, instructions: str, registry: Registry | None = None) -> None:
        """``registry``: the tools and resources served (by default a new one, filled by
        ``server.tool`` and ``server.resource``; what those add to a given one joins it)."""
        self.name, self.version, self.instructions = name, version, instructions
        self.registry = Registry() if registry is None else registry
        self.tools = self.registry.tools
        self.full_schemas = True  # False: tools/list leaves each tool's extras out of its schema
        self.resources = self.registry.resources
        self._initialized_version = LEGACY_VERSIONS[0]
        #: what the client said it supports (``initialize``'s ``capabilities``; the 2026 generation
        #: sends none here: it declares them per request, so nothing is asked of it in between)
        self.client_capabilities: dict[str, Any] = {}
        #: the client sent ``notifications/initialized``: requests may go to it from now on
        self.client_ready = False
        self._say: Callable[[Any], Awaitable[None]] | None = None  # set while serving asynchronously
        self._asked: dict[str, Any] = {}  # a request sent to the client -> where its answer goes
        self._requests_sent = 0

    def tool(self, description: str, *, read_only: bool, idempotent: bool | None = None, destructive: bool = False,
             extras: tuple[str, ...] = (), output_schema: dict[str, Any] | None = None,
             ) -> Callable[[Callable[..., Awaitable[dict[str, Any]]]], Any]:
        """Register an async function as a tool of this server (``Registry.tool``)."""
        return self.registry.tool(description, read_only=read_only, idempotent=idempotent, destructive=destructive,
                                  extras=extras, output_schema=output_schema)

    def resource(self, uri: str, *, name: str, mime_type: str,
                 description: str) -> Callable[[Callable[..., Awaitable[str]]], Any]:
        """Register an async function as a resource of this server (``Registry.resource``)."""
        return self.registry.resource(uri, name=name, mime_type=mime_type, description=description)

    # -- what subclasses may narrow -----------------------------------------------------------

    def listed_tools(self) -> Iterable[ToolSpec]:
        return self.tools.values()

    async def run_tool(self, spec: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
        """A tool's result for its checked arguments (what it raises is a tool error, but McpError)."""
        if spec.takes_server:
            return await spec.fn(self, **arguments)
        return await spec.fn(**arguments)

    async def before_call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Checks of a call before its arguments are (raise McpError); returns the arguments."""
        return arguments

    def not_offered(self, name: str) -> str | None:
        """Why a registered tool may not be called in this server's configuration, or None."""
        return None

    def wants_background(self) -> bool:
        """Whether to serve asynchronously now, before a request needs it (``serve_background``
        has something to run), once the client is ready; by default not: the static answers come
        before trio is imported."""
        return False

    async def serve_background(self) -> None:
        """What this server runs beside the requests while it serves asynchronously (cancelled
        when the input ends); by default nothing."""

    def refused_route(self, front: ToolSpec, name: str, reason: str) -> dict[str, Any] | None:
        """What front tool ``front`` answers when tool ``name``, which it routed a call to, refuses
        the call's arguments (``reason``): a result of its own, or None (that tool's error)."""
        return None

    # -- answering one message ----------------------------------------------------------------

    def answer_static(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The answers that need nothing from the daemon."""
        if method == "initialize":
            capabilities = params.get("capabilities")
            self.client_capabilities = dict(capabilities) if isinstance(capabilities, dict) else {}
            asked = params.get("protocolVersion")
            self._initialized_version = asked if asked in LEGACY_VERSIONS else LEGACY_VERSIONS[0]
            return {"protocolVersion": self._initialized_version, "capabilities": self._capabilities(),
                    "serverInfo": {"name": self.name, "version": self.version}, "instructions": self.instructions}
        if method == "server/discover":
            return {"supportedVersions": list(MODERN_VERSIONS), "capabilities": self._capabilities(),
                    "instructions": self.instructions}
        if method in ("ping", "logging/setLevel"):
            return {}
        if method == "tools/list":
            return {"tools": [t.to_wire(self.full_schemas) for t in self.listed_tools()]}
        if method == "resources/list":
            return {"resources": [r.to_wire() for r in self.resources if not r.template]}
        if method == "resources/templates/list":
            return {"resourceTemplates": [r.to_wire() for r in self.resources if r.template]}
        if method == "prompts/list":
            return {"prompts": []}
        raise McpError(METHOD_NOT_FOUND, "Method not found", method)

    def _capabilities(self) -> dict[str, Any]:
        return {"tools": {"listChanged": False}, "resources": {"listChanged": False, "subscribe": False},
                "prompts": {"listChanged": False}}

    async def answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "tools/call":
            return await self._call_tool(params)
        if method == "resources/read":
            return await self._read_resource(params)
        return self.answer_static(method, params)

    async def _call_tool(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        arguments = params.get("arguments") or {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise McpError(INVALID_PARAMS, "tools/call needs a tool name and an arguments object")
        spec = self.tools.get(name)
        if spec is None:
            return _tool_error(f"Unknown tool: {name}")
        refusal = self.not_offered(name)
        if refusal is not None:
            return _tool_error(refusal)
        front: ToolSpec | None = None
        if spec.routes:
            routed = await (spec.fn(self, **arguments) if spec.takes_server else spec.fn(**arguments))
            if not isinstance(routed, Route):
                return self._tool_result(spec, routed)  # the front tool's own answer (a parse error)
            if routed.tool not in self.tools:
                return _tool_error(f"{name}: {routed.tool} is not a tool of this server")
            # The tool it routes to is offered through it, whatever the offered set says.
            front, name, spec = spec, routed.tool, self.tools[routed.tool]
            arguments = {k: v for k, v in routed.arguments.items() if k in spec.input_schema["properties"]}
        arguments = await self.before_call(name, arguments)
        properties = spec.input_schema["properties"]
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            # A misspelt filter must not silently widen a list or a wait (MemPalace's answer too).
            # (MemPalace 3.11's words, then what the tool does take.)
            takes = f"it takes: {', '.join(sorted(properties))}" if properties else "it takes no arguments"
            raise McpError(INVALID_PARAMS, f"Unknown parameter '{unknown[0]}' for tool {name} ({takes})")
        missing = [p for p in spec.input_schema.get("required", ()) if arguments.get(p) is None]
        if missing:
            reason = f"Missing required parameter '{missing[0]}' for tool {name}"  # MemPalace 3.11's words
            return self._refused(front, name, reason, reason)
        try:
            values = {key: None if value is None else _coerce(key, value, properties[key])
                      for key, value in arguments.items()}
        except ValueError as exc:
            return self._refused(front, name, str(exc), f"Error executing tool {name}: {exc}")
        try:
            result = await self.run_tool(spec, values)
        except McpError:
            raise
        except Exception as exc:  # a tool's own failure is its result, as the SDK had it
            return _tool_error(f"Error executing tool {name}: {exc}")
        return self._tool_result(spec, result)

    def _refused(self, front: ToolSpec | None, name: str, reason: str, text: str) -> dict[str, Any]:
        """The answer to a call whose arguments tool ``name`` refuses: the tool error ``text``, or,
        reached through a front tool, that tool's answer when it has one (``refused_route``)."""
        if front is not None and (own := self.refused_route(front, name, reason)) is not None:
            return self._tool_result(front, own)
        return _tool_error(text)

    @staticmethod
    def _tool_result(spec: ToolSpec, result: dict[str, Any]) -> dict[str, Any]:
        text = json.dumps(result, ensure_ascii=False, separators=(",", ":"))
        if spec.text_only:
            return {"content": [{"type": "text", "text": text}], "isError": False}
        return {"content": [{"type": "text", "text": text}], "structuredContent": result, "isError": False}

    async def _read_resource(self, params: dict[str, Any]) -> dict[str, Any]:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise McpError(INVALID_PARAMS, "resources/read needs a uri")
        for spec in self.resources:
            found = spec.match(uri)
            if found is not None:
                text = await (spec.fn(self, **found) if spec.takes_server else spec.fn(**found))
                return {"contents": [{"uri": uri, "mimeType": spec.mime_type, "text": text}]}
        raise McpError(INVALID_PARAMS, f"Unknown resource: {uri}")

    def _modern(self, params: dict[str, Any]) -> bool:
        meta = params.get("_meta")
        return isinstance(meta, dict) and meta.get(_META_VERSION) in MODERN_VERSIONS

    def _reply(self, message_id: Any, method: str, params: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        if self._modern(params) or method == "server/discover":
            result = {**result, "resultType": "complete", "_meta": {_META_SERVER: {"name": self.name,
                                                                                   "version": self.version}}}
            if method.endswith("/list") or method == "server/discover":
                result.update(cacheScope="private", ttlMs=0)
        return {"jsonrpc": "2.0", "id": message_id, "result": result}

    # -- serving stdio --------------------------------------------------------------------------

    def serve_stdio(self, warm: Callable[[], None] | None = None) -> None:
        """Serve until stdin ends. The static answers are given by blocking IO, before trio is
        imported (``warm`` is run meanwhile in a thread: the imports the rest needs); at the first
        message needing the daemon, the rest is served by trio, that message first."""
        warming = threading.Thread(target=warm, name="mcp-warm", daemon=True) if warm else None
        if warming is not None:
            warming.start()
        stdin, stdout = _Lines(sys.stdin.fileno()), sys.stdout.buffer
        pending: list[Any] = []
        while True:
            line = stdin.next()
            if line is None:
                return
            message = self._parse(line, lambda reply: _write(stdout, reply))
            if message is None:
                continue
            if not _all_static(message):
                pending.append(message)
                break
            _write(stdout, self._answer_now(message))
            if self.client_ready and self.wants_background():
                break
        if warming is not None:
            warming.join()
        import trio

        trio.run(self._serve_async, pending, stdin)

    def _parse(self, line: bytes, say: Callable[[dict[str, Any]], None]) -> Any:
        if line is _OVERSIZED or len(line) > MAX_LINE_BYTES:
            say({"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST,
                                                         "message": f"message over {MAX_LINE_BYTES} bytes"}})
            return None
        try:
            return json.loads(line)
        except ValueError:
            if line.strip():
                say({"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": "Parse error"}})
            return None

    def _answer_now(self, message: Any) -> Any:
        if isinstance(message, list):
            replies = [r for r in (self._answer_one_static(m) for m in message) if r is not None]
            return replies or None
        return self._answer_one_static(message)

    def _answer_one_static(self, message: Any) -> dict[str, Any] | None:
        checked = _checked(message)
        if isinstance(checked, dict):  # the error answer to a bad message
            return checked
        message_id, method, params = checked
        if message_id is None:
            self._notified(method)
            return None  # a notification: nothing to answer
        try:
            return self._reply(message_id, method, params, self.answer_static(method, params))
        except McpError as exc:
            return {"jsonrpc": "2.0", "id": message_id, "error": exc.to_wire()}

    def _notified(self, method: str) -> None:
        if method == "notifications/initialized":
            self.client_ready = True

    async def request_client(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send the client a request and return its answer's result (only while serving
        asynchronously: ``serve_background`` and the tools run then). Cancelled, it tells the
        client so (``notifications/cancelled``), as MCP asks of either side.

        Raises:
            McpError: the client answered with an error.
            RuntimeError: the server is not serving asynchronously.
        """
        import trio

        if self._say is None:
            raise RuntimeError("requests go to the client only while the server serves asynchronously")
        self._requests_sent += 1
        request_id = f"palace-{self._requests_sent}"  # never one of the client's own ids: they answer us
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._asked[request_id] = send
        try:
            await self._say({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            answer = await receive.receive()
        except trio.Cancelled:
            with trio.CancelScope(shield=True), trio.move_on_after(_CANCEL_NOTICE_S):
                await self._say({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                 "params": {"requestId": request_id, "reason": "no longer needed"}})
            raise
        finally:
            self._asked.pop(request_id, None)
        error = answer.get("error")
        if error is not None:
            error = error if isinstance(error, dict) else {}
            code = error.get("code")
            raise McpError(code if isinstance(code, int) else INVALID_REQUEST, str(error.get("message") or "error"),
                           error.get("data"))
        result = answer.get("result")
        return result if isinstance(result, dict) else {}

    def _answered(self, message: Any) -> bool:
        """Hand the client's answer to a request of ours to its sender; False if it is no answer."""
        if not isinstance(message, dict) or "method" in message or not ("result" in message or "error" in message):
            return False
        request_id = message.get("id")
        waiting = self._asked.pop(request_id, None) if isinstance(request_id, str) else None
        if waiting is not None:
            waiting.send_nowait(message)  # room for one, and only one answer is taken from the map
        return True  # an answer to nothing we wait for (late, or unknown): dropped

    async def _serve_async(self, pending: list[Any], lines: _Lines) -> None:
        import trio

        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        stdout = trio.lowlevel.FdStream(os.dup(sys.stdout.fileno()))
        write_lock = trio.Lock()
        slots = trio.Semaphore(MAX_IN_FLIGHT)
        running: dict[Any, trio.CancelScope] = {}

        async def say(reply: Any) -> None:
            if reply is None:
                return
            data = (json.dumps(reply, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
            async with write_lock:
                await stdout.send_all(data)

        self._say = say

        async def handle(message: Any) -> None:
            async with slots:
                if isinstance(message, list):
                    replies = [r for r in [await one(m) for m in message] if r is not None]
                    await say(replies or None)
                else:
                    await say(await one(message))

        async def one(message: Any) -> dict[str, Any] | None:
            checked = _checked(message)
            if isinstance(checked, dict):  # the error answer to a bad message
                return checked
            message_id, method, params = checked
            if message_id is None:
                self._notified(method)
                if method == "notifications/cancelled":
                    scope = running.get(params.get("requestId"))
                    if scope is not None:
                        scope.cancel()
                return None
            with trio.CancelScope() as scope:
                running[message_id] = scope
                try:
                    return self._reply(message_id, method, params, await self.answer(method, params))
                except McpError as exc:
                    return {"jsonrpc": "2.0", "id": message_id, "error": exc.to_wire()}
                except Exception as exc:  # one failing request never ends the server
                    return {"jsonrpc": "2.0", "id": message_id,
                            "error": {"code": -32603, "message": f"internal error: {exc}"}}
                finally:
                    running.pop(message_id, None)
            return None  # cancelled: the client asked for no answer

        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.serve_background)
            for message in pending:
                nursery.start_soon(handle, message)
            while True:
                line = lines.take()
                if line is None:
                    chunk = await stdin.receive_some(1 << 16)
                    if not chunk:
                        break
                    lines.buffer += chunk
                    continue
                messages: list[Any] = []
                message = self._parse(line, messages.append)
                for error in messages:
                    await say(error)
                answers = message if isinstance(message, list) and message else [message]
                if message is not None and all(self._answered(m) for m in answers):
                    continue  # the client's answers to our requests (a batch of them too)
                if message is not None:
                    nursery.start_soon(handle, message)
            self._say = None
            nursery.cancel_scope.cancel()


def _checked(message: Any) -> tuple[Any, str, dict[str, Any]] | dict[str, Any]:
    """(id, method, params) of a request or notification, or the error answer to a bad one."""
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        if isinstance(message, dict) and ("result" in message or "error" in message):
            return (None, "", {})  # an answer to a request of ours that no one waits for: ignored
        return {"jsonrpc": "2.0", "id": message.get("id") if isinstance(message, dict) else None,
                "error": {"code": INVALID_REQUEST, "message": "Invalid request"}}
    message_id = message.get("id")
    if message_id is not None and (isinstance(message_id, bool) or not isinstance(message_id, (str, int, float))):
        # JSON-RPC ids are strings or numbers: anything else is refused (it would be a lookup key).
        return {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": "Invalid request id"}}
    params = message.get("params")
    return message_id, message["method"], params if isinstance(params, dict) else {}


def _all_static(message: Any) -> bool:
    items = message if isinstance(message, list) else [message]
    return all(isinstance(m, dict) and (m.get("method") in _STATIC or "id" not in m) for m in items)


def _tool_error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


class _Lines:
    """Lines split from what is read, with a buffer of our own: the blocking reads of the first
    answers (Python's buffer would read ahead, and what it held would be lost to trio's reader)
    and trio's reads after them share it. A line longer than MAX_LINE_BYTES comes back as
    ``_OVERSIZED`` (the caller refuses it), none of it kept."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        self._skipping = False

    def take(self) -> bytes | None:
        """The next whole line in the buffer, without its newline; None until one is there."""
        newline = self.buffer.find(b"\n")
        if newline < 0:
            if len(self.buffer) > MAX_LINE_BYTES:
                self._skipping, self.buffer = True, b""
            return None
        line, self.buffer = self.buffer[:newline], self.buffer[newline + 1:]
        if self._skipping:
            self._skipping = False
            return _OVERSIZED
        return line

    def next(self) -> bytes | None:
        """The next line by blocking reads (None at the end of input)."""
        while (line := self.take()) is None:
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        return line


def _write(stream: Any, reply: Any) -> None:
    if reply is None:
        return
    stream.write((json.dumps(reply, ensure_ascii=False, separators=(",", ":")) + "\n").encode())
    stream.flush()
