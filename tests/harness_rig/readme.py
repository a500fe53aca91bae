"""The README's harness configurations, read from the README itself (pure: text in, values out).

"Use palace from your agent" holds one fenced block per file a harness needs, each opening with a
comment that names the harness and, where it is a file, its path (``// ~/.claude/settings.json``,
``# Codex: ~/.codex/config.toml``), or, for Claude Code, the commands themselves (``claude mcp
add …``, ``palacectl rules …``). How each harness gets its rules block is in that block: the
``palacectl rules`` command, or the comment's ``(rules: --harness opencode --tools mcp)``.

``harness_setups`` turns them into what a test does: files to write (their text as printed, with
``//`` comment lines dropped from JSON), commands to run, and the ``palacectl rules`` arguments;
the palacectl the blocks name becomes the one under test (``palacectl`` must be a full path
where the harness's PATH lacks it, as the README says). The agent ids are the README's own.
A README whose blocks no longer say this raises ``SnippetError`` naming what is missing.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field

__all__ = ["HARNESSES", "HarnessSetup", "SnippetError", "fenced_blocks", "harness_setups"]

HARNESSES = ("claude", "codex", "opencode", "gemini")
SECTION = "## Use palace from your agent"
_FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
_PATH = re.compile(r"~/[\w./-]+\.(?:json|toml)")
_NAMES = {"claude": "claude", "codex": "codex", "opencode": "opencode", "gemini": "gemini"}


class SnippetError(ValueError):
    """The README's harness blocks are not where or what this reader expects."""


@dataclass(frozen=True)
class Block:
    lang: str
    comment: str  # the first line, without its comment marker
    text: str  # everything after the first line


@dataclass
class HarnessSetup:
    """One harness configured as the README says."""

    harness: str
    agent: str = ""
    #: path with ``~`` → (lang, text); JSON text has its ``//`` lines dropped
    files: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: commands run in a shell by the user (argv), the harness's own (``claude mcp add``)
    commands: list[list[str]] = field(default_factory=list)
    #: ``palacectl rules`` arguments (without ``palacectl``)
    rules: list[str] = field(default_factory=list)

    def json_file(self, path: str) -> dict:
        lang, text = self.files[path]
        assert lang == "json", (path, lang)
        return json.loads(text)


def fenced_blocks(readme: str) -> list[Block]:
    """The fenced blocks of the README's "Use palace from your agent" section."""
    start = readme.find(SECTION)
    if start < 0:
        raise SnippetError(f"the README has no {SECTION!r} section")
    end = readme.find("\n## ", start + len(SECTION))
    section = readme[start:end if end >= 0 else None]
    blocks = []
    for match in _FENCE.finditer(section):
        first, _, rest = match["body"].partition("\n")
        comment = re.sub(r"^\s*(#|//)\s?", "", first) if re.match(r"^\s*(#|//)", first) else ""
        blocks.append(Block(match["lang"], comment, rest if comment else match["body"]))
    return blocks


def _harness_of(comment: str) -> str | None:
    lowered = comment.lower()
    found = [name for word, name in _NAMES.items() if word in lowered]
    return found[0] if len(found) == 1 else None


def _agent_of(text: str) -> str:
    match = re.search(r"""--agent["',\s]+([\w.-]+)""", text)
    if match is None:
        raise SnippetError(f"no --agent in {text!r}")
    return match[1]


def _json_text(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def harness_setups(readme: str, palacectl: str) -> dict[str, HarnessSetup]:
    """Every harness's setup from ``readme``, with ``palacectl`` for the README's ``palacectl``."""
    setups = {name: HarnessSetup(name) for name in HARNESSES}
    for block in fenced_blocks(readme):
        harness = _harness_of(block.comment)
        if harness is None:
            continue
        setup = setups[harness]
        if block.lang == "sh":
            for line in block.text.splitlines():
                words = shlex.split(line, comments=True)
                if not words:
                    continue
                words = [palacectl if w == "palacectl" else w for w in words]
                if words[0] == palacectl and words[1:2] == ["rules"]:
                    setup.rules = words[1:]
                else:
                    setup.commands.append(words)
                    setup.agent = setup.agent or _agent_of(line)
            continue
        paths = _PATH.findall(block.comment)
        if len(paths) != 1:
            raise SnippetError(f"the {harness} block's first line names no single file: {block.comment!r}")
        text = block.text.replace('"palacectl"', json.dumps(palacectl))
        if block.lang == "json":
            text = _json_text(text)
            json.loads(text)  # as printed, it must be JSON once its comment lines are gone
        elif block.lang == "toml":
            tomllib.loads(text)
        else:
            raise SnippetError(f"the {harness} block for {paths[0]} is {block.lang!r}, not json or toml")
        setup.files[paths[0]] = (block.lang, text)
        if "--agent" in text:
            setup.agent = setup.agent or _agent_of(text)
        rules = re.search(r"rules(?::| --agent \S+)\s+(--harness \S+(?:\s+--[\w-]+ [\w,-]+)*)", block.comment)
        if rules and not setup.rules:
            setup.rules = ["rules", "--agent", "AGENT", *rules[1].split()]
    for setup in setups.values():
        missing = [what for what, value in (("its MCP server", setup.files or setup.commands),
                                            ("its agent id", setup.agent), ("its rules", setup.rules)) if not value]
        if missing:
            raise SnippetError(f"the README's {setup.harness} setup lacks {' and '.join(missing)}")
        setup.rules = [setup.agent if w == "AGENT" else w for w in setup.rules]
        if setup.rules[setup.rules.index("--harness") + 1] != setup.harness:
            raise SnippetError(f"the README's {setup.harness} rules are for another harness: {setup.rules}")
    return setups
