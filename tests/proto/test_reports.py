"""palace_proto.reports: a daemon report as its daemon writes it (bounded, sorted, ASCII, at most
16 KiB) and as every other daemon reads it — leniently but safely, because a hostile member may
have signed anything: unknown keys dropped, strings checked or made visible and cut, lists bounded,
wrong types read as None, and no exception for any JSON object."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palace_proto.ids import fingerprint
from palace_proto.reports import (
    LINK_STATES,
    MAX_HEALTH_PROBLEMS,
    MAX_PROBLEM_CHARS,
    MAX_REPORT_BYTES,
    MAX_REPORT_LINKS,
    REPORT_VERSION,
    decode_report,
    encode_report,
)

PEER_A, PEER_B = fingerprint(b"a" * 32), fingerprint(b"b" * 32)
ORIGIN = "ori2_" + "a" * 26
KEYS = {"v", "role", "version", "started_at", "events", "origin", "links", "health", "forks", "watchers"}
LINK_KEYS = {"peer_id", "state", "direction", "last_contact", "we_lack", "they_lack"}


def link(**fields):
    return {"peer_id": PEER_B, "state": "live", "direction": "out", "last_contact": "2026-11-30T01:02:03.000004Z",
            "we_lack": 0, "they_lack": 3, **fields}


def report(**fields):
    return {"role": "member", "version": "0.1.0", "started_at": "2026-11-30T01:00:00Z", "events": 1200,
            "origin": ORIGIN, "links": [link(), link(peer_id=PEER_A, state="disconnected", direction=None,
                                                     we_lack=None, they_lack=None)],
            "health": {"ok": False, "problems": ["1 fork(s) detected: see `palacectl peers`"]},
            "forks": 1, "watchers": 2, **fields}


def decoded(**fields):
    """``fields`` changed in a report that is otherwise good, read back."""
    return decode_report(json.dumps({**report(), **fields}).encode())


# -- our own reports ------------------------------------------------------------------------------


def test_a_report_round_trips_through_its_encoding():
    assert decode_report(encode_report(report())) == {"v": REPORT_VERSION, **report()}


def test_the_encoding_is_sorted_compact_ascii_and_leaves_unknown_keys_out():
    encoded = encode_report({**report(), "secret": "not for peers"})
    assert encoded == encode_report(dict(reversed(list(report().items()))))  # the same bytes, whatever the order
    assert encoded.isascii() and b" " not in encoded.replace(b"1 fork(s) detected: see `palacectl peers`", b"")
    assert list(json.loads(encoded)) == sorted(KEYS) and b"secret" not in encoded


def test_any_text_encodes_even_a_lone_surrogate():
    """The bytes are always valid JSON: a problem's text from anywhere (a peer's name in a log
    line, a path) travels as ``\\u`` escapes."""
    encoded = encode_report(report(health={"ok": False, "problems": ["Ünïcode ☃ and \ud800 alone"]}))
    assert encoded.isascii()
    assert decode_report(encoded)["health"]["problems"] == ["Ünïcode ☃ and \\ud800 alone"]


def test_lists_and_problems_are_cut_to_their_bounds():
    many = report(links=[link(we_lack=n) for n in range(MAX_REPORT_LINKS + 10)],
                  health={"ok": False, "problems": ["x" * 500] + [f"p{n}" for n in range(20)]})
    back = decode_report(encode_report(many))
    assert [link["we_lack"] for link in back["links"]] == list(range(MAX_REPORT_LINKS))
    problems = back["health"]["problems"]
    assert len(problems) == MAX_HEALTH_PROBLEMS and len(problems[0]) == MAX_PROBLEM_CHARS
    assert problems[0].endswith("…") and problems[1:] == [f"p{n}" for n in range(MAX_HEALTH_PROBLEMS - 1)]


def test_a_report_too_big_for_the_bound_loses_links_from_the_end_until_it_fits():
    big = report(links=[link(peer_id=f"{n:03d}" + "x" * 400) for n in range(MAX_REPORT_LINKS)])
    encoded = encode_report(big)
    assert len(encoded) <= MAX_REPORT_BYTES < len(json.dumps(big))
    kept = json.loads(encoded)["links"]
    assert 0 < len(kept) < MAX_REPORT_LINKS and [link["peer_id"][:3] for link in kept] == [
        f"{n:03d}" for n in range(len(kept))]
    assert json.loads(encoded)["health"]["problems"]  # problems go only once no link is left


# -- another daemon's reports ---------------------------------------------------------------------


def test_unknown_keys_are_dropped_and_missing_ones_read_as_none():
    assert decode_report(b"{}") == dict.fromkeys(KEYS)
    back = decoded(extra={"a": 1}, links=[{**link(), "extra": "x"}], health={"ok": True, "problems": [], "x": 1})
    assert set(back) == KEYS and set(back["links"][0]) == LINK_KEYS and set(back["health"]) == {"ok", "problems"}
    assert decode_report(b'{"links": [{}], "health": {}}')["links"] == [dict.fromkeys(LINK_KEYS)]


@pytest.mark.parametrize(("field", "value"), [
    ("v", "1"), ("v", -1), ("role", "admin"), ("role", ["member"]), ("version", 1), ("started_at", 1700000000),
    ("events", True), ("events", -5), ("events", 1.5), ("events", 2**62 + 1), ("events", "12"), ("origin", 3),
    ("links", {"peer_id": PEER_B}), ("links", "live"), ("health", ["ok"]), ("forks", None), ("watchers", {}),
])
def test_a_field_of_the_wrong_type_reads_as_none(field, value):
    back = decoded(**{field: value})
    assert back[field] is None
    assert {k: v for k, v in back.items() if k != field} == {k: v for k, v in decoded().items() if k != field}


@pytest.mark.parametrize(("field", "value"), [
    ("peer_id", PEER_B.lower()), ("peer_id", PEER_B.replace("-", "")), ("peer_id", PEER_B[:-1] + "A"),
    ("peer_id", PEER_B + "\n"), ("peer_id", 7), ("state", "on fire"), ("state", "LIVE"), ("direction", "sideways"),
    ("direction", True), ("last_contact", "yesterday"), ("last_contact", "2026-11-30T01:02:03Z\n"),
    ("last_contact", "٢٠٢٦-11-30T01:02:03Z"), ("we_lack", -1), ("they_lack", "3"),
])
def test_a_links_field_that_breaks_its_format_reads_as_none(field, value):
    (back,) = decoded(links=[link(**{field: value})])["links"]
    assert back[field] is None and back == {**link(), field: None}


def test_links_and_problems_that_are_not_maps_or_strings_are_left_out():
    back = decoded(links=[1, "x", None, link(), []], health={"ok": "yes", "problems": [1, None, "real", {"a": 1}]})
    assert back["links"] == [link()]
    assert back["health"] == {"ok": None, "problems": ["real"]}
    assert decoded(health={"ok": True, "problems": "none"})["health"] == {"ok": True, "problems": None}


def test_free_text_is_made_visible_and_cut():
    """Guards the dashboard and terminals: no escape sequences, no line breaks, no invisible
    characters, bounded length, whatever a peer's daemon signed."""
    hostile = "\x1b[31mred\x1b[0m\nforged line\u202e\u200b" + "x" * 1000
    back = decoded(version=hostile, health={"ok": False, "problems": [hostile] * 3})
    for text in (back["version"], *back["health"]["problems"]):
        assert text.isprintable() and "\x1b" not in text and "\n" not in text and text.endswith("…")
    assert len(back["version"]) == 64 and back["version"].startswith("\\x1b[31mred")
    assert all(len(p) == MAX_PROBLEM_CHARS for p in back["health"]["problems"])
    assert decoded(origin=ORIGIN + "\n")["origin"] is None and decoded(origin="ori_x")["origin"] is None


