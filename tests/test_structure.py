"""The shape of the code, counted with ``ast`` so that it stays as a restructuring left it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the sans-IO planners a link is made of: the link machine composes them, the shell holds only it
LINK_PARTS = frozenset({"PeerSession", "ServePlan", "PullPlan", "LinkOutbox", "LinkMachine"})


def _class(path: Path, name: str) -> ast.ClassDef:
    (node,) = [n for n in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(n, ast.ClassDef)
               and n.name == name]
    return node


def test_the_peer_link_is_a_thin_shell_over_one_protocol_machine():
    """Guards issue 44 §2: ``PeerLink`` had grown to 719 lines and 58 methods, held the session and
    three planners and decided which to ask and when. It lives in ``palaced/peers/``, holds one
    ``LinkMachine`` (palace_proto.link, where every rule of what to send next is tested without
    trio), and stays within 300 lines and 25 methods."""
    assert not (ROOT / "palaced" / "replication.py").exists()
    path = ROOT / "palaced" / "peers" / "link.py"
    link = _class(path, "PeerLink")
    lines = link.end_lineno - link.lineno + 1  # type: ignore[operator]
    methods = [n.name for n in link.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert lines <= 300, f"PeerLink is {lines} lines"
    assert len(methods) <= 25, f"PeerLink has {len(methods)} methods: {methods}"
    held = [(target.attr, node.value.func.id) for node in ast.walk(link) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
            and node.value.func.id in LINK_PARTS for target in node.targets if isinstance(target, ast.Attribute)]
    assert held == [("machine", "LinkMachine")], held
    imported = {alias.name for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert imported & LINK_PARTS == {"LinkMachine"}, "the shell drives the machine, never a part of it"
