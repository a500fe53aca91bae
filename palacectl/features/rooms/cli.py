"""palacectl's agent rooms: agents agree on something (an interface, a review) before anyone acts.

Owns: the ``room`` group (open, say, read, close, list, show) over the daemon's room operations
(palaced/handlers/rooms.py; the rules are palace_proto.rooms, the guide docs/rooms.md). ``read``
moves the reader's position, kept by its daemon; ``show`` moves nobody's. Exit codes as every
command's: 0 ok (an empty read too), 1 refused (a closed room, an unknown one, a turn that could
not be filed), 3 palaced unreachable, 64 usage. The root registers what ``COMMANDS`` and ``GROUPS`` name.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any, Final, Optional

import typer

from palace_proto.text import printable

from ...cli.common import JsonOpt, UsageProblem, call_daemon, text_or_file
from ...output import EXIT_FAILED, emit, note, table_header, write_stdout

__all__ = ["COMMANDS", "GROUPS", "room_app"]

room_app = typer.Typer(no_args_is_help=True, help="Rooms: agents discuss and agree before anyone acts; the "
                                                  "transcript is filed in memory when the room closes.")

RoomArg = Annotated[str, typer.Argument(help="The room's id (room_<name>_<hex>).")]
FromOpt = Annotated[str, typer.Option("--from-agent", help="Your agent id (who speaks).")]


def _turn(event: dict[str, Any]) -> str:
    """One turn for people: a header line, then the body indented, each line made printable."""
    to = event.get("to_agent")
    header = (f"{printable(event.get('created_at'))}  {printable(event.get('type'))}  {printable(event.get('id'))}  "
              f"{printable(event.get('from_agent'))}" + (f" -> {printable(to)}" if to and to != "*" else ""))
    if event.get("after_close"):
        header += "  (after the close: not in the transcript)"
    if event.get("impersonation"):
        header += "  !! IMPERSONATION"
    if event.get("body_redacted"):
        return header + "\n    [redacted]\n"
    body = event.get("body") or ""
    lines = "".join(f"    {printable(line, 100_000)}\n" for line in body.splitlines()) if body.strip() else ""
    return header + "\n" + lines


def _state(room: dict[str, Any]) -> str:
    if room.get("closed"):
        return f"closed by {printable(room.get('closed_by'))} at {printable(room.get('closed_at'))}"
    return "open"


@room_app.command("open")
def open_(
    name: Annotated[str, typer.Argument(help="What the room is about, e.g. 'orders API v2' (becomes its kebab name).")],
    project: Annotated[str, typer.Option("--project", help="The project (its stream is project/<slug>).")],
    from_agent: FromOpt,
    agenda: Annotated[Optional[str], typer.Option("--agenda", help="What to agree on (the room's first turn).")] = None,
    agenda_file: Annotated[Optional[str], typer.Option("--agenda-file", help="The agenda from a file, or - for stdin.")] = None,
    member: Annotated[Optional[list[str]], typer.Option("--member", help="An agent the room is for (repeatable): "
                                                                          "its watch wakes on the room.")] = None,
    wing: Annotated[Optional[str], typer.Option(
        "--wing", help="Wing the transcript is filed in (default: the project's slug).")] = None,
    palace_room: Annotated[Optional[str], typer.Option(
        "--palace-room", help="Palace room it is filed in (default: the room's name).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Open a room; prints its id and the line that brings other agents in."""
    text = text_or_file(agenda, agenda_file, "agenda")
    result = call_daemon("room_open", project=project, from_agent=from_agent, name=name, agenda=text,
                         members=member or None, wing=wing, room=palace_room)
    if emit(result, json_):
        return
    room = result["room"]
    write_stdout(f"{room['room_id']}\n")
    note(f"Opened {room['room_id']} in project {room['project']}; its transcript is filed in "
         f"{room['wing']}/{room['palace_room']} when it closes.")
    note(result["handoff"])


