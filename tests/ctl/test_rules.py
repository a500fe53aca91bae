"""Tests for palacectl.rules: the template's content, rendering, the docs/rules.md pin, and install."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from palace_proto.errors import ValidationError
from palacectl import rules
from palacectl.rules import (
    END_MARKER,
    HARNESS_FILES,
    START_MARKER_PREFIX,
    install_rules,
    load_template,
    render_rules,
)

REPO = Path(__file__).resolve().parents[2]
TEMPLATE_FILE = REPO / "rules" / "shared_brain_rules.md"
RULES_PAGE = REPO / "docs" / "rules.md"
AGENT_ERROR = ("--agent must be a single token like mac-claude (machine-harness): letters, digits, '.', '_', '-', "
               "or host:harness:project like mac:claude:shop")

# Every rule of the block must survive edits; each phrase is pinned verbatim.
REQUIRED_PHRASES = [
    # identity
    "<AGENT_ID>",
    "from_agent",
    "created_by",
    "never rotate",
    "another agent's id",
    # two layers
    "should *act* on it, append an event",
    "should *know* it, file a drawer",
    # memory discipline
    "mempalace_search",
    "mempalace_kg_query",
    "verbatim",
    "do not guess",
    "mempalace_add_drawer",
    "mempalace_kg_invalidate",
    "mempalace_kg_add",
    "secrets",
    "tokens",
    # identity bound to the daemon, session start
    "`unproven`",
    "`impersonation`",
    "`human:<name>` is the operator",
    "palacectl session start --agent <AGENT_ID>",
    "mempalace_session_start",
    "again after every compaction",
    # inbox sweep
    "palacectl inbox --agent <AGENT_ID>",
    "mempalace_inbox",
    "The daemon keeps the cursor",
    "palacectl inbox mark-read --agent <AGENT_ID> --upto",
    "mempalace_inbox_mark_read",
    "never past what the inbox has shown you",
    "palacectl list",
    "mempalace_event_list",
    "since_event_id",
    "Never resume by",
    "created_at",
    "with `text` finds an old message",
    # watcher
    "every session, unconditionally",
    "you must watch the stream actively",
    "palacectl watch --agent <AGENT_ID>",
    "Exit 0 = mail",
    "Exit 2 =",
    "re-arm the same command",
    "state file under the palace home",
    "live tip",
    "not `--to-agent`",
    "Repeated `--type` flags mean OR",
    "task.reply",
    "event.ack",
    "palacectl wait",
    "mempalace_event_wait",
    "never replaces it",
    "palacectl watch --agent <AGENT_ID> --announce",
    "cannot watch and needs a ping",
    "Never claim a watch",
    "allowlist",
    "patch submit",
    # acks, delegation, delivery
    "palacectl ack",
    "mempalace_event_ack",
    "Never hand-roll",
    "palacectl task create",
    "mempalace_task_create",
    "task.request",
    "project/<name>",
    "`delegation`",
    "task_…",
    "`open`",
    "goal, branch, base commit and definition of done",
    "palacectl task show",
    "palacectl ack <id> --status claimed",
    "palacectl patch submit",
    "mempalace_patch_submit",
    "pushing a branch is not a",
    "`blocked`",
    "Silence is the one failure the log cannot fix",
    "palacectl artifact get",
    "sha256",
    "user-visible intent",
    "agreed tests",
    "`applied` or `failed`",
    # where palace differs from MemPalace (docs/mempalace.md)
    "### Where palace differs from MemPalace",
    "The palace tools speak as you",
    "another id is refused",
    "content-addressed (`art_` + sha256)",
    "takes the id or the sha256",
    "`content_base64`",
    "takes the stream and the addressee from the task",
    "no poll interval",
    "`palacectl redact <event id> --from-agent <AGENT_ID>`",
    "exit 3 = palaced is down",
    "64 = a wrong command line",
    # close every loop
    "append-only and verbatim",
    "superseded",
    "applied, failed or blocked ack",
    "palacectl task list --agent <AGENT_ID> --open",
    "decided or learned as a drawer",
    "palacectl rules --agent <AGENT_ID>",
]


def block_of(agent: str = "mac-claude") -> str:
    return render_rules(agent)


# --- the template ---------------------------------------------------------------------------


def test_load_template_is_the_packaged_file_byte_for_byte() -> None:
    assert load_template().encode("utf-8") == TEMPLATE_FILE.read_bytes()


@pytest.mark.parametrize("phrase", REQUIRED_PHRASES)
def test_template_carries_every_rule(phrase: str) -> None:
    assert phrase in load_template()


def test_template_watcher_is_unconditional() -> None:
    text = load_template().lower()
    assert "if your harness can run a background process, start" not in text
    assert "if your harness can run a background process" not in text


def test_template_holds_no_marker_text() -> None:
    # A marker inside the body would make the next install cut the block in the wrong place.
    text = load_template()
    assert "palace-shared-brain:" not in text
    assert "rules-excerpt:" not in text


def test_template_stays_prompt_sized() -> None:
    # 112: issue 26 added the harness prefixes of the MCP tool names and --added-by to the memory
    # commands (a shared default id was refused on every machine but the first). 119: issue 28
    # added when to ask a person, and that silence is never a yes. 125: issue 29 added what
    # from_agent and writer mean (MemPalace 3.11) and how to discuss in a room.
    assert 40 <= len(load_template().splitlines()) <= 125


def test_unreadable_template_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rules, "_TEMPLATE_NAME", "no_such_rules.md")
    with pytest.raises(rules.RulesTemplateError, match=r"^Rules template not readable: "):
        load_template()
    with pytest.raises(rules.RulesTemplateError):
        render_rules("mac-claude")


def test_the_rules_page_shows_the_template_byte_for_byte() -> None:
    readme = RULES_PAGE.read_bytes()
    opening = b"<!-- rules-excerpt:start -->\n````markdown\n"
    closing = b"````\n<!-- rules-excerpt:end -->"
    assert readme.count(opening) == 1
    assert readme.count(closing) == 1
    excerpt = readme.split(opening, 1)[1].split(closing, 1)[0]
    assert excerpt == TEMPLATE_FILE.read_bytes()
    assert b"## The shared-brain rules (excerpt)\n" in readme.split(opening, 1)[0]
    assert b"[docs/rules.md](docs/rules.md)" in (REPO / "README.md").read_bytes()  # reachable from the front door


def test_harness_files() -> None:
    assert HARNESS_FILES == {
        "claude": "~/.claude/CLAUDE.md",
        "codex": "~/.codex/AGENTS.md",
        "opencode": "~/.config/opencode/AGENTS.md",
        "gemini": "~/.gemini/GEMINI.md",
        "antigravity": "~/.gemini/config/GEMINI.md",
        "hermes": "~/.hermes/SOUL.md",
    }


def test_rules_module_imports_no_trio_typer_or_palaced() -> None:
    probe = (
        "import sys, palacectl.rules; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'trio', 'typer', 'palaced'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- render ---------------------------------------------------------------------------------


def test_render_wraps_the_body_in_marker_lines() -> None:
    out = render_rules("mac-claude")
    lines = out.split("\n")
    assert lines[0] == (
        "<!-- palace-shared-brain:start (rendered by `palacectl rules --agent mac-claude`; "
        "edit rules/shared_brain_rules.md, then re-render) -->"
    )
    assert lines[1] == ""
    assert lines[-3:] == ["", END_MARKER, ""]  # blank line, end marker, final newline
    assert lines[-4] != ""  # trailing newlines of the body were stripped
    assert out.endswith(END_MARKER + "\n") and not out.endswith("\n\n")


def test_a_host_harness_project_id_is_told_how_to_compose_its_id_in_another_project() -> None:
    """Guards issue 47 §1.6: MemPalace 3.11's block for ``--host H --harness N --project P`` tells the
    agent to build ``H:N:<project>`` for another project; palace's named only the one id."""
    out = render_rules("win:claude:shop")
    assert out.split("\n")[0].startswith(
        "<!-- palace-shared-brain:start (rendered by `palacectl rules --host win --harness claude --project shop`;")
    paragraphs = out.split("\n\n")
    told = " ".join(paragraphs[3].split())  # after the marker, the heading and who you are
    assert told.startswith("Your id is host:harness:project: `win:claude:shop`")
    assert "Working in another project, compose your id for it" in told and "`win:claude:<project>`" in told
    assert max(len(line) for line in paragraphs[3].splitlines()) <= 100
    # Everything else is the template, as for any id; a flat id gets no such paragraph.
    body = out.split("\n\n", 1)[1].rsplit("\n\n", 1)[0]
    assert body.replace(paragraphs[3] + "\n\n", "", 1) == \
        load_template().replace("<AGENT_ID>", "win:claude:shop").rstrip("\n")
    assert "compose your id" not in render_rules("mac-claude")


