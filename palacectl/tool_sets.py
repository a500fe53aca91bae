"""Which of palace's MCP tools a harness is offered: the default set and the opt-in groups.

Owns: the group table (``core``, ``log``, ``memory``, ``leases``, ``people``, ``rooms``, ``light``), the
parsing of
``palacectl mcp --tools …`` / ``palacectl rules --mcp-tools …`` into a set of tool names, and
whether parameters beyond a tool's loop arguments are advertised. Stdlib only: the MCP server's
fast path and the rules renderer both read it before anything heavy is imported. The tools
themselves are in ``mcp_tools.py``, each naming its group here (checked when that is imported).

Why a small default (issue 26): every tool's schema is sent to the model on every turn. All 36
tools cost 16.5 KB (~3,900 tokens) per turn; ``core`` is the delegation loop alone (session start,
inbox, append/ack, wait, patch, artifact, task create/ready/claim, memory search/add) and stays
under ``CORE_BUDGET_BYTES``, pinned by a test. In ``core`` and the groups a tool advertises its
loop arguments and names the rest in its description; every argument is accepted either way, so
a MemPalace skill's call keeps working. ``all`` offers every tool with every argument listed,
MemPalace's full surface.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ALL", "CORE_BUDGET_BYTES", "DEFAULT_TOOLS", "GROUPS", "LISTING_ORDER", "ToolSetError", "parse_tool_sets"]

#: The most the default ``tools/list`` result may weigh, compact JSON (the issue's 6 KB).
CORE_BUDGET_BYTES: Final = 6 * 1024
ALL: Final = "all"
DEFAULT_TOOLS: Final = "core"
GROUPS: Final[dict[str, tuple[str, ...]]] = {
    "core": (
        "mempalace_session_start", "mempalace_inbox", "mempalace_inbox_mark_read", "mempalace_event_append",
        "mempalace_event_ack", "mempalace_event_wait", "mempalace_patch_submit", "mempalace_artifact_get",
        "mempalace_task_create", "mempalace_task_ready", "mempalace_task_claim", "mempalace_search",
        "mempalace_add_drawer",
    ),
    "log": (
        "mempalace_event_list", "mempalace_artifact_put", "mempalace_task_status", "mempalace_task_list",
        "mempalace_task_release", "mempalace_task_reassign", "mempalace_who", "mempalace_peers",
    ),
    "memory": (
        "mempalace_kg_query", "mempalace_kg_add", "mempalace_kg_invalidate", "mempalace_diary_write",
        "mempalace_diary_read", "mempalace_list_agents", "mempalace_find_tunnels",
    ),
    "leases": (
        "mempalace_lease_acquire", "mempalace_lease_renew", "mempalace_lease_release", "mempalace_lease_list",
        "mempalace_lease_check",
    ),
    "people": ("mempalace_ask_human", "mempalace_questions", "mempalace_usage"),
    # Agent rooms (MemPalace RFC 006; docs/rooms.md): a discussion with a read position kept for you.
    "rooms": ("mempalace_room_open", "mempalace_room_read", "mempalace_room_say", "mempalace_room_close",
              "mempalace_room_list"),
    # MemPalace 3.10's light server (palacectl/light.py): three tools that take a command string
    # and route it to the tools above. Never part of "all", which is MemPalace's full surface.
    "light": ("palace_query", "palace_exec", "palace_coordinate"),
    # Only for a launched run's harness (its --permission-prompt-tool): never part of "all".
    "approvals": ("approve",),
}
#: groups ``all`` leaves out: they serve palace's own runs, or are another surface over the same tools
_NOT_IN_ALL: Final = frozenset({"approvals", "light"})
_EVERY_TOOL: Final = frozenset(name for group, names in GROUPS.items() for name in names)
_ALL_TOOLS: Final = frozenset(name for group, names in GROUPS.items() if group not in _NOT_IN_ALL for name in names)
#: The order tools are listed in: the loop first, then each group's.
LISTING_ORDER: Final = {name: i for i, name in enumerate(n for names in GROUPS.values() for n in names)}


class ToolSetError(ValueError):
    """A ``--tools`` value names no group and no tool."""


def parse_tool_sets(value: str | None) -> tuple[frozenset[str], bool]:
    """``core,leases`` → (the tool names offered, whether every argument is advertised).

    Words are group names, ``all``, or single tool names (``mempalace_kg_query`` or
    ``kg_query``), separated by commas or spaces.

    Raises:
        ToolSetError: a word that is none of those, or nothing at all.
    """
    words = [w for w in (value if value is not None else DEFAULT_TOOLS).replace(",", " ").split()]
    if not words:
        raise ToolSetError(f"--tools is empty: name groups ({', '.join(GROUPS)}), tools, or {ALL}")
    names: set[str] = set()
    full = False
    for word in words:
        word = word.strip().lower()
        if word == ALL:
            names |= _ALL_TOOLS
            full = True
        elif word in GROUPS:
            names.update(GROUPS[word])
        elif word in _EVERY_TOOL or f"mempalace_{word}" in _EVERY_TOOL:
            names.add(word if word in _EVERY_TOOL else f"mempalace_{word}")
        else:
            raise ToolSetError(f"--tools: {word!r} is not a group ({', '.join(GROUPS)}, {ALL}) or a tool name "
                               "(e.g. mempalace_kg_query)")
    return frozenset(names), full
