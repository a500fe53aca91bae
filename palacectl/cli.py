"""The palacectl command line: thin typer commands over the client (parse → call → render).

Owns: the command surface and its flags (README "Command reference"). Business rules live in
the daemon; this module reads files and stdin byte-exactly, calls the API, and renders. Heavy
imports (the benchmark, MCP) are deferred to the commands that need them, so `palacectl list`
starts fast.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from palace_proto.errors import ApiError, ProtocolError, ValidationError
from palace_proto.validation import MAX_LIST_LIMIT, MAX_WAIT_TIMEOUT_MS, parse_json_object, validate_agent_token

from . import output
from .client import Client, DaemonUnreachable, home_from
from .output import EXIT_IDLE, EXIT_OK, EXIT_USAGE, CommandFailed, emit_json, fail, note, warn, write_stdout

app = typer.Typer(
    name="palacectl", add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    rich_markup_mode=None, help="Talk to the local palaced: the coordination log of a fleet of agents.",
)
artifact_app = typer.Typer(no_args_is_help=True, help="Store and fetch content-addressed artifacts.")
patch_app = typer.Typer(no_args_is_help=True, help="Deliver patches.")
task_app = typer.Typer(no_args_is_help=True, help="Delegate work and follow its lifecycle.")
app.add_typer(artifact_app, name="artifact")
app.add_typer(patch_app, name="patch")
app.add_typer(task_app, name="task")
peers_app = typer.Typer(help="See and manage the other daemons of the palace.", invoke_without_command=True)
app.add_typer(peers_app, name="peers")

_state: dict[str, Any] = {"home": None}

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
Multi = Optional[list[str]]
ReplicatedOpt = Annotated[Optional[int], typer.Option("--replicated", help="Wait until K peers hold the event (exit 2 on timeout).")]


class UsageProblem(CommandFailed):
    def __init__(self, message: str) -> None:
        super().__init__(message, code="usage", exit_code=EXIT_USAGE)


@app.callback()
def _main(
    home: Annotated[Optional[Path], typer.Option("--home", help="Palace home (default: $PALACE_HOME, else ~/.palace).")] = None,
) -> None:
    _state["home"] = home_from(home)


def _home() -> Path:
    return _state["home"] or home_from(None)


def _call(op: str, **args: Any) -> Any:
    with Client(_home()) as client:
        return client.call(op, **{k: v for k, v in args.items() if v is not None})


def _read_bytes(path: str, what: str) -> bytes:
    """Read a file or stdin ('-') as bytes: no newline translation, so CRLF and sha256 survive."""
    if path == "-":
        if sys.stdin.isatty():
            note("Reading standard input from the terminal; end with Ctrl-D (or pass a file instead).")
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        fail(f"cannot read {what} {path}: {exc.strerror or exc}", code="invalid_argument")


def _decode_utf8(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"{what} is not valid UTF-8 (byte {exc.start}): store binary content as an artifact instead",
             code="invalid_argument")


def _text_or_file(text: str | None, file: str | None, flag: str) -> str | None:
    if text is not None and file is not None:
        raise UsageProblem(f"pass inline text or a file, not both (--{flag} or --{flag}-file)")
    if file is not None:
        return _decode_utf8(_read_bytes(file, f"--{flag}-file"), f"--{flag}-file {file}")
    return text


def _metadata(text: str | None) -> dict[str, Any] | None:
    return None if text is None else parse_json_object(text, "--metadata")


def _capped(value: int | None, cap: int) -> int | None:
    """Cap a large number client-side (the daemon caps too); values too big for msgpack must not crash."""
    return None if value is None else min(value, cap)


def _filters(**values: Multi) -> dict[str, list[str]]:
    return {name: list(v) for name, v in values.items() if v}


def _print_events(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(result)
    elif result["events"]:
        write_stdout(output.events_block(result["events"]))
    elif sys.stderr.isatty():
        note("No matching events.")


# -- status -------------------------------------------------------------------------------------


@app.command()
def status(json_: JsonOpt = False) -> int:
    """Show the daemon and its health; exits 1 when something needs attention (a health check)."""
    result = _call("status")
    health = result.get("health") or {"ok": True, "problems": [], "notes": []}
    if json_:
        emit_json(result)
        return EXIT_OK if health["ok"] else output.EXIT_FAILED
    write_stdout(
        f"palaced {result['version']} (pid {result['pid']}) up {result['uptime_s']:.0f}s\n"
        f"  home         {result['home']}\n"
        f"  origin       {result['origin']}\n"
        f"  fingerprint  {result['fingerprint']}\n"
        f"  events       {result['events']}  artifacts {result['artifacts']}\n"
        f"  memory       {result['memory']['drawers']} drawer(s)  {result['memory']['facts']} fact(s)\n"
        f"  latest       {result['latest_event_id'] or '-'}\n"
        f"  watchers     {result['watchers']}\n"
        f"  palace       {_palace_line(result)}\n"
    )
    network = result.get("network")
    if network:
        peers = result.get("peers") or {"live": len(network["connected"]), "total": len(network["connected"])}
        write_stdout(f"  listening    {', '.join(network['listen']) or '-'}  mDNS {network['mdns']}\n"
                     f"  peers        {peers['live']} live of {peers['total']}"
                     + (f"  FORKS {network['forks']} (see `palacectl peers`)" if network["forks"] else "") + "\n")
    storage = result.get("storage")
    if storage:
        embedding = result["memory"].get("embedding") or {}
        write_stdout(f"  storage      database {_mib(storage['database_bytes'])}, WAL {_mib(storage['wal_bytes'])}"
                     + (f"; {embedding['pending']:,} drawer(s) await embedding" if embedding.get("pending") else "")
                     + "\n")
    write_stdout("  health       " + ("ok" if health["ok"] else "NEEDS ATTENTION") + "\n")
    for problem in health["problems"]:
        write_stdout(f"    ! {problem}\n")
    for item in health["notes"]:
        write_stdout(f"    - {item}\n")
    return EXIT_OK if health["ok"] else output.EXIT_FAILED


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def _palace_line(result: dict[str, Any]) -> str:
    palace = result.get("palace")
    if not palace:
        return "none (run `palacectl init` or `palacectl join`)"
    return f"{palace['palace_id']} ({palace['palace_name']}) as {palace['role']}, daemon {palace['name']}"


# -- the log ------------------------------------------------------------------------------------


@app.command()
def append(
    type_: Annotated[str, typer.Option("--type", help="Event type, e.g. task.reply.")],
    stream: Annotated[str, typer.Option(help="Stream, e.g. project/palace.")],
    room: Annotated[str, typer.Option(help="Room, e.g. delegation.")],
    from_agent: Annotated[str, typer.Option("--from-agent", help="Your agent id.")],
    topic: Annotated[Optional[str], typer.Option()] = None,
    to_agent: Annotated[Optional[str], typer.Option("--to-agent", help="Addressee, or * to broadcast.")] = None,
    correlation_id: Annotated[Optional[str], typer.Option("--correlation-id")] = None,
    branch: Annotated[Optional[str], typer.Option()] = None,
    base_commit: Annotated[Optional[str], typer.Option("--base-commit")] = None,
    status_: Annotated[Optional[str], typer.Option("--status")] = None,
    body: Annotated[Optional[str], typer.Option(help="Body text (verbatim).")] = None,
    body_file: Annotated[Optional[str], typer.Option("--body-file", help="Read the body from a file, or - for stdin.")] = None,
    metadata: Annotated[Optional[str], typer.Option(help="A JSON object.")] = None,
    artifact_id: Annotated[Multi, typer.Option("--artifact-id", help="Attach an artifact (repeatable).")] = None,
    replicated: ReplicatedOpt = None,
    timeout_ms: Annotated[Optional[int], typer.Option("--timeout-ms", help="With --replicated: how long to wait (default 30000).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Append an event; prints the stored event. With --replicated K, return once K peers hold it."""
    text = _text_or_file(body, body_file, "body")
    _check_replicated(replicated, timeout_ms)
    event = _call("append", type=type_, stream=stream, room=room, from_agent=from_agent, topic=topic,
                  to_agent=to_agent, correlation_id=correlation_id, branch=branch, base_commit=base_commit,
                  status=status_, body=text, metadata=_metadata(metadata), artifact_ids=artifact_id,
                  replicated=replicated, timeout_ms=_capped(timeout_ms, 3_600_000))
    if json_:
        emit_json(event)
    else:
        write_stdout("Appended:\n" + output.event_line(event) + "\n")
    _replication_outcome(event.get("replication"), replicated)



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




