"""palace's MCP tools and resources: how each is declared, the core's own, and all of them put together.

Owns: ``tool`` and ``resource``, the decorators a module's tools and resources are declared with —
a tool's name (the function's), its group (one its feature's declaration lists it in:
``Feature.tools``), whether it writes (and whether it may destroy, or differ when called again:
MCP's hints), its description, its input schema (the signature, where it is read:
``mcp_server.Registry``), what it returns (its output schema: ``result_schema``), the rarer
arguments a compact listing names only in the description (``extras``); the core's tools (the
delegation loop over the log and the inbox, the log's listing, and MemPalace's three light front
tools, which read their calls with ``palacectl.light``) and resource (an inbox); the helpers a
feature's tools share (``drop_none``, ``read_resource``, ``writers``, ``with_caller_note``); and
``build_registry``: the core's tools and every feature's (``Feature.tools_module``) in one
``Registry``, in the order ``palacectl mcp`` lists them (``tool_sets``), checked: a tool in the
group its feature declared, every declared tool defined and no other, no name twice, what each
returns declared. The server is ``mcp_adapter.PalaceMCP``, which every
tool and resource takes first (``Palace``, positional-only: no argument of the tool) and which
owns the rest of the policy: which tools are offered, the read-only mode, and the result shapes
(a writing tool's body returns what follows ``"success": true``; the daemon's refusals become
``{"success": false, "error"}`` or ``{"error"}`` there). This module names no feature.

What a client sees is pinned by ``tests/e2e/test_mcp.py``, ``tests/e2e/test_mempalace_compat.py``
and ``tests/ctl/test_mcp_server.py`` (the size of the default listing). It must not import trio,
typer, the command line or the ``mcp`` SDK (nor may a feature's tools module): the first answers
of ``palacectl mcp`` are given before trio is imported (issue 26).

Filters are built by ``palace_proto.filters.filter_args`` (MemPalace's singular names, a value or
a list, as the daemon's filter sets), as the CLI builds them; not by ``ListQuery.to_wire``, which
always names ``order``, ``limit`` and ``preview`` (a text search and a wait leave them to the
daemon here), and whose checks in this process would answer some refusals before the daemon is
asked (a different answer while it is down).
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, Final, Protocol, TypeVar

from palace_proto.errors import ApiError
from palace_proto.event_fields import EventField
from palace_proto.filters import FILTER_OPTIONS, filter_args
from palace_proto.validation import MAX_WAIT_TIMEOUT_MS

from .client import DaemonUnreachable
from .event_options import APPEND_FIELDS, PY_TYPES, RARE
from .feature import Features, load
from .light import LIGHT_TOOLS, LightError, read_light_call, tables
from .mcp_server import INVALID_PARAMS, McpError, Registry, Route
from .tool_sets import CORE_TOOLS, tool_sets

__all__ = ["DAEMON_DOWN", "ROUTED_RESULT", "Filter", "Palace", "Result", "build_registry", "drop_none", "light_refusal",
           "read_resource", "resource", "result_schema", "tool", "with_caller_note", "writers"]

# A resource read while palaced is down (JSON-RPC's server-error range).
DAEMON_DOWN: Final = -32001
#: where ``tool`` and ``resource`` leave what they declare on the function
_TOOL: Final = "__palace_tool__"
_RESOURCE: Final = "__palace_resource__"

Filter = str | list[str] | None
Result = dict[str, Any]
F = TypeVar("F", bound=Callable[..., Any])


class _Daemon(Protocol):
    async def call(self, op: str, **args: Any) -> Any: ...


class Palace(Protocol):
    """What a tool is given of the server calling it: the one agent it speaks as, its daemon, its
    home and the features it serves."""

    agent: str
    daemon: _Daemon
    home: Path
    features: Features

    def speaks_as(self, field: str, value: str | None) -> str:
        """The agent a write names in ``field``: this one, or ApiError (never impersonate)."""
        ...


def tool(group: str, *, description: str | Callable[[Features], str], mutating: bool = False,
         returns: Mapping[str, Any] | None = None, destructive: bool = False, idempotent: bool | None = None,
         extras: tuple[str, ...] = (), text_only: bool = False, routes: bool = False,
         schema: dict[str, Any] | Callable[[Features], dict[str, Any]] | None = None,
         ) -> Callable[[Callable[..., Any]], Any]:
    """Declare a module-level async function a tool (``build_registry`` registers it). ``group``:
    the one of its feature's ``tools`` that lists it (a mismatch fails when the tools are put
    together); ``mutating``: it writes, so read-only mode leaves it out; ``returns``: what its
    body returns (``result_schema``: its output schema; every tool answering structured content
    declares it, but a front tool, whose result is the routed tool's); ``destructive``: a write
    that may end or override what others rely on (MCP's ``destructiveHint``: false says it only
    adds); ``idempotent``: calling it again with the same arguments changes nothing more (default:
    a read is, a write is not); ``routes``, ``schema``: a front tool
    (``mcp_server.ToolSpec.routes``) and its input schema. A description or a schema may be a
    function of the features served (a light tool's). No tool reaches past the palace (its log,
    its people, its daemons): none is open-world."""
    def declare(fn: Callable[..., Any]) -> Any:
        setattr(fn, _TOOL, {"group": group, "description": description, "read_only": not mutating,
                            "extras": extras, "text_only": text_only, "routes": routes, "schema": schema,
                            "returns": returns, "destructive": destructive, "idempotent": idempotent})
        return fn
    return declare


_JSON_TYPES: Final = frozenset({"string", "integer", "number", "boolean", "object", "array", "null"})
#: a front tool's result: the tool it routed to's, or its own refusal (``light_refusal``)
ROUTED_RESULT: Final = {"type": "object", "properties": {"success": {"type": "boolean"}, "error": {"type": "string"}}}


def _property(spec: str | Mapping[str, Any]) -> dict[str, Any]:
    """A JSON schema from ``"integer"``, ``"object|null"`` or ``"array<string>"`` (its items'
    type), or a schema given whole."""
    if not isinstance(spec, str):
        return dict(spec)
    kinds: list[str] = []
    items: dict[str, Any] | None = None
    for kind in spec.split("|"):
        if kind.startswith("array<") and kind.endswith(">"):
            kind, items = "array", {"type": kind[len("array<"):-1]}
        if kind not in _JSON_TYPES or (items is not None and items["type"] not in _JSON_TYPES):
            raise TypeError(f"{spec!r} is not a JSON type here (one of {', '.join(sorted(_JSON_TYPES))})")
        kinds.append(kind)
    out: dict[str, Any] = {"type": kinds[0] if len(kinds) == 1 else kinds}
    if items is not None:
        out["items"] = items
    return out


def result_schema(returns: Mapping[str, Any], *, mutating: bool) -> dict[str, Any]:
    """The output schema of a tool whose body returns ``returns`` (key -> its type, see
    ``_property``; a key written ``?key`` may be absent), in the result shapes
    ``mcp_adapter.PalaceMCP.run_tool`` gives: a writing tool's ``{"success": true, …}`` or
    ``{"success": false, "error"}``, a reading tool's data or ``{"error"}``. Keys not named are
    allowed (a newer daemon may add some)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for key, spec in returns.items():
        name = key.removeprefix("?")
        properties[name] = _property(spec)
        if name == key:
            required.append(name)
    properties["error"] = {"type": "string"}
    given: dict[str, Any] = {"required": required} if required else {}
    if mutating:
        properties["success"] = {"type": "boolean"}
        return {"type": "object", "properties": properties, "required": ["success"], "anyOf": [
            {"properties": {"success": {"const": True}}, **given},
            {"properties": {"success": {"const": False}}, "required": ["error"]}]}
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["anyOf"] = [given, {"required": ["error"]}]
    return out


def resource(uri: str, *, name: str, mime_type: str, description: str) -> Callable[[Callable[..., Any]], Any]:
    """Declare a module-level async function a resource (``build_registry`` registers it)."""
    def declare(fn: Callable[..., Any]) -> Any:
        setattr(fn, _RESOURCE, {"uri": uri, "name": name, "mime_type": mime_type, "description": description})
        return fn
    return declare


def drop_none(**args: Any) -> dict[str, Any]:
    """``args`` without the ones that are None (the daemon's defaults apply)."""
    return {k: v for k, v in args.items() if v is not None}


# -- parameters from tables ----------------------------------------------------------------------


def offering(parameters: Iterable[inspect.Parameter], *, after: int = 0) -> Callable[[F], F]:
    """A tool taking ``parameters`` besides its own (placed after the first ``after`` of them, the
    server not counted), in its ``**`` parameter: its signature and type hints (its input schema)
    name them, and it is called with every one of them, defaults filled in."""
    parameters = tuple(parameters)
    defaults = {p.name: p.default for p in parameters}

    def declare(fn: F) -> F:
        own = inspect.signature(fn, eval_str=True)
        server = [p for p in own.parameters.values() if p.kind is inspect.Parameter.POSITIONAL_ONLY]
        rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own.parameters.values()
                if p.kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_KEYWORD)]

        @functools.wraps(fn)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await fn(*args, **{**defaults, **kwargs})

        signature = own.replace(parameters=[*server, *rest[:after], *parameters, *rest[after:]])
        call.__signature__ = signature  # type: ignore[attr-defined]
        call.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()} | {
            "return": own.return_annotation}
        return call  # type: ignore[return-value]
    return declare


