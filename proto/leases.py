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

Pure: stdlib only, no clock, no IO.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Final

from .errors import ValidationError
from .stamps import MAX_DURATION_S, MIN_DURATION_S, STAMP_RE, add_seconds, check_duration, parse_duration

__all__ = [
    "ACQUIRE", "CONFLICT", "DEFAULT_TTL_S", "LEASE_ROOM", "LEASE_TYPES", "MAX_PATTERNS", "MAX_TTL_S", "RELEASE",
    "RENEW", "Lease", "LeaseRequest", "check_ttl", "covers_path", "derive_leases", "lease_conflicts",
    "normalize_path", "normalize_pattern", "patterns_overlap",
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
# Why 32 patterns of 256 characters: a lease names a few directories, not a file list; the overlap
# test is quadratic in pattern length, so a peer's pattern must stay small...
MAX_PATTERNS: Final = 32
MAX_PATTERN_CHARS: Final = 256
# ...and a pair of glob segments (or of paths) whose test would take more than this many steps is
# taken to overlap, without trying: conservative, and the same verdict on every replica.
MAX_CELLS: Final = 4096
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
    pattern = text.strip()
    if len(pattern) > MAX_PATTERN_CHARS or _CONTROL_RE.search(pattern):
        raise ValidationError(f"lease pattern {pattern[:60]!r} is longer than {MAX_PATTERN_CHARS} characters "
                              "or holds control characters", field="patterns")
    if pattern.startswith(RESOURCE_PREFIX):
        name = pattern[len(RESOURCE_PREFIX):]
        if not name or "/" in name or "\\" in name:
            raise ValidationError(f"lease resource {pattern!r} needs a name without '/' after res:, e.g. res:gpu0",
                                  field="patterns")
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
    return "/".join(segments)


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


@lru_cache(maxsize=4096)
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


@lru_cache(maxsize=8192)
def _segments_meet(a: str, b: str) -> bool:
    """Whether two one-segment globs match at least one same name."""
    if not any(c in a for c in "*?[\\") and not any(c in b for c in "*?[\\"):
        return a == b
    ta, tb = _tokens(a), _tokens(b)
    if len(ta) * len(tb) > MAX_CELLS:
        return True  # too costly to decide: assume they overlap (the same answer on every replica)
    return _meet(ta, tb, ("*",), _chars_meet)


def _paths_meet(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    if len(a) * len(b) > MAX_CELLS:
        return True
    return _meet(a, b, "**", _segments_meet)


@lru_cache(maxsize=16384)
def patterns_overlap(a: str, b: str) -> bool:
    """Whether two normalized lease patterns can name one same file or resource."""
    if a.startswith(RESOURCE_PREFIX) or b.startswith(RESOURCE_PREFIX):
        return (a.startswith(RESOURCE_PREFIX) and b.startswith(RESOURCE_PREFIX)
                and _segments_meet(a[len(RESOURCE_PREFIX):], b[len(RESOURCE_PREFIX):]))
    return _paths_meet(_segments(a), _segments(b))


def covers_path(pattern: str, path: str) -> bool:
    """Whether a normalized lease pattern covers a normalized concrete path (or resource)."""
    if path.startswith(RESOURCE_PREFIX) or pattern.startswith(RESOURCE_PREFIX):
        return (path.startswith(RESOURCE_PREFIX) and pattern.startswith(RESOURCE_PREFIX)
                and _segments_meet(pattern[len(RESOURCE_PREFIX):], _escape(path[len(RESOURCE_PREFIX):])))
    return _paths_meet(_segments(pattern), tuple(_escape(s) for s in path.split("/")))


def _escape(name: str) -> str:
    """A concrete name as a glob that matches only itself."""
    return re.sub(r"([*?\[\\])", r"\\\1", name)


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
        return (self.holder != other.holder and (self.exclusive or other.exclusive)
                and any(patterns_overlap(a, b) for a in self.patterns for b in other.patterns))

    def to_wire(self, now: str) -> dict[str, Any]:
        return {"id": self.id, "event_id": self.event_id, "agent": self.holder, "origin": self.origin,
                "project": self.stream.removeprefix("project/"), "patterns": list(self.patterns),
                "mode": "exclusive" if self.exclusive else "shared", "reason": self.reason,
                "created_at": self.created_at, "expires_at": self.expires_at, "ttl_s": self.ttl_s, "state": self.state(now),
                "ended_at": self.ended_at if self.state(now) not in ("active", "expired") else None,
                "ended_by": self.ended_by, "ended_by_agent": self.ended_by_agent, "renewals": self.renewals,
                "forced": list(self.forced)}


def _metadata(event: Mapping[str, Any]) -> dict[str, Any]:
    meta = event.get("metadata")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            return {}
    return meta if isinstance(meta, dict) else {}


def _lease_from(event: Mapping[str, Any]) -> Lease | None:
    """The lease an acquire event takes, or None if a (hostile or damaged) event is malformed."""
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
                 expires_at=add_seconds(created, request.ttl_s), ttl_s=request.ttl_s, forced=tuple(forced))


def derive_leases(events: Iterable[Mapping[str, Any]], *, revoked: Mapping[str, str] | None = None) -> list[Lease]:
    """Every lease the events take, with how and when each ended (if it did), oldest first.

    ``events``: lease events (any order; others are ignored). ``revoked``: origin → when its
    daemon was revoked (its leases end then). The answer depends on nothing else, so every
    replica holding the same events derives the same leases (see the module docstring).
    """
    revoked = {origin: add_seconds(when, 0) for origin, when in (revoked or {}).items()
               if isinstance(when, str) and STAMP_RE.match(when)}
    acquires: dict[str, Lease] = {}
    changes: list[Mapping[str, Any]] = []
    for event in events:
        kind = event.get("type")
        if event.get("impersonation"):
            continue  # written as its holder by a daemon that did not hold that agent: it takes nothing
        if kind == ACQUIRE:
            lease = _lease_from(event)
            # One acquire per id; a replayed or forged duplicate id keeps the first (by order).
            if lease is not None and (lease.id not in acquires
                                      or (lease.created_at, lease.event_id) < (acquires[lease.id].created_at,
                                                                               acquires[lease.id].event_id)):
                acquires[lease.id] = lease
        elif kind in (RENEW, RELEASE) and isinstance(event.get("created_at"), str):
            changes.append(event)
    changes.sort(key=lambda e: (e["created_at"], str(e.get("id"))))
    for event in changes:
        lease = acquires.get(event.get("correlation_id"))  # type: ignore[arg-type]
        stamp = event["created_at"]
        if lease is None or event.get("from_agent") != lease.holder or not lease.created_at <= stamp < lease.until():
            continue  # only its holder, and only while it is in force
        if event["type"] == RELEASE:
            lease.ended_at, lease.end = stamp, "released"
            continue
        ttl = _metadata(event).get("ttl_s")
        try:
            ttl_s = check_duration(ttl, field="ttl")  # as written: an integer, never a text to parse
        except ValidationError:
            continue
        lease.expires_at = max(lease.expires_at, add_seconds(stamp, ttl_s))
        lease.renewals += 1
    ordered = sorted(acquires.values(), key=lambda lease: (lease.created_at, lease.event_id))
    for lease in ordered:
        when = revoked.get(lease.origin)
        if when is not None and when < lease.until():
            lease.ended_at, lease.end = max(when, lease.created_at), "revoked"
    _settle_collisions(ordered)
    return ordered


def _settle_collisions(ordered: list[Lease]) -> None:
    standing: list[Lease] = []
    for lease in ordered:
        # In start order: a lease that ended before this one started can meet none of the rest.
        standing = [e for e in standing if e.until() > lease.created_at]
        rivals = [e for e in standing if e.in_force_at(lease.created_at) and e.collides(lease)]
        winner = next((e for e in rivals if e.id not in lease.forced), None)
        if winner is not None:
            lease.ended_at, lease.end = lease.created_at, "lost"
            lease.ended_by, lease.ended_by_agent = winner.id, winner.holder
            continue
        for forced in rivals:
            forced.ended_at, forced.end = lease.created_at, "forced"
            forced.ended_by, forced.ended_by_agent = lease.id, lease.holder
        standing.append(lease)


def lease_conflicts(leases: Sequence[Lease], candidate: LeaseRequest, holder: str, now: str) -> list[Lease]:
    """The active leases of other agents a new lease by ``holder`` would collide with."""
    probe = Lease(id="lease_" + "0" * 16, event_id="", holder=holder, origin="", stream="",
                  patterns=candidate.patterns, exclusive=candidate.exclusive, reason=None, created_at=now,
                  expires_at=now)
    return [lease for lease in leases if lease.state(now) == "active" and lease.collides(probe)]
