"""palace's benchmarks: the measurements behind ``palacectl bench …`` (docs/benchmarks.md).

Owns: starting temporary daemons (``daemon``: mDNS off, loopback only), the client processes that
drive them (``clients``), the figures and their targets (``figures``), and one module per command:
``one_daemon`` (``palacectl bench``), ``cli``, ``leases``, ``mcp``, ``memory``, ``mesh``,
``replication``, ``ui``, ``usage``. ``benchmarks/vs_jetstream.py`` and ``floor.py`` reuse the
daemons and clients.

Not part of palacectl: ``palacectl.cli.bench`` imports a module of this package only inside the
command that runs it, so no other command pays for it. Imports ``palace_proto`` and
``palacectl.client`` (and ``palacectl.service.host`` for the console script's path), never
``palaced``: every daemon is ``python -m palaced``, a process of its own.
"""
