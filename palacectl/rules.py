"""Render the shared-brain rules block and install it into an agent's instruction file.

Owns: the template lookup (package ``palace_rules``, i.e. ``rules/shared_brain_rules.md``), the
marker lines that wrap a rendered block, the harness → instruction-file table, and the in-place
install that ``palacectl rules`` performs. Stdlib only plus ``palace_proto`` validation; must not
import trio, typer or palaced. Everything is a pure function except ``install_rules``, whose only
IO is reading and atomically rewriting the one file it is given.

The markers are the contract: a rendered block starts with a line beginning
``<!-- palace-shared-brain:start`` and ends with the line ``<!-- palace-shared-brain:end -->``.
Installing again finds that span and swaps it, so a protocol change means re-rendering once per
agent rather than hand-editing N prompts. Bytes outside the span are never touched.
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Collection
from importlib import resources
from pathlib import Path
from typing import Final, Literal

from palace_proto.validation import validate_agent_token

from .files import new_file_mode, write_atomically

__all__ = [
    "END_MARKER",
    "HARNESS_FILES",
    "PLACEHOLDER",
    "START_MARKER_PREFIX",
    "RulesTemplateError",
    "install_rules",
    "load_template",
    "render_rules",
]

#: Where each harness reads its standing instructions (expand ``~`` before use).
HARNESS_FILES: Final[dict[str, str]] = {
    "claude": "~/.claude/CLAUDE.md",
    "codex": "~/.codex/AGENTS.md",
    "opencode": "~/.config/opencode/AGENTS.md",
    # Gemini CLI reads ~/.gemini/GEMINI.md; the config/ one is the Antigravity IDE's (issue 26).
    "gemini": "~/.gemini/GEMINI.md",
    "antigravity": "~/.gemini/config/GEMINI.md",
    "hermes": "~/.hermes/SOUL.md",
}

PLACEHOLDER: Final = "<AGENT_ID>"
# Why a prefix: the start line also carries a human note that may change between releases, and a
# block rendered by an older palacectl must still be found and replaced.
START_MARKER_PREFIX: Final = "<!-- palace-shared-brain:start"
END_MARKER: Final = "<!-- palace-shared-brain:end -->"
_TEMPLATE_PACKAGE: Final = "palace_rules"
_TEMPLATE_NAME: Final = "shared_brain_rules.md"
# Markers count only at the start of a line, so prose that merely mentions them is left alone.
_START_RE: Final = re.compile(b"^" + re.escape(START_MARKER_PREFIX.encode()), re.MULTILINE)
_END_RE: Final = re.compile(b"^" + re.escape(END_MARKER.encode()), re.MULTILINE)

InstallResult = Literal["replaced", "appended", "unchanged"]
RulesTools = Literal["both", "cli", "mcp"]
RULES_TOOLS: Final = ("both", "cli", "mcp")
# Why 100: the template's own line length, so an added paragraph reads as part of it.
RULES_WIDTH: Final = 100
# "`palacectl list` (MCP `mempalace_event_list`)" and "… (MCP `mempalace_event_ack`, status `claimed`)"
_BOTH_NAMES_RE: Final = re.compile(r"`(?P<command>palacectl [^`]+)`\s+\(MCP `(?P<tool>mempalace_\w+)`(?P<rest>[^)]*)\)")


class RulesTemplateError(RuntimeError):
    """The packaged rules template is missing or unreadable (a broken install, not bad input)."""


def load_template() -> str:
    """Return the packaged rules template, exactly as shipped.

    Raises:
        RulesTemplateError: "Rules template not readable: <err>".
    """
    try:
        # Bytes, then decode: text mode would translate newlines and the README pin is byte-exact.
        data = resources.files(_TEMPLATE_PACKAGE).joinpath(_TEMPLATE_NAME).read_bytes()
        return data.decode("utf-8")
    except (OSError, ImportError, UnicodeDecodeError) as exc:
        raise RulesTemplateError(f"Rules template not readable: {exc}") from exc


def render_rules(agent_id: str, tools: RulesTools = "both", offered: Collection[str] | None = None) -> str:
    """Fill ``<AGENT_ID>`` into the template and wrap it in the start/end marker lines.

    Args:
        agent_id: the agent's stable identity, a single token like ``mac-claude``; surrounding
            whitespace is stripped. The id also lands inside an HTML comment, which is why
            anything beyond letters, digits, '.', '_' and '-' is refused. A
            ``host:harness:project`` id (``win:claude:shop``) also gets a paragraph after the
            first that tells the agent how to compose its id in another project
            (``win:claude:<project>``), as MemPalace's block does, and the start marker names
            ``rules --host --harness --project``.
        tools: which names the rules use where the template offers both (written as a command
            followed by "(MCP tool …)"): ``mcp`` for a harness wired to
            ``palacectl mcp``, ``cli`` for one that runs commands, ``both`` as written.
            Commands with no MCP tool (``watch``, ``rules``) stay commands in every mode.
        offered: the MCP tools the agent's ``palacectl mcp --tools …`` offers (``tool_sets``);
            a step whose tool is not among them is written as its command, so the rules never
            name a tool the agent cannot see. None: every tool.

    Returns:
        The block: start marker, blank line, body (trailing newlines dropped), blank line, end
        marker, final newline.

    Raises:
        ValidationError: the id is not a single token.
        RulesTemplateError: the template cannot be read.
    """
    agent = validate_agent_token(agent_id, "--agent")
    body = load_template().replace(PLACEHOLDER, agent).rstrip("\n")
    command = f"palacectl rules --agent {agent}"
    if ":" in agent:  # host:harness:project (validated): one id per project, composed by the agent
        host, harness, project = agent.split(":")
        heading, _, rest = body.partition("\n\n")
        first, _, others = rest.partition("\n\n")
        body = "\n\n".join([heading, first, _project_ids(host, harness, project), others])
        command = f"palacectl rules --host {host} --harness {harness} --project {project}"

    def named(m: re.Match[str]) -> str:
        if tools == "cli" or (offered is not None and m["tool"] not in offered):
            return f"`{m['command']}`"
        return f"`{m['tool']}`{m['rest']}" if tools == "mcp" else m[0]

    body = _BOTH_NAMES_RE.sub(named, body)
    start = (
        f"{START_MARKER_PREFIX} (rendered by `{command}`; "
        "edit rules/shared_brain_rules.md, then re-render) -->"
    )
    return f"{start}\n\n{body}\n\n{END_MARKER}\n"


def _project_ids(host: str, harness: str, project: str) -> str:
    """How an agent with a ``host:harness:project`` id (MemPalace RFC 005) composes its id for
    another project: the paragraph that follows the template's first (who you are)."""
    return textwrap.fill(f"Your id is host:harness:project: `{host}:{harness}:{project}` is harness `{harness}` on host "
            f"`{host}`, working in project `{project}`. One id per project: every session in a project "
            f"shares it, and you keep it for good there. Working in another project, compose your id for it "
            f"before its first palace call: `{host}:{harness}:<project>`, `<project>` being that project's "
            "stable lowercase name (e.g. its repository's folder; letters, digits, '.', '_', '-'), and use "
            f"it wherever this block says `{host}:{harness}:{project}`.", width=RULES_WIDTH,
                         break_long_words=False, break_on_hyphens=False)


