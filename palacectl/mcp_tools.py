"""palace's MCP tools and resources, each a module-level function registered by decorator.

Owns: what each tool and resource is — its name (the function's), its group (``tool_sets.py``'s
table, checked here), whether it writes, its description, its input schema (the signature,
where it is read: ``mcp_server.Registry``), the rarer arguments a compact listing names only in
the description (``extras``), and the request it sends the daemon. They are registered into
``TOOLS`` in the order ``palacectl mcp`` lists them, group by group, and served by
``mcp_adapter.PalaceMCP``, which every tool and resource takes first (``Palace``, positional-only:
no argument of the tool) and which owns the rest of the policy: which tools are offered, the
read-only mode, and the result shapes (a writing tool's body returns what follows
``"success": true``; the daemon's refusals become ``{"success": false, "error"}`` or
``{"error"}`` there).

What a client sees is pinned by ``tests/e2e/test_mcp.py``, ``tests/e2e/test_mempalace_compat.py``
and ``tests/ctl/test_mcp_server.py`` (the size of the default listing). It must not import trio,
typer, the command line or the ``mcp`` SDK: the first answers of ``palacectl mcp`` are given
before trio is imported (issue 26).

Filters are built by ``palace_proto.filters.filter_args`` (MemPalace's singular names, a value or
a list, as the daemon's filter sets), as the CLI builds them; not by ``ListQuery.to_wire``, which
always names ``order``, ``limit`` and ``preview`` (a text search and a wait leave them to the
daemon here), and whose checks in this process would answer some refusals before the daemon is
asked (a different answer while it is down).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Callable
from typing import Any, Final, Protocol

from palace_proto.errors import ApiError
from palace_proto.filters import filter_args
from palace_proto.validation import MAX_WAIT_TIMEOUT_MS

from .client import DaemonUnreachable
from .light import LightError, read_light_call
from .mcp_server import INVALID_PARAMS, McpError, Registry, Route
from . import approvals
from .permission_policy import TASK_ENV, PermissionPolicy, PolicyError
from .tool_sets import GROUPS, LISTING_ORDER

__all__ = ["DAEMON_DOWN", "TOOLS", "Palace"]

#: Every tool and resource, in the order they are listed.
TOOLS: Final = Registry()
# A resource read while palaced is down (JSON-RPC's server-error range).
DAEMON_DOWN: Final = -32001

Filter = str | list[str] | None
Result = dict[str, Any]


class _Daemon(Protocol):
    async def call(self, op: str, **args: Any) -> Any: ...


class Palace(Protocol):
    """What a tool is given of the server calling it: the one agent it speaks as, and its daemon."""

    agent: str
    daemon: _Daemon

    def speaks_as(self, field: str, value: str | None) -> str:
        """The agent a write names in ``field``: this one, or ApiError (never impersonate)."""
        ...

    def permission_policy(self) -> PermissionPolicy:
        """The permission policy of this machine for the runner this server serves (``config.toml``).

        Raises:
            PolicyError: the configuration is not a policy.
        """
        ...


def tool(group: str, *, description: str, mutating: bool = False, extras: tuple[str, ...] = (),
         text_only: bool = False, routes: bool = False,
         schema: dict[str, Any] | None = None) -> Callable[[Callable[..., Any]], Any]:
    """Register a tool in ``TOOLS``. ``group``: the one of ``tool_sets.GROUPS`` that lists it
    (a mismatch fails at import); ``mutating``: it writes, so read-only mode leaves it out;
    ``routes``, ``schema``: a front tool (``mcp_server.ToolSpec.routes``) and its input schema."""
    def register(fn: Callable[..., Any]) -> Any:
        if fn.__name__ not in GROUPS.get(group, ()):
            raise TypeError(f"{fn.__name__} is not in tool_sets.GROUPS[{group!r}]")
        return TOOLS.tool(description, read_only=not mutating, extras=extras, text_only=text_only, routes=routes,
                          schema=schema)(fn)
    return register


def _drop_none(**args: Any) -> dict[str, Any]:
    return {k: v for k, v in args.items() if v is not None}


def _content(text: str | None, encoded: str | None) -> bytes | str:
    if (text is None) == (encoded is None):
        raise ApiError("pass exactly one of content (text) or content_base64 (bytes)", code="invalid_argument")
    if text is not None:
        return text
    try:
        return base64.b64decode(encoded or "", validate=True)
    except ValueError:
        raise ApiError("content_base64 is not valid base64", code="invalid_argument") from None


# -- core: the delegation loop --------------------------------------------------------------------


@tool("core", description=(
    "Call at start and after a compaction: unread inbox, open loops, stalled tasks, leases, diary, who is "
    "watching and what to do next (JSON, and as text)."))
async def mempalace_session_start(palace: Palace, /) -> Result:
    from .session_text import render_session

    result = await palace.daemon.call("session_start", agent=palace.agent)
    return {**result, "text": render_session(result)}


@tool("core", description=(
    "Events for you (or *), not from you, after your read cursor, oldest first; then "
    "mempalace_inbox_mark_read the last you handled. Returns {events, count, more, unread, cursor}."))
async def mempalace_inbox(palace: Palace, /, limit: int = 20, preview: bool = True) -> Result:
    return await palace.daemon.call("inbox", agent=palace.agent, limit=limit, preview=preview)


@tool("core", description=(
    "Move your inbox read cursor to the last event you handled (never backwards). Returns {moved, cursor, "
    "unread}."))
async def mempalace_inbox_mark_read(palace: Palace, /, upto_event_id: str) -> Result:
    return await palace.daemon.call("inbox_mark_read", agent=palace.agent, upto_event_id=upto_event_id)


@tool("core", mutating=True, extras=("topic", "branch", "base_commit", "metadata", "from_agent"),
      description="Append an event to the log. from_agent defaults to you. Returns {success, event}.")
async def mempalace_event_append(
    palace: Palace, /, type: str, stream: str, room: str, body: str | None = "", topic: str | None = None,
    to_agent: str | None = None, correlation_id: str | None = None, branch: str | None = None,
    base_commit: str | None = None, status: str | None = None, metadata: dict[str, Any] | None = None,
    artifact_ids: list[str] | None = None, from_agent: str | None = None,
) -> Result:
    event = await palace.daemon.call("append", **_drop_none(
        type=type, stream=stream, room=room, body=body, topic=topic, to_agent=to_agent,
        correlation_id=correlation_id, branch=branch, base_commit=base_commit, status=status,
        metadata=metadata, artifact_ids=artifact_ids, from_agent=palace.speaks_as("from_agent", from_agent)))
    return {"event": event}


@tool("core", mutating=True, extras=("topic", "from_agent"), description=(
    "Acknowledge an event with a new event.ack linked to it (the target never changes); status claimed, "
    "applied, failed or blocked closes the loop. Returns {success, event}."))
async def mempalace_event_ack(
    palace: Palace, /, event_id: str, status: str | None = None, body: str | None = None, topic: str | None = None,
    from_agent: str | None = None,
) -> Result:
    event = await palace.daemon.call("ack", **_drop_none(
        event_id=event_id, status=status, body=body, topic=topic,
        from_agent=palace.speaks_as("from_agent", from_agent)))
    return {"event": event}


@tool("core", extras=("room", "topic", "status", "writer", "exclude_from_agent", "since_created_at", "limit"),
      description=(
          "Wait until an event matches (at once if one does); pushed by the daemon, no polling. from_agent: you "
          "(not a filter); writer filters by author. timeout_ms default 60000, max 300000. Returns {timed_out, "
          "events, count}; a timeout is not an error."))
async def mempalace_event_wait(
    palace: Palace, /, stream: Filter = None, room: Filter = None, topic: Filter = None, type: Filter = None,
    to_agent: Filter = None, from_agent: str | None = None, writer: Filter = None, exclude_from_agent: Filter = None,
    correlation_id: Filter = None, status: Filter = None, since_event_id: str | None = None,
    since_created_at: str | None = None, timeout_ms: float = 60_000, limit: int | None = None,
) -> Result:
    if timeout_ms < 0:
        raise ApiError("timeout_ms must be a non-negative number", code="invalid_argument")
    result = await palace.daemon.call("wait", **filter_args(
        stream=stream, room=room, topic=topic, type=type, to_agent=to_agent, from_agent=_writers(writer),
        exclude_from_agent=exclude_from_agent, correlation_id=correlation_id, status=status),
        **_drop_none(since_event_id=since_event_id, since_created_at=since_created_at, limit=limit,
                     timeout_ms=int(min(timeout_ms, MAX_WAIT_TIMEOUT_MS))))
    return _with_caller_note(result, from_agent, writer)


# Why a note (MemPalace 3.11, #2616): before 3.11 from_agent filtered by author on list and wait;
# a caller still expecting that learns what changed from the result, not from an empty inbox.
def _with_caller_note(result: Result, from_agent: str | None, writer: Filter) -> Result:
    """``result`` with MemPalace 3.11's ``note`` after ``count`` when ``from_agent`` (the caller,
    never a filter) is given without ``writer`` (the author filter)."""
    if isinstance(from_agent, str) and from_agent.strip() and not _writers(writer):
        result["note"] = (f"from_agent is the caller ({from_agent.strip()}) and does not filter; use "
                          f"writer=<agent> to filter by author; your inbox is to_agent={from_agent.strip()}")
    return result


def _writers(writer: Filter) -> Filter:
    """The author filter (``writer``), empty values dropped: an empty writer filters nothing."""
    if isinstance(writer, list):
        return [w for w in writer if not isinstance(w, str) or w.strip()] or None
    return writer if not isinstance(writer, str) or writer.strip() else None


@tool("core", mutating=True, extras=("stream", "room", "branch", "base_commit", "metadata", "topic", "from_agent"),
      description=(
          "Deliver a diff (byte-exact, with its final newline): stores it and appends patch.ready in one step; "
          "with correlation_id, stream and to_agent come from its task. Returns {success, artifact, event}."))
async def mempalace_patch_submit(
    palace: Palace, /, content: str, stream: str | None = None, room: str = "patches", to_agent: str | None = None,
    correlation_id: str | None = None, branch: str | None = None, base_commit: str | None = None,
    body: str | None = None, metadata: dict[str, Any] | None = None, topic: str | None = None,
    from_agent: str | None = None,
) -> Result:
    return await palace.daemon.call("patch_submit", **_drop_none(
        content=content, to_agent=to_agent, correlation_id=correlation_id, stream=stream, room=room,
        topic=topic, branch=branch, base_commit=base_commit, body=body, metadata=metadata,
        from_agent=palace.speaks_as("from_agent", from_agent)))


@tool("core", description=(
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


@tool("core", mutating=True, extras=("from_agent", "blocked_by", "priority", "stall_after"), description=(
    "Delegate work: a task.request with goal, branch, base_commit (a hex commit id, not a branch) and "
    "definition of done. Returns {success, task, handoff}; wait on task.correlation_id."))
async def mempalace_task_create(
    palace: Palace, /, project: str, to_agent: str, goal: str, branch: str, base_commit: str, done: str,
    from_agent: str | None = None, blocked_by: list[str] | None = None, priority: int | None = None,
    stall_after: str | None = None,
) -> Result:
    return await palace.daemon.call("task_create", **_drop_none(
        project=project, to_agent=to_agent, goal=goal, branch=branch, base_commit=base_commit, done=done,
        from_agent=palace.speaks_as("from_agent", from_agent), blocked_by=blocked_by or None,
        priority=priority, stall_after=stall_after))


@tool("core", description=(
    "Tasks you can take now (for you or *, open, unclaimed, blockers applied), urgent and oldest first. "
    "Claim one with mempalace_task_claim."))
async def mempalace_task_ready(palace: Palace, /) -> Result:
    return await palace.daemon.call("task_ready", agent=palace.agent)


@tool("core", mutating=True, description=(
    "Claim a task by correlation id; refused if another holds it, it is blocked or closed. A later "
    "task.conflict to you means another claim won: stop."))
async def mempalace_task_claim(palace: Palace, /, correlation_id: str) -> Result:
    return await palace.daemon.call("task_claim", correlation_id=correlation_id, agent=palace.agent)


@tool("core", extras=("since", "before"), description=(
    "Search the shared memory before you answer. query: keywords (<= 250 chars). Returns verbatim "
    "drawers (wing, room, drawer_id, source, score): quote, do not paraphrase."))
async def mempalace_search(
    palace: Palace, /, query: str, limit: int = 5, wing: str | None = None, room: str | None = None,
    since: str | None = None, before: str | None = None,
) -> Result:
    return await palace.daemon.call("search", **_drop_none(
        query=query, limit=limit, wing=wing, room=room, since=since, before=before))


@tool("core", mutating=True, extras=("source_file", "added_by"), description=(
    "File lasting knowledge verbatim in a wing and room (decisions, lessons; never secrets); the same "
    "content returns the existing drawer. Returns {success, drawer_id}."))
async def mempalace_add_drawer(
    palace: Palace, /, wing: str, room: str, content: str, source_file: str | None = None,
    added_by: str | None = None,
) -> Result:
    return await palace.daemon.call("memory_add", **_drop_none(
        wing=wing, room=room, content=content, source_file=source_file,
        added_by=palace.speaks_as("added_by", added_by)))


# -- log: the rest of the log and the queue -------------------------------------------------------


@tool("log", extras=("room", "topic", "status", "writer", "exclude_from_agent", "before_event_id", "since_created_at",
                     "order"),
      description=(
          "List events. Filters (value or list, OR) are exact; to_agent also matches '*'; writer: the author "
          "(from_agent is you, not a filter). Cursor: since_event_id. Newest first without a cursor, oldest "
          "first with one. preview=true cuts bodies over 200 chars. text: words to find. Returns {events, count}."))
async def mempalace_event_list(
    palace: Palace, /, stream: Filter = None, room: Filter = None, topic: Filter = None, type: Filter = None,
    to_agent: Filter = None, from_agent: str | None = None, writer: Filter = None, exclude_from_agent: Filter = None,
    correlation_id: Filter = None, status: Filter = None, since_event_id: str | None = None,
    before_event_id: str | None = None, since_created_at: str | None = None, order: str | None = None,
    limit: int | None = None, preview: bool = False, text: str | None = None,
) -> Result:
    filters = filter_args(
        stream=stream, room=room, topic=topic, type=type, to_agent=to_agent, from_agent=_writers(writer),
        exclude_from_agent=exclude_from_agent, correlation_id=correlation_id, status=status)
    if text is not None:  # a text search is ranked, best match first
        result = await palace.daemon.call("list", **filters, **_drop_none(
            since_event_id=since_event_id, before_event_id=before_event_id, since_created_at=since_created_at,
            limit=limit, preview=preview, text=text))
    else:
        result = await palace.daemon.call("list", **filters, **_drop_none(
            since_event_id=since_event_id, before_event_id=before_event_id, since_created_at=since_created_at,
            limit=limit, preview=preview, order=_order(order, since_event_id)))
    return _with_caller_note(result, from_agent, writer)


def _order(order: str | None, since_event_id: str | None) -> str:
    """MemPalace 3.10's order: an explicit one wins (any case, blanks stripped); omitted or null,
    oldest first after a ``since_event_id`` cursor, newest first otherwise."""
    if order is None or not order.strip():
        return "asc" if since_event_id else "desc"
    cleaned = order.strip().lower()
    if cleaned not in ("asc", "desc"):
        raise ApiError(f"order={order!r} must be 'asc' or 'desc'", code="invalid_argument")
    return cleaned


@tool("log", mutating=True, extras=("metadata", "created_by"), description=(
    "Store an artifact by content (sha256). kind: patch, file, log, json or note. Text in content, or bytes "
    "in content_base64. Returns {success, artifact} (artifact.warnings for suspicious patches)."))
async def mempalace_artifact_put(
    palace: Palace, /, kind: str, content: str | None = None, content_base64: str | None = None,
    metadata: dict[str, Any] | None = None, created_by: str | None = None,
) -> Result:
    data = _content(content, content_base64)
    record = await palace.daemon.call("artifact_put", **_drop_none(
        kind=kind, content=data, metadata=metadata, created_by=palace.speaks_as("created_by", created_by)))
    return {"artifact": record}


@tool("log", description="A task's lifecycle by correlation id: state, claimant, every event on it.")
async def mempalace_task_status(palace: Palace, /, correlation_id: str) -> Result:
    return await palace.daemon.call("task_show", correlation_id=correlation_id)


@tool("log", description="Tasks you requested or were asked to do; open_only=true (default): loops not yet closed.")
async def mempalace_task_list(palace: Palace, /, open_only: bool = True) -> Result:
    return await palace.daemon.call("task_list", agent=palace.agent, open=open_only)


@tool("log", mutating=True, description="Give back a task you claimed (it is open again); say why in reason.")
async def mempalace_task_release(palace: Palace, /, correlation_id: str, reason: str | None = None) -> Result:
    return await palace.daemon.call("task_release", **_drop_none(correlation_id=correlation_id, reason=reason,
                                                                 agent=palace.agent))


@tool("log", mutating=True,
      description="As a task's requester, hand it to another agent (or *): open again, it wakes them.")
async def mempalace_task_reassign(palace: Palace, /, correlation_id: str, to_agent: str) -> Result:
    return await palace.daemon.call("task_reassign", correlation_id=correlation_id, to_agent=to_agent,
                                    agent=palace.agent)


@tool("log", description="Watchers connected now on every daemon of the palace: who is really listening.")
async def mempalace_who(palace: Palace, /) -> Result:
    return await palace.daemon.call("who")


@tool("log", description="The other daemons of the palace: state, last contact and error, what each side lacks.")
async def mempalace_peers(palace: Palace, /) -> Result:
    return await palace.daemon.call("peers")


# -- people: questions to a person --------------------------------------------------------------


@tool("people", mutating=True, extras=("correlation_id", "question_id"), description=(
    "Ask a person (to: human:NAME or human:*) and wait: before irreversible or outward-facing acts. "
    "choices e.g. [\"yes\",\"no\"]. Returns {status, answer}; open after wait_s: call again with question_id; "
    "expired: nobody answered, so do NOT do it."))
async def mempalace_ask_human(palace: Palace, /, question: str | None = None, to: str = "human:*",
                              choices: list[str] | None = None, timeout_s: int = 1800, wait_s: int = 300,
                              correlation_id: str | None = None, question_id: str | None = None) -> Result:
    if question_id is not None:
        return await palace.daemon.call("ask", question_id=question_id, wait_s=max(0, int(wait_s)))
    if not question:
        raise ApiError("question is required (or question_id, to keep waiting for one asked before)",
                       code="invalid_argument")
    return await palace.daemon.call("ask", **_drop_none(
        from_agent=palace.speaks_as("from_agent", None), to=to, body=question, choices=choices,
        timeout_s=timeout_s, wait_s=max(0, int(wait_s)), correlation_id=correlation_id))


@tool("people", description=(
    "Questions to people with their state (open, answered, expired), newest first; to: human:NAME "
    "(includes those to human:*)."))
async def mempalace_questions(palace: Palace, /, to: str | None = None, status: str | None = None,
                              limit: int = 20) -> Result:
    return await palace.daemon.call("questions", **_drop_none(to=to, status=status, limit=limit))


@tool("people", description=(
    "What runs cost: usage reports summed by task, agent, machine, day or model (by), since a date; "
    "{totals: [{key, runs, tokens_in, tokens_out, cost_usd}]}."))
async def mempalace_usage(palace: Palace, /, by: str = "task", since: str | None = None) -> Result:
    return await palace.daemon.call("usage", **_drop_none(by=by, since=since))


# -- approvals: a harness's permission requests, answered by palace ------------------------------


@tool("approvals", text_only=True, description=(
    "palace's answer to a permission request of the harness running you (Claude Code's "
    "--permission-prompt-tool): allowed or refused by this machine's policy, or asked of a person."))
async def approve(palace: Palace, /, tool_name: str, input: dict | None = None,  # noqa: A002 - the harness's name
                  tool_use_id: str | None = None) -> Result:
    """Returns Claude Code's permission result: ``{"behavior": "allow", "updatedInput"}`` — exactly
    the input judged, or shown whole to the person who allowed it — or ``{"behavior": "deny",
    "message"}``. Anything that goes wrong is a deny, never a yes (``palacectl.approvals``, shared
    with Gemini CLI's hook). The run's worktree is this server's working directory: Claude Code
    starts it in the run's."""
    tool_input = input if isinstance(input, dict) else {}
    calls = [(tool_name, tool_input)]
    try:
        policy = palace.permission_policy()
    except PolicyError as exc:
        verdict = approvals.policy_unreadable(exc)
    else:
        try:
            folder: str | None = os.getcwd()
        except OSError:
            folder = None  # the folder is gone: no worktree, every file tool is asked
        # palace's home (config.toml, the identity key) is never inside a worktree file tools roam.
        worktree = approvals.worktree_of(folder, home=getattr(palace, "home", None))
        step = approvals.first_step(policy, calls, agent=palace.agent, task=os.environ.get(TASK_ENV) or None,
                                    worktree=worktree, asked=(tool_name, tool_input))
        if isinstance(step, approvals.Verdict):
            verdict = step
        else:
            try:
                state = await palace.daemon.call("ask", **step.ask_args())
            except (ApiError, DaemonUnreachable, OSError) as exc:
                verdict = approvals.ask_failed(exc)
            else:
                verdict = (approvals.answer_verdict(state, step) if isinstance(state, dict) else
                           approvals.ask_failed(ValueError("palaced's answer to ask is not a question's state")))
    if verdict.allowed:
        return {"behavior": "allow", "updatedInput": tool_input}
    return {"behavior": "deny", "message": verdict.reason}


# -- memory: the knowledge graph, diaries, agents and tunnels -------------------------------------


@tool("memory", description=(
    "Facts about an entity as of a date (default today): active, historical and future facts. "
    "direction: outgoing, incoming or both."))
async def mempalace_kg_query(palace: Palace, /, entity: str, as_of: str | None = None,
                             direction: str = "both") -> Result:
    return await palace.daemon.call("kg_query", **_drop_none(entity=entity, as_of=as_of, direction=direction))


@tool("memory", mutating=True, extras=("source_drawer_id", "source_file"), description=(
    "Add a fact subject → predicate → object, optionally valid_from/valid_to (YYYY-MM-DD). When a fact "
    "changes: invalidate the old one, then add the new one. Returns {success, triple_id, fact}."))
async def mempalace_kg_add(
    palace: Palace, /, subject: str, predicate: str, object: str, valid_from: str | None = None,
    valid_to: str | None = None, source_drawer_id: str | None = None, source_file: str | None = None,
) -> Result:
    return await palace.daemon.call("kg_add", **_drop_none(
        subject=subject, predicate=predicate, object=object, valid_from=valid_from, valid_to=valid_to,
        source_drawer_id=source_drawer_id, source_file=source_file, added_by=palace.agent))


@tool("memory", mutating=True,
      description="End a fact's validity (ended: YYYY-MM-DD, default today); it stays as history.")
async def mempalace_kg_invalidate(palace: Palace, /, subject: str, predicate: str, object: str,
                                  ended: str | None = None) -> Result:
    return await palace.daemon.call("kg_invalidate", **_drop_none(
        subject=subject, predicate=predicate, object=object, ended=ended, added_by=palace.agent))


@tool("memory", mutating=True, extras=("agent_name",),
      description="Write in your own diary (wing_<you>/diary) with a topic. Returns {success, entry_id, timestamp}.")
async def mempalace_diary_write(palace: Palace, /, entry: str, topic: str = "general",
                                agent_name: str | None = None) -> Result:
    return await palace.daemon.call("diary_write", agent_name=palace.speaks_as("agent_name", agent_name),
                                    entry=entry, topic=topic, added_by=palace.agent)


@tool("memory", description="Read an agent's diary, newest first: {agent, entries, total, showing}. last_n <= 100.")
async def mempalace_diary_read(palace: Palace, /, agent_name: str | None = None, last_n: int = 10) -> Result:
    return await palace.daemon.call("diary_read", agent_name=agent_name or palace.agent, last_n=last_n)


@tool("memory", description="Every agent the palace has seen: wing, last activity, whether it is watching now.")
async def mempalace_list_agents(palace: Palace, /) -> Result:
    return await palace.daemon.call("agents")


@tool("memory", description="Rooms that two wings share (both optional): where their knowledge meets.")
async def mempalace_find_tunnels(palace: Palace, /, wing_a: str | None = None, wing_b: str | None = None) -> Result:
    return await palace.daemon.call("tunnels", **_drop_none(wing_a=wing_a, wing_b=wing_b))


# -- rooms: a discussion among agents (MemPalace RFC 006, docs/rooms.md) ---------------------------


@tool("rooms", mutating=True, extras=("members", "wing", "room", "from_agent"), description=(
    "Open a discussion room in a project (name: a few words; agenda: what to settle). Others join with the "
    "room id in handoff. Returns {success, room, event, handoff}."))
async def mempalace_room_open(
    palace: Palace, /, project: str, name: str, agenda: str = "", from_agent: str | None = None,
    members: list[str] | None = None, wing: str | None = None, room: str | None = None,
) -> Result:
    return await palace.daemon.call("room_open", **_drop_none(
        project=project, name=name, agenda=agenda, members=members, wing=wing, room=room,
        from_agent=palace.speaks_as("from_agent", from_agent)))


@tool("rooms", extras=("agent",), description=(
    "What you have not read in a room yet, oldest first; your read position is kept for you (later reads "
    "leave your own turns out). Returns {room, events, more, count}."))
async def mempalace_room_read(palace: Palace, /, room_id: str, limit: int = 50, agent: str | None = None) -> Result:
    return await palace.daemon.call("room_read", room_id=room_id, limit=limit,
                                    agent=palace.speaks_as("agent", agent))


@tool("rooms", mutating=True, extras=("to_agent", "from_agent"), description=(
    "Say something in an open room (to everyone, or to_agent). Returns {success, event, unread}: unread "
    "counts others' turns since your last read."))
async def mempalace_room_say(palace: Palace, /, room_id: str, body: str, to_agent: str | None = None,
                             from_agent: str | None = None) -> Result:
    return await palace.daemon.call("room_say", **_drop_none(
        room_id=room_id, body=body, to_agent=to_agent, from_agent=palace.speaks_as("from_agent", from_agent)))


@tool("rooms", mutating=True, extras=("from_agent",), description=(
    "Close a room with its outcome; its transcript is filed as drawers (wing and room it names), found by "
    "mempalace_search. A second close changes nothing. Returns {success, room, event, already_closed, filed, "
    "already_filed, wing, palace_room}."))
async def mempalace_room_close(palace: Palace, /, room_id: str, outcome: str = "",
                               from_agent: str | None = None) -> Result:
    return await palace.daemon.call("room_close", room_id=room_id, outcome=outcome,
                                    from_agent=palace.speaks_as("from_agent", from_agent))


@tool("rooms", extras=("project", "agent"), description=(
    "Rooms, newest first: status open or closed; project; agent (rooms it is a member of). Returns {rooms, "
    "count}."))
async def mempalace_room_list(palace: Palace, /, status: str | None = None, project: str | None = None,
                              agent: str | None = None, limit: int | None = None) -> Result:
    return await palace.daemon.call("room_list", **_drop_none(status=status, project=project, agent=agent,
                                                              limit=limit))


# -- light: MemPalace 3.10's three-tool surface, routed to the tools above (palacectl/light.py) ------


def _light_schema(command: str, *fields: str, typed: dict[str, str] | None = None) -> dict[str, Any]:
    """A light tool's input schema: its command string and the fields a call may give instead
    (strings unless ``typed``); any other key is accepted and routed or dropped, as MemPalace does."""
    kinds = typed or {}
    properties: dict[str, Any] = {command: {"type": "string"}}
    properties.update({f: {"type": kinds[f]} if f in kinds else {"type": "string"} for f in fields})
    return {"type": "object", "properties": properties}


async def _light(tool: str, arguments: dict[str, Any]) -> Route | Result:
    try:
        call = read_light_call(tool, arguments)
    except LightError as exc:
        # A parse error is a result, not a protocol error (MemPalace's light server).
        return {"success": False, "error": f"PQL {tool.removeprefix('palace_')} parse error: {exc}"}
    return Route(call.tool, call.arguments)


@tool("light", routes=True, schema=_light_schema(
    "query", "target", "wing", "room", "limit", "since", "before", "entity", "as_of", "agent_name", "last_n",
    typed={"limit": "integer", "last_n": "integer"}), description=(
    "Read the palace: 'FIND words [IN wing/room] [LIMIT n] [SINCE d]', 'KG entity [AS OF d]', "
    "'DIARY agent [LAST n]', 'TUNNELS [BETWEEN a AND b]'; or fields (target: search|kg_query|diary|tunnels)."))
async def palace_query(palace: Palace, /, **arguments: Any) -> Route | Result:
    return await _light("palace_query", arguments)


@tool("light", mutating=True, routes=True, schema=_light_schema(
    "command", "action", "wing", "room", "content", "source_file", "subject", "predicate", "object", "valid_from",
    "ended", "agent_name", "entry", "topic"), description=(
    "Write memory: 'ADD IN wing/room \"verbatim text\"', 'KG ADD s -> p -> o [FROM d]', "
    "'KG INVALIDATE s -> p -> o [ENDED d]', 'DIARY WRITE agent text [TOPIC t]'; or fields (action)."))
async def palace_exec(palace: Palace, /, **arguments: Any) -> Route | Result:
    return await _light("palace_exec", arguments)


@tool("light", mutating=True, routes=True, schema=_light_schema(
    "command", "action", "type", "stream", "room", "topic", "to_agent", "from_agent", "writer", "correlation_id",
    "status", "body", "metadata", "since_event_id", "before_event_id", "since_created_at", "order", "limit",
    "preview", "timeout_ms", "event_id", "artifact_id", "kind", "content", "project", "goal", "branch",
    "base_commit", "done", "room_id", "name", "agenda", "outcome",
    typed={"metadata": "object", "limit": "integer", "preview": "boolean", "timeout_ms": "number"}), description=(
    "Coordinate: 'INBOX', 'EVENT LIST|WAIT to: from:(author) since_id: LIMIT n', 'EVENT APPEND type: stream: "
    "room: to: body:', 'EVENT ACK id: status:', 'TASK CREATE project: to: goal: branch: base: done:', "
    "'PATCH SUBMIT content: correlation_id:', 'ARTIFACT PUT|GET', 'PEERS', 'ROOM OPEN|READ|SAY|CLOSE'."))
async def palace_coordinate(palace: Palace, /, **arguments: Any) -> Route | Result:
    return await _light("palace_coordinate", arguments)


# -- leases -------------------------------------------------------------------------------------


@tool("leases", mutating=True, extras=("agent",), description=(
    "Lease paths before editing shared files: globs from the repository root (src/api/**) or res:NAME. "
    "Exclusive unless shared; ttl 90s/30m/2h/7d (default 1h). Refused, naming the holder, if it overlaps "
    "another agent's lease; force=true takes it (they are told)."))
async def mempalace_lease_acquire(
    palace: Palace, /, patterns: list[str], project: str, ttl: str | None = None, shared: bool = False,
    reason: str | None = None, force: bool = False, agent: str | None = None,
) -> Result:
    return await palace.daemon.call("lease_acquire", **_drop_none(
        patterns=patterns, project=project, ttl_s=ttl, shared=shared or None, reason=reason,
        force=force or None, agent=palace.speaks_as("agent", agent)))


@tool("leases", mutating=True,
      description="Extend your lease (by ttl, or as long as it was taken for). Returns {success, lease}.")
async def mempalace_lease_renew(palace: Palace, /, lease_id: str, ttl: str | None = None) -> Result:
    return await palace.daemon.call("lease_renew", **_drop_none(lease_id=lease_id, ttl_s=ttl, agent=palace.agent))


@tool("leases", mutating=True,
      description="Release your lease by id, or all=true for every lease you hold (optionally in one project).")
async def mempalace_lease_release(palace: Palace, /, lease_id: str | None = None, all: bool = False,
                                  project: str | None = None) -> Result:
    if all == (lease_id is not None):
        raise ApiError("pass a lease_id, or all=true", code="invalid_argument")
    return await palace.daemon.call("lease_release", **_drop_none(
        lease_id=lease_id, all=all or None, project=project, agent=palace.agent))


@tool("leases", description=(
    "Active leases (all=true: also ended ones), optionally of one project, one agent, or covering a path."))
async def mempalace_lease_list(palace: Palace, /, project: str | None = None, agent: str | None = None,
                               path: str | None = None, all: bool = False) -> Result:
    return await palace.daemon.call("lease_list", **_drop_none(project=project, agent=agent, path=path,
                                                               all=all or None))


@tool("leases", description=(
    "Before editing: are these paths under another agent's exclusive lease? Returns {ok, blocked: "
    "[{path, leases}]}; ok=false means do not edit them (ask the holder or wait)."))
async def mempalace_lease_check(palace: Palace, /, paths: list[str], project: str | None = None) -> Result:
    return await palace.daemon.call("lease_check", **_drop_none(paths=paths, project=project, agent=palace.agent))


# Every grouped tool is defined here, and no other (a tool_sets entry without a function would be
# offered and fail at the first listing).
if set(TOOLS.tools) != set(LISTING_ORDER):  # pragma: no cover - a registration mistake
    raise TypeError(f"tool_sets.GROUPS and mcp_tools differ: {sorted(set(TOOLS.tools) ^ set(LISTING_ORDER))}")


# -- resources, for harnesses that read them ------------------------------------------------------


async def _resource(palace: Palace, op: str, **args: Any) -> str:
    """The daemon's answer as JSON text; its refusals and its absence are JSON-RPC errors."""
    try:
        return json.dumps(await palace.daemon.call(op, **args), ensure_ascii=False)
    except ApiError as exc:
        raise McpError(INVALID_PARAMS, exc.message) from None
    except DaemonUnreachable as exc:
        raise McpError(DAEMON_DOWN, str(exc)) from None


@TOOLS.resource("palace://inbox/{agent}", name="inbox", mime_type="application/json",
                description="An agent's unread inbox (after its read cursor, oldest first, previews).")
async def inbox_resource(palace: Palace, /, agent: str) -> str:
    return await _resource(palace, "inbox", agent=agent, limit=50, preview=True)


@TOOLS.resource("palace://tasks/open", name="open tasks", mime_type="application/json",
                description="Tasks not closed yet (newest first), each with its state and claimant.")
async def open_tasks_resource(palace: Palace, /) -> str:
    return await _resource(palace, "task_list", open=True)


@TOOLS.resource("palace://task/{correlation_id}", name="task", mime_type="application/json",
                description="One task: its request, every event on it, its state, claims and blockers.")
async def task_resource(palace: Palace, /, correlation_id: str) -> str:
    return await _resource(palace, "task_show", correlation_id=correlation_id)


@TOOLS.resource("palace://leases", name="leases", mime_type="application/json",
                description="Active leases: who holds which paths, exclusive or shared, until when.")
async def leases_resource(palace: Palace, /) -> str:
    return await _resource(palace, "lease_list")


@TOOLS.resource("palace://who", name="who", mime_type="application/json",
                description="Watchers connected now on every daemon of the palace.")
async def who_resource(palace: Palace, /) -> str:
    return await _resource(palace, "who")
