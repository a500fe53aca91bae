"""The palacectl command line: thin typer commands over the client (parse → call → render).

Owns nothing itself; it names the entry point. ``main`` (the console script and ``python -m
palacectl``) and ``app`` (the typer application, built at its first use) come from ``cli.root``,
which assembles the core's command modules and every feature's (``palacectl.features``: each
feature's ``cli`` module, in its own package):

* ``common``: the home in use, ``call_daemon``, shared options, reading files and stdin;
* ``log``: append, list, wait, watch, ack, redact; ``status``: status, digest;
* ``session``: the inbox and session groups; ``harness``: rules, mcp;
* ``bench``: the bench group; ``notify``: the notify group.

Business rules live in the daemon; the commands read files and stdin byte-exactly, call the API
and render. Heavy imports (apsw, the benchmark, MCP, cryptography, the service helpers) are
deferred to the commands that need them, so ``palacectl list`` starts fast
(tests/test_layering.py guards it).
"""

from typing import Any

from .root import application, main

__all__ = ["app", "main"]


def __getattr__(name: str) -> Any:
    if name == "app":  # built at its first use (``root.application``)
        return application()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
