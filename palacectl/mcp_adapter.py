"""``palacectl mcp --agent ID``: palace as MCP tools over stdio, MemPalace-compatible.

Owns: the server an agent harness talks to (``PalaceMCP``) and its policy (which tools are
offered, the identity it speaks as, read-only mode, the result shapes) over the tools and
resources of the core and of the features it serves (``mcp_tools.build_registry``: the MemPalace
logstream tools with the same names, inputs and result shapes, reference §4, and palace's own),
translated onto the daemon's API. The adapter is a client of the local palaced like the CLI and
keeps no state: every tool call is one request on a fresh connection (``aclient.py``), so it
survives the daemon restarting under it.

What a harness is offered is ``--tools`` (``tool_sets.py``): by default ``core``, the delegation
loop in under 6 KB of schemas, each tool's rarer arguments named in its description and accepted;
the other groups add the rest, ``all`` is every tool with every argument listed.

Rules it enforces on top of the daemon's:

* **One identity.** ``from_agent`` / ``created_by`` default to ``--agent``; naming anyone else
  is refused (never impersonate).
* **Beside the tools.** For a client that declared a capability a feature serves
  (``Feature.mcp_services``: the questions feature's ``elicitation``, the person at the harness
  answering a question asked of them), that feature's service runs for the session; a client
  declaring none, or an adapter run with ``--read-only``, gets nothing else.
* **Read-only.** With ``--read-only``, or when the daemon is an observer, mutating tools are
  left out of ``tools/list`` and calling one is a JSON-RPC error -32003, as in MemPalace.
* **Result shapes.** Mutating tools answer ``{"success": true, …}`` or ``{"success": false,
  "error": "…"}``; read tools answer their data or ``{"error": "…"}``; messages are the
  daemon's, word for word. ``mempalace_artifact_get`` answers ``{"artifact": {…, "content"}}``.
  ``tests/e2e/test_mempalace_compat.py`` pins every shape and argument rule of the eight tools;
  what differs on purpose is listed in README.md, "Differences from MemPalace".

Nothing but protocol messages goes to stdout; logs go to stderr. The protocol is
``mcp_server.py``'s (not the SDK's: its import alone outlasted what harnesses wait, issue 26);
this module must not import trio, typer or the SDK at its top.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Final

from palace_proto import __version__
from palace_proto.errors import ApiError

from .client import Client, DaemonUnreachable
from .feature import Features, load
from .mcp_server import McpError, StdioServer, ToolSpec
from .mcp_tools import build_registry, light_refusal
from .tool_sets import ALL, DEFAULT_TOOLS, tool_sets

__all__ = ["READ_ONLY_ERROR", "PalaceMCP", "run_mcp"]

LOGGER: Final = logging.getLogger("palacectl.mcp")
#: JSON-RPC error code for a mutating tool called in read-only mode (MemPalace's).
READ_ONLY_ERROR: Final = -32003
# Arguments a harness adds to every tool on its own, documented by it, meaning nothing to palace:
# accepted and dropped (refusing them refuses every call such a harness makes). Gemini CLI adds
# ``wait_for_previous`` to each tool's schema and forwards what its model sets (issue 26).
HARNESS_ARGUMENTS: Final = frozenset({"wait_for_previous"})
INSTRUCTIONS: Final = (
    "palace: the shared coordination log of this agent fleet (MemPalace-compatible). Cursor = event id "
    "(since_event_id is exclusive). Claim with ack status=claimed; close every loop with ack "
    "applied/failed/blocked."
)


class _LazyDaemon:
    """The daemon's async client, made at the first call (its import brings trio, which the
    first answers do without)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._client: Any = None

    def __repr__(self) -> str:
        return f"<daemon {self.home}>"

    def _async(self) -> Any:
        if self._client is None:
            from .aclient import AsyncDaemon

            self._client = AsyncDaemon(self.home)
        return self._client

    async def call(self, op: str, **args: Any) -> Any:
        return await self._async().call(op, **args)

    def subscribe(self, **args: Any) -> Any:
        """The daemon's pushes, on a connection of their own (``aclient.AsyncDaemon.subscribe``:
        an async context manager)."""
        return self._async().subscribe(**args)


