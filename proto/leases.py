"""Leases: advisory, palace-wide claims on paths and named resources, derived from the log.

Owns: the lease events (``lease.acquire``, ``lease.renew``, ``lease.release``, ``lease.conflict``)
and their metadata, durations (``90s``, ``30m``, ``2h``, ``7d``), lease patterns (gitignore-style
path globs and ``res:NAME`` resources) and whether two of them can ever name the same thing, and
``derive_leases``: the state of every lease from the events, the same on every replica that
holds the same events (no clock of its own: the caller passes ``now``).

The conflict rule. Two leases *collide* when different agents hold them, at least one is
exclusive, their patterns overlap, and one was taken while the other was still in force (it had
neither expired, been released, nor lost). A daemon refuses such an acquire locally, unless
``--force``; so a collision in the log comes from a partition (both sides acquired without seeing
each other) or from a force. For a forced acquire the forced leases (named in its ``forced``
metadata) end when it was taken. Otherwise the earlier lease wins, by ``created_at`` and then by
event id (both signed into the events, so every replica orders them alike), and the later one
*loses*: it ends on every replica as of its own start, as if it had never been held. The loser's
own daemon tells the loser once (``lease.conflict``, addressed to it).

The order. The derivation is one pass over the events by ``created_at`` (at one same instant a
renew or release before an acquire, then by event id): an acquire is settled against the leases in
force when it starts, and a renew or release counts only if its lease is in force at its stamp (a
lease that lost, or was forced out, is not renewed by a later renew). ``LeaseLedger`` keeps the
pass: a daemon feeds it each lease event as it commits and derives afresh only when one arrives
out of order.

The bounds (issue 25, finding 6). A lease holds at most ``MAX_PATTERNS`` patterns of at most
``MAX_SEGMENTS`` segments and ``MAX_WILDCARDS`` wildcards; an agent holds at most ``MAX_HELD``
leases in force per project, and one taken beyond that (only a daemon that skips the check
writes it) ends *over_limit* as of its start on every replica. Whether two leases overlap is
decided within ``PAIR_BUDGET`` steps, counted from the patterns alone so every replica stops at
the same point; a pair beyond it counts as overlapping (a refusal, never a missed collision).

Pure: stdlib only, no clock, no IO.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Final, NamedTuple

from .authority import ANY_AGENT, LEASE_HOLDER, TELLING_DAEMON, Rule, Verdict, flag_of, judge, rule_named
from .errors import ValidationError
from .event_fields import PublicEvent
from .stamps import MAX_DURATION_S, MIN_DURATION_S, STAMP_RE, add_seconds, check_duration, parse_duration

__all__ = [
    "ACQUIRE", "CONFLICT", "DEFAULT_TTL_S", "LEASE_ROOM", "LEASE_TYPES", "MAX_PATTERNS", "MAX_TTL_S", "RELEASE",
    "MAX_HELD", "MAX_SEGMENTS", "MAX_WILDCARDS", "PAIR_BUDGET", "RENEW", "Lease", "LeaseIndex", "LeaseRequest",
    "LeaseLedger", "check_ttl", "covers_path", "derive_leases", "held_by", "lease_conflicts", "lease_of",
    "leases_overlap", "normalize_path", "normalize_pattern", "patterns_overlap",
]

ACQUIRE: Final = "lease.acquire"
RENEW: Final = "lease.renew"
RELEASE: Final = "lease.release"
CONFLICT: Final = "lease.conflict"
LEASE_TYPES: Final = frozenset({ACQUIRE, RENEW, RELEASE, CONFLICT})
LEASE_ROOM: Final = "leases"
RESOURCE_PREFIX: Final = "res:"
# Why 1 h: long enough for a piece of work, short enough that a crashed agent's lease frees itself.
DEFAULT_TTL_S: Final = 3600
# Why 10 s .. 30 d: palace_proto.stamps's one range of durations (the derivation looks back 30 d).
MIN_TTL_S: Final = MIN_DURATION_S
MAX_TTL_S: Final = MAX_DURATION_S
# What one lease may hold. Why these: a lease names a few directories, not a file list, and every
# replica must decide each pair of leases cheaply whatever a peer wrote (issue 25, finding 6: leases
# of 32 patterns x 64 segments cost seconds per check). 16 patterns of at most 16 segments, 256
# characters and 8 wildcards (``*``, ``**``, ``?``, ``[...]``) each...
MAX_PATTERNS: Final = 16
MAX_PATTERN_CHARS: Final = 256
MAX_SEGMENTS: Final = 16
MAX_WILDCARDS: Final = 8
# ...at most 32 leases in force per agent and project (a later one ends at once, "over_limit", on
# every replica: the cost of deciding a new lease grows with the leases in force)...
MAX_HELD: Final = 32
# ...and deciding whether two leases can name one same thing takes at most this many steps (path
# cells plus character cells, counted the same way on every replica); a pair that would take more
# is taken to overlap without trying further: conservative, and the same verdict everywhere. Why
# 4,000: the costliest pairs of everyday globs (``**/a*/**/b*/**/c*.py`` against
# ``web/src/components/**/*.tsx``) take under 400, so a lease of ten such patterns is still decided;
# a pair of the worst patterns stops after about a millisecond.
PAIR_BUDGET: Final = 4_000
MAX_REASON_CHARS: Final = 500
MAX_FORCED: Final = 256

_LEASE_ID_RE: Final = re.compile(r"^lease_[0-9a-f]{16}$")
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f]")


def check_ttl(seconds: Any, *, field: str = "ttl") -> int:
    """A lease's TTL in seconds, or ``90s``/``30m``/``2h``/``7d``.

    Raises:
        ValidationError: not a duration, or out of range.
    """
    return parse_duration(seconds, field=field) if isinstance(seconds, str) else check_duration(seconds, field=field)


# -- patterns -----------------------------------------------------------------------------------


def normalize_pattern(text: Any) -> str:
    """A lease pattern as stored: a path glob relative to the repository root (``./``, a leading
    ``/`` and a trailing ``/`` dropped) or ``res:NAME``. Every pattern is relative to the root,
    also one without a slash (unlike .gitignore, ``README.md`` is the root's README only; write
    ``**/README.md`` for every one): a lease should hold what its holder named, no more.

    Raises:
        ValidationError: empty, too long, control characters, ``\\`` separators or ``..``.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("a lease pattern must be a non-empty path glob (src/api/**) or res:NAME",
                              field="patterns")
    return _normalized(text.strip())


