"""palaced: the palace daemon.

Layers (imports flow downward only): palace_proto → store (sync apsw; aio adapter) → bus →
handlers (the local API's operations, one module per capability) → api (Unix socket or loopback TCP) → app
(nursery wiring) → __main__. Never imported by palacectl.
"""
