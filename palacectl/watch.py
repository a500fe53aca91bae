"""``palacectl watch``: the MemPalace watch contract on top of the daemon's pushed subscription.

Owns: the watch state file (the watcher's own cursor), where a watch starts, when the cursor is
checkpointed, and the exit codes. Rules (reference §3.3–3.4, made stricter where it lost events):

* state file absent → start at the live tip and say so; empty → replay from the beginning;
  corrupt or unreadable → replay with a warning (never skip); a stored cursor the daemon does not
  know → warn and replay.
* an explicit bad ``--since-event-id`` → exit 1, the state file untouched.
* the starting position is checkpointed before waiting; afterwards the cursor is written only
  after the output was written, so a broken pipe replays and never skips.
* exit 0 on a hit, 2 on idle timeout with no hit, 130 on Ctrl-C.
* palaced restarts: reconnect and resume from the cursor. palaced sends what is not a message
  (``DaemonProtocolError``): the watch ends with that error (exit 3), its cursor where the last
  output left it, so a new watch replays; reconnecting would hide a daemon's fault behind
  "palaced went away".

No polling: the client blocks in ``recv`` until the daemon pushes a batch or the idle deadline.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from palace_proto.errors import ApiError

from .client import Client, DaemonProtocolError, DaemonUnreachable, IdleTimeout, Subscription
from .files import write_atomically
from .output import (
    EXIT_FAILED,
    EXIT_IDLE,
    EXIT_OK,
    CommandFailed,
    emit_json,
    events_block,
    note,
    utc_now,
    warn,
    write_stdout,
)

__all__ = ["WatchOptions", "default_state_file", "read_state", "run_watch", "sanitise_agent", "write_state"]

# Why 0.5 s: how often a watch retries while palaced restarts (an upgrade, a crash): fast enough
# to feel continuous, slow enough to cost nothing.
RECONNECT_INTERVAL_S: Final = 0.5
# Where `watch --announce` says what it watches: a status to everyone, which fleet watchers sleep
# through (cli/log.py: a status wakes only the watches that ask for it).
_ANNOUNCEMENT: Final = {"type": "status", "stream": "presence", "room": "watch", "to_agent": "*"}


def sanitise_agent(agent: str) -> str:
    """File-name-safe agent id: double '_' first, then ':', '/', '\\\\' become '_' (MemPalace rule)."""
    if not agent.strip():
        raise CommandFailed("agent identity is required to name a watch state file")
    return agent.strip().replace("_", "__").replace(":", "_").replace("/", "_").replace("\\", "_")


def default_state_file(home: Path, agent: str) -> Path:
    return home / "watch" / f"{sanitise_agent(agent)}.json"


def read_state(path: Path | None) -> tuple[str | None, str]:
    """(cursor, condition) where condition is absent, ok, empty or corrupt.

    Opens the file directly (no exists() check first): an unreadable checkpoint must not look like
    a first run, which would skip events (MemPalace #2315 review).
    """
    if path is None:
        return None, "absent"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, "absent"
    except (OSError, UnicodeDecodeError):
        return None, "corrupt"
    try:
        data = json.loads(text)
    except ValueError:
        return None, "corrupt"
    if not isinstance(data, dict) or "cursor" not in data:
        return None, "corrupt"
    cursor = data["cursor"]
    if cursor is None or cursor == "":
        return None, "empty"
    if not isinstance(cursor, str):
        return None, "corrupt"
    return cursor, "ok"


def write_state(path: Path, cursor: str | None, agent: str | None) -> None:
    """Atomically write the checkpoint (palacectl.files: tmp file 0600, fsync, rename, fsync folder)."""
    data: dict[str, Any] = {"cursor": cursor, "updated_at": utc_now()}
    if agent:
        data["agent"] = agent
    write_atomically(path, (json.dumps(data) + "\n").encode("utf-8"), create_folder=True)


@dataclass(slots=True)
class WatchOptions:
    home: Path
    filters: dict[str, list[str]]
    agent: str | None
    since_event_id: str | None
    state_file: Path | None
    from_start: bool
    follow: bool
    idle_exit_ms: int
    announce: bool
    limit: int
    as_json: bool


def _described(filters: dict[str, list[str]]) -> str:
    """The filters as a watch says them: ``name=a,b`` by name, or ``everything``."""
    return " ".join(f"{name}={','.join(values)}" for name, values in sorted(filters.items()) if values) or "everything"


def _who(opts: WatchOptions) -> str:
    return opts.agent or _described(opts.filters)


class _Watch:
    def __init__(self, opts: WatchOptions) -> None:
        self.opts = opts
        self.cursor: str | None = None
        self.subscription: Subscription | None = None
        self.hits = 0
        self.deadline = time.monotonic() + opts.idle_exit_ms / 1000 if opts.idle_exit_ms > 0 else None

    def checkpoint(self, *, required: bool = False) -> None:
        if self.opts.state_file is None:
            return
        try:
            write_state(self.opts.state_file, self.cursor, self.opts.agent)
        except OSError as exc:
            if required:
                raise CommandFailed(
                    f"could not write the initial checkpoint to {self.opts.state_file}: {exc.strerror or exc}. "
                    "Refusing to start: a watch that cannot remember its cursor would replay or skip events"
                ) from None
            warn(f"could not checkpoint the watch cursor to {self.opts.state_file}: {exc.strerror or exc}")

    def subscribe(self, start: str, since: str | None) -> dict[str, Any]:
        """Subscribe from ``start`` on a connection of its own (``self.subscription``); the
        ``started`` push. Raises what ``Client.subscribe`` raises, with no connection left open."""
        args: dict[str, Any] = {**self.opts.filters, "start": start, "limit": self.opts.limit, "agent": self.opts.agent}
        if since:
            args["since_event_id"] = since
        client = Client(self.opts.home)
        try:
            client.connect()
            self.subscription = client.subscribe(**args)
        except BaseException:
            client.close()
            raise
        return self.subscription.started

    def close(self) -> None:
        if self.subscription is not None:
            self.subscription.close()
            self.subscription = None

    def output(self, batch: dict[str, Any]) -> None:
        doc = {"events": batch["events"], "count": len(batch["events"]), "cursor": batch["cursor"], "timed_out": False}
        if self.opts.as_json:
            emit_json(doc, compact=self.opts.follow)
        else:
            write_stdout(events_block(batch["events"]))

    def idle(self) -> int:
        self.checkpoint()
        if self.opts.as_json:
            emit_json({"events": [], "count": 0, "cursor": self.cursor, "timed_out": True}, compact=self.opts.follow)
        else:
            note("Idle timeout; no matching events." if not self.hits else "Idle timeout.")
        return EXIT_OK if self.hits else EXIT_IDLE

    def remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())


def _decide_start(opts: WatchOptions) -> tuple[str, str | None, str]:
    """(start mode, cursor, condition) before talking to the daemon."""
    if opts.since_event_id:
        return "cursor", opts.since_event_id, "explicit"
    stored, condition = read_state(opts.state_file)
    if opts.from_start:
        return "beginning", None, condition
    if condition == "ok":
        return "cursor", stored, condition
    if condition == "corrupt":
        warn(f"watch state file {opts.state_file} is unreadable or corrupt; replaying from the beginning")
        return "beginning", None, condition
    if condition == "empty":
        return "beginning", None, condition
    return "tip", None, condition


def run_watch(opts: WatchOptions) -> int:
    """Run a watch to completion; returns the exit code (raises CommandFailed / DaemonUnreachable)."""
    watch = _Watch(opts)
    start, since, condition = _decide_start(opts)
    try:
        try:
            started = watch.subscribe(start, since)
        except ApiError as exc:
            if exc.code != "not_found":
                raise
            if condition == "explicit":
                raise CommandFailed(f"{exc.message}. Nothing was written to the state file.") from None
            warn(f"stored watch cursor {since} is not in this palace ({exc.message}); replaying from the beginning")
            start, since, condition = "beginning", None, "stale"
            started = watch.subscribe(start, since)
        watch.cursor = started.get("cursor")
        if start == "tip":
            note(f"Starting at the tip ({watch.cursor or 'empty log'}); earlier events are not replayed. "
                 "Use --from-start to replay them.")
        note(f"Watching {_who(opts)} from {watch.cursor or ('the beginning' if start == 'beginning' else 'now')}; "
             "Ctrl-C to stop.")
        if condition != "ok":
            watch.checkpoint(required=True)
        if opts.announce:
            _announce(opts, watch.cursor)
        return _loop(watch)
    finally:
        watch.close()


def _announce(opts: WatchOptions, cursor: str | None) -> None:
    body = (f"{opts.agent} is watching ({_described(opts.filters)}) from {cursor or 'the beginning'}; "
            f"wake me with an event to_agent={opts.agent}.")
    # A second connection: the first one now belongs to the subscription.
    with Client(opts.home) as announcer:
        announcer.call(
            "append", **_ANNOUNCEMENT, from_agent=opts.agent, body=body,
            metadata={"watch": {"filters": opts.filters, "cursor": cursor,
                                "state_file": str(opts.state_file) if opts.state_file else None}},
        )


def _loop(watch: _Watch) -> int:
    opts = watch.opts
    while True:
        assert watch.subscription is not None
        try:
            push = watch.subscription.next_push(timeout=watch.remaining())
        except IdleTimeout:
            return watch.idle()
        except DaemonProtocolError:
            raise  # not a restart: the watch ends naming it (module docstring)
        except DaemonUnreachable:
            if not _reconnect(watch):
                return watch.idle()
            continue
        kind = push["push"]
        if kind == "batch":
            try:
                watch.output(push)
            except BrokenPipeError:
                # The cursor stays where it was: the next watch replays this batch, never skips it.
                sys.stderr.write("palacectl: output closed (broken pipe); cursor not advanced\n")
                return EXIT_FAILED
            watch.cursor = push["cursor"]
            watch.hits += 1
            watch.checkpoint()
            if not opts.follow:
                return EXIT_OK
            if opts.idle_exit_ms > 0:
                watch.deadline = time.monotonic() + opts.idle_exit_ms / 1000
        elif kind == "cursor":
            watch.cursor = push["cursor"]
            watch.checkpoint()


def _reconnect(watch: _Watch) -> bool:
    """Resume after palaced restarted: reconnect and re-subscribe from the last cursor (False:
    the idle time ran out first)."""
    note("palaced went away; reconnecting (the watch resumes from its cursor)")
    watch.close()
    while (left := watch.remaining()) is None or left > 0:
        time.sleep(min(RECONNECT_INTERVAL_S, left or RECONNECT_INTERVAL_S))
        try:
            started = watch.subscribe("cursor" if watch.cursor else "beginning", watch.cursor)
        except DaemonProtocolError:
            raise
        except DaemonUnreachable:
            continue
        watch.cursor = started.get("cursor")
        note("reconnected to palaced")
        return True
    return False