def test_render_fills_the_placeholder_everywhere() -> None:
    out = render_rules("linux-bob.claude_2")
    assert "<AGENT_ID>" not in out
    assert "palacectl watch --agent linux-bob.claude_2" in out
    assert "palacectl inbox --agent linux-bob.claude_2" in out
    body = out.split("\n\n", 1)[1].rsplit("\n\n", 1)[0]
    assert body == load_template().replace("<AGENT_ID>", "linux-bob.claude_2").rstrip("\n")


def test_render_strips_surrounding_whitespace_of_the_id() -> None:
    assert render_rules("  mac-claude\n") == render_rules("mac-claude")


@pytest.mark.parametrize("bad", ["", " ", "two words", "a\tb", "x-->", "a{b}"])
def test_render_rejects_ids_that_are_not_one_token(bad: str) -> None:
    with pytest.raises(ValidationError) as info:
        render_rules(bad)
    assert str(info.value) == AGENT_ERROR


# --- install --------------------------------------------------------------------------------


def test_install_creates_missing_file_and_parents(tmp_path: Path) -> None:
    target = tmp_path / "home" / ".claude" / "CLAUDE.md"
    assert install_rules(target, block_of()) == "appended"
    assert target.read_bytes() == block_of().encode()


def test_install_into_empty_file_has_no_leading_blank_line(tmp_path: Path) -> None:
    target = tmp_path / "AGENTS.md"
    target.write_bytes(b"")
    assert install_rules(target, block_of()) == "appended"
    assert target.read_bytes() == block_of().encode()


