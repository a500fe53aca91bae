"""The watch state file (palacectl.watch): how a checkpoint is read, written and named.

Reference §3.4 and §6.5: an unreadable checkpoint must read as *corrupt* (replay), never as
*absent* (a first run that starts at the tip and skips events); writes are atomic; the default
file name follows MemPalace's sanitising rule.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from palacectl.output import CommandFailed
from palacectl.watch import default_state_file, read_state, sanitise_agent, write_state

# -- read_state: absent -------------------------------------------------------------------------


def test_missing_file_is_absent(tmp_path: Path) -> None:
    assert read_state(tmp_path / "nope.json") == (None, "absent")


def test_missing_parent_directory_is_absent(tmp_path: Path) -> None:
    assert read_state(tmp_path / "no" / "such" / "dir" / "bob.json") == (None, "absent")


def test_no_path_is_absent() -> None:
    assert read_state(None) == (None, "absent")


# -- read_state: ok and empty -------------------------------------------------------------------


def test_string_cursor_is_ok(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"cursor": "evt_abc", "updated_at": "2024-01-01T00:00:00Z", "agent": "bob"}))
    assert read_state(path) == ("evt_abc", "ok")


def test_extra_keys_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"cursor": "evt_1", "something": [1, 2]}))
    assert read_state(path) == ("evt_1", "ok")


@pytest.mark.parametrize("cursor", [None, ""], ids=["null", "empty-string"])
def test_null_or_blank_cursor_is_empty(tmp_path: Path, cursor: object) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"cursor": cursor}))
    assert read_state(path) == (None, "empty")


# -- read_state: corrupt ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "",
        "   \n",
        "null",
        "[]",
        '"s"',
        "42",
        "true",
        "{}",
        '{"updated_at": "2024-01-01T00:00:00Z"}',
        '{"cursor": 42}',
        '{"cursor": true}',
        '{"cursor": ["evt_1"]}',
        '{"cursor": {"id": "evt_1"}}',
    ],
    ids=[
        "bad-json", "empty-file", "whitespace", "json-null", "json-list", "json-string", "json-number",
        "json-bool", "object-without-cursor", "object-other-key", "cursor-int", "cursor-bool",
        "cursor-list", "cursor-object",
    ],
)
def test_unusable_contents_are_corrupt(tmp_path: Path, text: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(text)
    assert read_state(path) == (None, "corrupt")


def test_directory_in_the_way_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "bob.json"
    path.mkdir()
    assert read_state(path) == (None, "corrupt")


def test_invalid_utf8_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(b'{"cursor": "evt_\xff\xfe"}')
    assert read_state(path) == (None, "corrupt")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file; covered by the directory and UTF-8 cases")
def test_unreadable_file_is_corrupt_not_absent(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"cursor": "evt_1"}))
    path.chmod(0)
    try:
        assert read_state(path) == (None, "corrupt")
    finally:
        path.chmod(0o600)


# -- write_state --------------------------------------------------------------------------------


def test_write_then_read_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "bob.json"
    write_state(path, "evt_123", "bob")
    assert read_state(path) == ("evt_123", "ok")


def test_write_content_has_cursor_updated_at_and_agent(tmp_path: Path) -> None:
    path = tmp_path / "bob.json"
    write_state(path, "evt_123", "bob")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["cursor"] == "evt_123"
    assert data["agent"] == "bob"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", data["updated_at"]), data


def test_write_null_cursor_reads_back_as_empty(tmp_path: Path) -> None:
    """The first run on an empty log checkpoints a null cursor: the next run replays, never skips."""
    path = tmp_path / "bob.json"
    write_state(path, None, "bob")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert "cursor" in data and data["cursor"] is None
    assert read_state(path) == (None, "empty")


def test_write_without_agent_omits_or_nulls_agent(tmp_path: Path) -> None:
    path = tmp_path / "anon.json"
    write_state(path, "evt_1", None)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["cursor"] == "evt_1"
    assert data.get("agent") is None


def test_write_creates_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "watch" / "bob.json"
    write_state(path, "evt_1", "bob")
    assert read_state(path) == ("evt_1", "ok")


def test_write_replaces_existing_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "bob.json"
    write_state(path, "evt_1", "bob")
    write_state(path, "evt_2", "bob")
    assert read_state(path) == ("evt_2", "ok")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bob.json"]


def test_write_is_tmp_then_replace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The new content is fully written to a sibling tmp file, then renamed over the target."""
    path = tmp_path / "bob.json"
    write_state(path, "evt_old", "bob")
    seen: list[tuple[str, str, str | None]] = []
    real_replace = os.replace

    def spy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        src_p, dst_p = Path(src), Path(dst)
        # At rename time: the tmp file holds the complete new document, the target still the old one.
        seen.append((src_p.name, json.loads(src_p.read_text())["cursor"], read_state(dst_p)[0]))
        assert src_p.parent == dst_p.parent  # same directory → same filesystem → atomic rename
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    write_state(path, "evt_new", "bob")
    assert len(seen) == 1
    tmp_name, tmp_cursor, target_cursor_before = seen[0]
    assert tmp_name != "bob.json" and tmp_name.startswith(".bob.json.")  # hidden, beside the target
    assert tmp_cursor == "evt_new"
    assert target_cursor_before == "evt_old"
    assert read_state(path) == ("evt_new", "ok")


def test_failed_write_keeps_the_old_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bob.json"
    write_state(path, "evt_old", "bob")

    def boom(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_state(path, "evt_new", "bob")
    assert read_state(path) == ("evt_old", "ok")


# -- sanitise_agent and default_state_file ------------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "expected"),
    [
        ("bob", "bob"),
        ("mac-claude", "mac-claude"),
        ("a:b_c:proj", "a_b__c_proj"),
        ("a_b:c:proj", "a__b_c_proj"),
        ("a/b", "a_b"),
        ("a\\b", "a_b"),
        ("../etc/passwd", ".._etc_passwd"),
        ("x_/y", "x___y"),
    ],
)
def test_sanitise_agent(agent: str, expected: str) -> None:
    assert sanitise_agent(agent) == expected


def test_sanitise_keeps_distinct_ids_distinct() -> None:
    """Doubling '_' first is what keeps `a:b_c` and `a_b:c` from sharing one state file."""
    assert sanitise_agent("a:b_c:proj") != sanitise_agent("a_b:c:proj")


def test_sanitised_name_has_no_path_separator() -> None:
    for agent in ("a/b", "a\\b", "/abs/path", "..\\..\\x"):
        assert "/" not in sanitise_agent(agent) and "\\" not in sanitise_agent(agent)


@pytest.mark.parametrize("agent", ["", " ", "\t\n"], ids=["empty", "space", "whitespace"])
def test_blank_agent_is_an_error(agent: str) -> None:
    with pytest.raises(CommandFailed, match="agent identity is required to name a watch state file"):
        sanitise_agent(agent)


def test_default_state_file_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert default_state_file(home, "bob") == home / "watch" / "bob.json"
    assert default_state_file(home, "a:b_c:proj") == home / "watch" / "a_b__c_proj.json"
    assert default_state_file(home, "a/b") == home / "watch" / "a_b.json"


def test_default_state_file_blank_agent_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CommandFailed):
        default_state_file(tmp_path, "  ")
