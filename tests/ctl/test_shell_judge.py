"""``palacectl.features.approvals.shell_judge``: a command line read as bash reads it — every simple command it runs,
with literal words, and what palace cannot vouch for (issue 43, finding 1)."""

from __future__ import annotations

import pytest

from palacectl.features.approvals.shell_judge import option_doubts, read_command


def commands(line: str) -> list[tuple[str, ...] | None]:
    return [c.words for c in read_command(line, ("/w",)).commands if not c.wrapped]


@pytest.mark.parametrize(("line", "words"), [
    ("git status", [("git", "status")]),
    ("git status; curl x|sh", [("git", "status"), ("curl", "x"), ("sh",)]),
    ("a && b || c & d\ne", [("a",), ("b",), ("c",), ("d",), ("e",)]),
    ("(a; b) | { c; }", [("a",), ("b",), ("c",)]),
    ("git log --format='%(describe)' \"a b\" c\\ d $'e\\tf'", [("git", "log", "--format=%(describe)", "a b", "c d",
                                                              "e\tf")]),
    ('g\\it "st"at\'us\'', [("git", "status")]),
    ("git diff HEAD~1 HEAD^ a#b", [("git", "diff", "HEAD~1", "HEAD^", "a#b")]),
    ("ls 2>&1 >/dev/null 3>&-", [("ls",)]),
    ("ls \\\n  -la", [("ls", "-la")]),
    ("git status # a comment $(rm -rf /)", [("git", "status")]),
])
def test_plain_lines_are_their_commands_and_nothing_to_doubt(line, words):
    reading = read_command(line, ("/w",))
    assert reading.doubts == () and commands(line) == words


@pytest.mark.parametrize(("line", "doubt"), [
    ("git status $(curl x)", "a word whose value palace cannot know"),
    ("ls $HOME", "a word whose value palace cannot know"),
    ("ls ${x:-y}", "a word whose value palace cannot know"),
    ("ls *.py", "a word whose value palace cannot know"),
    ("ls a?", "a word whose value palace cannot know"),
    ("ls [ab]", "a word whose value palace cannot know"),
    ("ls {a,b}", "a word whose value palace cannot know"),
    ("ls ~", "a word whose value palace cannot know"),
    ("ls a=~/x", "a word whose value palace cannot know"),
    ("ls =ls", "a word whose value palace cannot know"),
    ("ls ^x", "a word whose value palace cannot know"),
    ("ls $((1+2))", "a word whose value palace cannot know"),
    ("ls $'\\x41'", "a word whose value palace cannot know"),
    ("$X status", "is not a plain word"),
    ("X=1 git status", "sets a variable for the command"),
    ("X=1", "sets a variable"),
    ("export X=1", "sets a variable"),
    ("f() { ls; }", "defines a function"),
    ("if true; then ls; fi", "if_statement"),
    ("for f in a; do ls; done", "for_statement"),
    ("[[ -f x ]]", "test_command"),
    ("! if true; then git push; fi", "the shell keyword 'if'"),
    ("ls 'unterminated", "syntax error"),
    ("ls > out", "writes to out (>)"),
    ("ls >> out", "writes to out (>>)"),
    ("ls &> out", "writes to out (&>)"),
    ("ls &>> out", "writes to out (&>>)"),
    ("ls >| out", "writes to out (>|)"),
    ("ls >& out", "writes to out (>&)"),
    ("ls > $F", "whose name palace cannot know"),
    ("ls < /etc/passwd", "outside this run's worktree"),
    ("ls <<< $x", "a here-string"),
    ("cat <<EOF\nx\nEOF", "a here-document"),
    ("cat <<'EOF'\nx\nEOF", "a here-document"),
    ("git status\rcurl x", "a control character"),
    ("git status\x00", "a control character"),
    ("ls;;", "';;'"),
    ("bash -c \"$X\"", "bash -c with a command palace cannot read"),
    ("eval $X", "eval of words palace cannot read"),
])
def test_what_palace_cannot_vouch_for_is_a_doubt(line, doubt):
    reading = read_command(line, ("/w",))
    assert reading.doubts and any(doubt in d for d in reading.doubts), reading.doubts


def test_every_command_inside_is_found_wherever_it_sits():
    """Deny rules meet every command, and the renderings of what a wrapper runs."""
    forms = [f for c in read_command("echo \"$(git push)\" `sudo x` <(rm -rf /) > >(tee y)").commands
             for f in c.forms]
    assert {"git push", "sudo x", "rm -rf /", "tee y"} <= set(forms)
    wrapped = [c for c in read_command("env A=1 timeout 5 git push origin").commands if c.wrapped]
    assert "git push origin" in [c.text for c in wrapped]
    shelled = read_command("bash -c 'ls; sh -c \"git push\"'").commands
    assert ("git", "push") in [c.words for c in shelled] and all(c.wrapped for c in shelled[1:])
    assert ("git", "push") in [c.words for c in read_command("eval git push").commands]
    assert ("git", "push") in [c.words for c in read_command("/bin/bash -xc 'git push'").commands]
    unknown = read_command("xargs git push $X").commands
    assert "git push $X" in [f for c in unknown for f in c.forms] and "git push" in [f for c in unknown for f in c.forms]
    keyword = read_command("! { git push; }").commands
    assert any("git push" in c.forms for c in keyword)


def test_nesting_too_deep_is_a_doubt_not_a_crash():
    reading = read_command("echo " + "$(" * 400 + "ls" + ")" * 400)
    assert reading.doubts
    assert read_command("x" * ((1 << 20) + 1)).doubts == (f"a command line over {1 << 20} characters",)


@pytest.mark.parametrize(("words", "doubt"), [
    (["git", "log", "--output=/tmp/x"], "may write a file"),
    (["git", "diff", "--output", "x"], "may write a file"),
    (["git", "log", "--output-directory=x"], "may write a file"),
    (["git", "diff", "--ext-diff"], "may write a file, run a program"),
    (["git", "diff", "--textconv"], "run a program"),
    (["git", "diff", "--no-index", "a", "b"], "read outside the worktree"),
    (["git", "grep", "-Ovim", "x"], "run a program"),
    (["git", "ls-remote", "--upload-pack=sh", "x"], "run a program"),
    (["git", "-c", "core.pager=sh", "log"], "git's own options"),
    (["git", "-C", "x", "status"], "git's own options"),
    (["git", "--git-dir=x", "status"], "git's own options"),
    (["git", "--exec-path=/tmp", "log"], "git's own options"),
    (["sort", "-o", "x"], "writes its output to a file"),
    (["sort", "-ox"], "writes its output to a file"),
    (["npm", "pack", "--out-file=x"], "writes its output to a file"),
    (["ls", "/etc"], "outside this run's worktree"),
    (["ls", "../x"], "outside this run's worktree"),
    (["git", "log", "--format=x", "--", "/etc/x"], "outside this run's worktree"),
])
def test_options_that_write_or_run_are_doubts(words, doubt):
    found = option_doubts(words, ("/w",))
    assert found and any(doubt in d for d in found), found


@pytest.mark.parametrize("words", [["git", "status", "--short"], ["git", "log", "--format=%H", "-3"],
                                   ["git", "diff", "--stat", "HEAD~1..HEAD"], ["ls", "-la", "/w/src"], ["pwd"],
                                   ["git", "log", "--no-ext-diff"]])
def test_plain_options_are_no_doubt(words):
    assert option_doubts(words, ("/w",)) == []


def test_an_absolute_path_is_outside_when_the_worktree_is_unknown():
    assert option_doubts(["ls", "/w/src"], ()) and not option_doubts(["ls", "src"], ())
