"""The daemon report: what each daemon of a palace says about itself to the others (the network's).

The network carries reports as it carries presence (proto/PROTOCOL.md §5.3–5.4): a core
facility, read by the fleet view (the fleet feature's ``fleet`` operation) and by ``doctor``.

Owns: the content of a daemon report (version 1) — the daemon's role, release, start time, the
size of its log, its origin, its links to other daemons with their state and lag, its health
problems, forks and watchers — its encoding (``encode_report``: sorted keys, compact, every list
and free-text string cut to its bound, never more than ``MAX_REPORT_BYTES``), and the reading of
another daemon's (``decode_report``). What the report looks like on the wire, signed, is
``peer.Report``; how it travels is proto/PROTOCOL.md §5.3–5.4; ``palaced/network.py`` builds ours
and keeps the others'.

A report is relayed across the palace, so ``decode_report`` reads what a hostile member may have
signed: leniently but safely. Unknown keys are dropped; each string is either checked against
its format (a timestamp, a peer id, an origin id, one of a few words) or made visible text and
cut (``text.printable``); lists are bounded; a field of the wrong type becomes None. It never
raises for a JSON object, whatever the object holds; bytes that are not one (not UTF-8, not JSON,
nested deeper than the parser follows, another JSON value) raise ``ValueError``.

Pure: stdlib only (no msgpack, no signature library: a dashboard may import it to read reports).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from .ids import ORIGIN_ID_RE, fingerprint_is_valid
from .text import printable

__all__ = [
    "DIRECTIONS",
    "LINK_STATES",
    "MAX_HEALTH_PROBLEMS",
    "MAX_PROBLEM_CHARS",
    "MAX_REPORT_BYTES",
    "MAX_REPORT_LINKS",
    "REPORT_ROLES",
    "REPORT_VERSION",
    "decode_report",
    "encode_report",
]

#: the content version this module writes (a reader takes any: unknown keys are dropped)
REPORT_VERSION: Final = 1
# Why 16 KiB: a report is relayed to every link of every daemon on each heartbeat; 64 links of
# ~180 bytes and 8 problems of 200 characters fit with room, and anything bigger is refused by the
# codec before it is parsed (peer.py).
MAX_REPORT_BYTES: Final = 16 * 1024
# Why 64: a palace is a handful of machines; a daemon with more links reports its first 64
# (the connected ones first, see palaced/network.py).
MAX_REPORT_LINKS: Final = 64
# Why 8 of 200 characters: ``status.health`` problems are a few one-line sentences; the fleet view
# shows them, it is not a log.
MAX_HEALTH_PROBLEMS: Final = 8
MAX_PROBLEM_CHARS: Final = 200
# Why 64: a release string ("0.1.0", "1.2.0rc1+local") with room.
MAX_VERSION_CHARS: Final = 64
# Why 2**62: as every integer of the peer protocol (peer.MAX_WIRE_INT): counts a store can hold.
MAX_COUNT: Final = 2**62
# Why 20 digits: every count fits (2**62 has 19); a longer JSON number is not one, and Python would
# refuse to convert one of more than 4300 digits with an exception.
MAX_INT_DIGITS: Final = 20
#: the roles of peer.ROLES (not imported: peer.py pulls in msgpack and the signature library)
REPORT_ROLES: Final = ("member", "observer")
#: a link's state, as ``peers`` shows it
LINK_STATES: Final = ("discovered", "connecting", "catching up", "live", "disconnected", "error", "revoked")
#: who dialled a link: "in" (the peer), "out" (the reporting daemon); null when not connected
DIRECTIONS: Final = ("in", "out")
# An RFC 3339 UTC timestamp as palace writes them (whole seconds or microseconds). ASCII digits
# only, and matched whole (``fullmatch``: ``$`` alone would let a trailing newline through).
_STAMP_RE: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?Z", re.ASCII)
_LINK_KEYS: Final = ("peer_id", "state", "direction", "last_contact", "we_lack", "they_lack")


def encode_report(report: Mapping[str, Any]) -> bytes:
    """This daemon's report as the bytes a ``peer.Report`` carries and its signature covers.

    Args:
        report: the content (module docstring); unknown keys are left out, ``v`` is always
            ``REPORT_VERSION``.

    Returns:
        JSON with sorted keys, compact and ASCII-only (non-ASCII characters, even a lone
        surrogate in a problem's text, travel as ``\\u`` escapes: the bytes are always valid),
        at most ``MAX_REPORT_BYTES``: lists are cut to their bounds, problems to
        ``MAX_PROBLEM_CHARS``, and should that still be too big, links and then problems are
        dropped from the end until it fits.

    Raises:
        ValueError: a value JSON cannot carry (NaN, an object) — a bug of the caller's.
    """
    health = report.get("health") or {}
    links = [{key: link.get(key) for key in _LINK_KEYS} for link in list(report.get("links") or [])[:MAX_REPORT_LINKS]]
    problems = [_cut(str(p), MAX_PROBLEM_CHARS) for p in list(health.get("problems") or [])[:MAX_HEALTH_PROBLEMS]]
    version = report.get("version")
    content = {
        "v": REPORT_VERSION, "role": report.get("role"),
        "version": _cut(version, MAX_VERSION_CHARS) if isinstance(version, str) else version,
        "started_at": report.get("started_at"), "events": report.get("events"), "origin": report.get("origin"),
        "links": links, "health": {"ok": health.get("ok"), "problems": problems},
        "forks": report.get("forks"), "watchers": report.get("watchers"),
    }
    encoded = _json(content)
    while len(encoded) > MAX_REPORT_BYTES and (links or problems):
        (links or problems).pop()
        encoded = _json(content)
    if len(encoded) > MAX_REPORT_BYTES:  # pragma: no cover - every other field is a few dozen bytes
        raise ValueError(f"a report of {len(encoded)} bytes without links or problems")
    return encoded


def decode_report(data: bytes) -> dict[str, Any]:
    """Another daemon's report, read leniently but safely (module docstring).

    Returns:
        Every key of version 1, always: ``v, role, version, started_at, events, origin, links,
        health, forks, watchers``; a missing or unusable value is None. ``links`` is a list of at
        most ``MAX_REPORT_LINKS`` maps ``{peer_id, state, direction, last_contact, we_lack,
        they_lack}`` (entries that are not maps are left out); ``health`` is ``{ok, problems}``
        with at most ``MAX_HEALTH_PROBLEMS`` problems as visible text of at most
        ``MAX_PROBLEM_CHARS`` characters (entries that are not strings are left out).

    Raises:
        ValueError: more than ``MAX_REPORT_BYTES``, not UTF-8, not JSON, nested deeper than the
            JSON parser follows, or a JSON value that is not an object.
    """
    if len(data) > MAX_REPORT_BYTES:
        raise ValueError(f"a report is at most {MAX_REPORT_BYTES} bytes")
    try:
        # NaN and Infinity are not JSON: read as null. A number of more digits than any count is
        # not converted at all (see MAX_INT_DIGITS).
        value = json.loads(data.decode("utf-8"), parse_constant=lambda _: None,
                           parse_int=lambda digits: int(digits) if len(digits) <= MAX_INT_DIGITS else None)
    except RecursionError:
        raise ValueError("a report nested deeper than the JSON parser follows") from None
    if not isinstance(value, dict):
        raise ValueError("a report must be a JSON object")
    role, health = value.get("role"), value.get("health")
    return {
        "v": _count(value.get("v")),
        "role": role if role in REPORT_ROLES else None,
        "version": _text(value.get("version"), MAX_VERSION_CHARS),
        "started_at": _stamp(value.get("started_at")),
        "events": _count(value.get("events")),
        "origin": _origin(value.get("origin")),
        "links": _links(value.get("links")),
        "health": _health(health) if isinstance(health, dict) else None,
        "forks": _count(value.get("forks")),
        "watchers": _count(value.get("watchers")),
    }


# -- helpers -------------------------------------------------------------------------------------


def _json(content: Any) -> bytes:
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def _cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def _count(value: Any) -> int | None:
    # ``type(...) is int``: JSON true is not a count.
    return value if type(value) is int and 0 <= value <= MAX_COUNT else None


def _text(value: Any, max_chars: int) -> str | None:
    # printable marks a cut with "…" after ``max_chars - 1`` characters: at most ``max_chars`` in all
    return printable(value, max_chars - 1) if isinstance(value, str) else None


def _stamp(value: Any) -> str | None:
    return value if isinstance(value, str) and _STAMP_RE.fullmatch(value) else None


def _origin(value: Any) -> str | None:
    return value if isinstance(value, str) and ORIGIN_ID_RE.fullmatch(value) else None


def _peer_id(value: Any) -> str | None:
    """A fingerprint written the one way ``ids.fingerprint`` writes it (8 groups of 7, upper case)."""
    if not isinstance(value, str) or len(value) != 63 or not fingerprint_is_valid(value):
        return None
    compact = value.replace("-", "").upper()
    return value if value == "-".join(compact[i : i + 7] for i in range(0, 56, 7)) else None


def _links(value: Any) -> list[dict[str, Any]] | None:
    if not isinstance(value, list):
        return None
    links = []
    for item in value[:MAX_REPORT_LINKS]:
        if not isinstance(item, dict):
            continue
        state, direction = item.get("state"), item.get("direction")
        links.append({
            "peer_id": _peer_id(item.get("peer_id")),
            "state": state if state in LINK_STATES else None,
            "direction": direction if direction in DIRECTIONS else None,
            "last_contact": _stamp(item.get("last_contact")),
            "we_lack": _count(item.get("we_lack")),
            "they_lack": _count(item.get("they_lack")),
        })
    return links


def _health(value: dict[str, Any]) -> dict[str, Any]:
    ok, problems = value.get("ok"), value.get("problems")
    return {
        "ok": ok if isinstance(ok, bool) else None,
        "problems": ([_text(p, MAX_PROBLEM_CHARS) for p in problems[:MAX_HEALTH_PROBLEMS] if isinstance(p, str)]
                     if isinstance(problems, list) else None),
    }
