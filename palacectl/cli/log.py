"""palacectl's log commands: append, list, wait, watch, ack, redact.

Owns: writing to and reading from the coordination log (docs/commands.md), the event
filter options they share (``--stream``, ``--room``, … each repeatable for OR), and
``--replicated`` (wait until K peers hold an event). Thin commands: parse, one request through
``common.call_daemon``, render. ``watch`` loads ``palacectl.watch`` (its state file and push loop)
only when it runs. Registered on the root app by ``cli.root``; imports ``cli.common`` only.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from palace_proto.errors import ApiError
from palace_proto.filters import filter_args

from .. import loop
from ..event_options import APPEND_FIELDS, ROUTING
from ..feature import load
from ..output import EXIT_IDLE, emit, fail, note, write_stdout
from .common import (
    EVENT_FILTERS,
    JsonOpt,
    Multi,
    UsageProblem,
    call_daemon,
    capped,
    current_home,
    field_option,
    option,
    with_options,
)

__all__ = ["ack", "append", "list_", "redact", "wait", "watch"]

ReplicatedOpt = Annotated[Optional[int], typer.Option(
    "--replicated", help="Wait until K peers hold the event (exit 2 on timeout).")]
SinceOpt = Annotated[Optional[str], typer.Option("--since-event-id", help="Exclusive cursor (an event id).")]


def _append_options() -> list[inspect.Parameter]:
    """``append``'s options for the event's fields (``--body-file`` beside ``--body``): none is
    required of the command line, as ``--ndjson``'s lines may carry them."""
    options = []
    for field in APPEND_FIELDS:
        said = field.help
        if not field.optional:
            said = f"{said.removesuffix('.')} (required; with --ndjson a default)."
        elif field.wire == "ids":
            said = f"{said.removesuffix('.')} (repeatable)."
        options.append(field_option(field, help=said))
        if field.wire == "body":
            options.append(option("body_file", Annotated[Optional[str], typer.Option(
                "--body-file", help="Read the body from a file, or - for stdin.")]))
    return options


@with_options(_append_options())
def append(
    replicated: ReplicatedOpt = None,
    timeout_ms: Annotated[Optional[int], typer.Option(
        "--timeout-ms", help="With --replicated: how long to wait (default 30000).")] = None,
    ndjson: Annotated[Optional[str], typer.Option(
        "--ndjson",
        help=(
            "Append many events from a file (or - for stdin): one JSON object of append's fields per line; the "
            "options above are defaults for every line. All lines are checked before any is sent."
        ))] = None,
    json_: JsonOpt = False,
    **fields: Any,
) -> None:
    """Append an event; prints the stored event. With --replicated K, return once K peers hold it.
    With --ndjson, append every line of a file, in order, in as few commits as fit."""
    if ndjson is not None:
        given = [f"--{name.replace('_', '-')}" for name, value in (*fields.items(), ("replicated", replicated),
                                                                   ("timeout_ms", timeout_ms))
                 if value and name not in ROUTING]
        if given:
            raise UsageProblem(f"{given[0]} does not go with --ndjson: each line carries its own body, metadata and "
                               "artifact_ids (the routing options are defaults for every line)")
        _append_ndjson(ndjson, {k: fields[k] for k in ROUTING if fields[k] is not None}, as_json=json_)
        return
    _check_replicated(replicated, timeout_ms)
    event = loop.append_event(current_home(), {**fields, "replicated": replicated, "timeout_ms": timeout_ms,
                                               "json": json_})
    _replication_outcome(event.get("replication"), replicated)


