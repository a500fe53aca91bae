"""palacectl's reference, written from palacectl itself, and the generated parts of the docs.

Owns: the command reference (every command and sub-command of the typer app, with its one-line
help and its arguments and options, as typer declares them), the table of the MCP tool sets (the
tools each ``--tools`` word offers and what its ``tools/list`` weighs, from ``tool_sets`` and the
tools' own schemas), and the markers that hold generated text in the docs: a part runs from
``<!-- generated:NAME … -->`` to ``<!-- /generated:NAME -->`` (on lines of their own around a
block, within a line around a few words), and only what is between them is replaced.

``python -m palacectl.reference`` rewrites this module's parts in the checkout it runs from
(``--check``: changes nothing, exit 1 naming each stale part); ``tests/test_docs_generated.py``
fails when a checked-in part differs from what this renders. The benchmark tables are
``palace_bench.tables``' parts, written with ``update_docs`` by ``benchmarks/render_tables.py`` (a
script: palacectl and the benchmark package do not import each other).

Not imported by palacectl's commands: it loads the whole command line and every tool module.
The text depends on nothing but the code (no terminal width, no colour, no home, no clock).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

__all__ = [
    "DOCS", "REGENERATE", "generated_parts", "main", "render_commands", "render_tool_sets", "splice", "update_docs",
]

#: the checkout this module sits in (its docs are what ``main`` rewrites)
ROOT: Final = Path(__file__).resolve().parent.parent
#: the pages that may hold generated parts: the README and every page under docs/
DOCS: Final = ("README.md", "docs/*.md")
#: the command that rewrites this module's parts (named by the markers and by the staleness test)
REGENERATE: Final = "python -m palacectl.reference"
#: a generated part: ``<!-- generated:NAME … -->`` then its text, then ``<!-- /generated:NAME -->``; a
#: block part's markers stand on lines of their own, an inline part's sit within a line
_PART: Final = re.compile(
    r"<!-- generated:(?P<name>[\w.-]+)(?: [^>]*?)? -->(?P<body>.*?)<!-- /generated:(?P=name) -->", re.DOTALL)


# -- the generated parts of a page ------------------------------------------------------------


def generated_parts(text: str) -> dict[str, str]:
    """Each generated part of ``text`` by name: its text (a block part's lines, each ending in a
    newline; an inline part's words)."""
    return {m["name"]: m["body"].removeprefix("\n") for m in _PART.finditer(text)}


def splice(text: str, parts: Mapping[str, str]) -> str:
    """``text`` with each named part's text replaced by ``parts[name]`` (a block part's lines, or
    an inline part's words); parts of other names are left as they are."""
    def put(m: re.Match[str]) -> str:
        name = m["name"]
        if name not in parts:
            return m[0]
        head = m[0][: m.start("body") - m.start()]
        body = _fit(parts[name], block=m["body"].startswith("\n"))
        return f"{head}{chr(10) + body if m['body'].startswith(chr(10)) else body}<!-- /generated:{name} -->"

    return _PART.sub(put, text)


def _fit(body: str, *, block: bool) -> str:
    """A part's text as it stands between its markers: a block's lines between two blank lines
    (so that no Markdown reader takes a marker for part of a table or a list), an inline part on
    one line."""
    if block:
        return "\n" + body.strip("\n") + "\n\n"
    return " ".join(body.split("\n")).strip()


def doc_pages(root: Path = ROOT) -> list[Path]:
    """The pages under ``root`` that may hold generated parts."""
    return sorted(path for pattern in DOCS for path in root.glob(pattern))


def update_docs(renderers: Mapping[str, Callable[[], str]], *, root: Path = ROOT,
                check: bool = False) -> list[str]:
    """Render each part a page of ``root`` names and that ``renderers`` knows, and write it in;
    with ``check``, write nothing. Returns ``page: part`` for each part that was (or, with
    ``check``, would be) changed."""
    rendered: dict[str, str] = {}
    stale: list[str] = []
    for page in doc_pages(root):
        text = page.read_text(encoding="utf-8")
        found = {name: body for name, body in generated_parts(text).items() if name in renderers}
        if not found:
            continue
        for name in found:
            if name not in rendered:
                rendered[name] = renderers[name]()
        new = splice(text, {name: rendered[name] for name in found})
        stale += [f"{page.relative_to(root)}: {name}" for name, body in generated_parts(new).items()
                  if name in found and body != found[name]]
        if new != text and not check:
            page.write_text(new, encoding="utf-8")
    return stale


# -- the command reference --------------------------------------------------------------------


def _one_line(text: str | None) -> str:
    """The first paragraph of a help text, on one line."""
    if not text:
        return ""
    paragraph = re.split(r"\n\s*\n", text.strip().replace("\b", ""), maxsplit=1)[0]
    return " ".join(paragraph.split())


def _all_of(text: str | None) -> str:
    return " ".join((text or "").replace("\b", "").split())


#: typer's names for a value's type, as a synopsis writes them
_TYPE_WORDS: Final = {"str": "TEXT", "text": "TEXT", "int": "INTEGER", "integer": "INTEGER", "float": "FLOAT",
                      "path": "PATH", "boolean": "BOOLEAN"}


def _type_word(param: Any) -> str:
    """What an option's value is, in one upper-case word (``TEXT``, ``INTEGER``, ``a|b``)."""
    if getattr(param, "metavar", None):
        return str(param.metavar)
    kind = param.type
    choices = getattr(kind, "choices", None)
    if choices:
        return "|".join(str(getattr(c, "value", c)) for c in choices)
    name = str(getattr(kind, "name", "text")).removesuffix(" range")
    word = _TYPE_WORDS.get(name, name.upper())
    low, high = getattr(kind, "min", None), getattr(kind, "max", None)
    if low is not None or high is not None:
        word += f" {'' if low is None else low}–{'' if high is None else high}"
    return word


def _default(param: Any) -> str | None:
    """A default worth saying (not None, False, empty or computed), as the user would type it."""
    default = param.default
    if callable(default) or default is None or default is False or default in ((), [], ""):
        return None
    if default is True:
        return param.opts[0] if getattr(param, "secondary_opts", None) else None
    return str(default)


def _param_line(param: Any) -> str:
    if param.param_type_name == "argument":
        name = (param.metavar or param.name).upper()
        head = f"`{name}{' …' if param.nargs == -1 else ''}`"
        notes = [] if param.required else ["optional"]
    else:
        flags = " / ".join([*param.opts, *param.secondary_opts])
        head = f"`{flags}`" if param.is_flag or param.count else f"`{flags} {_type_word(param)}`"
        notes = ["required"] if param.required else []
        if param.multiple:
            notes.append("repeatable")
        default = _default(param)
        if default is not None:
            notes.append(f"default {default}")
        if param.envvar:
            notes.append(f"or ${param.envvar}" if isinstance(param.envvar, str) else
                         "or " + ", ".join(f"${e}" for e in param.envvar))
    help_text = _all_of(getattr(param, "help", None))
    said = f" ({', '.join(notes)})" if notes else ""
    return f"- {head}{said}{': ' + help_text if help_text else ''}"


def _synopsis(path: str, command: Any, group: bool) -> str:
    words = [path]
    for param in command.params:
        if param.param_type_name == "argument":
            name = (param.metavar or param.name).upper() + (" …" if param.nargs == -1 else "")
            words.append(name if param.required else f"[{name}]")
    if any(p.param_type_name == "option" and not p.hidden for p in command.params):
        words.append("[OPTIONS]")
    if group:
        words.append("[COMMAND …]" if getattr(command, "invoke_without_command", False) else "COMMAND …")
    return " ".join(words)


def _walk(command: Any, path: list[str], parent: Any) -> Iterator[tuple[list[str], Any, Any]]:
    """Every visible command under ``command`` (itself first), with its path and context."""
    ctx = command.context_class(command, parent=parent, info_name=path[-1])
    yield path, command, ctx
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _walk(sub, [*path, name], ctx)


def render_commands(app: Any = None) -> str:
    """Every palacectl command as Markdown: a heading, its one-line help, its synopsis, its
    arguments and options (``app``: another typer app, a test's; by default palacectl's)."""
    import typer

    if app is None:
        from .cli import application

        app = application()
    root = typer.main.get_command(app)
    lines: list[str] = []
    for path, command, _ctx in _walk(root, ["palacectl"], None):
        group = hasattr(command, "list_commands")
        level = "###" if len(path) <= 2 else "####"
        name = " ".join(path)
        lines += [f"{level} `{name}`", "", _one_line(command.help) or "(no help)", "",
                  f"`{_synopsis(name, command, group)}`", ""]
        params = [p for p in command.params if not getattr(p, "hidden", False)]
        if params:
            lines += [_param_line(p) for p in params] + [""]
        if group:
            ctx = command.context_class(command, info_name=path[-1])
            subs = [s for s in command.list_commands(ctx) if not command.get_command(ctx, s).hidden]
            lines += ["Commands: " + ", ".join(f"`{s}`" for s in subs) + ".", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


# -- the MCP tool sets ------------------------------------------------------------------------


def tool_set_listings() -> list[tuple[str, list[str], int, int, str]]:
    """Each ``--tools`` word: (the word, the tools it offers in listing order, the bytes of what a
    model is given of them — each tool's name, description and input schema, compact JSON, as
    ``tests/ctl/test_mcp_server.py`` weighs the default set against its budget —, the bytes of its
    whole ``tools/list`` result (output schemas and hints too), a note)."""
    from .features import features as registry
    from .mcp_tools import build_registry
    from .tool_sets import ALL, DEFAULT_TOOLS, tool_sets

    features = registry()
    tools = build_registry(features).tools
    sets = tool_sets(features)
    rows: list[tuple[str, list[str], int, int, str]] = []
    for word in [*sets.groups, ALL]:
        names, full = sets.parse(word)
        ordered = sorted(names, key=lambda n: sets.listing_order[n])
        result = {"tools": [tools[n].to_wire(full) for n in ordered]}
        seen = [{key: tool[key] for key in ("name", "description", "inputSchema")} for tool in result["tools"]]
        model, size = (len(json.dumps(x, ensure_ascii=False, separators=(",", ":")).encode()) for x in (seen, result))
        if word == DEFAULT_TOOLS:
            note = "the default"
        elif word == ALL:
            left_out = " and ".join(f"`{g}`" for g in sets.groups if g in sets.not_in_all)
            note = f"every group but {left_out}, with every argument in each schema"
        elif word in sets.not_in_all:
            note = "when named: not in `all`"
        else:
            note = f"added to the default by `--tools {DEFAULT_TOOLS},{word}`"
        rows.append((word, ordered, model, size, note))
    return rows


def _short(names: list[str]) -> str:
    """Tool names as the README writes them: the first in full, then ``_rest`` for MemPalace's."""
    out: list[str] = []
    for name in names:
        out.append(f"`_{name[len('mempalace_'):]}`" if out and name.startswith("mempalace_") else f"`{name}`")
    return ", ".join(out)


def render_tool_sets() -> str:
    """The table of ``palacectl mcp --tools`` words: what each offers and what its listing weighs."""
    lines = ["| `--tools` | tools | what the model reads, each turn | its whole `tools/list` | offered |",
             "|---|---|---:|---:|---|"]
    for word, names, model, size, note in tool_set_listings():
        listed = f"{len(names)}" if word == "all" else f"{len(names)}: {_short(names)}"
        lines.append(f"| `{word}` | {listed} | {model:,} bytes | {size:,} bytes | {note} |")
    return "\n".join(lines) + "\n"


def render_light_size() -> str:
    """What a model reads of the light tools, in KB of 1,024 bytes (the budget's unit): ``2.7 KB``."""
    (size,) = [model for word, _, model, _, _ in tool_set_listings() if word == "light"]
    return f"{size / 1024:.1f} KB"


#: every part this module writes, by its marker's name
RENDERERS: Final[dict[str, Callable[[], str]]] = {
    "commands": render_commands, "tool-sets": render_tool_sets, "light-kb": render_light_size,
}


def regenerate(prog: str, description: str, renderers: Mapping[str, Callable[[], str]],
               argv: list[str] | None = None) -> int:
    """A regenerating command's whole run: write each part ``renderers`` renders into the docs
    (``--check``: change nothing, exit 1 when a part is stale), saying which parts it touched."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a part is stale")
    args = parser.parse_args(argv)
    stale = update_docs(renderers, check=args.check)
    for part in stale:
        sys.stdout.write(f"{'stale' if args.check else 'rewritten'}: {part}\n")
    return 1 if stale and args.check else 0


def main(argv: list[str] | None = None) -> int:
    return regenerate(REGENERATE, "Write palacectl's command reference and the MCP tool-set table into the docs, "
                      "between their generated:commands and generated:tool-sets markers.", RENDERERS, argv)


if __name__ == "__main__":
    sys.exit(main())