def test_huge_lists_are_bounded_as_they_are_read():
    hostile = json.dumps({"links": [{}] * 3000, "health": {"ok": False, "problems": ["p"] * 1500}},
                         separators=(",", ":")).encode()
    assert len(hostile) <= MAX_REPORT_BYTES
    back = decode_report(hostile)
    assert len(back["links"]) == MAX_REPORT_LINKS and len(back["health"]["problems"]) == MAX_HEALTH_PROBLEMS


def test_numbers_that_are_not_counts_read_as_none_and_never_raise():
    assert decode_report(b'{"events": ' + b"9" * 5000 + b"}")["events"] is None  # Python refuses >4300 digits
    assert decode_report(b'{"events": 1e999, "forks": NaN, "watchers": -Infinity}')["events"] is None
    assert decode_report(b'{"events": 123456789012345678901}')["events"] is None
    assert decode_report(b'{"events": 4611686018427387904}')["events"] == 2**62


def test_nesting_is_dropped_or_refused_never_a_recursion_error():
    deep = "[" * 200 + "]" * 200
    back = decode_report(('{"links": ' + deep + ', "health": ' + deep + ', "x": ' + deep + "}").encode())
    assert back["links"] == [] and back["health"] is None  # a list holding a list: no link in it
    nested_link = decode_report(('{"links": [{"peer_id": ' + deep + "}]}").encode())
    assert nested_link["links"] == [dict.fromkeys(LINK_KEYS)]
    with pytest.raises(ValueError, match="nested"):
        decode_report(b'{"x": ' + b"[" * 8000 + b"]" * 8000 + b"}")


