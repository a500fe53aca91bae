"""A shell command line read the way bash reads it, so the permission policy judges every command
the line runs, not the line's first words (issue 43, finding 1).

Owns: ``read_command`` — a command line (Claude Code's ``Bash``, Gemini CLI's ``run_shell_command``)
parsed with tree-sitter's bash grammar into the simple commands it runs (``SimpleCommand``: its
literal words, and the renderings the deny list is matched against) and what palace cannot vouch
for in the whole (``Reading.doubts``); and ``option_doubts``: what an allowed command's own
arguments may do that its rule did not mean (write a file, run a program, read outside the run's
worktree). The policy's verdicts are ``permission_policy``'s.

Theory of operation
-------------------
A line is a tree: lists (``;``, ``&&``, ``||``, newline, ``&``), pipelines, subshells, groups,
negations, and inside words, command and process substitutions. We walk the whole tree and
collect every simple command wherever it sits — a substitution inside an argument runs too. A
node kind the walk does not know (``if``, ``for``, ``case``, ``[[``, a function definition, an
assignment, an arithmetic expansion, tree-sitter's ``ERROR``/``MISSING``) is a *doubt*: palace
cannot say what the line runs, so the line is asked, never allowed; the walk still goes inside, so
a denied command anywhere is still found and refused.

A word is *literal* when its value is its text: plain characters, backslash escapes, single
quotes, double quotes without expansions, ``$'…'`` with plain escapes (``\\n``, ``\\t``).
Anything whose value palace cannot know — ``$VAR``, ``${…}``, ``$(…)`` (the command inside is
judged, and the word is still unknown), globs (``*``, ``?``, ``[``: a file named ``--output=…``
turns ``git diff *`` into a write), braces, ``~``, zsh's ``=cmd`` and ``^x`` — is a doubt. A
command whose *name* is not literal cannot be matched against the deny list at all. So is a
command named by a reserved word (``if``, ``then``, ``{``): tree-sitter reads some as commands
where bash reads a compound command (``! if true; then git push; fi``).

Redirections: ``>``, ``>>``, ``&>``, ``&>>``, ``>|`` and ``>&FILE`` write a file (a doubt unless the
file is ``/dev/null``); ``N>&M`` and ``N>&-`` only move descriptors; ``<`` reads (a doubt outside
the worktree); a here-string feeds a word (its expansions are doubts, its substitutions judged);
a here-document is a doubt (where bash ends it is where a parser that disagrees hides a command).

Wrappers — commands that run their arguments as a command (``env``, ``xargs``, ``timeout``,
``nohup``, ``exec``, ``bash -c``, ``eval``, …) — add what they run to the renderings the deny list
sees (``env X=1 git push`` is a ``git push``; ``bash -c 'git push'`` is read again as a line). An
allow rule still has to name the wrapper itself.

Control characters other than tab and newline are a doubt before parsing: bash keeps a carriage
return inside a word where tree-sitter treats it as a blank, and no rule should hang on that gap.

Pure: no IO, no clock. Imports tree-sitter and its bash grammar (native, MIT, loaded at the first
command judged); never trio, palaced or the client.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any, Final

__all__ = ["GIT_DOUBTFUL_OPTIONS", "MAX_COMMAND_CHARS", "OUTPUT_OPTIONS", "Reading", "SimpleCommand",
           "option_doubts", "read_command"]

# Why 1 MiB: a command line a model writes (a heredoc with a file in it included); past that it is
# not a command a person or a rule vouches for, and the parse stays cheap.
MAX_COMMAND_CHARS: Final = 1 << 20
# Why 100: how deep substitutions, subshells and `bash -c` may nest before palace stops reading
# (a real command nests a few levels; Python's own recursion must never be what stops us).
MAX_NESTING: Final = 100
# Why 8: the doubts kept for the reason a person and the model read; the first says enough.
MAX_DOUBTS: Final = 8

#: anonymous tokens the walk accepts between the parts of a list, pipeline, group or substitution
_SEPARATORS: Final = frozenset({";", "&", "&&", "||", "|", "|&", "(", ")", "{", "}", "!", "\n", "$(", "`", "<(",
                                ">("})
#: node kinds whose named children are statements (the parts of the line)
_CONTAINERS: Final = frozenset({"program", "list", "pipeline", "subshell", "compound_statement", "negated_command",
                                "redirected_statement", "command_substitution", "process_substitution"})
_REDIRECTS: Final = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
#: node kinds that are words or parts of words (in a construct palace does not judge, only the
#: substitutions inside them are looked into)
_WORDS: Final = frozenset({"word", "number", "string", "raw_string", "ansi_c_string", "translated_string",
                           "concatenation", "simple_expansion", "expansion", "arithmetic_expansion",
                           "brace_expression", "variable_name", "special_variable_name", "string_content"})
_WRITES: Final = frozenset({">", ">>", "&>", "&>>", ">|", ">&", "&>|"})
_FD_RE: Final = re.compile(r"^(\d{1,3}-?|-)$")
#: commands that run their arguments (after their own options) as a command: the deny list sees
#: every tail of their words too
WRAPPERS: Final = frozenset({
    "env", "command", "builtin", "exec", "nohup", "nice", "time", "timeout", "stdbuf", "xargs", "sudo", "doas",
    "setsid", "ionice", "chrt", "taskset", "unbuffer", "watch", "strace", "ltrace", "flock", "chroot", "su", "find",
    "caffeinate", "script", "noglob", "nocorrect", "busybox", "parallel", "coproc",
})
#: bash's and zsh's reserved words: tree-sitter reads some as a command's name where bash reads
#: a compound command (`! if true; then git push; fi` parses as commands `if true`, `then git
#: push`, `fi`), so a command named one is a doubt, and its tails meet the deny list
RESERVED: Final = frozenset({"if", "then", "else", "elif", "fi", "do", "done", "case", "esac", "while", "until",
                             "for", "select", "function", "time", "{", "}", "!", "[[", "]]", "in", "coproc",
                             "foreach", "end", "repeat"})
#: shells whose ``-c`` argument is a command line read again; ``eval`` joins its words into one
SHELLS: Final = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "posh", "fish", "csh", "tcsh"})
#: options of any allowed command that name an output file (``-oFILE``, ``-o FILE``, ``--output=…``,
#: ``--output-directory``, ``--outfile``, ``--out-file``, ``--outdir``): asked, whatever the rule
OUTPUT_OPTIONS: Final = ("-o", "--out")
#: git's own options before the subcommand (``-c``, ``-C``, ``--git-dir``, ``--work-tree``,
#: ``--exec-path``, ``--config-env``, …) are all asked; after it, these (a prefix of the word):
GIT_DOUBTFUL_OPTIONS: Final = (
    "--output",                # git log/diff/show --output=FILE writes FILE
    "--ext-diff",              # runs the configured external diff program
    "--textconv",              # runs the configured text conversion filters
    "--no-index",              # git diff --no-index reads any two files on the machine
    "-O", "--open-files-in-pager",  # git grep -O<cmd> runs <cmd>; git diff -O<file> reads <file>
    "--upload-pack", "--receive-pack", "--exec",  # run a program (ls-remote, fetch, clone, archive, rebase)
    "--template", "--config",  # clone/init: hooks and configuration from elsewhere
    "--git-dir", "--work-tree",  # another repository, or another tree
    "--pathspec-from-file",    # reads a file
)
_ANSI_C: Final = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                  "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
_language: Any = None


@dataclasses.dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command of a line: ``words`` when each is literal (else None), and ``forms``,
    the texts the deny list is matched against (its words joined by single spaces, with an
    unknown word's source text in its place; its literal words before the first unknown one; what
    a wrapper runs). ``wrapped``: found inside a wrapper's arguments (judged by the deny list only:
    the allow list judges the wrapper)."""

    words: tuple[str, ...] | None
    forms: tuple[str, ...]
    wrapped: bool = False

    @property
    def text(self) -> str:
        """The command as a rule's pattern sees it (its literal words joined by spaces)."""
        return " ".join(self.words) if self.words is not None else self.forms[0]


