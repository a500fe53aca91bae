"""The palacectl command line: thin typer commands over the client (parse → call → render).

Owns nothing itself; it names the entry point. ``main`` (the console script and ``python -m
palacectl``) and ``app`` (the typer application) come from ``cli.root``, which assembles the
command modules:

* ``common``: the home in use, ``call_daemon``, shared options, reading files and stdin;
* ``log``: append, list, wait, watch, ack, redact;
* ``palace``: status, init, invite, join, revoke, doctor, digest, who, peers;
* ``artifacts``: the artifact and patch groups; ``tasks``: the task group;
* ``memory``: remember, search, agents, tunnels, and the kg, diary and memory groups;
* ``backup``: backup, restore; ``export``: export, import;
* ``harness``: rules, mcp; ``permissions``: approve-hook (hidden: a launched run's permission hook);
* ``bench``: the bench group; ``service``: the service group;
* ``rooms``: the room group (agent rooms: open, say, read, close, list, show);
* ``ui``: the dashboard (``palacectl.ui``).

Business rules live in the daemon; the commands read files and stdin byte-exactly, call the API
and render. Heavy imports (apsw, the benchmark, MCP, cryptography, the service helpers) are
deferred to the commands that need them, so ``palacectl list`` starts fast
(tests/test_layering.py guards it).
"""

from .root import app, main

__all__ = ["app", "main"]
