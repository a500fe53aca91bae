"""Test driver: runs ``run_discovery`` instances in one process and reports what each sees.

Only ever run it inside a network namespace (``unshare -n`` or ``ip netns exec``): it multicasts.

    python -m tests.daemon.mdns_probe '[{"peer": "A", "palace": "P", "version": 3, "name": "a"}, ...]'

Each instance listens on a TCP port of its own (advertised through mDNS) that answers with its
peer id, and dials every address it is told about, so a test can check the address is usable.
stdout gets one JSON object a line, ``{"event": ..., "by": <peer>, "t": <s since start>, ...}``:
``started`` (with ``port``), ``seen`` (the Sighting's fields), ``reached`` (``peer_id``,
``address``, ``answer``: what the listener there said; or ``unreachable``), ``gone`` (``peer_id``), ``stopped``.
stdin takes ``stop <peer>`` lines; EOF stops every instance and ends the process.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from functools import partial
from typing import Any

import trio

from palaced.discovery import Sighting, run_discovery

START = time.monotonic()


def emit(event: str, by: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "by": by, "t": round(time.monotonic() - START, 3), **fields}), flush=True)


async def dial(by: str, sighting: Sighting) -> None:
    """Connect to the sighting's first address and report what the listener there says."""
    address = sighting.addresses[0]
    host, _, port = address.rpartition(":")
    try:
        with trio.fail_after(5):
            async with await trio.open_tcp_stream(host.strip("[]"), int(port)) as stream:
                answer = await stream.receive_some(100)
    except (OSError, trio.TooSlowError) as exc:
        emit("unreachable", by, peer_id=sighting.peer_id, address=address, error=repr(exc))
    else:
        emit("reached", by, peer_id=sighting.peer_id, address=address, answer=answer.decode())


async def run_one(spec: dict[str, Any], scopes: dict[str, trio.CancelScope]) -> None:
    by = spec["peer"]

    async def answer(stream: trio.SocketStream) -> None:
        async with stream:
            await stream.send_all(by.encode())

    def on_seen(sighting: Sighting) -> None:
        emit("seen", by, **dataclasses.asdict(sighting))
        nursery.start_soon(dial, by, sighting)

    try:
        with trio.CancelScope() as scopes[by]:
            async with trio.open_nursery() as nursery:
                listeners = await nursery.start(trio.serve_tcp, answer, 0)
                port = listeners[0].socket.getsockname()[1]
                await nursery.start(partial(
                    run_discovery, palace_id=spec["palace"], peer_id=by, name=spec.get("name", by), port=port,
                    version=spec.get("version", 1), on_seen=on_seen,
                    on_gone=lambda peer_id: emit("gone", by, peer_id=peer_id)))
                emit("started", by, port=port)
    finally:
        emit("stopped", by)


async def main(specs: list[dict[str, Any]]) -> None:
    async with trio.open_nursery() as nursery:
        scopes: dict[str, trio.CancelScope] = {}
        for spec in specs:  # concurrently: each registration probes for ~1.6 s
            nursery.start_soon(run_one, spec, scopes)
        while line := await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True):
            command, _, peer = line.strip().partition(" ")
            if command == "stop" and peer in scopes:
                scopes[peer].cancel(reason="the test said stop")
        nursery.cancel_scope.cancel(reason="stdin closed")


if __name__ == "__main__":
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                        format="%(relativeCreated)7.0f %(threadName)s %(name)s %(levelname)s %(message)s")
    trio.run(main, json.loads(sys.argv[1]))
