"""palaced: the palace daemon.

Layers (imports flow downward only): palace_proto → store (sync apsw; aio adapter) → bus →
service (operations) → api (Unix socket) → app (nursery wiring) → __main__. Never imported by
palacectl.
"""