@dataclasses.dataclass(frozen=True, slots=True)
class Reading:
    """A command line as palace reads it: every simple command it runs, and why palace cannot
    vouch for the whole (empty: it is plain commands of literal words, all of them listed)."""

    commands: tuple[SimpleCommand, ...]
    doubts: tuple[str, ...]


def read_command(line: str, worktrees: Sequence[str] = ()) -> Reading:
    """``line`` read as bash reads it (see the module docstring); never raises. ``worktrees``: the
    run's worktree as given and as resolved (a ``<`` from outside it is a doubt); empty: unknown."""
    reader = _Reader(worktrees)
    reader.line(line, 0)
    return Reading(tuple(reader.commands), tuple(dict.fromkeys(reader.doubts))[:MAX_DOUBTS])


def option_doubts(words: Sequence[str], worktrees: Sequence[str] = ()) -> list[str]:
    """What the arguments of an allowed command may do that its rule did not mean: write a file,
    run a program, read outside the worktree (``worktrees``: the run's, as given and as resolved;
    empty: unknown, and every absolute path is outside). Empty: nothing to ask about."""
    doubts: list[str] = []
    args = list(words[1:])
    if words and posixpath.basename(words[0]) == "git":
        if args and args[0].startswith("-"):
            doubts.append(f"git {args[0]}: git's own options (-c, -C, --git-dir, --exec-path, …) change what git "
                          "runs and where")
        for word in args[1:]:
            if any(word.startswith(option) for option in GIT_DOUBTFUL_OPTIONS):
                doubts.append(f"git … {word}: may write a file, run a program or read outside the worktree")
    for word in args:
        if word.startswith(OUTPUT_OPTIONS):
            doubts.append(f"{word}: writes its output to a file")
        value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        if _outside(value, worktrees):
            doubts.append(f"{value}: a path outside this run's worktree")
    return doubts


