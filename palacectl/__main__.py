"""``palacectl`` entry point.

``palacectl mcp --agent ID [--read-only] [--home PATH] [--tools SETS]`` is started by a harness for every
session and must answer within what the harness waits (issue 26): a command line of exactly that
shape goes straight to the MCP server, without loading the command-line interface (typer and
every command, ~60 ms). Anything else — ``--help``, another order, a mistake — goes through the
interface, which says what is wrong. The commands an agent loop runs on every step (list,
append, ack, wait, inbox, task ready/claim) take the same kind of shortcut: ``palacectl.loop``
runs the command lines it fully understands without typer.
"""

from __future__ import annotations

import sys


def _mcp_fast(args: list[str]) -> int | None:
    """Serve MCP if ``args`` (after ``mcp``) are just its options, well formed; else None."""
    options: dict[str, str | bool] = {}
    words = list(args)
    while words:
        word = words.pop(0)
        name, eq, value = word.partition("=")
        if name == "--read-only" and not eq:
            options["read_only"] = True
        elif name in ("--agent", "--home", "--tools") and (eq or words):
            options[name[2:]] = value if eq else words.pop(0)
        else:
            return None
    agent = options.get("agent")
    if not isinstance(agent, str) or agent.strip().startswith("human:"):
        return None
    from palace_proto.errors import ValidationError
    from palace_proto.validation import validate_agent_token

    from .client import home_from
    from .tool_sets import ToolSetError, parse_tool_sets

    tools = options.get("tools")
    try:
        identity = validate_agent_token(agent, "--agent")
        if isinstance(tools, str):
            parse_tool_sets(tools)
    except (ValidationError, ToolSetError):
        return None  # the command-line interface says what is wrong
    from .mcp_adapter import run_mcp

    home = options.get("home")
    run_mcp(home_from(home if isinstance(home, str) else None), identity, read_only=bool(options.get("read_only")),
            tools=tools if isinstance(tools, str) else None)
    return 0


def main() -> int:
    if sys.argv[1:2] == ["mcp"]:
        served = _mcp_fast(sys.argv[2:])
        if served is not None:
            return served
    elif sys.argv[1:2] != ["--help"]:
        from .loop import run_quick

        quick = run_quick(sys.argv[1:])
        if quick is not None:
            return quick
    from .cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
