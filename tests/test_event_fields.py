"""One event, one table (issue 44 §3): the event's fields are written out once, in
``palace_proto.event_fields``, and every other form of an event is derived from it.

Counted here, so that it stays true: the statements of the product's packages that name eight or
more of the event's fields (a tuple, a dict, a call, a signature, a class body listing them), and
the files that name ``base_commit`` (one field, followed through every layer).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from palace_proto import event_fields
from palace_proto.envelope import SignedEvent
from palace_proto.event_content import EventContent
from palace_proto.event_fields import COLUMNS, EVENT_FIELDS, PUBLIC_KEYS, SIGNED_FIELDS
from palace_proto.validation import AppendRequest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("proto", "palaced", "palacectl")
#: every name an event's field goes by: attributes, public keys, columns, append arguments
FIELD_NAMES = frozenset({f.name for f in EVENT_FIELDS} | {f.public for f in EVENT_FIELDS if f.public}
                        | {f.column for f in EVENT_FIELDS} | {f.option for f in EVENT_FIELDS if f.option})
#: the statements allowed to list the fields: the table, and the two typed shapes it checks
ALLOWED = {("proto/event_fields.py", "EVENT_FIELDS"), ("proto/event_content.py", "EventContent"),
           ("proto/event_fields.py", "_Shown")}
MAX_LISTING_STATEMENTS = 3
MAX_BASE_COMMIT_FILES = 5


def _named_fields(node: ast.AST) -> set[str]:
    """The event fields ``node`` names, as a variable, attribute, string, keyword or parameter."""
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            names.add(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            names.add(sub.value)
        elif isinstance(sub, ast.keyword | ast.arg) and sub.arg:
            names.add(sub.arg)
    return names & FIELD_NAMES


_COMPOUND = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor, ast.While,
             ast.With, ast.AsyncWith, ast.Try, ast.Match)


def _listings(path: Path) -> list[tuple[str, int, str, int]]:
    """(file, line, what, how many fields) of each statement of ``path`` naming eight or more fields:
    a simple statement, a function's parameters, or a class's annotated attributes."""
    rel = str(path.relative_to(ROOT))
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            named = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} & FIELD_NAMES
            what = node.name
        elif isinstance(node, ast.ClassDef):
            named = {s.target.id for s in node.body
                     if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)} & FIELD_NAMES
            what = node.name
        elif isinstance(node, ast.stmt) and not isinstance(node, _COMPOUND):
            named = _named_fields(node)
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            what = target.id if isinstance(target, ast.Name) else type(node).__name__
        else:
            continue
        if len(named) >= 8:
            found.append((rel, node.lineno, what, len(named)))
    return found


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def test_the_counter_counts():
    """The counter finds a listing and passes over a short one (so the count below can fail)."""
    listed = ast.parse('event = {"type": t, "stream": s, "room": r, "topic": None, "from_agent": a, '
                       '"to_agent": b, "branch": c, "base_commit": d}\nshort = ("type", "room")\n')
    counts = [len(_named_fields(stmt)) for stmt in listed.body]
    assert counts == [8, 2]


def test_at_most_three_statements_list_the_event_fields():
    listings = [hit for path in _sources() for hit in _listings(path)]
    unexpected = [hit for hit in listings if hit[:3:2] not in ALLOWED]
    assert not unexpected, ("these statements write out eight or more of the event's fields; derive them from "
                            f"palace_proto.event_fields instead: {unexpected}")
    assert len(listings) <= MAX_LISTING_STATEMENTS


def test_base_commit_is_named_in_few_files():
    files = [str(p.relative_to(ROOT)) for p in _sources() if "base_commit" in p.read_text(encoding="utf-8")]
    assert len(files) <= MAX_BASE_COMMIT_FILES, files


def test_the_forms_of_an_event_follow_the_table():
    """Every form is the table's: the signed event's attributes, the content's, the public keys, the
    columns and the signed order (a field added to the table alone fails at import or here)."""
    attributes = {f.name for f in EVENT_FIELDS if f.role not in ("derived", "local")}
    assert {f.name for f in dataclasses.fields(SignedEvent)} == attributes
    assert {f.name for f in dataclasses.fields(AppendRequest)} == {f.name for f in dataclasses.fields(EventContent)}
    assert set(PUBLIC_KEYS) | {"body_sha256"} >= set(COLUMNS) - {"prev_hash", "event_hash", "signature"}
    assert SIGNED_FIELDS[:4] == ("origin", "origin_seq", "prev_hash", "created_at")
    assert event_fields.author_field("metadata").name == "metadata_json"
    assert event_fields.author_field("artifact_ids").wire == "ids"
    assert event_fields.author_field("nonsense") is None


@pytest.mark.parametrize("field", [f for f in EVENT_FIELDS if f.role == "author"], ids=lambda f: f.name)
def test_each_author_field_reaches_the_signed_event(field):
    """An append's argument for each author field lands in the signed event and its public view."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from palace_proto.envelope import GENESIS_HASH, seal_request
    from palace_proto.validation import Limits

    sample = {"text": "x-1", "ids": ["art_" + "0" * 32], "json": {"k": 1}, "body": "words"}[field.wire]
    if field.name == "status":
        sample = "open"
    args = {"type": "note", "stream": "s", "room": "r", "from_agent": "a", field.option: sample}
    request = AppendRequest.from_wire(args, Limits())
    event = seal_request(Ed25519PrivateKey.generate(), request, origin="ori_" + "a" * 26, origin_seq=1,
                         prev_hash=GENESIS_HASH, created_at="2026-12-06T00:00:00.000000Z")
    assert event.to_public(1)[field.public] == sample


def test_the_signed_order_is_the_specs():
    """PROTOCOL.md's canonical encoding lists the fields in the table's signed order."""
    import re

    spec = (ROOT / "proto" / "PROTOCOL.md").read_text(encoding="utf-8")
    block = spec[spec.index("[1, origin, origin_seq"):]
    listed = re.sub(r"\([^)]*\)", "", block[1:block.index("]\n")]).replace("\n", " ")
    names = [name.strip() for name in listed.split(",")][1:]
    assert tuple(names) == SIGNED_FIELDS
