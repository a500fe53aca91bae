"""The store is the one seam for SQL (issue 27 §3): outside ``palaced/store/`` no module of the
daemon runs a statement, reaches a store connection, imports apsw or carries SQL text.

What a handler needs from the database is a named function of ``palaced/store/`` (a read bound to
the store, or one taking the write job's ``WriteContext``); statements written anywhere else
would let the schema's users spread through the daemon again. The check reads the source (AST):
it names file:line of each violation.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DAEMON = ROOT / "palaced"
STORE = DAEMON / "store"

# Files let past the seam for a while (none now: network.py's static_peers and peer_addresses
# writes went to palaced/store/peer_rows.py). An entry names its owner's move, and leaves with it.
EXEMPT: frozenset[str] = frozenset()

#: where an attribute named ``conn`` is not a database connection: the control API's protocol
#: connection (``Connection.conn``, a ``ServerConnection``), reached as ``self.conn`` there only
PROTOCOL_CONN_FILES: frozenset[str] = frozenset({"palaced/api.py"})
#: the store's own connections and the means to reach them (its ``Db``: ``db.writer``,
#: ``db.reader()``, ``db.checkpointer()``; a job's ``conn``; the old ``_conn``, ``_reader()``):
#: never used from outside the store
STORE_CONNECTION_ATTRS: frozenset[str] = frozenset({"conn", "_conn", "_reader", "checkpointer", "db", "writer",
                                                    "reader"})
#: statements run on a connection or a cursor
EXECUTE_ATTRS: frozenset[str] = frozenset({"execute", "executemany"})
# Upper case only, as statements are written here: prose says "select", "update" and "create".
SQL_TEXT = re.compile(r"\b(?:SELECT |INSERT |UPDATE |DELETE FROM|CREATE )")


def seam_violations(source: str, path: str) -> list[str]:
    """Each way ``source`` (the file at ``path``, relative to the repository) goes past the
    store's seam, as ``path:line: what``."""
    found: list[str] = []

    def note(node: ast.AST, what: str) -> None:
        found.append(f"{path}:{getattr(node, 'lineno', 0)}: {what}")

    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in EXECUTE_ATTRS:
            note(node, f".{node.func.attr}(...) runs a statement outside palaced/store")
        elif isinstance(node, ast.Attribute) and node.attr in STORE_CONNECTION_ATTRS:
            if not (path in PROTOCOL_CONN_FILES and node.attr == "conn" and isinstance(node.value, ast.Name)
                    and node.value.id == "self"):
                note(node, f".{node.attr} reaches a store connection outside palaced/store")
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "apsw" for a in node.names):
            note(node, "imports apsw outside palaced/store")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "apsw":
            note(node, "imports from apsw outside palaced/store")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_TEXT.search(node.value):
            note(node, f"SQL text outside palaced/store: {node.value[:60]!r}")
    return sorted(found, key=lambda line: int(line.split(":")[1]))


def _daemon_files() -> list[Path]:
    return sorted(p for p in DAEMON.rglob("*.py") if STORE not in p.parents)


def test_no_sql_outside_the_store():
    """Guards the seam: a statement, a store connection, apsw or SQL text outside palaced/store."""
    violations = []
    for file in _daemon_files():
        rel = file.relative_to(ROOT).as_posix()
        if rel not in EXEMPT:
            violations += seam_violations(file.read_text(encoding="utf-8"), rel)
    assert not violations, "SQL outside palaced/store (move it into a named store function):\n" + "\n".join(violations)


def test_the_exemptions_are_still_needed():
    """An exempt file that no longer crosses the seam leaves the list (it must not stay forgotten)."""
    for rel in sorted(EXEMPT):
        file = ROOT / rel
        assert file.exists(), f"{rel} is exempt but does not exist"
        assert seam_violations(file.read_text(encoding="utf-8"), rel), f"{rel} keeps to the seam now: drop its exemption"


def test_the_walk_sees_the_daemon_but_not_the_store():
    files = {p.relative_to(ROOT).as_posix() for p in _daemon_files()}
    assert {"palaced/app.py", "palaced/api.py", "palaced/handlers/log.py"} <= files
    assert not any(f.startswith("palaced/store/") for f in files)


# -- the checker itself: each kind of violation is found, and named by file:line -------------------


def test_a_statement_run_on_a_write_context_is_found():
    source = ("def job(w):\n"
              "    return w.conn.execute('SELECT max_seq FROM origins WHERE origin=?', ('o',)).fetchone()\n")
    found = seam_violations(source, "palaced/handlers/x.py")
    assert "palaced/handlers/x.py:2: .execute(...) runs a statement outside palaced/store" in found
    assert "palaced/handlers/x.py:2: .conn reaches a store connection outside palaced/store" in found
    assert any(f.startswith("palaced/handlers/x.py:2: SQL text") for f in found)


def test_a_statement_in_a_memory_read_lambda_is_found():
    source = "rows = store.memory_read(\n    lambda conn: conn.executemany(q, params))\n"
    assert seam_violations(source, "palaced/features/memory_vectors.py") == [
        "palaced/features/memory_vectors.py:2: .executemany(...) runs a statement outside palaced/store"]


def test_a_connection_passed_on_is_found():
    source = "ctx.store.write(lambda w: settle(w.conn, finished))\nx = store._conn\ny = store._reader()\n"
    assert seam_violations(source, "palaced/handlers/tasks.py") == [
        "palaced/handlers/tasks.py:1: .conn reaches a store connection outside palaced/store",
        "palaced/handlers/tasks.py:2: ._conn reaches a store connection outside palaced/store",
        "palaced/handlers/tasks.py:3: ._reader reaches a store connection outside palaced/store",
    ]


def test_apsw_imports_are_found():
    source = "import apsw\nfrom apsw import Connection\nimport apsw.ext\n"
    assert [f.split(": ", 1)[0] for f in seam_violations(source, "palaced/app.py")] == [
        "palaced/app.py:1", "palaced/app.py:2", "palaced/app.py:3"]


def test_sql_text_is_found_in_any_string_and_in_f_strings():
    source = ('A = "INSERT INTO invites VALUES (?)"\n'
              'B = f"UPDATE invites SET used_by={x}"\n'
              'C = "DELETE FROM static_peers"\n'
              'D = "CREATE TABLE t (x)"\n'
              'E = f"SELECT {cols} FROM events"\n')
    found = seam_violations(source, "palaced/fleet.py")
    assert [f.split(": ", 1)[0] for f in found] == [f"palaced/fleet.py:{n}" for n in range(1, 6)]


def test_the_api_protocol_connection_and_prose_pass():
    api = "class Connection:\n    def reply(self):\n        return self.conn.reply(1, {})\n"
    assert seam_violations(api, "palaced/api.py") == []
    # the same attribute on anything else, or in another file, is a store connection
    assert seam_violations("conn = ctx.conn\n", "palaced/api.py") != []
    assert seam_violations(api, "palaced/handlers/x.py") != []
    prose = 'LOGGER.info("select an agent, then update it; delete from the list to create room")\n'
    assert seam_violations(prose, "palaced/handlers/x.py") == []