def install_rules(path: Path, block: str) -> InstallResult:
    """Put ``block`` into the instruction file at ``path``, replacing an earlier block if any.

    If the file has a start-marker line followed later by an end-marker line, that span (from
    the start of the start line through the end line and its newline) is replaced and every
    other byte is kept as is, CRLF and all. Otherwise the block is appended after a blank line.
    A missing file (and its parent directories) is created. Installing the same block twice
    leaves the file alone the second time.

    Resource handling: the new content goes to a temporary file in the same directory that has
    the original file's mode before its first byte, is fsynced, then ``os.replace``s the old file
    and the folder is fsynced (palacectl.files), so a crash leaves either the old or the new
    file, never half of one. A symlinked instruction file (dotfile repos) is followed, and its
    target is rewritten rather than the link.

    Args:
        path: the instruction file, already ``~``-expanded.
        block: a block from ``render_rules``.

    Returns:
        "replaced", "appended" or "unchanged".

    Raises:
        ValueError: ``block`` is not a rendered block, or the file has a start marker with no
            end marker after it (nothing is written; the user must fix or remove it).
        OSError: the file or its directory cannot be read or written.
    """
    if not block.startswith(START_MARKER_PREFIX) or not block.endswith(END_MARKER + "\n"):
        raise ValueError("block must be a rendered rules block (from render_rules)")
    target = Path(os.path.realpath(path))
    new_block = block.encode("utf-8")
    try:
        old: bytes | None = target.read_bytes()
    except FileNotFoundError:
        old = None
    current = old or b""

    span = _find_block(current, path)
    if span is not None:
        begin, end = span
        new = current[:begin] + new_block + current[end:]
        result: InstallResult = "replaced"
    else:
        new = _separated(current) + new_block
        result = "appended"

    if old is not None and new == old:
        return "unchanged"
    # A new file gets the user's usual mode (umask); an existing one keeps the mode the user gave it.
    write_atomically(target, new, new_file_mode(), keep_mode=True, create_folder=True)
    return result


def _find_block(data: bytes, path: Path) -> tuple[int, int] | None:
    """The byte span of the first installed block, or None when there is no start marker."""
    start = _START_RE.search(data)
    if start is None:
        return None
    end = _END_RE.search(data, start.end())
    if end is None:
        raise ValueError(
            f"{path} has a '{START_MARKER_PREFIX}' line but no '{END_MARKER}' line after it; "
            "fix or remove the broken block, then run this again. Nothing was written."
        )
    newline = data.find(b"\n", end.end())
    return start.start(), len(data) if newline == -1 else newline + 1


def _separated(data: bytes) -> bytes:
    """``data`` ending in a blank line, ready for an appended block (empty stays empty)."""
    if not data:
        return data
    if not data.endswith(b"\n"):
        data += b"\n"
    before_last_newline = data[:-2] if data.endswith(b"\r\n") else data[:-1]
    if before_last_newline and not before_last_newline.endswith(b"\n"):
        data += b"\n"
    return data