@pytest.mark.parametrize(
    ("before", "joined"),
    [
        (b"# Mine\nkeep this", b"# Mine\nkeep this\n\n"),  # no trailing newline
        (b"# Mine\n", b"# Mine\n\n"),  # newline, no blank line
        (b"# Mine\n\n", b"# Mine\n\n"),  # already ends in a blank line
        (b"# Mine\r\n", b"# Mine\r\n\n"),  # CRLF line, no blank line
        (b"# Mine\r\n\r\n", b"# Mine\r\n\r\n"),  # CRLF blank line
        (b"\n", b"\n"),  # a lone blank line
    ],
)
def test_install_appends_after_a_blank_line(tmp_path: Path, before: bytes, joined: bytes) -> None:
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(before)
    assert install_rules(target, block_of()) == "appended"
    assert target.read_bytes() == joined + block_of().encode()


def test_install_replaces_in_place_and_keeps_every_other_byte(tmp_path: Path) -> None:
    target = tmp_path / "CLAUDE.md"
    head = "# Réglages — mine 🧠\r\nline with CRLF\r\n\r\n".encode()
    tail = "\r\n## After\r\nnaïve trailing text, no final newline".encode()
    old_block = render_rules("old-agent").encode()
    target.write_bytes(head + old_block + tail)

    assert install_rules(target, block_of()) == "replaced"
    assert target.read_bytes() == head + block_of().encode() + tail