def _outside(value: str, worktrees: Sequence[str]) -> bool:
    """Whether a word names a path out of the worktree, lexically: absolute and under none of
    ``worktrees``, or with a ``..`` part."""
    if ".." in value.split("/"):
        return True
    if not value.startswith("/"):
        return False
    path = PurePosixPath(posixpath.normpath(value))
    for worktree in worktrees:
        root = PurePosixPath(posixpath.normpath(worktree))
        if path == root or root in path.parents:
            return False
    return True


def _parse(source: bytes) -> Any:
    """tree-sitter's tree of ``source`` (a parser of its own each time: the hook judges in a thread)."""
    global _language
    import tree_sitter
    if _language is None:
        import tree_sitter_bash
        _language = tree_sitter.Language(tree_sitter_bash.language())
    return tree_sitter.Parser(_language).parse(source)


class _Reader:
    """One walk over a line (and the lines its wrappers run)."""

    def __init__(self, worktrees: Sequence[str]) -> None:
        self.worktrees = tuple(worktrees)
        self.commands: list[SimpleCommand] = []
        self.doubts: list[str] = []
        self.source = b""

    def doubt(self, why: str) -> None:
        self.doubts.append(why)

    def line(self, line: str, depth: int, *, wrapped: bool = False) -> None:
        if depth > MAX_NESTING:
            self.doubt("commands nested too deeply to read")
            return
        if len(line) > MAX_COMMAND_CHARS:
            self.doubt(f"a command line over {MAX_COMMAND_CHARS} characters")
            return
        if any((ch < " " and ch not in "\t\n") or ch == "\x7f" for ch in line):
            self.doubt("a control character (bash and palace's parser could read it two ways)")
            # still read, so a denied command in it is refused
        try:
            source = line.encode("utf-8")
        except UnicodeEncodeError:
            self.doubt("the command is not text (a lone surrogate)")
            return
        saved, self.source = self.source, source
        try:
            self.statement(_parse(source).root_node, depth, wrapped)
        except RecursionError:
            self.doubt("commands nested too deeply to read")
        finally:
            self.source = saved

    def text(self, node: Any) -> str:
        return self.source[node.start_byte:node.end_byte].decode("utf-8", "replace")

    # -- statements ---------------------------------------------------------------------------

    def statement(self, node: Any, depth: int, wrapped: bool) -> None:
        if depth > MAX_NESTING:
            self.doubt("commands nested too deeply to read")
            return
        kind = node.type
        if node.is_error or node.is_missing or kind == "ERROR":
            self.doubt("a command palace's parser cannot read whole (a syntax error)")
        elif kind == "command":
            self.command(node, depth, wrapped)
            return
        elif kind in _REDIRECTS:
            self.redirect(node, depth, wrapped)
            return
        elif kind == "comment":
            return
        elif kind in _CONTAINERS:
            for child in node.children:
                if child.is_named:
                    self.statement(child, depth + 1, wrapped)
                elif child.is_missing or child.type not in _SEPARATORS:
                    self.doubt(f"{child.type!r} where palace expects a command")
            return
        elif kind in ("variable_assignment", "variable_assignments", "declaration_command"):
            self.doubt("sets a variable (it changes what later commands do)")
        elif kind == "function_definition":
            self.doubt("defines a function (a later command's name may be it)")
        else:
            self.doubt(f"{kind} (palace judges only plain commands, lists, pipelines, subshells and groups)")
        for child in node.named_children:  # a denied command inside is still found
            if child.type in _WORDS:
                self.inside(child, depth, wrapped)
            else:
                self.statement(child, depth + 1, wrapped)

    def command(self, node: Any, depth: int, wrapped: bool) -> None:
        values: list[str | None] = []
        shown: list[str] = []
        for child in node.children:
            kind = child.type
            if kind == "variable_assignment":
                self.doubt("sets a variable for the command (NAME=… before it)")
                self.inside(child, depth, wrapped)
            elif kind in _REDIRECTS:
                self.redirect(child, depth, wrapped)
            elif kind == "command_name":
                parts = child.named_children
                value = self.literal(parts[0]) if len(parts) == 1 else None
                if value is None:
                    self.doubt(f"the command's name ({self.text(child)[:80]}) is not a plain word")
                    self.inside(child, depth, wrapped)
                values.append(value)
                shown.append(value if value is not None else self.text(child))
            elif child.is_named:
                value = self.literal(child)
                if value is None:
                    self.doubt(f"{self.text(child)[:80]}: a word whose value palace cannot know (an expansion, "
                               "a substitution, a glob, ~, braces)")
                    self.inside(child, depth, wrapped)
                values.append(value)
                shown.append(value if value is not None else self.text(child))
            else:
                self.doubt(f"{kind!r} inside a command")
        if not values:
            return
        self.add(values, shown, wrapped)
        name = node.child_by_field_name("name")
        if name is not None and self.text(name) in RESERVED:
            self.doubt(f"the shell keyword {self.text(name)!r} where palace's parser reads a command")
            for start in range(1, len(values)):
                self.add(values[start:], shown[start:], True)
                self.unwrap(values[start:], shown[start:], depth + 1)
        else:
            self.unwrap(values, shown, depth)

    def add(self, values: Sequence[str | None], shown: Sequence[str], wrapped: bool) -> None:
        known: list[str] = []
        for value in values:
            if value is None:
                break
            known.append(value)
        literal = tuple(known) if len(known) == len(values) else None
        forms = [" ".join(shown)] + ([" ".join(known)] if known and literal is None else [])
        self.commands.append(SimpleCommand(literal, tuple(forms), wrapped))

    def unwrap(self, values: Sequence[str | None], shown: Sequence[str], depth: int) -> None:
        """What a wrapper runs, for the deny list: every tail of its words, and a shell's ``-c``
        line (or ``eval``'s words) read again."""
        name = values[0]
        if name is None or depth > MAX_NESTING:
            return
        name = posixpath.basename(name)
        flags = [at for at, value in enumerate(values) if at and value is not None and value.startswith("-")
                 and not value.startswith("--") and "c" in value[1:]]
        if name in SHELLS and flags:  # `bash -c LINE`, `bash -xc LINE`
            at = flags[0] + 1
            inner = values[at] if at < len(values) else None
            if inner is None:
                self.doubt(f"{name} -c with a command palace cannot read")
            else:
                self.line(inner, depth + 1, wrapped=True)
        elif name == "eval":
            if None in values[1:]:
                self.doubt("eval of words palace cannot read")
            else:
                self.line(" ".join(v for v in values[1:] if v is not None), depth + 1, wrapped=True)
        elif name in WRAPPERS:
            for start in range(1, len(values)):
                if values[start] is None:
                    break
                self.add(values[start:], shown[start:], True)
                self.unwrap(values[start:], shown[start:], depth + 1)

    def inside(self, node: Any, depth: int, wrapped: bool) -> None:
        """The command and process substitutions in a word (or the word itself, if it is one),
        judged as parts of the line."""
        if node.type in ("command_substitution", "process_substitution"):
            self.statement(node, depth + 1, wrapped)
            return
        for child in node.named_children:
            self.inside(child, depth + 1, wrapped)

    def redirect(self, node: Any, depth: int, wrapped: bool) -> None:
        kind = node.type
        if kind == "herestring_redirect":
            for child in node.named_children:
                if self.literal(child) is None:
                    self.doubt("a here-string whose text palace cannot know")
                    self.inside(child, depth, wrapped)
            return
        if kind == "heredoc_redirect":
            # Where a here-document ends is where a parser that disagrees with bash hides a
            # command (a delimiter quoted, indented or followed by blanks): never vouched for.
            self.doubt("a here-document (palace does not vouch for where bash ends it)")
            for child in node.named_children:
                if child.type in ("heredoc_start", "heredoc_end", "heredoc_content"):
                    continue
                if child.type == "heredoc_body":
                    self.inside(child, depth, wrapped)
                else:  # what follows the here-document's start on its line: `cat <<EOF | sh`
                    self.statement(child, depth + 1, wrapped)
            return
        operator = next((c.type for c in node.children if not c.is_named), None)
        targets = [c for c in node.named_children if c.type != "file_descriptor"]
        if operator in (">&-", "<&-") and not targets:
            return  # closes a descriptor
        if operator is None or len(targets) != 1:
            self.doubt(f"a redirection palace cannot read ({self.text(node)[:80]})")
            for target in targets:
                self.inside(target, depth, wrapped)
            return
        target = self.literal(targets[0])
        if target is None:
            self.doubt(f"a redirection to {self.text(targets[0])[:80]}, whose name palace cannot know")
            self.inside(targets[0], depth, wrapped)
        elif operator in (">&", "<&") and _FD_RE.match(target):
            pass  # moves or closes a descriptor
        elif operator in _WRITES:
            if target != "/dev/null":
                self.doubt(f"writes to {target} ({operator})")
        elif operator == "<":
            if target != "/dev/null" and _outside(target, self.worktrees):
                self.doubt(f"reads {target}, outside this run's worktree")
        else:
            self.doubt(f"a redirection palace does not judge ({operator})")

    # -- words --------------------------------------------------------------------------------

    def literal(self, node: Any) -> str | None:
        """The value of a word when it is its text; None otherwise."""
        kind = node.type
        text = self.text(node)
        if kind in ("word", "number"):
            return _unquoted(text)
        if kind == "raw_string":
            return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == "'" else None
        if kind == "ansi_c_string":
            return _ansi_c(text)
        if kind == "string":
            if not (len(text) >= 2 and text[0] == text[-1] == '"'):
                return None
            out: list[str] = []
            for child in node.children:
                if not child.is_named:
                    if child.type != '"':
                        return None
                    continue
                part = _double_quoted(self.text(child)) if child.type == "string_content" else None
                if part is None:
                    return None
                out.append(part)
            return "".join(out)
        if kind == "concatenation":
            values = [self.literal(child) if child.is_named else None for child in node.children]
            return None if None in values else "".join(v for v in values if v is not None)
        return None


