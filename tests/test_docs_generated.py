"""Docs that cannot drift: what can be generated is, and each of these fails when a page has drifted.

* The command reference (docs/commands.md) and the MCP tool sets (README.md) are written from
  palacectl itself by ``python -m palacectl.reference``; the benchmark tables and the figures
  quoted from them, from the results files in ``benchmarks/results/`` by ``python
  benchmarks/render_tables.py``. A checked-in part that differs from what its command writes fails
  here, naming the command.
* Every page under docs/ has a place in the README's index ("Read on").
* Pages for users say what a thing is, never which internal issue brought it (the developer
  pages, which tell the code's history, may).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from palace_bench import tables
from palacectl import reference

ROOT = Path(__file__).resolve().parent.parent
#: pages for the project's developers, where an issue number is a useful pointer into its history
DEVELOPER_PAGES = frozenset({"docs/development.md", "docs/profile-write-path.md"})
#: an internal issue, as the code's history names it: "issue 28", "Issue 45 §3", "issues 26 and 27"
#: (another project's, "issue #1175", is a source a page may cite)
INTERNAL_ISSUE = re.compile(r"\bissues? \d", re.IGNORECASE)


def _pages() -> dict[str, str]:
    return {str(page.relative_to(ROOT)): page.read_text(encoding="utf-8") for page in reference.doc_pages(ROOT)}


@pytest.mark.parametrize("module", [reference, tables], ids=["reference", "tables"])
def test_each_generated_part_is_what_its_command_writes(module) -> None:
    """Guards issue 47 §2: numbers in the docs disagreed with each other and with the code."""
    stale = reference.update_docs(module.RENDERERS, root=ROOT, check=True)
    assert not stale, (f"generated parts of the docs are stale ({'; '.join(stale)}): run `{module.REGENERATE}` "
                       "and commit what it changes")


def test_every_generated_part_is_closed_and_has_a_writer() -> None:
    writers = {**reference.RENDERERS, **tables.RENDERERS}
    for name, text in _pages().items():
        opened = re.findall(r"<!-- generated:([\w.-]+)", text)
        parts = reference.generated_parts(text)
        assert sorted(opened) == sorted(parts), f"{name}: a generated part without its closing marker"
        unknown = set(parts) - set(writers)
        assert not unknown, f"{name}: no command writes the generated parts {sorted(unknown)}"


def test_the_command_reference_lists_every_command_whatever_the_terminal(monkeypatch) -> None:
    """`notify` was missing from a hand-kept list that claimed every command."""
    monkeypatch.setenv("COLUMNS", "33")
    monkeypatch.setenv("TERM", "xterm-256color")
    text = reference.render_commands()
    assert "### `palacectl notify`" in text and "#### `palacectl notify test`" in text
    assert "approve-hook" not in text and "guard run" not in text  # hidden: not for people
    assert reference.generated_parts((ROOT / "docs" / "commands.md").read_text(encoding="utf-8"))["commands"] == (
        "\n" + text.strip("\n") + "\n\n")


def test_the_reference_of_a_toy_app_names_arguments_options_and_sub_commands() -> None:
    app = typer.Typer(help="A toy.")
    group = typer.Typer(help="Things.\n\nMore words, not in the reference.")

    @app.command("hello")
    def hello(name: str = typer.Argument(..., help="Whom to greet."),
              times: int = typer.Option(1, "--times", min=1, max=9, help="How often."),
              tag: list[str] = typer.Option([], "--tag", help="Repeat it."), loud: bool = False) -> None:
        """Say hello
        on two lines."""

    @app.command("secret", hidden=True)
    def secret() -> None:
        """Not for people."""

    @group.command("list")
    def list_(json_: bool = typer.Option(False, "--json")) -> None:
        """List them."""

    app.add_typer(group, name="things")
    text = reference.render_commands(app)
    assert "### `palacectl hello`\n\nSay hello on two lines.\n\n`palacectl hello NAME [OPTIONS]`\n" in text
    assert "- `NAME`: Whom to greet." in text
    assert "- `--times INTEGER 1–9` (default 1): How often." in text
    assert "- `--tag TEXT` (repeatable): Repeat it." in text
    assert "- `--loud / --no-loud`" in text
    assert "### `palacectl things`\n\nThings.\n\n`palacectl things COMMAND …`" in text
    assert "#### `palacectl things list`" in text and "secret" not in text


def test_a_part_is_replaced_between_its_markers_and_nothing_else() -> None:
    page = ("Before <!-- generated:word -->old<!-- /generated:word --> after.\n\n"
            "<!-- generated:table by hand? no -->\nold\n<!-- /generated:table -->\n"
            "<!-- generated:other -->\nkept\n<!-- /generated:other -->\n")
    new = reference.splice(page, {"word": "new words", "table": "| a |\n|---|\n"})
    assert new == ("Before <!-- generated:word -->new words<!-- /generated:word --> after.\n\n"
                   "<!-- generated:table by hand? no -->\n\n| a |\n|---|\n\n<!-- /generated:table -->\n"
                   "<!-- generated:other -->\nkept\n<!-- /generated:other -->\n")
    assert reference.splice(new, {"word": "new words", "table": "| a |\n|---|"}) == new


def test_every_page_has_a_place_in_the_readme_index() -> None:
    """The longest page was linked from nowhere."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    index = readme.split("\n## Read on\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"\]\((docs/[\w.-]+\.md)\)", index))
    pages = {str(page.relative_to(ROOT)) for page in (ROOT / "docs").glob("*.md")}
    assert pages - listed == set(), f"pages not in README.md's index (## Read on): {sorted(pages - listed)}"
    assert listed - pages == set(), f"README.md's index links pages that do not exist: {sorted(listed - pages)}"


def test_pages_for_users_do_not_speak_of_internal_issues() -> None:
    found = [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {text[m.start():m.start() + 40]!r}"
             for name, text in _pages().items() if name not in DEVELOPER_PAGES
             for m in INTERNAL_ISSUE.finditer(text)]
    assert not found, "say what the thing is, not which issue brought it:\n" + "\n".join(found)


def test_the_commands_at_a_glance_name_every_command() -> None:
    """docs/commands.md's hand-written table names every top-level command and group (each
    option of each is in the generated reference below it)."""
    from palacectl.cli import application

    root = typer.main.get_command(application())
    ctx = root.context_class(root, info_name="palacectl")
    commands = [name for name in root.list_commands(ctx) if not root.get_command(ctx, name).hidden]
    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    glance = text.split("\n## At a glance\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z][a-z-]*)[ `]", glance))
    assert [c for c in commands if c not in named] == [], "add them to docs/commands.md, ## At a glance"