def _list_args(stream: Multi, room: Multi, topic: Multi, type_: Multi, to_agent: Multi, from_agent: Multi,
               exclude_from_agent: Multi, correlation_id: Multi, status_: Multi) -> dict[str, list[str]]:
    return _filters(streams=stream, rooms=room, topics=topic, types=type_, to_agents=to_agent,
                    from_agents=from_agent, exclude_from_agents=exclude_from_agent,
                    correlation_ids=correlation_id, statuses=status_)


StreamOpt = Annotated[Multi, typer.Option("--stream", help="Repeat for OR.")]
RoomOpt = Annotated[Multi, typer.Option("--room")]
TopicOpt = Annotated[Multi, typer.Option("--topic")]
TypeOpt = Annotated[Multi, typer.Option("--type")]
ToOpt = Annotated[Multi, typer.Option("--to-agent", help="Matches the agent or * (broadcast).")]
FromOpt = Annotated[Multi, typer.Option("--from-agent")]
ExcludeOpt = Annotated[Multi, typer.Option("--exclude-from-agent")]
CorrOpt = Annotated[Multi, typer.Option("--correlation-id")]
StatusOpt = Annotated[Multi, typer.Option("--status")]
SinceOpt = Annotated[Optional[str], typer.Option("--since-event-id", help="Exclusive cursor (an event id).")]


