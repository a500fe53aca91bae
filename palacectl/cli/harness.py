"""palacectl's commands that connect an agent harness to palace: its rules and its MCP server.

Owns: ``rules`` (print the shared-brain rules block for an agent, or install it into a file or a
known harness's instruction file, through ``palacectl.rules``) and ``mcp`` (serve palace as MCP
tools on stdio, through ``palacectl.mcp_adapter``). Both load their module only when they run:
the MCP SDK (anyio, pydantic) would double every other command's start-up. Registered on the
root app by ``cli.root``; imports ``cli.common`` only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from palace_proto.errors import ValidationError
from palace_proto.validation import agent_id_from_parts, validate_agent_token

from ..client import home_from
from ..output import emit, fail, note, write_stdout
from .common import JsonOpt, UsageProblem, current_home

__all__ = ["mcp", "rules"]


def rules(
    agent: Annotated[Optional[str], typer.Option("--agent", help="Your agent id, a single token like mac-claude "
                                                                 "(or host:harness:project).")] = None,
    install: Annotated[Optional[Path], typer.Option("--install", help="Write the block into this file.")] = None,
    harness: Annotated[Optional[str], typer.Option("--harness", help="claude, codex, opencode, gemini, antigravity or "
                                                                     "hermes: install into its file. With --host "
                                                                     "and --project: the id's harness part.")] = None,
    host: Annotated[Optional[str], typer.Option("--host", help="MemPalace 3.10's identity: with --harness and "
                                                               "--project, the id host:harness:project (printed).")] = None,
    project: Annotated[Optional[str], typer.Option("--project", help="The project part of host:harness:project.")] = None,
    mcp: Annotated[Optional[str], typer.Option("--mcp", help="MemPalace's spelling: full (every tool) or light "
                                                             "(palace_query/_exec/_coordinate).")] = None,
    tools: Annotated[str, typer.Option("--tools", help="mcp (the agent uses `palacectl mcp`), cli, or both.")] = "both",
    mcp_tools: Annotated[str, typer.Option("--mcp-tools", help="The tool sets its `palacectl mcp --tools` offers "
                                                               "(default core): steps with other tools are written "
                                                               "as commands.")] = "core",
    hooks: Annotated[bool, typer.Option("--hooks", help="With --harness: also install its session-start hook "
                                                       "(runs `palacectl session start` at start and after a "
                                                       "compaction).")] = False,
    remove_hooks: Annotated[bool, typer.Option("--remove-hooks", help="With --harness: remove palace's hook "
                                                                     "(the rules stay).")] = False,
    json_: JsonOpt = False,
) -> None:
    """Print (or install) the shared-brain rules block for an agent."""
    from ..rules import HARNESS_FILES, RULES_TOOLS, install_rules, render_rules
    from ..tool_sets import ToolSetError, parse_tool_sets

    if host is not None or project is not None:
        # MemPalace 3.10 (RFC 005): `rules --host H --harness N --project P` prints the block for
        # the id H:N:P; --harness is then the id's harness, not a file to install into.
        if agent is not None:
            raise UsageProblem("pass --agent ID or --host/--harness/--project, not both")
        try:
            agent = agent_id_from_parts(host, harness, project)
        except ValidationError as exc:
            raise UsageProblem(str(exc)) from None
        harness = None
    if agent is None:
        raise UsageProblem("--agent ID is required (or --host H --harness N --project P: the id H:N:P)")
    if mcp is not None:
        if mcp not in ("full", "light"):
            raise UsageProblem("--mcp must be full or light")
        mcp_tools = "all" if mcp == "full" else "light"
    if install is not None and harness is not None:
        raise UsageProblem("pass --install PATH or --harness NAME, not both")
    if (hooks or remove_hooks) and harness is None:
        raise UsageProblem("--hooks and --remove-hooks go with --harness NAME (whose settings to change)")
    if hooks and remove_hooks:
        raise UsageProblem("pass --hooks or --remove-hooks, not both")
    if hooks or remove_hooks:
        _harness_hooks(agent, harness or "", remove=remove_hooks, as_json=json_)
        if remove_hooks:
            return
    if tools not in RULES_TOOLS:
        raise UsageProblem(f"--tools must be one of: {', '.join(RULES_TOOLS)}")
    try:
        offered, _ = parse_tool_sets(mcp_tools)
    except ToolSetError as exc:
        raise UsageProblem(str(exc).replace("--tools", "--mcp-tools", 1)) from None
    block = render_rules(agent, tools, offered)  # type: ignore[arg-type]
    target = install
    if harness is not None:
        if harness not in HARNESS_FILES:
            raise UsageProblem(f"--harness must be one of: {', '.join(sorted(HARNESS_FILES))}")
        target = Path(HARNESS_FILES[harness]).expanduser()
    if target is None:
        if not emit({"agent": agent, "rules": block}, json_):
            write_stdout(block)
        return
    try:
        action = install_rules(target, block)
    except (OSError, ValueError) as exc:
        fail(str(exc))
    if not emit({"agent": agent, "path": str(target), "action": action}, json_):
        note(f"Rules for {agent}: {action} in {target}")


def _harness_hooks(agent: str, harness: str, *, remove: bool, as_json: bool) -> None:
    """Install (or remove) palace's session-start hook in the harness's settings."""
    from ..hooks import HOOK_HARNESSES, HooksError, hook_command, install_hooks, remove_hooks
    from ..installed import palacectl_command

    spec = HOOK_HARNESSES.get(harness)
    if spec is None:
        fail(f"{harness} offers no session-start hook palace can install (hooks: {', '.join(sorted(HOOK_HARNESSES))}); "
             "its rules tell the agent to run `palacectl session start` itself", code="invalid_argument")
    validate_agent_token(agent, "--agent")
    path = Path(spec.settings).expanduser()
    try:
        if remove:
            action = remove_hooks(spec, path)
        else:
            action = install_hooks(spec, path, hook_command(palacectl_command(), current_home(), agent, harness))
    except (HooksError, OSError) as exc:
        fail(str(exc))
    if emit({"agent": agent, "harness": harness, "hooks_path": str(path), "hooks": action}, as_json):
        return
    note(f"Session-start hook for {agent} ({harness}): {action} in {path}")
    if harness == "codex" and not remove and action != "unchanged":
        # Codex skips an untrusted hook without a word (issue 26): say what it takes.
        note("Codex runs it only once you trust it: start `codex` in a terminal and trust palace's SessionStart "
                 "hook when it asks you to review it; headless runs can pass --dangerously-bypass-hook-trust")


def mcp(
    agent: Annotated[str, typer.Option("--agent", help="The agent identity this adapter speaks as, e.g. mac-claude.")],
    read_only: Annotated[bool, typer.Option("--read-only", help="Offer only the reading tools.")] = False,
    home: Annotated[Optional[Path], typer.Option("--home", help="Palace home (same as the global --home).")] = None,
    tools: Annotated[str, typer.Option("--tools", help="What to offer: core (the default: the delegation loop), "
                                                       "and the groups log, memory, leases, or all; comma-separated, "
                                                       "tool names too.")] = "core",
) -> None:
    """Serve palace to an agent harness as MCP tools on stdio (MemPalace-compatible names)."""
    from ..tool_sets import ToolSetError, parse_tool_sets

    try:
        parse_tool_sets(tools)
    except ToolSetError as exc:
        raise UsageProblem(str(exc)) from None
    if agent.strip().startswith("human:"):
        # Guards the complaint of agents posting as the human overseer: a harness never speaks as a person.
        raise UsageProblem(f"--agent {agent.strip()} is a person's id; the MCP adapter speaks for an agent. Send "
                           "your own messages with `palacectl append --from-agent human:NAME`")
    identity = validate_agent_token(agent, "--agent")
    from ..mcp_adapter import run_mcp

    run_mcp(home_from(home) if home is not None else current_home(), identity, read_only=read_only, tools=tools)
