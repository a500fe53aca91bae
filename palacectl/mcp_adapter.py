"""``palacectl mcp --agent ID``: palace as MCP tools over stdio, MemPalace-compatible.

Owns: the tool surface an agent harness sees — the eight MemPalace logstream tools with the
same names, inputs and result shapes (reference §4), plus palace's ``task_status``,
``task_list``, ``who``, ``peers``, the ``lease_*``, ``inbox``, ``inbox_mark_read`` and
``session_start`` tools, and the resources ``palace://inbox/{agent}``, ``palace://tasks/open``,
``palace://task/{correlation_id}``, ``palace://leases`` and ``palace://who`` — translated onto
the daemon's API. The adapter is a client
of the local palaced like the CLI and keeps no state: every tool call is one request on a fresh
connection (``aclient.py``), so it survives the daemon restarting under it.

What a harness is offered is ``--tools`` (``tool_sets.py``): by default ``core``, the delegation
loop in under 6 KB of schemas, each tool's rarer arguments named in its description and accepted;
``log``, ``memory`` and ``leases`` add the rest, ``all`` is every tool with every argument listed.

Rules it enforces on top of the daemon's:

* **One identity.** ``from_agent`` / ``created_by`` default to ``--agent``; naming anyone else
  is refused (never impersonate).
* **Read-only.** With ``--read-only``, or when the daemon is an observer, mutating tools are
  left out of ``tools/list`` and calling one is a JSON-RPC error -32003, as in MemPalace.
* **Result shapes.** Mutating tools answer ``{"success": true, …}`` or ``{"success": false,
  "error": "…"}``; read tools answer their data or ``{"error": "…"}``; messages are the
  daemon's, word for word. ``mempalace_artifact_get`` answers ``{"artifact": {…, "content"}}``.
  ``tests/e2e/test_mempalace_compat.py`` pins every shape and argument rule of the eight tools;
  what differs on purpose is listed in README.md, "Differences from MemPalace".

Nothing but protocol messages goes to stdout; logs go to stderr. The protocol is
``mcp_server.py``'s (not the SDK's: its import alone outlasted what harnesses wait, issue 26).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from palace_proto import __version__
from palace_proto.errors import ApiError
from palace_proto.validation import MAX_WAIT_TIMEOUT_MS

from .client import Client, DaemonUnreachable
from .mcp_server import INVALID_PARAMS, McpError, StdioServer, ToolSpec
from .tool_sets import ALL, DEFAULT_TOOLS, GROUPS, LISTING_ORDER, parse_tool_sets

__all__ = ["MUTATING_TOOLS", "READ_ONLY_ERROR", "PalaceMCP", "run_mcp"]

LOGGER: Final = logging.getLogger("palacectl.mcp")
#: JSON-RPC error code for a mutating tool called in read-only mode (MemPalace's).
READ_ONLY_ERROR: Final = -32003
# Arguments a harness adds to every tool on its own, documented by it, meaning nothing to palace:
# accepted and dropped (refusing them refuses every call such a harness makes). Gemini CLI adds
# ``wait_for_previous`` to each tool's schema and forwards what its model sets (issue 26).
HARNESS_ARGUMENTS: Final = frozenset({"wait_for_previous"})
# A resource read while palaced is down (JSON-RPC's server-error range).
DAEMON_DOWN: Final = -32001
MUTATING_TOOLS: Final = frozenset({
    "mempalace_event_append", "mempalace_event_ack", "mempalace_artifact_put", "mempalace_patch_submit",
    "mempalace_task_create", "mempalace_add_drawer", "mempalace_kg_add", "mempalace_kg_invalidate",
    "mempalace_diary_write", "mempalace_task_claim", "mempalace_task_release", "mempalace_task_reassign",
    "mempalace_lease_acquire", "mempalace_lease_renew", "mempalace_lease_release",
})
INSTRUCTIONS: Final = (
    "palace: the shared coordination log of this agent fleet (MemPalace-compatible). Cursor = event id "
    "(since_event_id is exclusive). Claim with ack status=claimed; close every loop with ack "
    "applied/failed/blocked."
)

Filter = str | list[str] | None
Result = dict[str, Any]
# MemPalace filter inputs (singular, a value or a list) -> the daemon's filter sets.
_FILTERS: Final = {"stream": "streams", "room": "rooms", "topic": "topics", "type": "types",
                   "to_agent": "to_agents", "from_agent": "from_agents", "correlation_id": "correlation_ids",
                   "status": "statuses", "exclude_from_agent": "exclude_from_agents"}


def _filter_args(**values: Filter) -> dict[str, list[str]]:
    out = {}
    for name, value in values.items():
        if value is None or value == "" or value == []:
            continue
        out[_FILTERS[name]] = [value] if isinstance(value, str) else list(value)
    return out


def _drop_none(**args: Any) -> dict[str, Any]:
    return {k: v for k, v in args.items() if v is not None}


class _LazyDaemon:
    """The daemon's async client, made at the first call (its import brings trio, which the
    first answers do without)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._client: Any = None

    def __repr__(self) -> str:
        return f"<daemon {self.home}>"

    async def call(self, op: str, **args: Any) -> Any:
        if self._client is None:
            from .aclient import AsyncDaemon

            self._client = AsyncDaemon(self.home)
        return await self._client.call(op, **args)