def field_parameters(fields: Iterable[EventField], *, defaults: Mapping[str, Any] | None = None,
                     ) -> list[inspect.Parameter]:
    """A writing tool's parameters for event ``fields``: each its append argument, of its wire's
    type, required as the table says unless ``defaults`` gives it a default (else None); the
    caller (``from_agent``) last, optional: the agent this server speaks as (``Palace.speaks_as``)."""
    defaults = defaults or {}
    given, caller = [], []
    for field in fields:
        name, kind = field.option or field.name, PY_TYPES[field.wire]
        if name == "from_agent":
            caller.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind | None))
        elif field.optional or name in defaults:
            given.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=defaults.get(name),
                                           annotation=kind | None))
        else:
            given.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind))
    return [*given, *caller]


def rare_options(fields: Iterable[EventField], *, also: tuple[str, ...] = ()) -> tuple[str, ...]:
    """A writing tool's extras (``tool``): ``also``, its rare fields' arguments and the caller."""
    return (*also, *(f.option for f in fields if f.option in RARE), "from_agent")


def _filter_parameters() -> list[inspect.Parameter]:
    """The event filters of a list or a wait (``palace_proto.filters``), each a value or a list (OR):
    MemPalace's names, but the author filter is ``writer`` (3.11), after ``from_agent``, the caller."""
    parameters = []
    for name in FILTER_OPTIONS:
        if name == "from_agent":
            parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                                annotation=str | None))
            name = "writer"
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Filter))
    return parameters