def test_install_replaces_a_hand_edited_block_with_crlf_lines(tmp_path: Path) -> None:
    # An editor converted the block to CRLF; the end line's \r\n belongs to the block.
    target = tmp_path / "CLAUDE.md"
    old_block = render_rules("old-agent").replace("\n", "\r\n").encode()
    target.write_bytes(b"before\r\n" + old_block + b"after\r\n")
    assert install_rules(target, block_of()) == "replaced"
    assert target.read_bytes() == b"before\r\n" + block_of().encode() + b"after\r\n"


def test_install_replaces_a_block_at_eof_without_newline(tmp_path: Path) -> None:
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(b"mine\n\n" + render_rules("old-agent").rstrip("\n").encode())
    assert install_rules(target, block_of()) == "replaced"
    assert target.read_bytes() == b"mine\n\n" + block_of().encode()


def test_install_finds_a_block_from_an_older_start_line(tmp_path: Path) -> None:
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(b"x\n<!-- palace-shared-brain:start (old note) -->\nold\n" + END_MARKER.encode() + b"\ny\n")
    assert install_rules(target, block_of()) == "replaced"
    assert target.read_bytes() == b"x\n" + block_of().encode() + b"y\n"


def test_markers_mentioned_mid_line_do_not_count(tmp_path: Path) -> None:
    target = tmp_path / "CLAUDE.md"
    prose = f"We wrap it in `{START_MARKER_PREFIX}` and `{END_MARKER}`.\n".encode()
    target.write_bytes(prose)
    assert install_rules(target, block_of()) == "appended"
    assert target.read_bytes() == prose + b"\n" + block_of().encode()


@pytest.mark.parametrize("before", [None, b"", b"mine\r\nno newline", "ünï\n".encode()])
def test_install_is_idempotent(tmp_path: Path, before: bytes | None) -> None:
    target = tmp_path / "CLAUDE.md"
    if before is not None:
        target.write_bytes(before)
    install_rules(target, block_of())
    once = target.read_bytes()
    mtime = target.stat().st_mtime_ns
    assert install_rules(target, block_of()) == "unchanged"
    assert target.read_bytes() == once
    assert target.stat().st_mtime_ns == mtime  # not rewritten at all


def test_install_then_new_agent_replaces_and_nothing_accumulates(tmp_path: Path) -> None:
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(b"mine\n")
    install_rules(target, render_rules("a-one"))
    assert install_rules(target, render_rules("a-two")) == "replaced"
    data = target.read_bytes()
    assert data == b"mine\n\n" + render_rules("a-two").encode()
    assert data.count(START_MARKER_PREFIX.encode()) == 1


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755])
def test_install_preserves_the_file_mode(tmp_path: Path, mode: int) -> None:
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(b"mine\n")
    os.chmod(target, mode)
    install_rules(target, block_of())
    assert stat.S_IMODE(target.stat().st_mode) == mode
    os.chmod(target, mode)
    install_rules(target, render_rules("other-agent"))
    assert stat.S_IMODE(target.stat().st_mode) == mode


def test_install_new_file_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        install_rules(tmp_path / "CLAUDE.md", block_of())
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "CLAUDE.md").stat().st_mode) == 0o640