class PalaceMCP(StdioServer):
    """The MCP server for one agent identity on one palace home, serving the core's tools and
    ``features``' (each tool and resource is given this server: ``mcp_tools.Palace``)."""

    def __init__(self, home: Path, agent: str, *, read_only: bool = False, tools: str | None = ALL,
                 features: Features | None = None) -> None:
        """``tools``: what ``--tools`` says (``tool_sets``): groups, tool names or ``all``;
        ``features``: whose tools it serves besides the core's (by default palacectl's)."""
        if features is None:
            from .features import features as registry

            features = registry()
        super().__init__("palace", __version__, INSTRUCTIONS, build_registry(features))
        self.home = home
        self.features = features
        self.daemon = _LazyDaemon(home)
        self.agent = agent
        self.forced_read_only = read_only
        self.tool_sets = tools or DEFAULT_TOOLS
        self._sets = tool_sets(features)
        self.offered, self.full_schemas = self._sets.parse(tools)
        #: the tools that write (``mutating=True``): read-only mode leaves them out
        self.mutating = frozenset(name for name, spec in self.tools.items() if not spec.read_only)
        self._observer: bool | None = None  # learned from the daemon (None: not asked yet)

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
        order = self._sets.listing_order
        tools = sorted((t for t in self.tools.values() if t.name in self.offered), key=lambda t: order[t.name])
        if self.read_only_now():
            tools = [t for t in tools if t.name not in self.mutating]
        return tools

    async def before_call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if name in self.mutating and self.read_only_now():
            raise self._read_only_error(name)
        known = self.tools[name].input_schema["properties"]
        return {k: v for k, v in arguments.items() if k not in HARNESS_ARGUMENTS or k in known}

    def not_offered(self, name: str) -> str | None:
        if name in self.offered:
            return None
        group = self._sets.group_of[name]
        return (f"{name} is not offered here (palacectl mcp --tools {self.tool_sets}); add its group: "
                f"--tools {self.tool_sets},{group} (or --tools all)")

    def refused_route(self, front: ToolSpec, name: str, reason: str) -> dict[str, Any] | None:
        """A light call whose arguments the tool it runs refuses answers as a light call that cannot
        run: ``{"success": false, "error"}`` (MemPalace's light server; issue 47 §1.3)."""
        return light_refusal(front.name, reason)

    # -- what runs beside the tools ------------------------------------------------------------

    def services(self) -> list[str]:
        """The features' services for this session (``Feature.mcp_services``): those of the
        capabilities the client declared. None for a client of no capability (nothing changes), nor
        with --read-only: what a service does may write (an answer, as a person)."""
        if self.forced_read_only:
            return []
        return [ref for feature in self.features for capability, ref in feature.mcp_services.items()
                if capability in self.client_capabilities]

    def wants_background(self) -> bool:
        return bool(self.services())

    async def serve_background(self) -> None:
        """Each service of ``services`` for the session; one that fails is logged and ends, the
        server goes on (what a service meets must not take the tools down with it)."""
        refs = self.services()
        if not refs:
            return
        import trio

        async def run(ref: str) -> None:
            try:
                await load(ref)(self)
            except Exception:
                LOGGER.exception("%s stopped", ref)

        async with trio.open_nursery() as nursery:
            for ref in refs:
                nursery.start_soon(run, ref)

    def _read_only_error(self, name: str) -> McpError:
        why = "--read-only" if self.forced_read_only else "the daemon is a read-only observer"
        return McpError(READ_ONLY_ERROR, f"{name} is not available: this palace adapter is read-only ({why})",
                        {"tool": name})

    # -- calling the daemon --------------------------------------------------------------------

    def speaks_as(self, field: str, value: str | None) -> str:
        """The agent a write names in ``field``: this adapter's, or ApiError (never impersonate)."""
        if (value is None or value.strip() == self.agent
                or (field == "agent_name" and value.strip().lower() == self.agent.lower())):
            return self.agent
        raise ApiError(f"this adapter speaks as {self.agent!r}; {field}={value.strip()!r} would impersonate "
                       "another agent (run one adapter per agent identity)", code="invalid_argument")

    async def run_tool(self, spec: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
        """A tool's result in MemPalace's shapes: a writing tool's is ``{"success": true, …}`` or
        ``{"success": false, "error"}``, a reading tool's its data or ``{"error"}``. The daemon's
        refusals (and its absence) are results; a write refused as read-only is an McpError."""
        try:
            result = await super().run_tool(spec, arguments)
        except ApiError as exc:
            if spec.read_only:
                return {"error": exc.message}
            if exc.code == "read_only":
                self._observer = True
                raise self._read_only_error(spec.name) from None
            return {"success": False, "error": exc.message}
        except DaemonUnreachable as exc:
            return {"error": str(exc)} if spec.read_only else {"success": False, "error": str(exc)}
        return result if spec.read_only else {"success": True, **result}


def _warm() -> None:
    """What the first call to the daemon needs, imported while the first answers are given."""
    from . import aclient, session_text  # noqa: F401


def run_mcp(home: Path, agent: str, *, read_only: bool, tools: str | None = None) -> None:
    """Serve MCP on stdin/stdout until the client closes it. ``tools``: ``--tools`` (default: core)."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="palacectl mcp: %(levelname)s %(message)s")
    server = PalaceMCP(home, agent, read_only=read_only, tools=tools or DEFAULT_TOOLS)
    server.serve_stdio(warm=_warm)