#: The event filters' parameters of ``mempalace_event_list`` and ``mempalace_event_wait``.
FILTER_PARAMETERS: Final = _filter_parameters()


# -- core: the delegation loop --------------------------------------------------------------------


@tool("core", returns={
    "agent": "string", "now": "string", "identity": "object", "inbox": "object", "?open_loops": "object",
    "?stalled": "object", "?leases": "object", "?lost_leases": "object", "?diary": "object", "?rooms": "array",
    "?watching": "object", "?you_are_watching": "boolean", "?next": "string", "text": "string"}, description=(
    "Call at start and after a compaction: unread inbox, open loops, stalled tasks, leases, diary, who is "
    "watching and what to do next (JSON, and as text)."))
async def mempalace_session_start(palace: Palace, /) -> Result:
    from .session_text import render_session

    result = await palace.daemon.call("session_start", agent=palace.agent)
    return {**result, "text": render_session(result)}


@tool("core", returns={
    "agent": "string", "events": "array<object>", "count": "integer", "more": "boolean", "unread": "integer",
    "unread_capped": "boolean", "cursor": "object"}, description=(
    "Events for you (or *), not from you, after your read cursor, oldest first; then "
    "mempalace_inbox_mark_read the last you handled. Returns {events, count, more, unread, cursor}."))