@app.command("list")
def list_(
    stream: StreamOpt = None, room: RoomOpt = None, topic: TopicOpt = None, type_: TypeOpt = None,
    to_agent: ToOpt = None, from_agent: FromOpt = None, exclude_from_agent: ExcludeOpt = None,
    correlation_id: CorrOpt = None, status_: StatusOpt = None, since_event_id: SinceOpt = None,
    before_event_id: Annotated[Optional[str], typer.Option("--before-event-id")] = None,
    since_created_at: Annotated[Optional[str], typer.Option("--since-created-at", help="YYYY-MM-DD or UTC datetime (inclusive); prefer the id cursor.")] = None,
    order: Annotated[Optional[str], typer.Option(help="asc (default) or desc.")] = None,
    limit: Annotated[Optional[int], typer.Option(help="Default 50, capped at 500.")] = None,
    preview: Annotated[bool, typer.Option("--preview", help="Cut bodies over 200 characters.")] = False,
    json_: JsonOpt = False,
) -> None:
    """List events (oldest first by default)."""
    result = _call("list", **_list_args(stream, room, topic, type_, to_agent, from_agent, exclude_from_agent,
                                        correlation_id, status_),
                   since_event_id=since_event_id, before_event_id=before_event_id,
                   since_created_at=since_created_at, order=order, limit=_capped(limit, MAX_LIST_LIMIT),
                   preview=preview)
    _print_events(result, json_)