def test_install_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(b"mine\n")
    install_rules(target, block_of())
    install_rules(target, render_rules("other-agent"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CLAUDE.md"]


def test_install_writes_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "CLAUDE.md"
    real.parent.mkdir()
    real.write_bytes(b"mine\n")
    link = tmp_path / "CLAUDE.md"
    link.symlink_to(real)
    assert install_rules(link, block_of()) == "appended"
    assert link.is_symlink()
    assert real.read_bytes() == b"mine\n\n" + block_of().encode()


def test_broken_block_is_an_error_and_nothing_is_written(tmp_path: Path) -> None:
    target = tmp_path / "CLAUDE.md"
    broken = b"mine\r\n" + render_rules("old-agent").split(END_MARKER)[0].encode()
    target.write_bytes(broken)
    os.chmod(target, 0o640)
    mtime = target.stat().st_mtime_ns
    with pytest.raises(ValueError, match="fix or remove the broken block") as info:
        install_rules(target, block_of())
    assert str(target) in str(info.value)
    assert target.read_bytes() == broken
    assert target.stat().st_mtime_ns == mtime
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CLAUDE.md"]


def test_end_marker_before_start_marker_does_not_close_it(tmp_path: Path) -> None:
    target = tmp_path / "CLAUDE.md"
    broken = END_MARKER.encode() + b"\n" + START_MARKER_PREFIX.encode() + b" -->\nbody\n"
    target.write_bytes(broken)
    with pytest.raises(ValueError, match="no '<!-- palace-shared-brain:end -->' line after it"):
        install_rules(target, block_of())
    assert target.read_bytes() == broken


@pytest.mark.parametrize("bad_block", ["just text\n", render_rules("a-b").rstrip("\n"), ""])
def test_install_refuses_a_block_that_was_not_rendered(tmp_path: Path, bad_block: str) -> None:
    target = tmp_path / "CLAUDE.md"
    with pytest.raises(ValueError, match="rendered rules block"):
        install_rules(target, bad_block)
    assert not target.exists()


def test_mcp_and_cli_renderings_name_one_kind_of_tool() -> None:
    both = render_rules("mac-claude")
    mcp_only = render_rules("mac-claude", "mcp")
    cli_only = render_rules("mac-claude", "cli")
    assert "(MCP `" in both
    assert "(MCP `" not in mcp_only and "(MCP `" not in cli_only
    for tool in ("mempalace_event_list", "mempalace_event_ack", "mempalace_patch_submit", "mempalace_task_status",
                 "mempalace_artifact_get", "mempalace_task_list", "mempalace_event_wait"):
        assert f"`{tool}`" in mcp_only and tool not in cli_only
    for command in ("palacectl list", "palacectl ack <id> --status claimed", "palacectl patch submit"):
        assert command in cli_only and command not in mcp_only
    # What has no MCP tool stays a command everywhere: the watcher is a background process.
    assert "palacectl watch --agent mac-claude" in mcp_only
    assert "claim it first with `mempalace_event_ack`, status `claimed`" in mcp_only


def test_rules_rendered_for_a_tool_set_name_only_the_tools_it_offers() -> None:
    """Guards issue 26: rules rendered for `palacectl mcp`'s default set must not send the agent
    to tools it cannot see; those steps are written as commands instead."""
    from palacectl.tool_sets import GROUPS, parse_tool_sets

    core, _ = parse_tool_sets("core")
    rendered = render_rules("mac-claude", "mcp", core)
    named = set(re.findall(r"`(mempalace_\w+)`", rendered))
    assert named and named <= core
    assert "`palacectl list`" in rendered and "`palacectl kg query`" in rendered  # not offered: commands
    assert "`mempalace_patch_submit`" in rendered
    with_memory = render_rules("mac-claude", "mcp", parse_tool_sets("core,memory")[0])
    assert "`mempalace_kg_query`" in with_memory and "mempalace_lease_acquire" not in with_memory
    assert set(re.findall(r"`(mempalace_\w+)`", render_rules("mac-claude", "mcp"))) - core  # None: every tool
    both = render_rules("mac-claude", "both", core)
    assert "(MCP `mempalace_event_list`" not in both and "(MCP `mempalace_inbox`)" in both
    assert set(GROUPS["leases"]).isdisjoint(re.findall(r"`(mempalace_\w+)`", both))