async def mempalace_inbox(palace: Palace, /, limit: int = 20, preview: bool = True) -> Result:
    return await palace.daemon.call("inbox", agent=palace.agent, limit=limit, preview=preview)


@tool("core", returns={"agent": "string", "moved": "boolean", "cursor": "object", "unread": "integer",
                        "unread_capped": "boolean"}, description=(
    "Move your inbox read cursor to the last event you handled (never backwards). Returns {moved, cursor, "
    "unread}."))
async def mempalace_inbox_mark_read(palace: Palace, /, upto_event_id: str) -> Result:
    return await palace.daemon.call("inbox_mark_read", agent=palace.agent, upto_event_id=upto_event_id)


@tool("core", mutating=True, returns={"event": "object"}, extras=rare_options(APPEND_FIELDS),
      description="Append an event to the log. from_agent defaults to you. Returns {success, event}.")
@offering(field_parameters(APPEND_FIELDS, defaults={"body": ""}))
async def mempalace_event_append(palace: Palace, /, **fields: Any) -> Result:
    event = await palace.daemon.call("append", **drop_none(
        **{**fields, "from_agent": palace.speaks_as("from_agent", fields["from_agent"])}))
    return {"event": event}


@tool("core", mutating=True, returns={"event": "object"}, extras=("topic", "from_agent"), description=(
    "Acknowledge an event with a new event.ack linked to it (the target never changes); status claimed, "
    "applied, failed or blocked closes the loop. Returns {success, event}."))
async def mempalace_event_ack(
    palace: Palace, /, event_id: str, status: str | None = None, body: str | None = None, topic: str | None = None,
    from_agent: str | None = None,
) -> Result:
    event = await palace.daemon.call("ack", **drop_none(
        event_id=event_id, status=status, body=body, topic=topic,
        from_agent=palace.speaks_as("from_agent", from_agent)))
    return {"event": event}


@tool("core", extras=("room", "topic", "status", "writer", "exclude_from_agent", "since_created_at", "limit"),
      returns={"timed_out": "boolean", "events": "array<object>", "count": "integer", "?note": "string"},
      description=(
          "Wait until an event matches (at once if one does); pushed by the daemon, no polling. from_agent: you "
          "(not a filter); writer filters by author. timeout_ms default 60000, max 300000. Returns {timed_out, "
          "events, count}; a timeout is not an error."))
@offering(FILTER_PARAMETERS)
async def mempalace_event_wait(
    palace: Palace, /, since_event_id: str | None = None, since_created_at: str | None = None,
    timeout_ms: float = 60_000, limit: int | None = None, **filters: Filter,
) -> Result:
    if timeout_ms < 0:
        raise ApiError("timeout_ms must be a non-negative number", code="invalid_argument")
    from_agent, writer = filters.pop("from_agent"), filters.pop("writer")
    result = await palace.daemon.call("wait", **filter_args(**filters, from_agent=writers(writer)), **drop_none(
        since_event_id=since_event_id, since_created_at=since_created_at, limit=limit,
        timeout_ms=int(min(timeout_ms, MAX_WAIT_TIMEOUT_MS))))
    return with_caller_note(result, from_agent, writer)


# Why a note (MemPalace 3.11, #2616): before 3.11 from_agent filtered by author on list and wait;
# a caller still expecting that learns what changed from the result, not from an empty inbox.
def with_caller_note(result: Result, from_agent: Filter, writer: Filter) -> Result:
    """``result`` with MemPalace 3.11's ``note`` after ``count`` when ``from_agent`` (the caller,
    never a filter) is given without ``writer`` (the author filter)."""
    if isinstance(from_agent, str) and from_agent.strip() and not writers(writer):
        result["note"] = (f"from_agent is the caller ({from_agent.strip()}) and does not filter; use "
                          f"writer=<agent> to filter by author; your inbox is to_agent={from_agent.strip()}")
    return result


