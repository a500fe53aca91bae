"""A small working palace for the dashboard's browser tests and its screenshots.

Three daemons on loopback, as a user would set them up (``init``, ``invite``, ``join``): ``mac``
(the founder, where Claude works), ``linux`` (the home box, where Codex works) and ``wall`` (a
read-only observer). Everything is written through ``palacectl`` on the daemon an agent lives on:
tasks with a dependency, a claim, a delivered patch, a failure, leases, a question for a person,
drawers, facts with their validity, diary entries, and a watcher that stays connected.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from typing import Any

from tests.fleet import Fleet, ctl_json, wait_converged, wait_until
from tests.helpers import PYTHON, Daemon, run_ctl

PATCH = """diff --git a/shop/orders.py b/shop/orders.py
index 3b18e51..a8c2f4d 100644
--- a/shop/orders.py
+++ b/shop/orders.py
@@ -1,9 +1,17 @@
 import sqlite3
+from dataclasses import dataclass

-def create_tables(conn):
-    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
+
+@dataclass(frozen=True)
+class Order:
+    id: int
+    customer_id: int
+    total_cents: int
+
+
+def create_tables(conn: sqlite3.Connection) -> None:
+    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
+    # Orders reference their customer; totals are integers (cents), never floats.
+    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers, "
+                 "total_cents INTEGER NOT NULL)")
"""


@dataclass
class DemoPalace:
    mac: Daemon
    linux: Daemon
    wall: Daemon
    tasks: dict[str, str] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def close(self) -> None:
        for proc in self.processes:
            proc.kill()
            proc.wait()


def _ctl(daemon: Daemon, *args: str, input: bytes | None = None) -> Any:
    result = run_ctl(daemon.home, *args, "--json", input=input)
    assert result.returncode == 0, result
    return result.json()


def _task(daemon: Daemon, goal: str, to: str, *extra: str) -> str:
    return _ctl(daemon, "task", "create", "--project", "shop", "--from-agent", "mac-claude", "--to-agent", to,
                "--branch", "main", "--base-commit", "3b18e51", "--goal", goal, "--done", "the tests pass",
                *extra)["task"]["correlation_id"]


def build_demo_palace(fleet: Fleet) -> DemoPalace:
    mac = fleet.found("mac")
    linux = fleet.join("linux")
    wall = fleet.join("wall", role="observer")
    demo = DemoPalace(mac, linux, wall)
    orders = _task(mac, "Add the orders table", "linux-codex", "--priority", "1")
    api = _task(mac, "Expose orders over the REST API", "*", "--blocked-by", orders)
    flaky = _task(mac, "Fix the flaky login test", "linux-codex", "--priority", "0")
    _task(mac, "Write the release notes for 2.4", "*", "--priority", "3")
    demo.tasks = {"orders": orders, "api": api, "flaky": flaky}
    wait_until(lambda: ctl_json(linux.home, "task", "list")["count"] >= 4, "the tasks on linux")
    _ctl(linux, "task", "claim", orders, "--agent", "linux-codex")
    _ctl(linux, "task", "claim", flaky, "--agent", "linux-codex")
    _ctl(linux, "patch", "submit", "--from-agent", "linux-codex", "--correlation-id", orders,
         "--body", "Orders table with integer totals; 14 tests pass.", input=PATCH.encode())
    request = ctl_json(linux.home, "task", "show", flaky)["request"]["id"]
    _ctl(linux, "ack", request, "--from-agent", "linux-codex", "--status", "failed",
         "--body", "The login test waits on a real SMTP server; it needs a fake first. Log attached upstream.")
    _ctl(linux, "lease", "acquire", "--agent", "linux-codex", "--project", "shop", "--ttl", "2h",
         "--reason", "orders migration", "shop/orders.py", "migrations/**")
    _ctl(mac, "lease", "acquire", "--agent", "mac-claude", "--project", "shop", "--ttl", "45m", "--shared",
         "--reason", "release notes", "docs/**")
    _ctl(linux, "append", "--type", "question", "--stream", "project/shop", "--room", "delegation",
         "--from-agent", "linux-codex", "--to-agent", "human:ana", "--correlation-id", orders,
         "--body", "May I drop the legacy orders_view? It blocks the migration and nothing reads it since 2.1.")
    for content in ("We keep orders in Postgres in production; SQLite only in tests.",
                    "Money is stored as integer cents everywhere: floats lost a cent in the 2.2 invoices.",
                    "The login test needs a fake SMTP server (see the flaky-test task)."):
        run_ctl(mac.home, "remember", "--wing", "wing_shop", "--room", "decisions", "--added-by", "mac-claude",
                input=content.encode())
    _ctl(mac, "kg", "add", "orders-service", "stores_data_in", "postgres-14", "--valid-from", "2025-03-01",
         "--added-by", "mac-claude")
    _ctl(mac, "kg", "invalidate", "orders-service", "stores_data_in", "postgres-14", "--ended", "2026-06-30",
         "--added-by", "mac-claude")
    _ctl(mac, "kg", "add", "orders-service", "stores_data_in", "postgres-16", "--valid-from", "2026-07-01",
         "--added-by", "mac-claude")
    _ctl(mac, "kg", "add", "orders-service", "owned_by", "team-checkout", "--added-by", "mac-claude")
    _ctl(mac, "diary", "write", "--agent", "mac-claude", "--topic", "shop",
         "--entry", "Split the orders work in two: the table first, the API after it. Codex takes the table.")
    _ctl(linux, "diary", "write", "--agent", "linux-codex", "--topic", "shop",
         "--entry", "Orders table done with integer cents; the flaky login test needs an SMTP fake.")
    # mac-claude keeps a watcher armed, as its rules say.
    demo.processes.append(subprocess.Popen(
        [PYTHON, "-m", "palacectl", "--home", str(mac.home), "watch", "--agent", "mac-claude", "--follow"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_until(lambda: ctl_json(mac.home, "who")["count"] == 1, "mac-claude's watcher")
    wait_converged(mac, linux, wall)
    return demo