def _ndjson_events(text: str, defaults: dict[str, Any], limits: Any) -> list[tuple[int, dict[str, Any]]]:
    """(line number, append fields) of every non-blank line, each checked with the daemon's own
    rules (palace_proto.appends); the first bad line stops everything before anything is sent."""
    import json

    from palace_proto.appends import append_request
    from palace_proto.errors import ValidationError

    events = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            fields = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"line {number}: not JSON ({exc.msg} at column {exc.colno}); nothing was appended") from None
        if not isinstance(fields, dict):
            raise ValidationError(f"line {number}: must be a JSON object of append's fields; nothing was appended")
        if "replicated" in fields:
            raise ValidationError(f"line {number}: replicated is not taken per line; nothing was appended",
                                  field="replicated")
        event = {**defaults, **fields}
        try:
            append_request(event, limits)
        except ValidationError as exc:
            raise ValidationError(f"line {number}: {exc.message}; nothing was appended", field=exc.field) from None
        events.append((number, event))
    if not events:
        raise ValidationError("the file holds no events (one JSON object per line); nothing was appended")
    return events


def _append_ndjson(source: str, defaults: dict[str, Any], *, as_json: bool) -> None:
    """Send the file's events in order, in requests of at most MAX_APPEND_MANY events and half the
    daemon's frame limit, one after the other: each request is one commit, all or nothing, so a
    failure leaves a clean cut (the lines before it appended, none after)."""
    import json
    import re

    from palace_proto.appends import MAX_APPEND_MANY
    from palace_proto.validation import Limits

    from ..client import Client
    from .common import decode_utf8, read_input

    text = decode_utf8(read_input(source, "--ndjson"), "--ndjson")
    appended: list[dict[str, Any]] = []
    with Client(current_home()) as client:
        limits = client.hello.get("limits", {})
        default = Limits()  # a daemon's hello names its limits; one that does not has the defaults
        checked = _ndjson_events(text, defaults, Limits(
            max_body_bytes=limits.get("max_body_bytes", default.max_body_bytes),
            max_metadata_bytes=limits.get("max_metadata_bytes", default.max_metadata_bytes)))
        budget = max(1 << 16, int(limits.get("max_frame_bytes", 16 << 20)) // 2)
        chunk: list[tuple[int, dict[str, Any]]] = []
        size = 0

        def send() -> None:
            try:
                reply = client.call("append_many", events=[event for _, event in chunk])
            except ApiError as exc:
                # The daemon names the event by its index in this request: say which line it is.
                why = re.sub(r"^events\[(\d+)\]", lambda m: f"line {chunk[int(m.group(1))][0]}", exc.message)
                why = why.removesuffix("; nothing was appended")
                kept = f"lines before {chunk[0][0]} were appended ({len(appended)} events), " if appended else ""
                raise ApiError(f"{why}; {kept}nothing from line {chunk[0][0]} on was appended", code=exc.code) from None
            appended.extend(reply["events"])

        for number, event in checked:
            weight = len(json.dumps(event, ensure_ascii=False).encode("utf-8", "surrogatepass")) + 64
            if chunk and (len(chunk) >= MAX_APPEND_MANY or size + weight > budget):
                send()
                chunk, size = [], 0
            chunk.append((number, event))
            size += weight
        send()
    emit({"events": appended, "count": len(appended)}, as_json,
         f"Appended {len(appended)} events ({appended[0]['id']} … {appended[-1]['id']})")


def _check_replicated(replicated: int | None, timeout_ms: int | None) -> None:
    if replicated is not None and replicated < 0:
        raise UsageProblem("--replicated must be zero or a positive number of peers")
    if timeout_ms is not None and timeout_ms < 0:
        raise UsageProblem("--timeout-ms must be zero or a positive number of milliseconds")
    if timeout_ms is not None and replicated is None:
        raise UsageProblem("--timeout-ms applies to --replicated; add --replicated K")


def _replication_outcome(replication: dict[str, Any] | None, wanted: int | None) -> None:
    """Say how far the event got; exit 2 when fewer than K peers confirmed in time."""
    if not replication:
        return
    holders = ", ".join(p[:7] for p in replication["replicated"]) or "none"
    if replication["timed_out"]:
        note(f"Stored locally, but only {replication['replicated_count']} of {wanted} peer(s) confirmed it in time "
             f"({holders}).")
        raise typer.Exit(EXIT_IDLE)
    note(f"Held by {replication['replicated_count']} peer(s): {holders}.")


@with_options(EVENT_FILTERS)
def list_(
    since_event_id: SinceOpt = None,
    before_event_id: Annotated[Optional[str], typer.Option("--before-event-id")] = None,
    since_created_at: Annotated[Optional[str], typer.Option(
        "--since-created-at", help="YYYY-MM-DD or UTC datetime (inclusive); prefer the id cursor.")] = None,
    order: Annotated[Optional[str], typer.Option(help="asc (default) or desc.")] = None,
    limit: Annotated[Optional[int], typer.Option(help="Default 50, capped at 500.")] = None,
    preview: Annotated[bool, typer.Option("--preview", help="Cut bodies over 200 characters.")] = False,
    text: Annotated[Optional[str], typer.Option("--text", help="Only events whose body has every one of these "
                                                              "words, best match first.")] = None,
    json_: JsonOpt = False,
    **filters: Multi,
) -> None:
    """List events (oldest first by default; with --text, best match first)."""
    loop.list_events(current_home(), {
        **filters,
        "since_event_id": since_event_id, "before_event_id": before_event_id, "since_created_at": since_created_at,
        "order": order, "limit": limit, "preview": preview, "text": text, "json": json_})


@with_options(EVENT_FILTERS)
def wait(
    since_event_id: SinceOpt = None,
    since_created_at: Annotated[Optional[str], typer.Option("--since-created-at")] = None,
    limit: Annotated[Optional[int], typer.Option()] = None,
    preview: Annotated[bool, typer.Option("--preview")] = False,
    timeout_ms: Annotated[Optional[int], typer.Option("--timeout-ms", help="Default 60000, max 300000.")] = None,
    replicated: ReplicatedOpt = None,
    event_id: Annotated[Optional[str], typer.Option("--event-id", help="With --replicated: the event to wait for.")] = None,
    json_: JsonOpt = False,
    **filters: Multi,
) -> None:
    """Wait until a matching event exists (at once if one already does); exits 2 on timeout.

    With --replicated K --event-id ID: wait until K peers hold that event instead."""
    if replicated is not None or event_id is not None:
        if replicated is None or event_id is None:
            raise UsageProblem("--replicated K and --event-id ID go together")
        _check_replicated(replicated, timeout_ms)
        result = call_daemon("replicated", event_id=event_id, replicated=replicated,
                             timeout_ms=capped(timeout_ms, 3_600_000))
        emit(result, json_, f"{result['event_id']}\t{result['replicated_count']} peer(s)\t"
                            f"{' '.join(result['replicated']) or '-'}")
        if result["timed_out"]:
            raise typer.Exit(EXIT_IDLE)
        return
    code = loop.wait_events(current_home(), {
        **filters,
        "since_event_id": since_event_id, "since_created_at": since_created_at, "limit": limit, "preview": preview,
        "timeout_ms": timeout_ms, "json": json_})
    if code:
        raise typer.Exit(code)


@with_options(EVENT_FILTERS, after=1)
def watch(
    agent: Annotated[Optional[str], typer.Option(
        "--agent", help="= --to-agent ID --exclude-from-agent ID, with a state file.")] = None,
    since_event_id: SinceOpt = None,
    state_file: Annotated[Optional[str], typer.Option("--state-file", help="Cursor file; '' turns persistence off.")] = None,
    from_start: Annotated[bool, typer.Option("--from-start", help="Replay from the first event.")] = False,
    follow: Annotated[bool, typer.Option("--follow", help="Keep going; one JSON batch per line.")] = False,
    idle_exit_ms: Annotated[int, typer.Option("--idle-exit-ms", help="Exit 2 after this long without a match (0 = never).")] = 0,
    announce: Annotated[bool, typer.Option("--announce", help="Post a status event to * saying what you watch.")] = False,
    with_status: Annotated[bool, typer.Option(
        "--with-status", help="With --agent: wake on status events too (by default a fleet watcher sleeps "
        "through them, announcements included).")] = False,
    limit: Annotated[int, typer.Option(help="Events per batch (max 500).")] = 50,
    json_: JsonOpt = False,
    **filters: Multi,
) -> None:
    """Block until matching events arrive (pushed by palaced); exit 0 on a hit, 2 when idle."""
    from ..watch import WatchOptions, default_state_file, run_watch

    if idle_exit_ms < 0:
        fail("--idle-exit-ms must be zero (wait forever) or a positive number of milliseconds", code="invalid_argument")
    if limit < 1:
        fail("--limit must be a positive integer", code="invalid_argument")
    to_agents, excluded = list(filters["to_agent"] or []), list(filters["exclude_from_agent"] or [])
    if agent is not None:
        if not agent.strip():
            fail("agent identity is required to name a watch state file", code="invalid_argument")
        to_agents.append(agent.strip())
        excluded.append(agent.strip())
        to_agents.extend(_also_addressed(agent.strip()))
    if announce and not agent:
        raise UsageProblem("--announce needs --agent (the announcement is posted as that agent)")
    home = current_home()
    if state_file is None:
        path = default_state_file(home, agent) if agent else None
    else:
        path = Path(state_file).expanduser() if state_file else None
    wanted = filter_args(**{**filters, "to_agent": to_agents, "exclude_from_agent": excluded})
    # The shared-brain rules: status is the type fleet watchers sleep through, so one agent's
    # `watch --announce` (a status to *) wakes nobody else (issue 26). Asked for by --type or
    # --with-status, it wakes.
    if agent is not None and not with_status and not filters["type"]:
        wanted["exclude_types"] = ["status"]
    code = run_watch(WatchOptions(
        home=home, filters=wanted, agent=agent.strip() if agent else None, since_event_id=since_event_id,
        state_file=path, from_start=from_start, follow=follow, idle_exit_ms=idle_exit_ms, announce=announce,
        limit=min(limit, 500), as_json=json_,
    ))
    raise typer.Exit(code)


def _also_addressed(agent: str) -> list[str]:
    """Who else a watch of ``agent`` wakes for: what the features say (``Feature.watch_also``)."""
    from ..features import features

    return [also for feature in features() if feature.watch_also for also in load(feature.watch_also)(agent)]


def ack(
    event_id: Annotated[str, typer.Argument(help="The event you acknowledge.")],
    from_agent: Annotated[str, typer.Option("--from-agent")],
    status_: Annotated[Optional[str], typer.Option("--status", help="e.g. claimed, applied, failed, blocked.")] = None,
    topic: Annotated[Optional[str], typer.Option()] = None,
    body: Annotated[Optional[str], typer.Option()] = None,
    body_file: Annotated[Optional[str], typer.Option("--body-file")] = None,
    json_: JsonOpt = False,
) -> None:
    """Acknowledge an event with a new event.ack (the target is never modified)."""
    loop.ack_event(current_home(), {"event_id": event_id, "from_agent": from_agent, "status": status_, "topic": topic,
                                    "body": body, "body_file": body_file, "json": json_})


def redact(
    event_id: Annotated[str, typer.Argument(help="The event whose body is purged.")],
    from_agent: Annotated[str, typer.Option("--from-agent")],
    reason: Annotated[Optional[str], typer.Option(help="Why (kept in the event.redact event).")] = None,
    operator: Annotated[bool, typer.Option("--operator", help="You are this daemon's operator (not the event's "
                                                              "author agent).")] = False,
    json_: JsonOpt = False,
) -> None:
    """Purge an event's body (a secret pasted by mistake) on every replica; the signed chain still
    verifies. The author agent may redact its events, or the operator with --operator; an event
    written on another daemon only there or on the palace owner's machine."""
    event = call_daemon("redact", event_id=event_id, from_agent=from_agent, reason=reason, operator=operator)
    loop.print_event(event, json_, f"Redacted {event_id}")
    if json_:
        return  # the event is the whole answer
    if event.get("also_redacted"):
        write_stdout(f"Also redacted (the same fact): {', '.join(event['also_redacted'])}\n")
    if event.get("purge") == "pending":
        write_stdout("The body is gone from every view and index; old database pages still hold it until a reader "
                     "lets go of the WAL — palaced finishes by itself (`palacectl status` shows it until done).\n")