def writers(writer: Filter) -> Filter:
    """The author filter (``writer``), empty values dropped: an empty writer filters nothing."""
    if isinstance(writer, list):
        return [w for w in writer if not isinstance(w, str) or w.strip()] or None
    return writer if not isinstance(writer, str) or writer.strip() else None
















# -- log: the rest of the log -------------------------------------------------------


@tool("log", extras=("room", "topic", "status", "writer", "exclude_from_agent", "before_event_id", "since_created_at",
                     "order"),
      returns={"events": "array<object>", "count": "integer", "?note": "string"}, description=(
          "List events. Filters (value or list, OR) are exact; to_agent also matches '*'; writer: the author "
          "(from_agent is you, not a filter). Cursor: since_event_id. Newest first without a cursor, oldest "
          "first with one. preview=true cuts bodies over 200 chars. text: words to find. Returns {events, count}."))
@offering(FILTER_PARAMETERS)
async def mempalace_event_list(
    palace: Palace, /, since_event_id: str | None = None, before_event_id: str | None = None,
    since_created_at: str | None = None, order: str | None = None, limit: int | None = None, preview: bool = False,
    text: str | None = None, **filters: Filter,
) -> Result:
    from_agent, writer = filters.pop("from_agent"), filters.pop("writer")
    wanted = filter_args(**filters, from_agent=writers(writer))
    if text is not None:  # a text search is ranked, best match first
        result = await palace.daemon.call("list", **wanted, **drop_none(
            since_event_id=since_event_id, before_event_id=before_event_id, since_created_at=since_created_at,
            limit=limit, preview=preview, text=text))
    else:
        result = await palace.daemon.call("list", **wanted, **drop_none(
            since_event_id=since_event_id, before_event_id=before_event_id, since_created_at=since_created_at,
            limit=limit, preview=preview, order=_order(order, since_event_id)))
    return with_caller_note(result, from_agent, writer)


def _order(order: str | None, since_event_id: str | None) -> str:
    """MemPalace 3.10's order: an explicit one wins (any case, blanks stripped); omitted or null,
    oldest first after a ``since_event_id`` cursor, newest first otherwise."""
    if order is None or not order.strip():
        return "asc" if since_event_id else "desc"
    cleaned = order.strip().lower()
    if cleaned not in ("asc", "desc"):
        raise ApiError(f"order={order!r} must be 'asc' or 'desc'", code="invalid_argument")
    return cleaned


# -- light: MemPalace 3.10's three-tool surface, routed to the full tools (palacectl/light.py) --------


def _light_schema(name: str) -> Callable[[Features], dict[str, Any]]:
    return lambda features: tables(features).schema(name)


def _light_description(name: str) -> Callable[[Features], str]:
    return lambda features: tables(features).description(name)


def light_refusal(tool: str, reason: str) -> Result:
    """A light call that cannot run: a result, not a protocol or tool error (MemPalace's light
    server); ``reason`` is its reader's, or the routed tool's refusal of its arguments."""
    return {"success": False, "error": f"PQL {LIGHT_TOOLS.get(tool, tool)} parse error: {reason}"}


async def _light(palace: Palace, tool: str, arguments: dict[str, Any]) -> Route | Result:
    try:
        call = read_light_call(tool, arguments, palace.features)
    except LightError as exc:
        return light_refusal(tool, str(exc))
    return Route(call.tool, call.arguments)


@tool("light", routes=True, schema=_light_schema("palace_query"), description=_light_description("palace_query"))
async def palace_query(palace: Palace, /, **arguments: Any) -> Route | Result:
    return await _light(palace, "palace_query", arguments)


@tool("light", mutating=True, destructive=True, routes=True, schema=_light_schema("palace_exec"),
      description=_light_description("palace_exec"))
async def palace_exec(palace: Palace, /, **arguments: Any) -> Route | Result:
    return await _light(palace, "palace_exec", arguments)


@tool("light", mutating=True, destructive=True, routes=True, schema=_light_schema("palace_coordinate"),
      description=_light_description("palace_coordinate"))