@app.command()
def wait(
    stream: StreamOpt = None, room: RoomOpt = None, topic: TopicOpt = None, type_: TypeOpt = None,
    to_agent: ToOpt = None, from_agent: FromOpt = None, exclude_from_agent: ExcludeOpt = None,
    correlation_id: CorrOpt = None, status_: StatusOpt = None, since_event_id: SinceOpt = None,
    since_created_at: Annotated[Optional[str], typer.Option("--since-created-at")] = None,
    limit: Annotated[Optional[int], typer.Option()] = None,
    preview: Annotated[bool, typer.Option("--preview")] = False,
    timeout_ms: Annotated[Optional[int], typer.Option("--timeout-ms", help="Default 60000, max 300000.")] = None,
    replicated: ReplicatedOpt = None,
    event_id: Annotated[Optional[str], typer.Option("--event-id", help="With --replicated: the event to wait for.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Wait until a matching event exists (at once if one already does); exits 2 on timeout.

    With --replicated K --event-id ID: wait until K peers hold that event instead."""
    if replicated is not None or event_id is not None:
        if replicated is None or event_id is None:
            raise UsageProblem("--replicated K and --event-id ID go together")
        _check_replicated(replicated, timeout_ms)
        result = _call("replicated", event_id=event_id, replicated=replicated,
                       timeout_ms=_capped(timeout_ms, 3_600_000))
        if json_:
            emit_json(result)
        else:
            write_stdout(f"{result['event_id']}\t{result['replicated_count']} peer(s)\t"
                         f"{' '.join(result['replicated']) or '-'}\n")
        if result["timed_out"]:
            raise typer.Exit(EXIT_IDLE)
        return
    result = _call("wait", **_list_args(stream, room, topic, type_, to_agent, from_agent, exclude_from_agent,
                                        correlation_id, status_),
                   since_event_id=since_event_id, since_created_at=since_created_at,
                   limit=_capped(limit, MAX_LIST_LIMIT), preview=preview,
                   timeout_ms=_capped(timeout_ms, MAX_WAIT_TIMEOUT_MS))
    if json_:
        emit_json(result)
    elif result["timed_out"]:
        note("Timed out; no matching events.")
    else:
        write_stdout(output.events_block(result["events"]))
    if result["timed_out"]:
        raise typer.Exit(EXIT_IDLE)


@app.command()
def watch(
    agent: Annotated[Optional[str], typer.Option("--agent", help="= --to-agent ID --exclude-from-agent ID, with a state file.")] = None,
    stream: StreamOpt = None, room: RoomOpt = None, topic: TopicOpt = None, type_: TypeOpt = None,
    to_agent: ToOpt = None, from_agent: FromOpt = None, exclude_from_agent: ExcludeOpt = None,
    correlation_id: CorrOpt = None, status_: StatusOpt = None, since_event_id: SinceOpt = None,
    state_file: Annotated[Optional[str], typer.Option("--state-file", help="Cursor file; '' turns persistence off.")] = None,
    from_start: Annotated[bool, typer.Option("--from-start", help="Replay from the first event.")] = False,
    follow: Annotated[bool, typer.Option("--follow", help="Keep going; one JSON batch per line.")] = False,
    idle_exit_ms: Annotated[int, typer.Option("--idle-exit-ms", help="Exit 2 after this long without a match (0 = never).")] = 0,
    announce: Annotated[bool, typer.Option("--announce", help="Post a status event to * saying what you watch.")] = False,
    limit: Annotated[int, typer.Option(help="Events per batch (max 500).")] = 50,
    json_: JsonOpt = False,
) -> None:
    """Block until matching events arrive (pushed by palaced); exit 0 on a hit, 2 when idle."""
    from .watch import WatchOptions, default_state_file, run_watch

    if idle_exit_ms < 0:
        fail("--idle-exit-ms must be zero (wait forever) or a positive number of milliseconds", code="invalid_argument")
    if limit < 1:
        fail("--limit must be a positive integer", code="invalid_argument")
    to_agents, excluded = list(to_agent or []), list(exclude_from_agent or [])
    if agent is not None:
        if not agent.strip():
            fail("agent identity is required to name a watch state file", code="invalid_argument")
        to_agents.append(agent.strip())
        excluded.append(agent.strip())
    if announce and not agent:
        raise UsageProblem("--announce needs --agent (the announcement is posted as that agent)")
    home = _home()
    if state_file is None:
        path = default_state_file(home, agent) if agent else None
    else:
        path = Path(state_file).expanduser() if state_file else None
    filters = _filters(streams=stream, rooms=room, topics=topic, types=type_, to_agents=to_agents,
                       from_agents=from_agent, exclude_from_agents=excluded, correlation_ids=correlation_id,
                       statuses=status_)
    code = run_watch(WatchOptions(
        home=home, filters=filters, agent=agent.strip() if agent else None, since_event_id=since_event_id,
        state_file=path, from_start=from_start, follow=follow, idle_exit_ms=idle_exit_ms, announce=announce,
        limit=min(limit, 500), as_json=json_,
    ))
    raise typer.Exit(code)


@app.command()
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
    text = _text_or_file(body, body_file, "body")
    event = _call("ack", event_id=event_id, from_agent=from_agent, status=status_, topic=topic, body=text)
    if json_:
        emit_json(event)
    else:
        write_stdout("Acknowledged:\n" + output.event_line(event) + "\n")


@app.command()
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
    event = _call("redact", event_id=event_id, from_agent=from_agent, reason=reason, operator=operator)
    if json_:
        emit_json(event)
        return
    write_stdout(f"Redacted {event_id}:\n" + output.event_line(event) + "\n")
    if event.get("also_redacted"):
        write_stdout(f"Also redacted (the same fact): {', '.join(event['also_redacted'])}\n")
    if event.get("purge") == "pending":
        write_stdout("The body is gone from every view and index; old database pages still hold it until a reader "
                     "lets go of the WAL — palaced finishes by itself (`palacectl status` shows it until done).\n")


@app.command()
def init(
    name: Annotated[Optional[str], typer.Option(help="A name for the palace (default: this host's name).")] = None,
    daemon_name: Annotated[Optional[str], typer.Option("--daemon-name", help="This daemon's name (default: host name).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Create a new palace with this daemon as its first member."""
    result = _call("init", name=name, daemon_name=daemon_name)
    if json_:
        emit_json(result)
    else:
        write_stdout(f"Created palace {result['palace_id']} ({result['palace_name']})\n"
                     f"  this daemon: {result['peer_id']} ({result['name']}, {result['role']})\n"
                     f"  listening on {', '.join(result['listen']) or '-'}\n"
                     "Next: `palacectl invite` here, then `palacectl join CODE` on each other machine.\n")


def _parse_ttl(text: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    value, unit = text.strip()[:-1], text.strip()[-1:].lower()
    if unit.isdigit():
        value, unit = text.strip(), "s"
    if unit not in units or not value.isdigit() or int(value) == 0:
        raise UsageProblem(f"--ttl {text!r}: use a number with s, m, h or d, e.g. 24h or 7d")
    return int(value) * units[unit]


@app.command()
def invite(
    role: Annotated[str, typer.Option(help="member (reads and writes) or observer (reads only).")] = "member",
    ttl: Annotated[str, typer.Option(help="How long the invite stays valid: e.g. 30m, 24h, 7d.")] = "24h",
    address: Annotated[Optional[str], typer.Option(help="HOST:PORT where joiners reach this daemon (default: this machine's LAN address).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Print a one-line, single-use invite code for another machine (`palacectl join CODE` there)."""
    if role not in ("member", "observer"):
        raise UsageProblem("--role must be member or observer")
    result = _call("invite", role=role, ttl_s=_parse_ttl(ttl), address=address)
    if json_:
        emit_json(result)
    else:
        write_stdout(result["code"] + "\n")
        note(f"Single use, {result['role']}, valid until {result['expires_at']}; the joiner dials {result['address']}.")


# Why 4 KiB: an invite code is ~100 characters; more than this is not a code (a wrong file).
MAX_INVITE_CODE_BYTES = 4096


def _invite_code(code: str | None, code_file: Path | None) -> str:
    """The invite code from the argument, stdin (``-``) or ``--code-file``: one line, stripped.

    The code is a secret until used: read from stdin or a file it stays out of `ps` and of the
    shell's history. A code file others can read is refused (as ssh refuses a readable key).
    """
    if (code is None) == (code_file is None):
        raise UsageProblem("give the invite code as CODE, as - (read from stdin), or with --code-file PATH: one of them")
    if code_file is not None:
        what = f"--code-file {code_file}"
        try:
            with open(code_file, "rb") as fh:
                mode = os.fstat(fh.fileno()).st_mode & 0o777
                if os.name != "nt" and mode & 0o077:
                    raise UsageProblem(f"{what} is accessible by other users (mode {mode:04o}); the code is a secret "
                                       f"until used: chmod 600 {code_file}")
                data = fh.read(MAX_INVITE_CODE_BYTES + 1)
        except UsageProblem:
            raise
        except OSError as exc:
            raise UsageProblem(f"cannot read {what}: {exc.strerror or exc}") from None
    elif code == "-":
        what = "standard input"
        if sys.stdin.isatty():
            note("Paste the invite code, then press Enter:")
        data = sys.stdin.buffer.readline(MAX_INVITE_CODE_BYTES + 1)
    else:
        return code.strip()
    if len(data) > MAX_INVITE_CODE_BYTES:
        raise UsageProblem(f"{what} holds more than {MAX_INVITE_CODE_BYTES} bytes: not an invite code")
    try:
        lines = data.decode("utf-8").strip().splitlines()
    except UnicodeDecodeError:
        raise UsageProblem(f"{what} is not text: not an invite code") from None
    if not lines:
        raise UsageProblem(f"{what} is empty; it must hold the invite code printed by `palacectl invite`")
    if len(lines) > 1:
        raise UsageProblem(f"{what} holds {len(lines)} lines; it must hold only the invite code")
    return lines[0].strip()


@app.command()
def join(
    code: Annotated[Optional[str], typer.Argument(
        help="The invite code printed by `palacectl invite`, or - to read it from stdin (keeps it out of `ps` "
             "and shell history).")] = None,
    code_file: Annotated[Optional[Path], typer.Option(
        "--code-file", help="Read the invite code from this file (mode 600: the code is a secret).")] = None,
    name: Annotated[Optional[str], typer.Option(help="This daemon's name (default: host name).")] = None,
    address: Annotated[Optional[str], typer.Option(help="Reach the inviter at this HOST:PORT instead of the one in the code.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Return only once caught up with the palace's log.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Join a palace with an invite code: this daemon gets its certificate and starts replicating.

    Pass the code as `-` (one line on stdin) or with --code-file to keep it out of `ps` and shell history.
    """
    code = _invite_code(code, code_file)
    if not code:
        raise UsageProblem("the invite code is empty; pass the code printed by `palacectl invite`")
    result = _call("join", code=code, name=name, address=address)
    if not json_:
        write_stdout(f"Joined palace {result['palace_id']} ({result['palace_name']}) as {result['role']}\n"
                     f"  this daemon: {result['peer_id']} ({result['name']})\n"
                     f"  listening on {', '.join(result['listen']) or '-'}\n")
    # A bar on a terminal; without one, --wait prints its own plain lines (see _follow_catch_up).
    bar = output.ProgressBar("catching up", enabled=sys.stderr.isatty() and not json_)
    if wait or bar.enabled:
        result["events"] = _follow_catch_up(bar, plain=wait and not bar.enabled and not json_)
    elif not json_:
        write_stdout("Catching up in the background; `palacectl peers` shows how far.\n")
    if json_:
        emit_json(result)


def _follow_catch_up(bar: output.ProgressBar, *, plain: bool) -> int | None:
    """Until the peers we hear from hold nothing we lack: a bar on a terminal, a line every 5 s
    with ``plain``. Ctrl-C stops watching only (the daemon goes on). Returns our event count."""
    import time

    last_line = 0.0
    try:
        with Client(_home()) as client:
            while True:
                peers = client.call("peers")["peers"]
                ours = client.call("status")["events"]
                # Only peers whose vector we have heard: a link still "connecting" reports nothing lacking.
                known = [p["we_lack"] for p in peers if p["we_lack"] is not None and p["state"] in ("live", "catching up")]
                lacking = sum(known)
                if known and not lacking:
                    bar.update(ours, ours, force=True)
                    bar.close()
                    if plain or bar.enabled:
                        write_stdout(f"Caught up: {ours:,} events.\n")
                    return int(ours)
                bar.update(ours, ours + lacking)
                if plain and time.monotonic() - last_line >= 5:
                    write_stdout(f"catching up: {ours:,} events, {lacking:,} to go\n" if known else
                                 "catching up: waiting for a peer to say what it holds\n")
                    last_line = time.monotonic()
                time.sleep(0.2)
    except KeyboardInterrupt:
        bar.close()
        note("Stopped watching; the daemon goes on catching up.")
        return None


@app.command()
def revoke(
    peer_id: Annotated[str, typer.Argument(help="The peer id (see `palacectl peers`).")],
    json_: JsonOpt = False,
) -> None:
    """Revoke a daemon: a signed revocation that replicates; peers refuse it from then on."""
    result = _call("revoke", peer_id=peer_id)
    if json_:
        emit_json(result)
    else:
        write_stdout(f"Revoked {result['revoked']} ({result['name']}); the revocation replicates to every peer.\n")


@app.command()
def doctor(json_: JsonOpt = False) -> None:
    """Check why a peer might be invisible, and say what to do (exit 1 if a check fails)."""
    result = _call("doctor")
    if json_:
        emit_json(result)
    else:
        marks = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}
        for c in result["checks"]:
            write_stdout(f"{marks[c['status']]}  {c['check']}: {c['detail']}\n")
    if not result["ok"]:
        raise typer.Exit(1)


@app.command()
def digest(json_: JsonOpt = False) -> None:
    """Per origin (origin_seq, head hash), and one digest of it all: equal digests, equal logs."""
    result = _call("digest")
    if json_:
        emit_json(result)
        return
    for o in result["origins"]:
        write_stdout(f"{o['origin']}\t{o['origin_seq']}\t{o['head_hash']}\n")
    write_stdout(f"digest\t{result['events']}\t{result['digest']}\n")


@app.command()
def who(json_: JsonOpt = False) -> None:
    """Watchers connected anywhere in the palace right now (what daemons see, not what agents claim)."""
    result = _call("who")
    if json_:
        emit_json(result)
        return
    if not result["watchers"]:
        note("No watchers connected.")
    for w in result["watchers"]:
        daemon = w.get("daemon") or {}
        where = "here" if w.get("local") else (daemon.get("name") or (daemon.get("peer_id") or "?")[:7])
        if not w.get("local") and w.get("daemon_silent"):
            where += f" (silent since {w['daemon_last_heard']})"
        write_stdout(f"{w['agent'] or '-'}\t{where}\t{w['since']}\t{w['filters']}\n")


@peers_app.callback()
def peers(ctx: typer.Context, json_: JsonOpt = False) -> None:
    """Every known peer: id, name, role, addresses, state, last contact and error, vectors, forks."""
    if ctx.invoked_subcommand is not None:
        return
    result = _call("peers")
    if json_:
        emit_json(result)
        return
    write_stdout(f"this daemon {result['peer_id']}  listening {', '.join(result['listen'])}  mDNS {result['mdns']}\n")
    if not result["peers"]:
        note("No peers known yet: `palacectl invite` / `palacectl join`, or `palacectl peers add HOST:PORT`.")
    for p in result["peers"]:
        who = f"{p['name'] or '?'} {p['peer_id'] or '(not reached yet)'}" + (f" [{p['role']}]" if p["role"] else "")
        write_stdout(f"{who}\n  state      {p['state']}" + (f" ({p['direction']})" if p["direction"] else "") + "\n")
        for a in p["addresses"]:
            write_stdout(f"  address    {a['address']} via {a['source']} ({a['state']})\n")
        write_stdout(f"  found by   {', '.join(p['found_by']) or '-'}\n"
                     f"  contact    {p['last_contact'] or 'never'}\n")
        if p["last_error"]:
            write_stdout(f"  last error {p['last_error']} at {p['last_error_at']}\n")
        if p["peer_id"] and p["we_lack"] is not None:
            write_stdout(f"  missing    we lack {p['we_lack']} event(s), it lacks {p['they_lack']}\n")
        for origin in p["forks"]:
            write_stdout(f"  FORK       origin {origin} has two histories\n")
    for f in result["forks"]:
        write_stdout(f"FORK origin {f['origin']} seq {f['origin_seq']}: refused {f['rejected_hash'][:16]} "
                     f"from {f['source']} at {f['detected_at']}\n")


@peers_app.command("add")
def peers_add(
    address: Annotated[str, typer.Argument(help="HOST:PORT of another daemon (for networks without multicast).")],
    json_: JsonOpt = False,
) -> None:
    """Dial a peer at a fixed address (kept across restarts)."""
    result = _call("peers_add", address=address)
    if json_:
        emit_json(result)
    else:
        write_stdout(f"Added static peer {result['added']}\n")


@peers_app.command("remove")
def peers_remove(
    address: Annotated[str, typer.Argument(help="HOST:PORT as added.")],
    json_: JsonOpt = False,
) -> None:
    """Stop dialling a static peer."""
    result = _call("peers_remove", address=address)
    if json_:
        emit_json(result)
    else:
        write_stdout(f"Removed static peer {result['removed']}\n")


# -- artifacts and patches ----------------------------------------------------------------------


def _print_warnings(record: dict[str, Any]) -> None:
    for message in record.get("warnings", []):
        warn(message)


@artifact_app.command("put")
def artifact_put(
    kind: Annotated[str, typer.Option(help="patch, file, log, json or note.")],
    created_by: Annotated[str, typer.Option("--created-by")],
    file: Annotated[str, typer.Option("--file", help="Path, or - for stdin (default).")] = "-",
    metadata: Annotated[Optional[str], typer.Option()] = None,
    json_: JsonOpt = False,
) -> None:
    """Store bytes (any bytes) by content; identical bytes are stored once."""
    content = _read_bytes(file, "--file")
    record = _call("artifact_put", kind=kind, created_by=created_by, content=content, metadata=_metadata(metadata))
    _print_warnings(record)
    if json_:
        emit_json(record)
    else:
        write_stdout(f"Stored {record['id']}  kind={record['kind']}\n  sha256={record['sha256']}\n"
                     f"  size={record['size_bytes']} bytes\n")


@artifact_app.command("get")
def artifact_get(
    artifact_id: Annotated[str, typer.Argument(help="art_… id or sha256.")],
    out: Annotated[Optional[Path], typer.Option("--out", help="Write the bytes to this file.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Write an artifact's exact bytes to stdout or --out (sha256 verified on arrival)."""
    record = _call("artifact_get", artifact_id=artifact_id)
    content: bytes = record.pop("content")
    if hashlib.sha256(content).hexdigest() != record["sha256"]:
        fail(f"artifact {record['id']} failed hash verification; nothing written", code="integrity")
    if out is not None:
        from .files import new_file_mode, write_atomically

        try:
            # The user's usual mode for a new file (umask), as `cp` would give it.
            write_atomically(out, content, new_file_mode())
        except OSError as exc:
            fail(f"cannot write {out}: {exc.strerror or exc}")
    if json_:
        emit_json({**record, "content_written_to": str(out) if out is not None else None})
    elif out is not None:
        write_stdout(f"Wrote {len(content)} bytes to {out}\n  sha256={record['sha256']}\n")
    else:
        sys.stdout.buffer.write(content)
        sys.stdout.buffer.flush()


@patch_app.command("submit")
def patch_submit(
    from_agent: Annotated[str, typer.Option("--from-agent")],
    to_agent: Annotated[Optional[str], typer.Option("--to-agent", help="Default: who requested the task.")] = None,
    correlation_id: Annotated[Optional[str], typer.Option("--correlation-id", help="The task this answers.")] = None,
    file: Annotated[str, typer.Option("--file", help="The diff, or - for stdin (default).")] = "-",
    stream: Annotated[Optional[str], typer.Option(help="Default: the stream of the task on this correlation.")] = None,
    room: Annotated[str, typer.Option()] = "patches",
    topic: Annotated[Optional[str], typer.Option()] = None,
    branch: Annotated[Optional[str], typer.Option()] = None,
    base_commit: Annotated[Optional[str], typer.Option("--base-commit")] = None,
    body: Annotated[Optional[str], typer.Option()] = None,
    metadata: Annotated[Optional[str], typer.Option()] = None,
    json_: JsonOpt = False,
) -> None:
    """Store a patch and announce it with patch.ready, in one transaction.

    Give --correlation-id (the task it answers) or --stream: with a correlation, the stream and
    --to-agent default to its task's."""
    if stream is None and correlation_id is None:
        raise UsageProblem("pass --correlation-id (the task this patch answers; its stream is used) or --stream")
    content = _read_bytes(file, "--file")
    result = _call("patch_submit", from_agent=from_agent, to_agent=to_agent, correlation_id=correlation_id,
                   content=content, stream=stream, room=room, topic=topic, branch=branch,
                   base_commit=base_commit, body=body, metadata=_metadata(metadata))
    _print_warnings(result["artifact"])
    if json_:
        emit_json(result)
    else:
        a = result["artifact"]
        write_stdout(f"Stored {a['id']}  sha256={a['sha256']}  size={a['size_bytes']} bytes\n"
                     + output.event_line(result["event"]) + "\n")


# -- tasks --------------------------------------------------------------------------------------


@task_app.command("create")
def task_create(
    project: Annotated[str, typer.Option()],
    from_agent: Annotated[str, typer.Option("--from-agent")],
    to_agent: Annotated[str, typer.Option("--to-agent")],
    branch: Annotated[str, typer.Option()],
    base_commit: Annotated[str, typer.Option("--base-commit", help="A hex commit id (≥7 chars), not a branch.")],
    goal: Annotated[Optional[str], typer.Option()] = None,
    goal_file: Annotated[Optional[str], typer.Option("--goal-file")] = None,
    done: Annotated[Optional[str], typer.Option(help="Definition of done.")] = None,
    done_file: Annotated[Optional[str], typer.Option("--done-file")] = None,
    json_: JsonOpt = False,
) -> None:
    """Delegate work: a task.request with goal, branch, base commit and definition of done."""
    goal_text = _text_or_file(goal, goal_file, "goal")
    done_text = _text_or_file(done, done_file, "done")
    result = _call("task_create", project=project, from_agent=from_agent, to_agent=to_agent, goal=goal_text or "",
                   branch=branch, base_commit=base_commit, done=done_text or "")
    if json_:
        emit_json(result)
        return
    task = result["task"]
    write_stdout(f"Task created: {task['correlation_id']}\nEvent: {task['id']}\nTo: {task['to_agent']}\n\n"
                 f"Ready to paste:\n{result['handoff']}\n")


@task_app.command("show")
def task_show(
    correlation_id: Annotated[str, typer.Argument()],
    json_: JsonOpt = False,
) -> None:
    """A task's lifecycle: the request, every event on its correlation, its state and claimant."""
    view = _call("task_show", correlation_id=correlation_id)
    if json_:
        emit_json(view)
        return
    write_stdout(f"Task {view['correlation_id']}: {view['state']}"
                 f"{' (claimed by ' + view['claimed_by'] + ')' if view['claimed_by'] else ''}\n"
                 f"  requested by {view['requested_by']} for {view['assigned_to'] or '*'}\n"
                 + output.events_block(view["events"]))


@task_app.command("list")
def task_list(
    agent: Annotated[Optional[str], typer.Option("--agent", help="Tasks this agent requested or was asked to do.")] = None,
    open_: Annotated[bool, typer.Option("--open", help="Only tasks without a terminal state.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Tasks and their state (with --open: the loops still to close)."""
    result = _call("task_list", agent=agent, open=open_)
    if json_:
        emit_json(result)
        return
    if not result["tasks"] and sys.stderr.isatty():
        note("No tasks.")
    for t in result["tasks"]:
        write_stdout(f"{t['correlation_id']}\t{t['state']}\t{t['requested_by']}->{t['assigned_to'] or '*'}\t"
                     f"{t['claimed_by'] or '-'}\t{t['last_activity']}\n")


# -- rules and bench ----------------------------------------------------------------------------


@app.command()
def rules(
    agent: Annotated[str, typer.Option("--agent", help="Your agent id, a single token like mac-claude.")],
    install: Annotated[Optional[Path], typer.Option("--install", help="Write the block into this file.")] = None,
    harness: Annotated[Optional[str], typer.Option("--harness", help="claude, codex, opencode, gemini or hermes.")] = None,
    tools: Annotated[str, typer.Option("--tools", help="mcp (the agent uses `palacectl mcp`), cli, or both.")] = "both",
    json_: JsonOpt = False,
) -> None:
    """Print (or install) the shared-brain rules block for an agent."""
    from .rules import HARNESS_FILES, RULES_TOOLS, install_rules, render_rules

    if install is not None and harness is not None:
        raise UsageProblem("pass --install PATH or --harness NAME, not both")
    if tools not in RULES_TOOLS:
        raise UsageProblem(f"--tools must be one of: {', '.join(RULES_TOOLS)}")
    block = render_rules(agent, tools)  # type: ignore[arg-type]
    target = install
    if harness is not None:
        if harness not in HARNESS_FILES:
            raise UsageProblem(f"--harness must be one of: {', '.join(sorted(HARNESS_FILES))}")
        target = Path(HARNESS_FILES[harness]).expanduser()
    if target is None:
        if json_:
            emit_json({"agent": agent, "rules": block})
        else:
            write_stdout(block)
        return
    try:
        action = install_rules(target, block)
    except (OSError, ValueError) as exc:
        fail(str(exc))
    if json_:
        emit_json({"agent": agent, "path": str(target), "action": action})
    else:
        note(f"Rules for {agent}: {action} in {target}")


@app.command()
def mcp(
    agent: Annotated[str, typer.Option("--agent", help="The agent identity this adapter speaks as, e.g. mac-claude.")],
    read_only: Annotated[bool, typer.Option("--read-only", help="Offer only the reading tools.")] = False,
    home: Annotated[Optional[Path], typer.Option("--home", help="Palace home (same as the global --home).")] = None,
) -> None:
    """Serve palace to an agent harness as MCP tools on stdio (MemPalace-compatible names)."""
    identity = validate_agent_token(agent, "--agent")
    from .mcp_adapter import run_mcp

    run_mcp(home_from(home) if home is not None else _home(), identity, read_only=read_only)


bench_app = typer.Typer(help="Measure palace on this machine (temporary daemons; nothing else touched).",
                        invoke_without_command=True)
app.add_typer(bench_app, name="bench")


@bench_app.callback()
def bench(
    ctx: typer.Context,
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs (for a smoke test, not for figures).")] = False,
    json_: JsonOpt = False,
) -> None:
    """Measure a temporary daemon: append throughput, wake latency, list latency, RSS.

    `palacectl bench replication` measures a fleet of local daemons instead."""
    if ctx.invoked_subcommand is not None:
        return
    from .bench import run_bench

    result = run_bench(quick=quick, progress=not json_)
    if json_:
        emit_json(result)


@bench_app.command("memory")
def bench_memory(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs (for a smoke test, not for figures).")] = False,
    drawers: Annotated[Optional[int], typer.Option("--drawers", help="How many drawers to file (default 10,000).")] = None,
    peer: Annotated[bool, typer.Option("--peer/--no-peer", help="Also time a fresh peer indexing them all.")] = True,
    json_: JsonOpt = False,
) -> None:
    """Measure the shared memory: retrieval evaluation, embedding, search latency, a fresh peer."""
    from .bench_memory import run_memory_bench

    if drawers is not None and drawers < 1:
        raise UsageProblem("--drawers must be a positive number")
    result = run_memory_bench(quick=quick, progress=not json_, drawers=drawers, peer=peer)
    if json_:
        emit_json(result)


@bench_app.command("replication")
def bench_replication(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs (for a smoke test, not for figures).")] = False,
    json_: JsonOpt = False,
) -> None:
    """Measure replication between local daemons: cross-peer wake, 100k catch-up, throughput, heal."""
    from .bench_replication import run_replication_bench

    result = run_replication_bench(quick=quick, progress=not json_)
    if json_:
        emit_json(result)


# Command groups in their own modules (memory, backup/restore, export/import, service); importing them registers
# their commands on `app`.
from . import backup_cli, export_cli, memory_cli, service_cli  # noqa: E402,F401

# -- entry point --------------------------------------------------------------------------------

_UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def main(argv: list[str] | None = None) -> int:
    """Run palacectl; returns the exit code (never a traceback for expected failures)."""
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=args, prog_name="palacectl", standalone_mode=False)
    except _UsageError as exc:
        output.report_error(exc.format_message() if hasattr(exc, "format_message") else str(exc), "usage", as_json=as_json)
        return EXIT_USAGE
    except CommandFailed as exc:
        output.report_error(exc.message, exc.code, as_json=as_json)
        return exc.exit_code
    except ProtocolError as exc:
        output.report_error(f"cannot send this request: {exc.message}", "invalid_argument", as_json=as_json)
        return output.EXIT_FAILED
    except ValidationError as exc:
        output.report_error(exc.message, exc.code, as_json=as_json)
        return output.EXIT_FAILED
    except ApiError as exc:
        output.report_error(exc.message, exc.code, as_json=as_json)
        return output.EXIT_FAILED
    except DaemonUnreachable as exc:
        output.report_error(str(exc), "unreachable", as_json=as_json)
        return output.EXIT_UNREACHABLE
    except KeyboardInterrupt:
        sys.stderr.write("Stopped.\n")
        return output.EXIT_INTERRUPTED
    except BrokenPipeError:
        # Our reader went away; stay quiet (like `head`) and point stdout at devnull for the exit flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return output.EXIT_FAILED
    except typer.Abort:
        sys.stderr.write("Stopped.\n")
        return output.EXIT_INTERRUPTED
    if rv == output.EXIT_INTERRUPTED:
        # typer turns Ctrl-C into exit 130 itself; say so, as the watch contract promises.
        sys.stderr.write("Stopped.\n")
    if isinstance(rv, int):
        return rv
    return EXIT_OK