@pytest.mark.parametrize("data", [
    b"", b"not json", b"[1, 2]", b'"a report"', b"null", b"42", b"\xff\xfe{}", b"{" * 10, b'{"a": 1}garbage',
    b"{}" + b" " * MAX_REPORT_BYTES,
])
def test_bytes_that_are_not_a_json_object_are_a_value_error(data):
    with pytest.raises(ValueError):
        decode_report(data)


# -- properties -----------------------------------------------------------------------------------

_json_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                          st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30),
                          st.sampled_from([PEER_A, ORIGIN, "live", "in", "member", "2026-11-30T01:02:03Z"]))
_json = st.recursive(_json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=6),
    st.dictionaries(st.sampled_from(sorted(KEYS | LINK_KEYS | {"ok", "problems", "x"})), inner, max_size=8)),
    max_leaves=40)


def _well_typed(back):
    assert set(back) == KEYS
    for key in ("v", "events", "forks", "watchers"):
        assert back[key] is None or (type(back[key]) is int and back[key] >= 0)
    assert back["role"] in (None, "member", "observer")
    assert back["version"] is None or (back["version"].isprintable() and len(back["version"]) <= 64)
    assert back["links"] is None or len(back["links"]) <= MAX_REPORT_LINKS
    for item in back["links"] or ():
        assert set(item) == LINK_KEYS and item["state"] in (None, *LINK_STATES)
        assert item["direction"] in (None, "in", "out")
    if back["health"] is not None:
        assert back["health"]["ok"] in (None, True, False)
        problems = back["health"]["problems"]
        assert problems is None or (len(problems) <= MAX_HEALTH_PROBLEMS and all(
            p.isprintable() and len(p) <= MAX_PROBLEM_CHARS for p in problems))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(KEYS | {"x", "y"})), _json, max_size=12))
def test_any_json_object_reads_as_a_well_typed_report(value):
    _well_typed(decode_report(json.dumps(value).encode()))


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200) | _json.map(lambda v: json.dumps(v).encode()))
def test_any_bytes_read_as_a_report_or_a_value_error(data):
    try:
        back = decode_report(data)
    except ValueError:
        return
    _well_typed(back)


_links = st.lists(st.builds(
    link, peer_id=st.sampled_from([PEER_A, PEER_B]), state=st.sampled_from(LINK_STATES),
    direction=st.sampled_from(["in", "out", None]), we_lack=st.none() | st.integers(0, 2**62),
    they_lack=st.none() | st.integers(0, 2**62)), max_size=MAX_REPORT_LINKS)


@settings(max_examples=200, deadline=None)
# Spaces: " " only (a no-break or em space is shown escaped, as str.isprintable would have it).
@given(_links, st.lists(st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "P"],
                                                        include_characters=" "),
                                max_size=MAX_PROBLEM_CHARS), max_size=MAX_HEALTH_PROBLEMS),
       st.sampled_from(["member", "observer"]), st.integers(0, 2**62))
def test_every_report_within_its_bounds_round_trips(links, problems, role, events):
    mine = report(links=links, role=role, events=events, health={"ok": not problems, "problems": problems})
    encoded = encode_report(mine)
    assert len(encoded) <= MAX_REPORT_BYTES
    assert decode_report(encoded) == {"v": REPORT_VERSION, **mine}