# Cached: every derivation reads every lease's patterns again, and checking the wildcards of the
# costliest patterns a member may write is most of what a derivation would otherwise cost.
@lru_cache(maxsize=65536)
def _normalized(pattern: str) -> str:
    if len(pattern) > MAX_PATTERN_CHARS or _CONTROL_RE.search(pattern):
        raise ValidationError(f"lease pattern {pattern[:60]!r} is longer than {MAX_PATTERN_CHARS} characters "
                              "or holds control characters", field="patterns")
    if pattern.startswith(RESOURCE_PREFIX):
        name = pattern[len(RESOURCE_PREFIX):]
        if not name or "/" in name or "\\" in name:
            raise ValidationError(f"lease resource {pattern!r} needs a name without '/' after res:, e.g. res:gpu0",
                                  field="patterns")
        _check_wildcards(pattern, [name])
        return pattern
    if "\\" in pattern:
        raise ValidationError(f"lease pattern {pattern!r}: use / between directories (also on Windows)",
                              field="patterns")
    segments = [s for s in pattern.split("/") if s not in ("", ".")]
    if not segments:
        return "**"
    if ".." in segments:
        raise ValidationError(f"lease pattern {pattern!r} leaves the repository (..); name paths from its root",
                              field="patterns")
    if len(segments) > MAX_SEGMENTS:
        raise ValidationError(f"lease pattern {pattern[:60]!r} has {len(segments)} directory levels; a lease names "
                              f"at most {MAX_SEGMENTS} (lease the directory: everything under it is included)",
                              field="patterns")
    _check_wildcards(pattern, segments)
    return "/".join(segments)


def _check_wildcards(pattern: str, segments: Sequence[str]) -> None:
    count = sum(1 if segment == "**" else sum(token[0] != "c" for token in _tokens(segment)) for segment in segments)
    if count > MAX_WILDCARDS:
        raise ValidationError(f"lease pattern {pattern[:60]!r} has {count} wildcards; a lease pattern takes at most "
                              f"{MAX_WILDCARDS} (*, **, ?, [...]): name the directories instead", field="patterns")


def normalize_path(text: Any) -> str:
    """A concrete path relative to the repository root (for ``lease check`` and the git guard)."""
    if not isinstance(text, str) or not text.strip() or _CONTROL_RE.search(text) or len(text) > 4096:
        raise ValidationError("a path to check must be a non-empty path relative to the repository root",
                              field="paths")
    if text.startswith(RESOURCE_PREFIX):
        return text
    segments = [s for s in text.strip().replace("\\", "/").split("/") if s not in ("", ".")]
    if not segments or ".." in segments:
        raise ValidationError(f"path {text!r} must name something inside the repository", field="paths")
    return "/".join(segments)


def _segments(pattern: str) -> tuple[str, ...]:
    """A normalized path pattern as segments, everything under what it names included (a lease
    on ``src/api`` covers ``src/api/x.py``)."""
    parts = tuple(pattern.split("/"))
    return (*parts, "**") if parts[-1] != "**" else parts


# A glob segment as tokens: ("c", char), ("?",), ("*",), ("[", negated, ((lo, hi), ...)).
_Token = tuple[Any, ...]


@lru_cache(maxsize=16384)
def _tokens(segment: str) -> tuple[_Token, ...]:
    out: list[_Token] = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            if not out or out[-1] != ("*",):
                out.append(("*",))
        elif ch == "?":
            out.append(("?",))
        elif ch == "\\" and i + 1 < len(segment):
            i += 1
            out.append(("c", segment[i]))
        elif ch == "[":
            parsed = _char_class(segment, i)
            if parsed is None:
                out.append(("c", "["))
            else:
                token, i = parsed
                out.append(token)
                continue
        else:
            out.append(("c", ch))
        i += 1
    return tuple(out)


def _char_class(segment: str, start: int) -> tuple[_Token, int] | None:
    """``[...]`` at ``start``: the token and the index after it, or None if it never closes."""
    i = start + 1
    negated = i < len(segment) and segment[i] in "!^"
    if negated:
        i += 1
    ranges: list[tuple[int, int]] = []
    first = True
    while i < len(segment):
        ch = segment[i]
        if ch == "]" and not first:
            return ("[", negated, tuple(ranges)), i + 1
        if ch == "\\" and i + 1 < len(segment):
            i += 1
            ch = segment[i]
        if i + 2 < len(segment) and segment[i + 1] == "-" and segment[i + 2] != "]":
            lo, hi = ord(ch), ord(segment[i + 2])
            if lo <= hi:
                ranges.append((lo, hi))
            i += 3
        else:
            ranges.append((ord(ch), ord(ch)))
            i += 1
        first = False
    return None


def _in_ranges(code: int, ranges: Iterable[tuple[int, int]]) -> bool:
    return any(lo <= code <= hi for lo, hi in ranges)


def _class_has(token: _Token, code: int) -> bool:
    return _in_ranges(code, token[2]) != token[1]