async def palace_coordinate(palace: Palace, /, **arguments: Any) -> Route | Result:
    return await _light(palace, "palace_coordinate", arguments)


# -- resources, for harnesses that read them ------------------------------------------------------


async def read_resource(palace: Palace, op: str, **args: Any) -> str:
    """The daemon's answer as JSON text; its refusals and its absence are JSON-RPC errors."""
    try:
        return json.dumps(await palace.daemon.call(op, **args), ensure_ascii=False)
    except ApiError as exc:
        raise McpError(INVALID_PARAMS, exc.message) from None
    except DaemonUnreachable as exc:
        raise McpError(DAEMON_DOWN, str(exc)) from None


@resource("palace://inbox/{agent}", name="inbox", mime_type="application/json",
                description="An agent's unread inbox (after its read cursor, oldest first, previews).")
async def inbox_resource(palace: Palace, /, agent: str) -> str:
    return await read_resource(palace, "inbox", agent=agent, limit=50, preview=True)


# -- all of them, put together ------------------------------------------------------------------


def build_registry(features: Features) -> Registry:
    """The core's tools and resources and ``features``', in the order they are listed (made once
    for a ``Features``: ``Features.memo``).

    Raises:
        TypeError: a tool in another group than its feature declares, a declared tool no module
            defines (or one defined that none declares), one name twice, or a tool answering
            structured content that does not say what it returns.
    """
    return features.memo("mcp_registry", _build)


def _declared(module: ModuleType, marker: str) -> list[Any]:
    """The functions ``module`` itself declares with ``marker``, in the order it defines them."""
    return [fn for fn in vars(module).values()
            if callable(fn) and hasattr(fn, marker) and getattr(fn, "__module__", None) == module.__name__]


def _build(features: Features) -> Registry:
    sets = tool_sets(features)
    parts: list[tuple[str, Any, Mapping[str, tuple[str, ...]]]] = [("the core", sys.modules[__name__], CORE_TOOLS)]
    parts += [(f"feature {f.name}", load(f.tools_module), f.tools) for f in features if f.tools_module]
    found: dict[str, Callable[..., Any]] = {}
    resources: list[Callable[..., Any]] = []
    for who, module, declared in parts:
        defined = _declared(module, _TOOL)
        listed = {name for names in declared.values() for name in names}
        if {fn.__name__ for fn in defined} != listed:
            raise TypeError(f"{who}: its declared tools and {module.__name__}'s differ: "
                            f"{sorted({fn.__name__ for fn in defined} ^ listed)}")
        for fn in defined:
            group = getattr(fn, _TOOL)["group"]
            if fn.__name__ not in declared.get(group, ()):
                raise TypeError(f"{fn.__name__} ({module.__name__}) is not in {who}'s tools[{group!r}]")
            if fn.__name__ in found:
                raise TypeError(f"{fn.__name__}: a tool of that name is defined twice")
            found[fn.__name__] = fn
        resources.extend(_declared(module, _RESOURCE))
    registry = Registry()
    for name in sorted(found, key=sets.listing_order.__getitem__):
        fn = found[name]
        spec = getattr(fn, _TOOL)
        description, schema, returns = spec["description"], spec["schema"], spec["returns"]
        if spec["routes"]:
            output: dict[str, Any] | None = ROUTED_RESULT
        elif spec["text_only"]:
            output = None  # no structured content: nothing to declare
        elif returns is None:
            raise TypeError(f"{name}: declare what it returns (tool(returns=...)): its output schema")
        else:
            output = result_schema(returns, mutating=not spec["read_only"])
        registry.tool(description(features) if callable(description) else description, read_only=spec["read_only"],
                      destructive=spec["destructive"], idempotent=spec["idempotent"], extras=spec["extras"],
                      text_only=spec["text_only"], routes=spec["routes"],
                      schema=schema(features) if callable(schema) else schema, output_schema=output)(fn)
    for fn in resources:
        declared_resource = getattr(fn, _RESOURCE)
        registry.resource(declared_resource["uri"], name=declared_resource["name"],
                          mime_type=declared_resource["mime_type"], description=declared_resource["description"])(fn)
    return registry