@room_app.command("say")
def say(
    room_id: RoomArg,
    from_agent: FromOpt,
    body: Annotated[Optional[str], typer.Option("--body", help="What you say.")] = None,
    body_file: Annotated[Optional[str], typer.Option("--body-file", help="What you say, from a file or - for stdin.")] = None,
    to_agent: Annotated[Optional[str], typer.Option(
        "--to-agent", help="Address one member (default: everyone in the room).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Say one thing in an open room (refused once it is closed)."""
    text = text_or_file(body, body_file, "body")
    if text is None:
        raise UsageProblem("Missing option '--body' (or --body-file PATH|-): what you say in the room")
    result = call_daemon("room_say", room_id=room_id, from_agent=from_agent, body=text, to_agent=to_agent)
    if emit(result, json_, result["event"]["id"]):
        return
    if result["unread"]:
        note(f"{result['unread']} turn(s) by others you have not read: palacectl room read {room_id} "
             f"--agent {from_agent}")


@room_app.command("read")
def read(
    room_id: RoomArg,
    agent: Annotated[str, typer.Option("--agent", help="Your agent id (whose read position moves).")],
    limit: Annotated[Optional[int], typer.Option("--limit", help="Turns at most (default 50, max 500).")] = None,
    json_: JsonOpt = False,
) -> None:
    """What you have not read in the room yet, oldest first; your position is kept by your daemon.

    The first read shows everything, your own turns too; later ones leave your own out."""
    result = call_daemon("room_read", room_id=room_id, agent=agent, limit=limit)
    if emit(result, json_):
        return
    for event in result["events"]:
        write_stdout(_turn(event))
    room = result["room"]
    if not result["events"] and sys.stderr.isatty():
        note(f"Nothing new in {room_id} for {agent} (the room is {_state(room)}).")
    elif result["more"]:
        note(f"More to read: palacectl room read {room_id} --agent {agent}")
    elif room.get("closed"):
        note(f"The room is {_state(room)}.")


@room_app.command("close")
def close(
    room_id: RoomArg,
    from_agent: FromOpt,
    outcome: Annotated[Optional[str], typer.Option("--outcome", help="What was agreed (the room's last turn).")] = None,
    outcome_file: Annotated[Optional[str], typer.Option(
        "--outcome-file", help="The outcome from a file, or - for stdin.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Close the room and file its transcript in memory, one drawer per turn (closing again files
    what is missing and appends nothing)."""
    text = text_or_file(outcome, outcome_file, "outcome")
    result = call_daemon("room_close", room_id=room_id, from_agent=from_agent, outcome=text)
    if not emit(result, json_):
        room = result["room"]
        verb = f"Already {_state(room)}" if result["already_closed"] else "Closed"
        write_stdout(f"{verb}: {room_id}; filed {result['filed']} turn(s) in {result['wing']}/{result['palace_room']}"
                     f" ({result['already_filed']} there already)\n")
        if not result["success"]:
            note(f"palacectl: {result['error']}: {'; '.join(result.get('errors', []))[:500]}")
    if not result["success"]:
        raise typer.Exit(EXIT_FAILED)


@room_app.command("list")
def list_(
    project: Annotated[Optional[str], typer.Option("--project", help="Only this project's rooms.")] = None,
    status: Annotated[Optional[str], typer.Option("--status", help="open or closed.")] = None,
    agent: Annotated[Optional[str], typer.Option("--agent", help="Only rooms this agent belongs to.")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Rooms at most (default 50, max 200).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Rooms, newest first: id, state, project, messages, last activity, opener, agenda."""
    if status is not None and status not in ("open", "closed"):
        raise UsageProblem(f"--status must be open or closed, not {status!r}")
    result = call_daemon("room_list", project=project, status=status, agent=agent, limit=limit)
    if emit(result, json_):
        return
    if not result["rooms"] and sys.stderr.isatty():
        note("No rooms.")
        return
    table_header("room", "state", "project", "messages", "last activity", "opened by", "agenda")
    for room in result["rooms"]:
        agenda = (room.get("agenda") or "").strip().splitlines()
        write_stdout("\t".join([printable(room["room_id"]), "closed" if room["closed"] else "open",
                                printable(room["project"]), str(room["messages"]), printable(room["last_activity"]),
                                printable(room["opened_by"]), printable(agenda[0] if agenda else "", 80)]) + "\n")


@room_app.command("show")
def show(
    room_id: RoomArg,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Turns at most (default 200, max 500).")] = None,
    offset: Annotated[Optional[int], typer.Option("--offset", help="Skip this many turns first.")] = None,
    json_: JsonOpt = False,
) -> None:
    """The whole room in the order every replica agrees on, moving nobody's read position."""
    result = call_daemon("room_show", room_id=room_id, limit=limit, offset=offset)
    if emit(result, json_):
        return
    room = result["room"]
    write_stdout(f"{room['room_id']}  project {printable(room['project'])}  opened by {printable(room['opened_by'])} "
                 f"at {printable(room['opened_at'])}  {_state(room)}\n")
    write_stdout(f"members: {', '.join(printable(m) for m in room['members'])}\n\n")
    for event in result["events"]:
        write_stdout(_turn(event))
    if result["more"]:
        note(f"More: palacectl room show {room_id} --offset {result['offset'] + result['count']}")


COMMANDS: Final[dict[str, Callable[..., None]]] = {}
GROUPS: Final = {"room": room_app}