def _chars_meet(a: _Token, b: _Token) -> bool:
    """Whether two single-character tokens can match one same character (never '/')."""
    if a[0] == "?" or b[0] == "?":
        other = b if a[0] == "?" else a
        return other[0] != "[" or other[1] or bool(other[2])
    if a[0] == "c" and b[0] == "c":
        return a[1] == b[1]
    if a[0] == "c" or b[0] == "c":
        char, cls = (a, b) if a[0] == "c" else (b, a)
        return _class_has(cls, ord(char[1]))
    if a[1] and b[1]:
        return True  # two negated classes exclude a few characters each, never all of them
    if not a[1] and not b[1]:
        return any(lo1 <= hi2 and lo2 <= hi1 for lo1, hi1 in a[2] for lo2, hi2 in b[2])
    positive, negative = (a, b) if not a[1] else (b, a)
    for lo, hi in positive[2]:
        candidates = [lo] + [h + 1 for _, h in negative[2] if lo <= h + 1 <= hi]
        if any(not _in_ranges(c, negative[2]) for c in candidates):
            return True
    return False


def _meet(a: Sequence[Any], b: Sequence[Any], star: Any, step: Any) -> bool:
    """Whether two token sequences, where ``star`` matches any run of tokens and ``step(x, y)``
    says whether two other tokens can match one same thing, match at least one same sequence.
    Bottom-up (a pattern's length must not become the interpreter's recursion depth)."""
    n, m = len(a), len(b)
    below = [False] * (m + 1)  # row i + 1
    for i in range(n, -1, -1):
        row = [False] * (m + 1)
        for j in range(m, -1, -1):
            if i == n and j == m:
                row[j] = True
            elif i < n and a[i] == star:
                row[j] = below[j] or (j < m and row[j + 1])
            elif j < m and b[j] == star:
                row[j] = row[j + 1] or (i < n and below[j])
            elif i < n and j < m:
                row[j] = below[j + 1] and step(a[i], b[j])
        below = row
    return below[0]


_GLOB_CHARS: Final = frozenset("*?[\\")


def _is_literal(segment: str) -> bool:
    return _GLOB_CHARS.isdisjoint(segment)


class _OverBudget(Exception):
    """A pair of leases whose overlap would take more than ``PAIR_BUDGET`` steps to decide."""