class PalaceMCP(StdioServer):
    """The MCP server for one agent identity on one palace home."""

    def __init__(self, home: Path, agent: str, *, read_only: bool = False, tools: str | None = ALL) -> None:
        """``tools``: what ``--tools`` says (``tool_sets``): groups, tool names or ``all``."""
        super().__init__("palace", __version__, INSTRUCTIONS)
        self.home = home
        self.daemon = _LazyDaemon(home)
        self.agent = agent
        self.forced_read_only = read_only
        self.tool_sets = tools or DEFAULT_TOOLS
        self.offered, self.full_schemas = parse_tool_sets(tools)
        self._observer: bool | None = None  # learned from the daemon (None: not asked yet)
        self._register()

    def __repr__(self) -> str:
        return (f"<PalaceMCP agent={self.agent} read_only={self.forced_read_only} tools={self.tool_sets!r} "
                f"{self.daemon!r}>")

    # -- read-only mode ------------------------------------------------------------------------

    def read_only_now(self) -> bool:
        """Read-only by --read-only, or because the daemon is an observer (asked once, with a
        blocking call: the tool listing is answered before the async server runs)."""
        if self.forced_read_only:
            return True
        if self._observer is None:
            try:
                with Client(self.home, client_name="palacectl-mcp") as client:
                    status = client.call("status")
            except (ApiError, DaemonUnreachable, OSError):
                return False  # unknown for now: the daemon refuses observer writes itself
            self._observer = (status.get("palace") or {}).get("role") == "observer"
        return self._observer

    def listed_tools(self) -> list[ToolSpec]:
        tools = sorted((t for t in self.tools.values() if t.name in self.offered), key=lambda t: LISTING_ORDER[t.name])
        if self.read_only_now():
            tools = [t for t in tools if t.name not in MUTATING_TOOLS]
        return tools

    async def before_call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if name in MUTATING_TOOLS and self.read_only_now():
            raise self._read_only_error(name)
        known = self.tools[name].input_schema["properties"]
        return {k: v for k, v in arguments.items() if k not in HARNESS_ARGUMENTS or k in known}

    def not_offered(self, name: str) -> str | None:
        if name in self.offered:
            return None
        group = next(g for g, names in GROUPS.items() if name in names)
        return (f"{name} is not offered here (palacectl mcp --tools {self.tool_sets}); add its group: "
                f"--tools {self.tool_sets},{group} (or --tools all)")

    def _read_only_error(self, name: str) -> McpError:
        why = "--read-only" if self.forced_read_only else "the daemon is a read-only observer"
        return McpError(READ_ONLY_ERROR, f"{name} is not available: this palace adapter is read-only ({why})")

    # -- calling the daemon --------------------------------------------------------------------

    def _speaks_as(self, field: str, value: str | None) -> str:
        if value is None or value.strip() == self.agent or (field == "agent_name" and value.strip().lower() == self.agent.lower()):
            return self.agent
        raise ApiError(f"this adapter speaks as {self.agent!r}; {field}={value.strip()!r} would impersonate "
                       "another agent (run one adapter per agent identity)", code="invalid_argument")

    async def _write(self, name: str, call: Callable[[], Awaitable[Result]]) -> Result:
        try:
            return {"success": True, **await call()}
        except ApiError as exc:
            if exc.code == "read_only":
                self._observer = True
                raise self._read_only_error(name) from None
            return {"success": False, "error": exc.message}
        except DaemonUnreachable as exc:
            return {"success": False, "error": str(exc)}

    async def _read(self, call: Callable[[], Awaitable[Result]]) -> Result:
        try:
            return await call()
        except ApiError as exc:
            return {"error": exc.message}
        except DaemonUnreachable as exc:
            return {"error": str(exc)}

    # -- the tools -----------------------------------------------------------------------------

    def _register(self) -> None:  # noqa: C901 - one place that lists every tool
        daemon = self.daemon

        def tool(description: str, extras: tuple[str, ...] = ()) -> Callable[[Callable[..., Awaitable[Result]]], Any]:
            def register(fn: Callable[..., Awaitable[Result]]) -> Any:
                return self.tool(description, read_only=fn.__name__ not in MUTATING_TOOLS, extras=extras)(fn)
            return register

        @tool(description="Append an event to the log. from_agent defaults to you. Returns {success, event}.",
              extras=("topic", "branch", "base_commit", "metadata", "from_agent"))
        async def mempalace_event_append(
            type: str, stream: str, room: str, body: str | None = "", topic: str | None = None,
            to_agent: str | None = None, correlation_id: str | None = None, branch: str | None = None,
            base_commit: str | None = None, status: str | None = None, metadata: dict[str, Any] | None = None,
            artifact_ids: list[str] | None = None, from_agent: str | None = None,
        ) -> Result:
            async def call() -> Result:
                event = await daemon.call("append", **_drop_none(
                    type=type, stream=stream, room=room, body=body, topic=topic, to_agent=to_agent,
                    correlation_id=correlation_id, branch=branch, base_commit=base_commit, status=status,
                    metadata=metadata, artifact_ids=artifact_ids, from_agent=self._speaks_as("from_agent", from_agent)))
                return {"event": event}

            return await self._write("mempalace_event_append", call)

        @tool(description=(
            "List events. Filters (value or list, OR) are exact; to_agent also matches '*'. Cursor: since_event_id "
            "(exclusive). Order: newest first without a cursor, oldest first with one. preview=true cuts bodies "
            "over 200 chars. text: words every body must hold, best match first. Returns {events, count}."),
            extras=("room", "topic", "status", "exclude_from_agent", "before_event_id", "since_created_at", "order"))
        async def mempalace_event_list(
            stream: Filter = None, room: Filter = None, topic: Filter = None, type: Filter = None,
            to_agent: Filter = None, from_agent: Filter = None, exclude_from_agent: Filter = None,
            correlation_id: Filter = None, status: Filter = None, since_event_id: str | None = None,
            before_event_id: str | None = None, since_created_at: str | None = None, order: str | None = None,
            limit: int | None = None, preview: bool = False, text: str | None = None,
        ) -> Result:
            async def call() -> Result:
                if text is not None:  # a text search is ranked, best match first
                    return await daemon.call("list", **_filter_args(
                        stream=stream, room=room, topic=topic, type=type, to_agent=to_agent, from_agent=from_agent,
                        exclude_from_agent=exclude_from_agent, correlation_id=correlation_id, status=status),
                        **_drop_none(since_event_id=since_event_id, before_event_id=before_event_id,
                                     since_created_at=since_created_at, limit=limit, preview=preview, text=text))
                return await daemon.call("list", **_filter_args(
                    stream=stream, room=room, topic=topic, type=type, to_agent=to_agent, from_agent=from_agent,
                    exclude_from_agent=exclude_from_agent, correlation_id=correlation_id, status=status),
                    **_drop_none(since_event_id=since_event_id, before_event_id=before_event_id,
                                 since_created_at=since_created_at, limit=limit, preview=preview,
                                 order=order or ("asc" if since_event_id else "desc")))

            return await self._read(call)

        @tool(description=(
            "Wait until an event matches (at once if one does); pushed by the daemon, no polling. "
            "timeout_ms default 60000, max 300000. Returns {timed_out, events, count}; a timeout is not an error."),
            extras=("room", "topic", "status", "exclude_from_agent", "since_created_at", "limit"))
        async def mempalace_event_wait(
            stream: Filter = None, room: Filter = None, topic: Filter = None, type: Filter = None,
            to_agent: Filter = None, from_agent: Filter = None, exclude_from_agent: Filter = None,
            correlation_id: Filter = None, status: Filter = None, since_event_id: str | None = None,
            since_created_at: str | None = None, timeout_ms: float = 60_000, limit: int | None = None,
        ) -> Result:
            async def call() -> Result:
                if timeout_ms < 0:
                    raise ApiError("timeout_ms must be a non-negative number", code="invalid_argument")
                return await daemon.call("wait", **_filter_args(
                    stream=stream, room=room, topic=topic, type=type, to_agent=to_agent, from_agent=from_agent,
                    exclude_from_agent=exclude_from_agent, correlation_id=correlation_id, status=status),
                    **_drop_none(since_event_id=since_event_id, since_created_at=since_created_at, limit=limit,
                                 timeout_ms=int(min(timeout_ms, MAX_WAIT_TIMEOUT_MS))))

            return await self._read(call)

        @tool(description=(
            "Acknowledge an event with a new event.ack linked to it (the target never changes); status claimed, "
            "applied, failed or blocked closes the loop. Returns {success, event}."),
            extras=("topic", "from_agent"))
        async def mempalace_event_ack(
            event_id: str, status: str | None = None, body: str | None = None, topic: str | None = None,
            from_agent: str | None = None,
        ) -> Result:
            async def call() -> Result:
                event = await daemon.call("ack", **_drop_none(
                    event_id=event_id, status=status, body=body, topic=topic,
                    from_agent=self._speaks_as("from_agent", from_agent)))
                return {"event": event}

            return await self._write("mempalace_event_ack", call)

        @tool(description=(
            "Store an artifact by content (sha256). kind: patch, file, log, json or note. Text in content, or bytes "
            "in content_base64. Returns {success, artifact} (artifact.warnings for suspicious patches)."),
            extras=("metadata", "created_by"))
        async def mempalace_artifact_put(
            kind: str, content: str | None = None, content_base64: str | None = None,
            metadata: dict[str, Any] | None = None, created_by: str | None = None,
        ) -> Result:
            async def call() -> Result:
                data = _content(content, content_base64)
                record = await daemon.call("artifact_put", **_drop_none(
                    kind=kind, content=data, metadata=metadata, created_by=self._speaks_as("created_by", created_by)))
                return {"artifact": record}

            return await self._write("mempalace_artifact_put", call)

        @tool(description=(
            "Get an artifact by art_ id or sha256, verified: {artifact: {id, kind, sha256, created_by, metadata, "
            "content, …}}; bytes that are not UTF-8 come as content_base64 (content_is_base64=true)."))
        async def mempalace_artifact_get(artifact_id: str) -> Result:
            async def call() -> Result:
                record = dict(await daemon.call("artifact_get", artifact_id=artifact_id))
                raw: bytes = record.pop("content")
                if hashlib.sha256(raw).hexdigest() != record["sha256"]:
                    raise ApiError(f"artifact {record['id']} failed sha256 verification", code="internal")
                try:
                    record["content"] = raw.decode("utf-8")
                except UnicodeDecodeError:
                    record["content_base64"] = base64.b64encode(raw).decode("ascii")
                    record["content_is_base64"] = True
                return {"artifact": record}  # MemPalace's shape: skills read result["artifact"]["content"]

            return await self._read(call)

        @tool(description=(
            "Deliver a diff (byte-exact, with its final newline): stores it and appends patch.ready in one step; "
            "with correlation_id, stream and to_agent come from its task. Returns {success, artifact, event}."),
            extras=("stream", "room", "branch", "base_commit", "metadata", "topic", "from_agent"))
        async def mempalace_patch_submit(
            content: str, stream: str | None = None, room: str = "patches", to_agent: str | None = None,
            correlation_id: str | None = None, branch: str | None = None, base_commit: str | None = None,
            body: str | None = None, metadata: dict[str, Any] | None = None, topic: str | None = None,
            from_agent: str | None = None,
        ) -> Result:
            async def call() -> Result:
                return await daemon.call("patch_submit", **_drop_none(
                    content=content, to_agent=to_agent, correlation_id=correlation_id, stream=stream, room=room,
                    topic=topic, branch=branch, base_commit=base_commit, body=body, metadata=metadata,
                    from_agent=self._speaks_as("from_agent", from_agent)))

            return await self._write("mempalace_patch_submit", call)

        @tool(description=(
            "Delegate work: a task.request with goal, branch, base_commit (a hex commit id, not a branch) and "
            "definition of done. Returns {success, task, handoff}; wait on task.correlation_id."),
            extras=("from_agent", "blocked_by", "priority", "stall_after"))
        async def mempalace_task_create(
            project: str, to_agent: str, goal: str, branch: str, base_commit: str, done: str,
            from_agent: str | None = None, blocked_by: list[str] | None = None, priority: int | None = None,
            stall_after: str | None = None,
        ) -> Result:
            async def call() -> Result:
                return await daemon.call("task_create", **_drop_none(
                    project=project, to_agent=to_agent, goal=goal, branch=branch, base_commit=base_commit, done=done,
                    from_agent=self._speaks_as("from_agent", from_agent), blocked_by=blocked_by or None,
                    priority=priority, stall_after=stall_after))

            return await self._write("mempalace_task_create", call)

        @tool(description="A task's lifecycle by correlation id: state, claimant, every event on it.")
        async def mempalace_task_status(correlation_id: str) -> Result:
            return await self._read(lambda: daemon.call("task_show", correlation_id=correlation_id))

        @tool(description="Tasks you requested or were asked to do; open_only=true (default): loops not yet closed.")
        async def mempalace_task_list(open_only: bool = True) -> Result:
            return await self._read(lambda: daemon.call("task_list", agent=self.agent, open=open_only))

        @tool(description=(
            "Tasks you can take now (for you or *, open, unclaimed, blockers applied), urgent and oldest first. "
            "Claim one with mempalace_task_claim."))
        async def mempalace_task_ready() -> Result:
            return await self._read(lambda: daemon.call("task_ready", agent=self.agent))

        @tool(description=(
            "Claim a task by correlation id; refused if another holds it, it is blocked or closed. A later "
            "task.conflict to you means another claim won: stop."))
        async def mempalace_task_claim(correlation_id: str) -> Result:
            async def call() -> Result:
                return await daemon.call("task_claim", correlation_id=correlation_id, agent=self.agent)

            return await self._write("mempalace_task_claim", call)

        @tool(description="Give back a task you claimed (it is open again); say why in reason.")
        async def mempalace_task_release(correlation_id: str, reason: str | None = None) -> Result:
            async def call() -> Result:
                return await daemon.call("task_release", **_drop_none(correlation_id=correlation_id, reason=reason,
                                                                      agent=self.agent))

            return await self._write("mempalace_task_release", call)

        @tool(description="As a task's requester, hand it to another agent (or *): open again, it wakes them.")
        async def mempalace_task_reassign(correlation_id: str, to_agent: str) -> Result:
            async def call() -> Result:
                return await daemon.call("task_reassign", correlation_id=correlation_id, to_agent=to_agent,
                                         agent=self.agent)

            return await self._write("mempalace_task_reassign", call)

        @tool(description="Watchers connected now on every daemon of the palace: who is really listening.")
        async def mempalace_who() -> Result:
            return await self._read(lambda: daemon.call("who"))

        @tool(description="The other daemons of the palace: state, last contact and error, what each side lacks.")
        async def mempalace_peers() -> Result:
            return await self._read(lambda: daemon.call("peers"))

        # -- memory ------------------------------------------------------------------------

        @tool(description=(
            "Search the shared memory before you answer. query: keywords (<= 250 chars). Returns verbatim "
            "drawers (wing, room, drawer_id, source, score): quote, do not paraphrase."),
            extras=("since", "before"))
        async def mempalace_search(
            query: str, limit: int = 5, wing: str | None = None, room: str | None = None,
            since: str | None = None, before: str | None = None,
        ) -> Result:
            return await self._read(lambda: daemon.call("search", **_drop_none(
                query=query, limit=limit, wing=wing, room=room, since=since, before=before)))

        @tool(description=(
            "File lasting knowledge verbatim in a wing and room (decisions, lessons; never secrets); the same "
            "content returns the existing drawer. Returns {success, drawer_id}."),
            extras=("source_file", "added_by"))
        async def mempalace_add_drawer(
            wing: str, room: str, content: str, source_file: str | None = None, added_by: str | None = None,
        ) -> Result:
            async def call() -> Result:
                return await daemon.call("memory_add", **_drop_none(
                    wing=wing, room=room, content=content, source_file=source_file,
                    added_by=self._speaks_as("added_by", added_by)))

            return await self._write("mempalace_add_drawer", call)

        @tool(description=(
            "Facts about an entity as of a date (default today): active, historical and future facts. "
            "direction: outgoing, incoming or both."))
        async def mempalace_kg_query(entity: str, as_of: str | None = None, direction: str = "both") -> Result:
            return await self._read(lambda: daemon.call("kg_query", **_drop_none(
                entity=entity, as_of=as_of, direction=direction)))

        @tool(description=(
            "Add a fact subject → predicate → object, optionally valid_from/valid_to (YYYY-MM-DD). When a fact "
            "changes: invalidate the old one, then add the new one. Returns {success, triple_id, fact}."),
            extras=("source_drawer_id", "source_file"))
        async def mempalace_kg_add(
            subject: str, predicate: str, object: str, valid_from: str | None = None, valid_to: str | None = None,
            source_drawer_id: str | None = None, source_file: str | None = None,
        ) -> Result:
            async def call() -> Result:
                return await daemon.call("kg_add", **_drop_none(
                    subject=subject, predicate=predicate, object=object, valid_from=valid_from, valid_to=valid_to,
                    source_drawer_id=source_drawer_id, source_file=source_file, added_by=self.agent))

            return await self._write("mempalace_kg_add", call)

        @tool(description="End a fact's validity (ended: YYYY-MM-DD, default today); it stays as history.")
        async def mempalace_kg_invalidate(subject: str, predicate: str, object: str, ended: str | None = None) -> Result:
            async def call() -> Result:
                return await daemon.call("kg_invalidate", **_drop_none(
                    subject=subject, predicate=predicate, object=object, ended=ended, added_by=self.agent))

            return await self._write("mempalace_kg_invalidate", call)

        @tool(description="Write in your own diary (wing_<you>/diary) with a topic. Returns {success, entry_id, timestamp}.",
              extras=("agent_name",))
        async def mempalace_diary_write(entry: str, topic: str = "general", agent_name: str | None = None) -> Result:
            async def call() -> Result:
                return await daemon.call("diary_write", agent_name=self._speaks_as("agent_name", agent_name),
                                         entry=entry, topic=topic, added_by=self.agent)

            return await self._write("mempalace_diary_write", call)

        @tool(description="Read an agent's diary, newest first: {agent, entries, total, showing}. last_n <= 100.")
        async def mempalace_diary_read(agent_name: str | None = None, last_n: int = 10) -> Result:
            return await self._read(lambda: daemon.call("diary_read", agent_name=agent_name or self.agent,
                                                         last_n=last_n))

        @tool(description="Every agent the palace has seen: wing, last activity, whether it is watching now.")
        async def mempalace_list_agents() -> Result:
            return await self._read(lambda: daemon.call("agents"))

        @tool(description="Rooms that two wings share (both optional): where their knowledge meets.")
        async def mempalace_find_tunnels(wing_a: str | None = None, wing_b: str | None = None) -> Result:
            return await self._read(lambda: daemon.call("tunnels", **_drop_none(wing_a=wing_a, wing_b=wing_b)))

        # -- leases --------------------------------------------------------------------------

        @tool(description=(
            "Lease paths before editing shared files: globs from the repository root (src/api/**) or res:NAME. "
            "Exclusive unless shared; ttl 90s/30m/2h/7d (default 1h). Refused, naming the holder, if it overlaps "
            "another agent's lease; force=true takes it (they are told)."), extras=("agent",))
        async def mempalace_lease_acquire(
            patterns: list[str], project: str, ttl: str | None = None, shared: bool = False,
            reason: str | None = None, force: bool = False, agent: str | None = None,
        ) -> Result:
            async def call() -> Result:
                return await daemon.call("lease_acquire", **_drop_none(
                    patterns=patterns, project=project, ttl_s=ttl, shared=shared or None, reason=reason,
                    force=force or None, agent=self._speaks_as("agent", agent)))

            return await self._write("mempalace_lease_acquire", call)

        @tool(description="Extend your lease (by ttl, or as long as it was taken for). Returns {success, lease}.")
        async def mempalace_lease_renew(lease_id: str, ttl: str | None = None) -> Result:
            async def call() -> Result:
                return await daemon.call("lease_renew", **_drop_none(lease_id=lease_id, ttl_s=ttl, agent=self.agent))

            return await self._write("mempalace_lease_renew", call)

        @tool(description="Release your lease by id, or all=true for every lease you hold (optionally in one project).")
        async def mempalace_lease_release(lease_id: str | None = None, all: bool = False,
                                          project: str | None = None) -> Result:
            async def call() -> Result:
                if all == (lease_id is not None):
                    raise ApiError("pass a lease_id, or all=true", code="invalid_argument")
                return await daemon.call("lease_release", **_drop_none(
                    lease_id=lease_id, all=all or None, project=project, agent=self.agent))

            return await self._write("mempalace_lease_release", call)

        @tool(description=(
            "Active leases (all=true: also ended ones), optionally of one project, one agent, or covering a path."))
        async def mempalace_lease_list(project: str | None = None, agent: str | None = None, path: str | None = None,
                                       all: bool = False) -> Result:
            return await self._read(lambda: daemon.call("lease_list", **_drop_none(
                project=project, agent=agent, path=path, all=all or None)))

        @tool(description=(
            "Before editing: are these paths under another agent's exclusive lease? Returns {ok, blocked: "
            "[{path, leases}]}; ok=false means do not edit them (ask the holder or wait)."))
        async def mempalace_lease_check(paths: list[str], project: str | None = None) -> Result:
            return await self._read(lambda: daemon.call("lease_check", **_drop_none(
                paths=paths, project=project, agent=self.agent)))

        # -- inbox and session -----------------------------------------------------------------

        @tool(description=(
            "Events for you (or *), not from you, after your read cursor, oldest first; then "
            "mempalace_inbox_mark_read the last you handled. Returns {events, count, more, unread, cursor}."))
        async def mempalace_inbox(limit: int = 20, preview: bool = True) -> Result:
            return await self._read(lambda: daemon.call("inbox", agent=self.agent, limit=limit, preview=preview))

        @tool(description=(
            "Move your inbox read cursor to the last event you handled (never backwards). Returns {moved, cursor, "
            "unread}."))
        async def mempalace_inbox_mark_read(upto_event_id: str) -> Result:
            return await self._read(lambda: daemon.call("inbox_mark_read", agent=self.agent,
                                                         upto_event_id=upto_event_id))

        @tool(description=(
            "Call at start and after a compaction: unread inbox, open loops, stalled tasks, leases, diary, who is "
            "watching and what to do next (JSON, and as text)."))
        async def mempalace_session_start() -> Result:
            async def call() -> Result:
                from .session_text import render_session

                result = await daemon.call("session_start", agent=self.agent)
                return {**result, "text": render_session(result)}

            return await self._read(call)

        # -- resources, for harnesses that read them ---------------------------------------------

        async def resource(op: str, **args: Any) -> str:
            try:
                return json.dumps(await daemon.call(op, **args), ensure_ascii=False)
            except ApiError as exc:
                raise McpError(INVALID_PARAMS, exc.message) from None
            except DaemonUnreachable as exc:
                raise McpError(DAEMON_DOWN, str(exc)) from None

        @self.resource("palace://inbox/{agent}", name="inbox", mime_type="application/json",
                       description="An agent's unread inbox (after its read cursor, oldest first, previews).")
        async def inbox_resource(agent: str) -> str:
            return await resource("inbox", agent=agent, limit=50, preview=True)

        @self.resource("palace://tasks/open", name="open tasks", mime_type="application/json",
                       description="Tasks not closed yet (newest first), each with its state and claimant.")
        async def open_tasks_resource() -> str:
            return await resource("task_list", open=True)

        @self.resource("palace://task/{correlation_id}", name="task", mime_type="application/json",
                       description="One task: its request, every event on it, its state, claims and blockers.")
        async def task_resource(correlation_id: str) -> str:
            return await resource("task_show", correlation_id=correlation_id)

        @self.resource("palace://leases", name="leases", mime_type="application/json",
                       description="Active leases: who holds which paths, exclusive or shared, until when.")
        async def leases_resource() -> str:
            return await resource("lease_list")

        @self.resource("palace://who", name="who", mime_type="application/json",
                       description="Watchers connected now on every daemon of the palace.")
        async def who_resource() -> str:
            return await resource("who")

        del (mempalace_inbox, mempalace_inbox_mark_read, mempalace_session_start, inbox_resource, open_tasks_resource,
             task_resource, leases_resource, who_resource)
        del (mempalace_search, mempalace_add_drawer, mempalace_kg_query, mempalace_kg_add, mempalace_kg_invalidate,
             mempalace_diary_write, mempalace_diary_read, mempalace_list_agents, mempalace_find_tunnels)
        del (mempalace_event_append, mempalace_event_list, mempalace_event_wait, mempalace_event_ack,
             mempalace_artifact_put, mempalace_artifact_get, mempalace_patch_submit, mempalace_task_create,
             mempalace_task_status, mempalace_task_list, mempalace_who, mempalace_peers)
        del mempalace_task_ready, mempalace_task_claim, mempalace_task_release, mempalace_task_reassign
        del (mempalace_lease_acquire, mempalace_lease_renew, mempalace_lease_release, mempalace_lease_list,
             mempalace_lease_check)


def _content(text: str | None, encoded: str | None) -> bytes | str:
    if (text is None) == (encoded is None):
        raise ApiError("pass exactly one of content (text) or content_base64 (bytes)", code="invalid_argument")
    if text is not None:
        return text
    try:
        return base64.b64decode(encoded or "", validate=True)
    except ValueError:
        raise ApiError("content_base64 is not valid base64", code="invalid_argument") from None


def _warm() -> None:
    """What the first call to the daemon needs, imported while the first answers are given."""
    from . import aclient, session_text  # noqa: F401


def run_mcp(home: Path, agent: str, *, read_only: bool, tools: str | None = None) -> None:
    """Serve MCP on stdin/stdout until the client closes it. ``tools``: ``--tools`` (default: core)."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="palacectl mcp: %(levelname)s %(message)s")
    server = PalaceMCP(home, agent, read_only=read_only, tools=tools or DEFAULT_TOOLS)
    server.serve_stdio(warm=_warm)