def _unquoted(text: str) -> str | None:
    """An unquoted word's value: backslash escapes removed; None for anything bash (or zsh)
    would expand — globs, braces, ``$``, backquotes, ``~`` at the start or after ``=`` or ``:``,
    ``=`` at the start — and for characters a word cannot hold unquoted."""
    out: list[str] = []
    i, n = 0, len(text)
    if text.startswith("="):
        return None
    while i < n:
        ch = text[i]
        if ch == "\\":
            if i + 1 >= n:
                return None
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        if ch in "*?[{}$`'\"()<>|&; \t\n":
            return None
        if ch == "~" and (i == 0 or text[i - 1] in "=:"):
            return None
        if ch == "^" and (i == 0 or text[i - 1] == "/"):
            return None  # zsh's extended glob: ^x is every file but x
        out.append(ch)
        i += 1
    return "".join(out)


def _double_quoted(text: str) -> str | None:
    """The value of text between double quotes (no expansions in it)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] in '$`"\\\n':
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        if ch in "$`":
            return None
        out.append(ch)
        i += 1
    return "".join(out)


def _ansi_c(text: str) -> str | None:
    """The value of ``$'…'`` when its escapes are the plain ones (``\\n``, ``\\t``, ``\\'``, …);
    None for a numeric or control escape (palace does not decode those: read two ways, a rule
    could match what bash does not run)."""
    if not (len(text) >= 3 and text.startswith("$'") and text.endswith("'")):
        return None
    body, out, i = text[2:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        code = body[i + 1] if i + 1 < len(body) else None
        if code is None or code not in _ANSI_C:
            return None
        out.append(_ANSI_C[code])
        i += 2
    return "".join(out)
