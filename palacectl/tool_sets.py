"""Which of palace's MCP tools a harness is offered: the default set and the opt-in groups.

Owns: the group table — the core's tools (``CORE_TOOLS``: the delegation loop over the log, the
log's listing, MemPalace's light front tools) and every feature's (``Feature.tools``), each group
listing the core's first, then the features' in their order, the groups in the order
``Features.tool_groups`` gives (``ToolSets``) — the parsing of ``palacectl mcp --tools …`` /
``palacectl rules --mcp-tools …`` into a set of tool names, and whether parameters beyond a
tool's loop arguments are advertised. Stdlib only: the MCP server's fast path and the rules
renderer both read it before anything heavy is imported (a declaration is data). The tools
themselves are defined in ``mcp_tools.py`` and in each feature's tools module, each naming its
group (checked when ``mcp_tools.build_registry`` puts them together). This module names no
feature.

Why a small default (issue 26): every tool's schema is sent to the model on every turn. All 36
tools cost 16.5 KB (~3,900 tokens) per turn; ``core`` is the delegation loop alone (session start,
inbox, append/ack, wait, patch, artifact, task create/ready/claim, memory search/add) and stays
under ``CORE_BUDGET_BYTES``, pinned by a test. In ``core`` and the groups a tool advertises its
loop arguments and names the rest in its description; every argument is accepted either way, so
a MemPalace skill's call keeps working. ``all`` offers every tool with every argument listed,
MemPalace's full surface, but the groups that serve palace's own runs or are another surface over
the same tools (``light``, and a feature's ``not_in_all``).
"""

from __future__ import annotations

from typing import Final

from .feature import Features

__all__ = [
    "ALL", "CORE_BUDGET_BYTES", "CORE_TOOLS", "DEFAULT_TOOLS", "GROUPS", "LISTING_ORDER", "ToolSetError", "ToolSets",
    "parse_tool_sets", "tool_sets",
]

#: The most the model may be given of the default ``tools/list``, compact JSON (the issue's 6 KB):
#: each tool's name, description and input schema (a harness keeps the output schema and the
#: annotations to itself).
CORE_BUDGET_BYTES: Final = 6 * 1024
ALL: Final = "all"
DEFAULT_TOOLS: Final = "core"
#: the core's tools by group (``mcp_tools`` defines them); each feature's are its ``Feature.tools``
CORE_TOOLS: Final[dict[str, tuple[str, ...]]] = {
    "core": (
        "mempalace_session_start", "mempalace_inbox", "mempalace_inbox_mark_read", "mempalace_event_append",
        "mempalace_event_ack", "mempalace_event_wait",
    ),
    "log": ("mempalace_event_list",),
    # MemPalace 3.10's light server (palacectl/light.py): three tools that take a command string
    # and route it to the full tools. Never part of "all", which is MemPalace's full surface.
    "light": ("palace_query", "palace_exec", "palace_coordinate"),
}
#: the core's groups ``all`` leaves out: another surface over the same tools
_CORE_NOT_IN_ALL: Final = frozenset({"light"})


class ToolSetError(ValueError):
    """A ``--tools`` value names no group and no tool."""


class ToolSets:
    """The groups of the core's tools and ``features``', and ``--tools`` read against them.

    Raises:
        ValueError: a tool listed twice (by the core, or by features).
    """

    def __init__(self, features: Features) -> None:
        grouped: dict[str, list[str]] = {}
        owner: dict[str, str] = {}
        for who, tools in [("the core", CORE_TOOLS), *((f"feature {f.name}", f.tools) for f in features)]:
            for group, names in tools.items():
                for name in names:
                    if name in owner:
                        raise ValueError(f"{owner[name]} and {who} both declare the tool {name}")
                    owner[name] = who
                    grouped.setdefault(group, []).append(name)
        self.groups: dict[str, tuple[str, ...]] = {
            group: tuple(grouped[group]) for group in features.ordered(list(grouped), features.tool_groups)}
        self.not_in_all: frozenset[str] = _CORE_NOT_IN_ALL.union(*(f.not_in_all for f in features))
        self.group_of: dict[str, str] = {name: group for group, names in self.groups.items() for name in names}
        self.every: frozenset[str] = frozenset(self.group_of)
        self.all_tools: frozenset[str] = frozenset(
            name for group, names in self.groups.items() if group not in self.not_in_all for name in names)
        #: The order tools are listed in: the loop first, then each group's.
        self.listing_order: dict[str, int] = {
            name: i for i, name in enumerate(n for names in self.groups.values() for n in names)}

    def __repr__(self) -> str:
        return f"<ToolSets {' '.join(f'{g}={len(n)}' for g, n in self.groups.items())}>"

    def parse(self, value: str | None) -> tuple[frozenset[str], bool]:
        """``core,leases`` → (the tool names offered, whether every argument is advertised).

        Words are group names, ``all``, or single tool names (``mempalace_kg_query`` or
        ``kg_query``), separated by commas or spaces.

        Raises:
            ToolSetError: a word that is none of those, or nothing at all.
        """
        words = (value if value is not None else DEFAULT_TOOLS).replace(",", " ").split()
        if not words:
            raise ToolSetError(f"--tools is empty: name groups ({', '.join(self.groups)}), tools, or {ALL}")
        names: set[str] = set()
        full = False
        for word in words:
            word = word.strip().lower()
            if word == ALL:
                names |= self.all_tools
                full = True
            elif word in self.groups:
                names.update(self.groups[word])
            elif word in self.every or f"mempalace_{word}" in self.every:
                names.add(word if word in self.every else f"mempalace_{word}")
            else:
                raise ToolSetError(f"--tools: {word!r} is not a group ({', '.join(self.groups)}, {ALL}) or a tool "
                                   "name (e.g. mempalace_kg_query)")
        return frozenset(names), full


def tool_sets(features: Features | None = None) -> ToolSets:
    """The tool sets of ``features`` (by default palacectl's, ``palacectl.features``)."""
    if features is None:
        from .features import features as registry

        features = registry()
    return features.memo("tool_sets", ToolSets)


def parse_tool_sets(value: str | None, features: Features | None = None) -> tuple[frozenset[str], bool]:
    """``ToolSets.parse`` with ``features``' tools (by default palacectl's)."""
    return tool_sets(features).parse(value)


#: palacectl's groups, and the order its tools are listed in
GROUPS: Final = tool_sets().groups
LISTING_ORDER: Final = tool_sets().listing_order