class _Budget:
    """Steps left for deciding one pair of leases. What is charged depends only on the patterns
    (never on a cache), so every replica runs out at the same point."""

    __slots__ = ("left",)

    def __init__(self, steps: int = PAIR_BUDGET) -> None:
        self.left = steps

    def charge(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise _OverBudget


@lru_cache(maxsize=8192)
def _globs_meet(a: str, b: str) -> bool:
    """Whether two one-segment globs match at least one same name (uncharged: see _segments_meet)."""
    return _meet(_tokens(a), _tokens(b), ("*",), _chars_meet)


def _segments_meet(a: str, b: str, budget: _Budget) -> bool:
    """Whether two one-segment globs match at least one same name, charging ``budget``."""
    a_literal, b_literal = _is_literal(a), _is_literal(b)
    if a_literal and b_literal:
        return a == b
    budget.charge((len(_tokens(a)) + 1) * (len(_tokens(b)) + 1))
    # A name meets a glob only if the glob matches it: one walk along the name, not the table
    # of two globs (the charge stays the table's, the same on every replica).
    if a_literal:
        return _child_matches(b, a)
    if b_literal:
        return _child_matches(a, b)
    return _globs_meet(a, b)


class _Shape(NamedTuple):
    """A normalized pattern prepared once for overlap and cover tests. A tuple of strings and
    numbers only: the collector stops tracking it (a daemon caches thousands; issue 25, finding 6)."""

    resource: bool
    #: a resource's name as one segment; a path's segments, ``**`` appended (what is under it)
    segments: tuple[str, ...]
    #: the leading segments without glob characters: two patterns whose prefixes differ where both
    #: have one name nothing in common, decided without any matching
    prefix: tuple[str, ...]
    #: a path it covers has at least this many names (one per segment but ``**``)...
    min_names: int
    #: ...and among them every literal segment past the prefix: cheap refusals before any matching
    needs: tuple[str, ...]
    #: how many segments come before the first ``**`` (a path's segments always hold one)
    lead: int = 0


@lru_cache(maxsize=16384)
def _shape(pattern: str) -> _Shape:
    if pattern.startswith(RESOURCE_PREFIX):
        segments: tuple[str, ...] = (pattern,)
        resource = True
    else:
        segments, resource = _segments(pattern), False
    prefix = []
    for segment in segments:
        if not _is_literal(segment) or segment == "**":
            break
        prefix.append(segment)
    needs = tuple(sorted({s for s in segments[len(prefix):] if s != "**" and _is_literal(s)}))
    lead = segments.index("**") if "**" in segments else len(segments)
    return _Shape(resource, segments, tuple(prefix), sum(s != "**" for s in segments), needs, lead)


def _shapes_overlap(a: _Shape, b: _Shape, budget: _Budget) -> bool:
    if a.resource != b.resource:
        return False  # a resource is never a path
    n = min(len(a.prefix), len(b.prefix))
    if a.prefix[:n] != b.prefix[:n]:
        return False
    if a.resource:
        return _segments_meet(a.segments[0], b.segments[0], budget)
    # Before the first ** of either, a name both match sits at the same depth in both: segment
    # by segment, stopping at the first pair that cannot meet (most pairs end here, in one step).
    lead = min(a.lead, b.lead)
    for depth in range(n, lead):
        if not _segments_meet(a.segments[depth], b.segments[depth], budget):
            return False
    if lead == len(a.segments) - 1 or lead == len(b.segments) - 1:
        return True  # one of them goes on with ** alone: it takes whatever the other adds below
    budget.charge((len(a.segments) + 1) * (len(b.segments) + 1))
    return _meet(a.segments, b.segments, "**", lambda x, y: _segments_meet(x, y, budget))


def patterns_overlap(a: str, b: str) -> bool:
    """Whether two normalized lease patterns can name one same file or resource (conservatively
    yes when deciding would take more than ``PAIR_BUDGET`` steps): two leases of one pattern each."""
    return leases_overlap((a,), (b,))


@lru_cache(maxsize=65536)
def leases_overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether some pattern of ``a`` and some pattern of ``b`` can name one same thing, within one
    ``PAIR_BUDGET`` for the whole pair (conservatively yes beyond it). The verdict does not depend
    on the order of the patterns: with no overlap every pair is decided and the steps add up to the
    same total, and an overlap found before or after the budget runs out answers yes either way."""
    budget = _Budget()
    try:
        return any(_shapes_overlap(_shape(x), _shape(y), budget) for x in a for y in b)
    except _OverBudget:
        return True


def _star_walk(pattern: Sequence[Any], items: Sequence[Any], star: Any, fits: Any) -> bool:
    """Whether ``pattern`` matches all of ``items``, where ``star`` matches any run of items and
    ``fits(element, item)`` one item: the classic single-star backtracking walk (a failed match
    resumes after the last star), linear on ordinary input, never worse than the two lengths'
    product."""
    p = i = 0
    star_p, star_i = -1, 0
    while i < len(items):
        if p < len(pattern) and pattern[p] == star:
            star_p, star_i = p, i
            p += 1
        elif p < len(pattern) and fits(pattern[p], items[i]):
            p += 1
            i += 1
        elif star_p >= 0:
            p, star_i = star_p + 1, star_i + 1
            i = star_i
        else:
            return False
    while p < len(pattern) and pattern[p] == star:
        p += 1
    return p == len(pattern)


def _name_matches(glob: str, name: str) -> bool:
    """Whether the one-segment ``glob`` matches the concrete ``name``."""
    head, tail, least = _ends(glob)
    if len(name) < least or not name.startswith(head) or not name.endswith(tail):
        return False  # most names fail here, before any walk
    return _star_walk(_tokens(glob), name, ("*",), _token_has)


@lru_cache(maxsize=16384)
def _ends(glob: str) -> tuple[str, str, int]:
    """What every name a glob matches must hold: the literal characters it starts with, those it
    ends with, and its least length (a necessary test: the walk decides)."""
    tokens = _tokens(glob)
    head = []
    for token in tokens:
        if token[0] != "c":
            break
        head.append(token[1])
    tail: list[str] = []
    if len(head) < len(tokens):  # all literal: the head is the whole name, and no tail is needed
        for token in reversed(tokens):
            if token[0] != "c":
                break
            tail.append(token[1])
    return "".join(head), "".join(reversed(tail)), sum(token != ("*",) for token in tokens)

# For the trie walk: the same few directory names are matched against the same globs on every
# derivation.
_child_matches: Final = lru_cache(maxsize=65536)(_name_matches)


def _token_has(token: _Token, char: str) -> bool:
    kind = token[0]
    if kind == "c":
        return token[1] == char
    if kind == "?":
        return True
    return _class_has(token, ord(char))


def _segment_covers(glob: str, name: str) -> bool:
    return glob == name if _is_literal(glob) else _name_matches(glob, name)


def _path_covered(segments: tuple[str, ...], names: Sequence[str]) -> bool:
    """The same walk one level up: ``**`` is the star, a segment glob the test of one name."""
    return _star_walk(segments, names, "**", _segment_covers)


def covers_path(pattern: str, path: str) -> bool:
    """Whether a normalized lease pattern covers a normalized concrete path (or resource)."""
    shape = _shape(pattern)
    if path.startswith(RESOURCE_PREFIX) or shape.resource:
        return path.startswith(RESOURCE_PREFIX) and shape.resource and _segment_covers(shape.segments[0], path)
    return _covers_names(shape, path.split("/"))


def _covers_names(shape: _Shape, names: list[str]) -> bool:
    """``covers_path`` of a path pattern, the path split into its names (once per path)."""
    if len(names) < shape.min_names or tuple(names[:len(shape.prefix)]) != shape.prefix:
        return False
    if shape.needs and not all(need in names for need in shape.needs):
        return False
    return _path_covered(shape.segments, names)


class _Node:
    __slots__ = ("children", "here")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        #: leases with a pattern whose literal prefix ends at this node
        self.here: dict[str, Lease] = {}


@lru_cache(maxsize=65536)
def _could_start(patterns: tuple[str, ...], name: str) -> bool:
    """Whether a pattern of ``patterns`` can name something whose first name (or resource) is
    ``name``: its first segment is ``**``, ``name`` itself, or a glob matching it (a necessary test
    for an overlap with a pattern starting with the literal ``name``)."""
    resource = name.startswith(RESOURCE_PREFIX)
    for pattern in patterns:
        shape = _shape(pattern)
        if shape.resource != resource:
            continue
        first = shape.segments[0]
        if first == "**" or first == name or (not _is_literal(first) and _child_matches(first, name)):
            return True
    return False


class _PrefixTrie:
    """Leases by the literal prefixes of their patterns (``src/api`` of ``src/api/*.py``). Two
    patterns can only meet when one prefix is a prefix of the other, so the leases a pattern must be
    tried against lie on its path from the root (shorter prefixes, the root holding the patterns
    that start with a glob) and below its end (longer ones)."""

    def __init__(self) -> None:
        self.root = _Node()

    def add(self, lease: Lease) -> None:
        for pattern in lease.patterns:
            node = self.root
            for name in _shape(pattern).prefix:
                node = node.children.setdefault(name, _Node())
            node.here[lease.id] = lease

    def remove(self, lease: Lease) -> None:
        for pattern in lease.patterns:
            node: _Node | None = self.root
            for name in _shape(pattern).prefix:
                node = node.children.get(name) if node is not None else None
            if node is not None:
                node.here.pop(lease.id, None)

    def evolved(self, add: Iterable[Lease], remove: Iterable[Lease]) -> _PrefixTrie:
        """A new trie: this one with ``add`` in and ``remove`` out, sharing every node neither
        touches (the nodes on their paths are copied once), so readers of this one are undisturbed
        and the cost is the changes', not the size's."""
        fresh: set[int] = set()

        def own(node: _Node) -> _Node:
            copy = _Node()
            copy.children, copy.here = dict(node.children), dict(node.here)
            fresh.add(id(copy))
            return copy

        out = _PrefixTrie()
        out.root = own(self.root)

        def node_of(pattern: str, create: bool) -> _Node | None:
            node = out.root
            for name in _shape(pattern).prefix:
                child = node.children.get(name)
                if child is None:
                    if not create:
                        return None
                    child = _Node()
                    fresh.add(id(child))
                elif id(child) not in fresh:
                    child = own(child)
                node.children[name] = child
                node = child
            return node

        for lease in remove:
            for pattern in lease.patterns:
                node = node_of(pattern, create=False)
                if node is not None:
                    node.here.pop(lease.id, None)
        for lease in add:
            for pattern in lease.patterns:
                node_of(pattern, create=True).here[lease.id] = lease  # type: ignore[union-attr]
        return out

    def along(self, names: Sequence[str], found: dict[str, Lease]) -> _Node | None:
        """Add the leases on the path of ``names`` to ``found``; the node it ends at (None if the
        path leaves the trie)."""
        node = self.root
        found.update(node.here)
        for name in names:
            child = node.children.get(name)
            if child is None:
                return None
            node = child
            found.update(node.here)
        return node

    def meeting(self, patterns: Iterable[str]) -> dict[str, Lease]:
        """The leases with a pattern that could meet one of ``patterns``: the trie is walked along
        each pattern's segments (a literal follows its child, a glob the children whose name it
        matches), taking the leases whose prefix ends on the way (their patterns go on with a glob)
        and, where the pattern reaches ``**``, everything below."""
        found: dict[str, Lease] = {}
        for pattern in patterns:
            shape = _shape(pattern)
            stack: list[tuple[_Node, int]] = [(self.root, 0)]
            first = shape.segments[0]
            while stack:
                node, depth = stack.pop()
                if depth == 0 and _is_literal(first):
                    # The root holds the leases whose patterns start with a glob: each is tried
                    # by its first segment against this pattern's first name (once per lease and
                    # name), not by a whole overlap test (a flood of glob leases, issue 25).
                    found.update((i, lease) for i, lease in node.here.items() if _could_start(lease.patterns, first))
                else:
                    found.update(node.here)
                if depth == len(shape.segments):
                    continue  # a resource's one name, matched (a path pattern always ends with **)
                segment = shape.segments[depth]
                if segment == "**":
                    below = list(node.children.values())
                    while below:
                        deeper = below.pop()
                        found.update(deeper.here)
                        below.extend(deeper.children.values())
                elif _is_literal(segment):
                    child = node.children.get(segment)
                    if child is not None:
                        stack.append((child, depth + 1))
                else:
                    stack.extend((child, depth + 1) for name, child in node.children.items()
                                 if _child_matches(segment, name))
        return found


class LeaseIndex:
    """Leases by the literal prefixes of their patterns, for asking which of them cover a path
    without trying every one (``lease check``, the git guard)."""

    def __init__(self, leases: Iterable[Lease] = ()) -> None:
        self._trie = _PrefixTrie()
        self.size = 0
        for lease in leases:
            self._trie.add(lease)
            self.size += 1

    def evolved(self, add: Sequence[Lease], remove: Sequence[Lease]) -> LeaseIndex:
        """This index with ``add`` in and ``remove`` out, as a new index (this one unchanged: a
        reader may be walking it in another thread); costs what changes, not the size."""
        out = LeaseIndex()
        out._trie = self._trie.evolved(add, remove)
        out.size = self.size + len(add) - len(remove)
        return out

    def __repr__(self) -> str:
        return f"<LeaseIndex leases={self.size}>"

    def meeting(self, patterns: Iterable[str]) -> list[Lease]:
        """The leases with a pattern that could meet one of ``patterns`` (to try for collisions)."""
        return list(self._trie.meeting(patterns).values())

    def covering(self, path: str, keep: Any = None) -> list[Lease]:
        """The leases with a pattern covering the normalized ``path``, each once; of those for
        which ``keep(lease)`` is true, if given (asked first: the patterns of the others are never
        tried, e.g. shared leases for a check that only exclusive ones can fail)."""
        candidates: dict[str, Lease] = {}
        if path.startswith(RESOURCE_PREFIX):
            self._trie.along((path,), candidates)
            return [lease for lease in candidates.values() if (keep is None or keep(lease))
                    and any(covers_path(p, path) for p in lease.patterns)]
        names = path.split("/")
        self._trie.along(names, candidates)
        return [lease for lease in candidates.values() if (keep is None or keep(lease))
                and any(not shape.resource and _covers_names(shape, names) for shape in map(_shape, lease.patterns))]


# -- requests -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseRequest:
    """A checked ``lease acquire``: what the ``lease.acquire`` event's metadata carries."""

    patterns: tuple[str, ...]
    exclusive: bool
    ttl_s: int
    reason: str | None

    @classmethod
    def from_wire(cls, args: Mapping[str, Any]) -> LeaseRequest:
        raw = args.get("patterns")
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not raw:
            raise ValidationError("lease acquire needs at least one pattern (a path glob like src/api/** or res:NAME)",
                                  field="patterns")
        if len(raw) > MAX_PATTERNS:
            raise ValidationError(f"a lease takes at most {MAX_PATTERNS} patterns", field="patterns")
        patterns = tuple(dict.fromkeys(normalize_pattern(p) for p in raw))
        ttl_s = check_ttl(args.get("ttl_s", DEFAULT_TTL_S))
        shared = args.get("shared", False)
        if not isinstance(shared, bool):
            raise ValidationError("shared must be true or false", field="shared")
        reason = args.get("reason")
        if reason is not None:
            if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS or _CONTROL_RE.search(reason):
                raise ValidationError(f"reason must be one line of text of at most {MAX_REASON_CHARS} characters",
                                      field="reason")
            reason = reason.strip() or None
        return cls(patterns, not shared, ttl_s, reason)

    def metadata(self, forced: Sequence[str]) -> dict[str, Any]:
        meta: dict[str, Any] = {"patterns": list(self.patterns), "mode": "exclusive" if self.exclusive else "shared",
                                "ttl_s": self.ttl_s}
        if self.reason:
            meta["reason"] = self.reason
        if forced:
            meta["forced"] = sorted(forced)
        return meta


# -- state --------------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class Lease:
    """One lease as derived from the log. ``state``: active, expired, released, lost (it collided
    with an earlier lease), forced (a later ``--force`` ended it), revoked (its daemon was)."""

    id: str
    event_id: str
    holder: str
    origin: str
    stream: str
    patterns: tuple[str, ...]
    exclusive: bool
    reason: str | None
    created_at: str
    expires_at: str
    #: what it was taken for (a renew without a TTL extends by as much)
    ttl_s: int = DEFAULT_TTL_S
    forced: tuple[str, ...] = ()
    ended_at: str | None = None
    end: str | None = None
    #: the lease that won against this one (lost) or forced it out (forced)
    ended_by: str | None = None
    ended_by_agent: str | None = None
    renewals: int = 0

    def until(self) -> str:
        """When it stops (or stopped) being in force."""
        return self.ended_at if self.ended_at is not None and self.ended_at < self.expires_at else self.expires_at

    def in_force_at(self, stamp: str) -> bool:
        return self.created_at <= stamp < self.until()

    def state(self, now: str) -> str:
        if self.ended_at is not None and self.ended_at <= now and self.ended_at < self.expires_at:
            return self.end or "released"
        return "expired" if self.expires_at <= now else "active"

    def collides(self, other: Lease) -> bool:
        """Different holders in one project, one of them exclusive, patterns that can meet."""
        return (self.holder != other.holder and self.stream == other.stream and (self.exclusive or other.exclusive)
                and leases_overlap(self.patterns, other.patterns))

    def to_wire(self, now: str) -> dict[str, Any]:
        state = self.state(now)
        return {"id": self.id, "event_id": self.event_id, "agent": self.holder, "origin": self.origin,
                "project": self.stream.removeprefix("project/"), "patterns": list(self.patterns),
                "mode": "exclusive" if self.exclusive else "shared", "reason": self.reason,
                "created_at": self.created_at, "expires_at": self.expires_at, "ttl_s": self.ttl_s, "state": state,
                "ended_at": self.ended_at if state not in ("active", "expired") else None,
                "ended_by": self.ended_by, "ended_by_agent": self.ended_by_agent, "renewals": self.renewals,
                "forced": list(self.forced)}


def _metadata(event: PublicEvent) -> dict[str, Any]:
    meta = event.get("metadata")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            return {}
    return meta if isinstance(meta, dict) else {}


def lease_of(event: PublicEvent) -> Lease | None:
    """The lease an acquire event takes, as it stands when taken (nothing renewed or ended yet), or
    None if a (hostile or damaged) event is malformed."""
    meta = _metadata(event)
    lease_id, created = event.get("correlation_id"), event.get("created_at")
    if not isinstance(lease_id, str) or not _LEASE_ID_RE.match(lease_id) or not isinstance(created, str) \
            or not STAMP_RE.match(created):
        return None
    try:
        request = LeaseRequest.from_wire({"patterns": meta.get("patterns"), "ttl_s": meta.get("ttl_s"),
                                          "shared": meta.get("mode") == "shared", "reason": meta.get("reason")})
    except ValidationError:
        return None
    forced = meta.get("forced", [])
    if not isinstance(forced, list) or len(forced) > MAX_FORCED or not all(
            isinstance(f, str) and _LEASE_ID_RE.match(f) for f in forced):
        return None
    return Lease(id=lease_id, event_id=str(event.get("id")), holder=str(event.get("from_agent")),
                 origin=str(event.get("origin")), stream=str(event.get("stream")), patterns=request.patterns,
                 exclusive=request.exclusive, reason=request.reason, created_at=created,
                 expires_at=_expiry(created, request.ttl_s), ttl_s=request.ttl_s, forced=tuple(forced))


# Cached: every derivation reads every lease of the window again (parsing a stamp is most of that).
_expiry: Final = lru_cache(maxsize=65536)(add_seconds)


def derive_leases(events: Iterable[PublicEvent], *, revoked: Mapping[str, str] | None = None,
                  daemon_of: Callable[[Any], Any] | None = None) -> list[Lease]:
    """Every lease the events take, with how and when each ended (if it did), oldest first.

    ``events``: lease events (any order; others are ignored). ``revoked``: origin → when its
    daemon was revoked (its leases end then). The answer depends on nothing else, so every
    replica holding the same events derives the same leases (see the module docstring).
    """
    ledger = LeaseLedger(revoked, daemon_of)
    ledger.feed(events)
    return ledger.leases()


def _settle_order(event: PublicEvent) -> tuple[str, int, str]:
    """Where an event stands in the one pass: by ``created_at``; at one same instant a renew or a
    release comes before an acquire (a lease released at t is not in force at t); then by id."""
    return event["created_at"], 1 if event["type"] == ACQUIRE else 0, str(event.get("id"))


class LeaseLedger:
    """The derivation, kept: the events are applied in one pass, in ``_settle_order``, each as the
    pass reaches it (an acquire is settled against the leases in force at its start; a renew or a
    release counts only if its lease is in force at its stamp). Fed more events that all come after
    the last one applied, it goes on where it stopped and holds exactly what one pass over all of
    them would: a lease event costs the daemon one step, not a derivation of the month (issue 25,
    finding 6). An event that sorts before the last one applied (a late arrival, a clock behind)
    cannot be applied that way: ``feed`` refuses the whole batch and the caller derives afresh.

    Who may renew, release and tell is the authority table's (``palace_proto.authority``, rules
    ``lease.*``): a renew or a release by anyone but the lease's holder while it is in force, and a
    ``lease.conflict`` from another daemon than the loser's or about a lease that did not lose,
    are *flagged* (``flagged``: the newest ``MAX_FLAGGED_KEPT``, and ``flagged_count``) and move
    nothing. ``daemon_of(origin)`` names the daemon an origin belongs to (origins compared without it).

    Not thread-safe: one writer at a time. Lease objects are updated in place as later events end,
    renew or revoke them."""

    #: Why 100: what `lease list` shows of the flagged events (a member can write any number; the
    #: count says how many).
    MAX_FLAGGED_KEPT: Final = 100

    def __init__(self, revoked: Mapping[str, str] | None = None,
                 daemon_of: Callable[[Any], Any] | None = None) -> None:
        self.daemon_of = daemon_of if daemon_of is not None else (lambda origin: origin)
        #: the newest events the table did not allow, each ``authority.flag_of``
        self.flagged: collections.deque[dict[str, Any]] = collections.deque(maxlen=self.MAX_FLAGGED_KEPT)
        self.flagged_count = 0
        self.revoked = {origin: add_seconds(when, 0) for origin, when in (revoked or {}).items()
                        if isinstance(when, str) and STAMP_RE.match(when)}
        self._acquires: dict[str, Lease] = {}
        self._ordered: list[Lease] = []
        self._projects: dict[str, _Standing] = {}
        #: where the pass stands: the order key of the last event applied
        self.frontier: tuple[str, int, str] | None = None
        #: the agents whose events were applied (a change to one's record may change what it took)
        self.writers: set[str] = set()
        #: how many events were applied
        self.applied = 0
        #: the leases that began or stopped standing, or were renewed, since ``take_touched``
        self._touched: dict[str, Lease] = {}

    def __repr__(self) -> str:
        return f"<LeaseLedger leases={len(self._ordered)} applied={self.applied} frontier={self.frontier}>"

    def take_touched(self) -> list[Lease]:
        """The leases that began or stopped standing, or were renewed, since the last call (what
        an index of the leases in force must add, drop or look at again)."""
        touched, self._touched = list(self._touched.values()), {}
        for standing in self._projects.values():
            standing._touched = self._touched
        return touched

    def leases(self) -> list[Lease]:
        """Every lease taken so far, in start order (a new list; the leases themselves are shared)."""
        return list(self._ordered)

    def feed(self, events: Iterable[PublicEvent]) -> bool:
        """Apply ``events`` (any order among themselves); False, applying none, if one of them
        sorts at or before the last event applied (derive afresh)."""
        batch = []
        for event in events:
            if event.get("type") not in (ACQUIRE, RENEW, RELEASE, CONFLICT) or event.get("impersonation"):
                continue  # written as its holder by a daemon that did not hold that agent: it takes nothing
            if not isinstance(event.get("created_at"), str) or not STAMP_RE.match(event["created_at"]):
                continue
            batch.append(event)
        batch.sort(key=_settle_order)
        if batch and self.frontier is not None and _settle_order(batch[0]) <= self.frontier:
            return False
        for event in batch:
            self.writers.add(str(event.get("from_agent")))
            if event["type"] == ACQUIRE:
                self._acquire(event)
            elif event["type"] == CONFLICT:
                self._told(event)
            else:
                self._change(event)
            self.applied += 1
        if batch:
            self.frontier = _settle_order(batch[-1])
        return True

    def _acquire(self, event: PublicEvent) -> None:
        lease = lease_of(event)
        # One acquire per id: a replayed or forged duplicate id keeps the first (by order).
        if lease is None or lease.id in self._acquires:
            return
        self._acquires[lease.id] = lease
        self._ordered.append(lease)
        self._revoke_if(lease)
        standing = self._projects.get(lease.stream)
        if standing is None:
            standing = self._projects[lease.stream] = _Standing(self._touched)
        _settle(lease, standing)

    def _revoke_if(self, lease: Lease) -> None:
        when = self.revoked.get(lease.origin)
        if when is not None and when < lease.until():
            lease.ended_at, lease.end = max(when, lease.created_at), "revoked"

    def _flag(self, event: PublicEvent, verdict: Verdict) -> None:
        self.flagged.append(flag_of(event, verdict))
        self.flagged_count += 1

    def _told(self, event: PublicEvent) -> None:
        """A ``lease.conflict`` moves nothing; from another daemon than the loser's, or about a
        lease that did not lose (or was not forced out), it is flagged: it tells nobody anything."""
        lease = self._acquires.get(_metadata(event).get("lease_id"))  # type: ignore[arg-type]
        refers = (lease is not None and lease.end in ("lost", "forced")
                  and self.daemon_of(event.get("origin")) == self.daemon_of(lease.origin))
        verdict = judge(rule_named("lease.conflict"), {TELLING_DAEMON} if event.get("from_agent") == "palaced" else (),
                        agent=event.get("from_agent"), refers=refers,
                        refers_why="lease.conflict must come from the daemon of a lease that lost, about that lease")
        if not verdict.ok:
            self._flag(event, verdict)

    def _change(self, event: PublicEvent) -> None:
        lease = self._acquires.get(event.get("correlation_id"))  # type: ignore[arg-type]
        stamp = event["created_at"]
        holds = lease is not None and event.get("from_agent") == lease.holder and lease.created_at <= stamp < lease.until()
        verdict = judge(rule_named(str(event["type"])), {LEASE_HOLDER} if holds else {ANY_AGENT},
                        agent=event.get("from_agent"), refers=lease is not None,
                        refers_why=f"{event['type']} must name a lease taken (its correlation id)",
                        names={LEASE_HOLDER: lease.holder if lease is not None else None})
        if not verdict.ok:
            self._flag(event, verdict)
            return  # only its holder, and only while it is in force
        assert lease is not None
        standing = self._projects[lease.stream]
        if event["type"] == RELEASE:
            lease.ended_at, lease.end = stamp, "released"
            standing.remove(lease)
            return
        ttl = _metadata(event).get("ttl_s")
        try:
            ttl_s = check_duration(ttl, field="ttl")  # as written: an integer, never a text to parse
        except ValidationError:
            return
        lease.expires_at = max(lease.expires_at, add_seconds(stamp, ttl_s))
        lease.renewals += 1
        self._revoke_if(lease)
        standing.extended(lease)


class _Standing:
    """The leases of one project in force at the point the pass has reached, in a prefix trie (a
    new lease is tried only against those whose patterns could meet its own), with their ends in a
    heap (a lease leaves as soon as it ends: ended leases cost nothing further)."""

    def __init__(self, touched: dict[str, Lease]) -> None:
        self.by_id: dict[str, Lease] = {}
        self._trie = _PrefixTrie()
        self._ends: list[tuple[str, int, Lease]] = []
        self._pushed = 0
        self.held: dict[str, int] = {}
        self._touched = touched

    def add(self, lease: Lease) -> None:
        self.by_id[lease.id] = lease
        self._trie.add(lease)
        self._push(lease)
        self.held[lease.holder] = self.held.get(lease.holder, 0) + 1
        self._touched[lease.id] = lease

    def _push(self, lease: Lease) -> None:
        self._pushed += 1
        heapq.heappush(self._ends, (lease.until(), self._pushed, lease))

    def extended(self, lease: Lease) -> None:
        """A lease standing here was renewed: its end moved (the earlier entry is passed over)."""
        if lease.id in self.by_id:
            self._push(lease)
            self._touched[lease.id] = lease

    def remove(self, lease: Lease) -> None:
        if self.by_id.pop(lease.id, None) is None:
            return
        self._trie.remove(lease)
        self.held[lease.holder] -= 1
        self._touched[lease.id] = lease

    def expire(self, stamp: str) -> None:
        """Drop the leases no longer in force at ``stamp``."""
        while self._ends and self._ends[0][0] <= stamp:
            lease = heapq.heappop(self._ends)[2]
            if lease.until() <= stamp:  # else renewed since: a later entry holds its end
                self.remove(lease)

    def candidates(self, lease: Lease) -> list[Lease]:
        """The standing leases of other holders that could collide with ``lease``, in start order."""
        found = self._trie.meeting(lease.patterns)
        return sorted((e for e in found.values() if e.holder != lease.holder),
                      key=lambda e: (e.created_at, e.event_id))


def _settle(lease: Lease, standing: _Standing) -> None:
    """Settle a new lease against the leases of its project in force when it starts."""
    standing.expire(lease.created_at)
    if standing.held.get(lease.holder, 0) >= MAX_HELD:
        lease.ended_at, lease.end = lease.created_at, "over_limit"
        return
    # The first rival it did not force out wins (and the rest need not be tried); with none,
    # every rival was named in its force and ends now.
    rivals: list[Lease] = []
    for earlier in standing.candidates(lease):
        if earlier.in_force_at(lease.created_at) and earlier.collides(lease):
            if earlier.id not in lease.forced:
                lease.ended_at, lease.end = lease.created_at, "lost"
                lease.ended_by, lease.ended_by_agent = earlier.id, earlier.holder
                return
            rivals.append(earlier)
    for forced in rivals:
        forced.ended_at, forced.end = lease.created_at, "forced"
        forced.ended_by, forced.ended_by_agent = lease.id, lease.holder
        standing.remove(forced)
    if lease.until() > lease.created_at:
        standing.add(lease)


def held_by(leases: Iterable[Lease], holder: str, stream: str, now: str) -> int:
    """How many leases ``holder`` has active in the project ``stream`` (at most ``MAX_HELD``)."""
    return sum(1 for lease in leases if lease.holder == holder and lease.stream == stream
               and lease.state(now) == "active")


def lease_conflicts(leases: Sequence[Lease], candidate: LeaseRequest, holder: str, now: str,
                    stream: str | None = None, *, limit: int | None = None) -> list[Lease]:
    """The active leases of other agents (in project ``stream``, or any) a new lease by ``holder``
    would collide with, in the order given; the first ``limit`` of them only, if given (a refusal
    names a few: the rest need not be decided)."""
    found: list[Lease] = []
    for lease in leases:
        if (lease.holder != holder and (stream is None or lease.stream == stream)
                and (lease.exclusive or candidate.exclusive) and lease.state(now) == "active"
                and leases_overlap(lease.patterns, candidate.patterns)):
            found.append(lease)
            if limit is not None and len(found) >= limit:
                break
    return found


# -- the feature's declaration (palace_proto.features puts every feature's together) ----------------

#: the local API's operations of leases
OPS: Final = frozenset({"lease_acquire", "lease_renew", "lease_release", "lease_list", "lease_check"})
NAMESPACE: Final = "lease."
RULES: Final[tuple[Rule, ...]] = (
    Rule("lease.acquire", ("lease.acquire",), (), "lease", frozenset({ANY_AGENT}),
         "paths or resources of a project",
         "the earlier of two colliding leases holds; a forced acquire ends the leases it names; beyond 32 in "
         "force per agent and project, over_limit",
         written_by="lease_acquire (palacectl lease acquire)",
         test="tests/proto/test_leases.py::test_an_agent_holds_at_most_max_held_leases_in_a_project_on_every_replica"),
    Rule("lease.renew", ("lease.renew",), (), "lease", frozenset({LEASE_HOLDER}),
         "a lease in force", "extends it from the renewal on",
         written_by="lease_renew (palacectl lease renew)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("lease.release", ("lease.release",), (), "lease", frozenset({LEASE_HOLDER}),
         "a lease in force", "ends it",
         written_by="lease_release (palacectl lease release)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("lease.conflict", ("lease.conflict",), (), "lease", frozenset({TELLING_DAEMON}),
         "the losing lease", "moves nothing: tells the loser once",
         written_by="palaced (to a lease's loser)", as_daemon=True,
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
)
