"""One connection of a long-running follower of the log — the integrator, the reviewer — to its
daemon: subscribe, look at once, then look again whenever a push carries an event that may change
what there is to do, or every ``LOOK_EVERY_S`` without one (a lease freed by expiry, an artifact
that arrived after its event). Its caller reconnects every ``RECONNECT_INTERVAL_S`` while palaced
is away (``DaemonUnreachable``) and decides what a look does.

Synchronous (the client's): it runs on the follower's main thread; never trio, never palaced.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from ...client import Client, IdleTimeout

__all__ = ["LOOK_EVERY_S", "RECONNECT_INTERVAL_S", "follow"]

# Why 5 s: how often a follower looks without a push — and how long a stop waits for it.
LOOK_EVERY_S: Final = 5.0
RECONNECT_INTERVAL_S: Final = 0.5


def follow(home: Path, client_name: str, *, greeting: str, say: Callable[[str], None], look: Callable[[], None],
           wakes: Callable[[Mapping[str, Any]], bool], stopping: threading.Event, **subscribe: Any) -> None:
    """One session, until ``stopping`` is set: a subscription of ``subscribe`` (from the tip),
    ``greeting`` said once it is up, ``look`` at once, then after each push with an event ``wakes``
    picks and after each ``LOOK_EVERY_S`` without a push.

    Raises:
        DaemonUnreachable: palaced went away (the caller waits and follows again).
    """
    with Client(home, client_name=client_name) as client:
        sub = client.subscribe(start="tip", **subscribe)
        say(greeting)
        look()
        while not stopping.is_set():
            try:
                push = sub.next_push(timeout=LOOK_EVERY_S)
            except IdleTimeout:
                look()
                continue
            if push["push"] == "batch" and any(wakes(e) for e in push.get("events") or []):
                look()
