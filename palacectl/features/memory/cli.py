"""palacectl's shared-memory commands: remember, search, tunnels, and the kg, diary and memory
groups.

Owns: the memory half of the command surface (docs/commands.md): filing drawers
verbatim, searching them, the knowledge graph (facts with validity over time), each agent's
diary, and rebuilding the memory views with progress drawn from a second connection. Same
conventions as every other command: ``--json`` prints one JSON document, errors are one line and
exit 1, usage errors exit 64. The root registers what ``COMMANDS`` and ``GROUPS`` name.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any, Final, Optional

import typer

from ...cli.common import JsonOpt, UsageProblem, call_daemon, current_home, decode_utf8, read_input
from ...client import Client
from ...output import ProgressBar, emit, fail, note, write_stdout

__all__ = ["COMMANDS", "GROUPS", "diary_app", "kg_app", "memory_app", "remember", "search", "tunnels"]


kg_app = typer.Typer(no_args_is_help=True, help="The knowledge graph: facts with validity over time.")
diary_app = typer.Typer(no_args_is_help=True, help="Each agent's diary (wing_<agent>/diary).")
memory_app = typer.Typer(no_args_is_help=True, help="Maintain the memory views.")

WingOpt = Annotated[Optional[str], typer.Option("--wing")]
RoomOpt = Annotated[Optional[str], typer.Option("--room")]


def _who(added_by: str | None) -> str:
    """Who files it: --added-by, else $PALACE_AGENT. Never a shared default: an id belongs to one
    daemon, so a fleet-wide "palacectl" would be refused on every machine but the first (issue 26)."""
    who = added_by or os.environ.get("PALACE_AGENT", "").strip()
    if not who:
        raise UsageProblem("say who files it: --added-by YOUR_AGENT_ID (or set PALACE_AGENT)")
    return who


def remember(
    wing: Annotated[str, typer.Option("--wing", help="The wing, e.g. wing_project or wing_mac-claude.")],
    room: Annotated[str, typer.Option("--room", help="The room, e.g. decisions.")],
    file: Annotated[str, typer.Option("--file", help="The content, verbatim: a file, or - for stdin (default).")] = "-",
    source_file: Annotated[Optional[str], typer.Option("--source-file", help="Where it came from.")] = None,
    added_by: Annotated[Optional[str], typer.Option("--added-by", help="Your agent id (default: $PALACE_AGENT).")] = None,
    json_: JsonOpt = False,
) -> None:
    """File a drawer: verbatim content in a wing and room (the same content again is the same drawer)."""
    content = decode_utf8(read_input(file, "--file"), f"--file {file}")
    result = call_daemon("memory_add", wing=wing, room=room, content=content, source_file=source_file,
                         added_by=_who(added_by))
    state = "already filed" if result["duplicate"] else "filed"
    emit(result, json_, f"{result['drawer_id']}  {state} in {result['wing']}/{result['room']}")


def search(
    query: Annotated[str, typer.Argument(help="Keywords (at most 250 characters).")],
    wing: WingOpt = None, room: RoomOpt = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Filed on or after (YYYY-MM-DD).")] = None,
    before: Annotated[Optional[str], typer.Option("--before", help="Filed before (YYYY-MM-DD).")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Default 5, max 100.")] = None,
    mode: Annotated[Optional[str], typer.Option("--mode", help="hybrid (default), keyword or vector.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Search the drawers by meaning and keywords; every hit is the verbatim content with its place."""
    result = call_daemon("search", query=query, wing=wing, room=room, since=since, before=before, mode=mode,
                         limit=None if limit is None else min(limit, 1000))
    if emit(result, json_):
        return
    if not result["results"]:
        note("Nothing found.")
    for hit in result["results"]:
        # Not embedded yet: its score is its words' alone (0.000 for common ones), not a judgement.
        score = f"score {hit['score']:.3f}" if hit.get("embedded", True) else "score pending (not embedded yet)"
        write_stdout(f"{hit['drawer_id']}  {hit['wing']}/{hit['room']}  {hit['filed_at'][:10]}  "
                     f"{score}\n{hit['content'].rstrip()}\n\n")


@kg_app.command("add")
def kg_add(
    subject: str, predicate: str, object_: Annotated[str, typer.Argument(metavar="OBJECT")],
    valid_from: Annotated[Optional[str], typer.Option("--valid-from")] = None,
    valid_to: Annotated[Optional[str], typer.Option("--valid-to")] = None,
    source_drawer_id: Annotated[Optional[str], typer.Option("--source-drawer-id")] = None,
    added_by: Annotated[Optional[str], typer.Option("--added-by", help="Your agent id (default: $PALACE_AGENT).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Record a fact: SUBJECT PREDICATE OBJECT, optionally valid from / to a date."""
    result = call_daemon("kg_add", subject=subject, predicate=predicate, object=object_, valid_from=valid_from,
                         valid_to=valid_to, source_drawer_id=source_drawer_id, added_by=_who(added_by))
    emit(result, json_, f"{result['triple_id']}  {result['fact']}")


@kg_app.command("invalidate")
def kg_invalidate(
    subject: str, predicate: str, object_: Annotated[str, typer.Argument(metavar="OBJECT")],
    ended: Annotated[Optional[str], typer.Option("--ended", help="Default: today.")] = None,
    added_by: Annotated[Optional[str], typer.Option("--added-by", help="Your agent id (default: $PALACE_AGENT).")] = None,
    json_: JsonOpt = False,
) -> None:
    """End a fact's validity (the fact stays as history; add the new one after)."""
    result = call_daemon("kg_invalidate", subject=subject, predicate=predicate, object=object_, ended=ended,
                         added_by=_who(added_by))
    emit(result, json_, f"ended {result['ended']}: {result['fact']} ({result['facts_ended']} fact(s))")


@kg_app.command("query")
def kg_query(
    entity: str,
    as_of: Annotated[Optional[str], typer.Option("--as-of", help="Default: today.")] = None,
    direction: Annotated[str, typer.Option("--direction", help="outgoing, incoming or both.")] = "both",
    json_: JsonOpt = False,
) -> None:
    """What was true about ENTITY as of a date: active, historical and future facts."""
    result = call_daemon("kg_query", entity=entity, as_of=as_of, direction=direction)
    if emit(result, json_):
        return
    if not result["count"]:
        note(f"No facts about {entity!r}." + (f" Did you mean: {', '.join(result['candidates'])}?"
                                              if result.get("candidates") else ""))
    for state in ("active", "historical", "future"):
        for fact in result[f"{state}_facts"]:
            span = f"{fact['valid_from'] or '…'} → {fact['valid_to'] or '…'}"
            write_stdout(f"{state:10s}  {fact['fact']}  ({span})\n")


@diary_app.command("write")
def diary_write(
    agent: Annotated[str, typer.Option("--agent", help="Whose diary (your agent id).")],
    entry: Annotated[Optional[str], typer.Option("--entry", help="The entry; or --file.")] = None,
    file: Annotated[Optional[str], typer.Option("--file", help="Read the entry from a file, or - for stdin.")] = None,
    topic: Annotated[str, typer.Option("--topic")] = "general",
    json_: JsonOpt = False,
) -> None:
    """Write an entry in an agent's diary."""
    if (entry is None) == (file is None):
        raise UsageProblem("pass the entry with --entry TEXT or --file PATH|-, one of them")
    text = entry if entry is not None else decode_utf8(read_input(file or "-", "--file"), f"--file {file}")
    result = call_daemon("diary_write", agent_name=agent, entry=text, topic=topic)
    emit(result, json_, f"{result['entry_id']}  {result['wing']}/diary  {result['topic']}  {result['timestamp']}")


@diary_app.command("read")
def diary_read(
    agent: Annotated[str, typer.Option("--agent", help="Whose diary.")],
    last: Annotated[int, typer.Option("--last", help="Newest N entries (default 10, max 100).")] = 10,
    json_: JsonOpt = False,
) -> None:
    """Read an agent's diary, newest first."""
    result = call_daemon("diary_read", agent_name=agent, last_n=last)
    if emit(result, json_):
        return
    write_stdout(f"{result['wing']}: showing {result['showing']} of {result['total']}\n")
    for e in result["entries"]:
        write_stdout(f"{e['timestamp']}  [{e['topic']}]  {e['content'].rstrip()}\n")


def tunnels(
    wing_a: Annotated[Optional[str], typer.Argument(help="A wing (optional).")] = None,
    wing_b: Annotated[Optional[str], typer.Argument(help="Another wing (optional).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Rooms that two wings share (or that any two wings share)."""
    result = call_daemon("tunnels", wing_a=wing_a, wing_b=wing_b)
    if emit(result, json_):
        return
    if not result["tunnels"]:
        note("No shared rooms.")
    for t in result["tunnels"]:
        write_stdout(f"{t['room']}\t{', '.join(t['wings'])}\t{t['drawers']} drawer(s)\n")


@memory_app.command("rebuild")
def memory_rebuild(
    vectors: Annotated[bool, typer.Option("--vectors", help="Also re-embed every drawer (minutes for a large "
                                                           "palace; search falls back to keywords meanwhile).")] = False,
    json_: JsonOpt = False,
) -> None:
    """Derive the memory views (drawers, facts, diaries) again from the log."""
    views_bar = ProgressBar("memory views", enabled=None if not json_ else False)
    if not json_ and not views_bar.enabled:
        note("Rebuilding the memory views from the log…")
    result: dict[str, Any] = _follow(lambda: call_daemon("memory_rebuild", vectors=vectors or None), views_bar,
                                           lambda status: status["memory"]["rebuild"])
    views_bar.update(result["events"], result["events"], force=True)
    views_bar.close()
    if emit(result, json_):
        return
    write_stdout(f"Rebuilt from {result['events']} memory event(s): {result['drawers']} drawer(s), "
                 f"{result['facts']} fact(s) in {result['seconds']:.2f} s\n")
    if result.get("vectors_reset"):
        embedding = result["embedding"] or {}
        write_stdout(f"Re-embedding {embedding.get('pending', 0):,} drawer(s) in the background; "
                     "`palacectl status` shows how many remain.\n")
        _follow_embedding()
    elif vectors:
        note("Vectors are off on this daemon ([memory] embed = false): nothing to re-embed.")


def _follow(call: Callable[[], Any], bar: ProgressBar, progress_of: Callable[[dict[str, Any]], Any]) -> Any:
    """Run ``call`` (one request that takes a while) while a second connection polls ``status``
    for its progress and draws it; without a terminal, just run it."""
    if not bar.active:
        return call()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as exc:  # re-raised in the calling thread, where it is reported
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="palacectl-call", daemon=True)
    worker.start()
    with Client(current_home()) as poller:
        while worker.is_alive():
            progress = progress_of(poller.call("status"))
            if progress and progress.get("total"):
                bar.update(progress["done"], progress["total"])
            worker.join(0.2)
    if "error" in outcome:
        bar.close()
        raise outcome["error"]
    return outcome["result"]


# Why 20 polls (10 s): how long the bar waits with nothing pending for the index to reach every drawer.
SETTLED_POLLS: Final = 20


def _follow_embedding() -> None:
    """On a terminal, draw the background re-embedding until it is done (Ctrl-C stops watching
    only; the daemon carries on)."""
    bar = ProgressBar("embedding")
    if not bar.enabled:  # a script gets its answer at once; re-embedding goes on in the background
        return
    try:
        idle = 0
        with Client(current_home()) as poller:
            while True:
                memory = poller.call("status")["memory"]
                embedding = memory["embedding"] or {}
                indexed, pending = embedding.get("indexed", 0), embedding.get("pending", 0)
                # Every drawer is what is due: until the daemon's worker has taken the reset in, its
                # counts may still be the old index's (a busy machine: the model loads for seconds).
                total = max(indexed + pending, memory.get("drawers") or 0)
                bar.update(indexed, total, force=True)
                if embedding.get("error"):
                    bar.close()
                    fail(f"embedding stopped: {embedding['error']}")
                idle = idle + 1 if not pending else 0
                # (A drawer that cannot be embedded — its text gone — is never indexed: 10 s of
                # nothing pending ends the bar all the same.)
                if not pending and (indexed >= total or idle >= SETTLED_POLLS):
                    break
                time.sleep(0.5)
    except KeyboardInterrupt:
        bar.close()
        note("Stopped watching; the daemon goes on embedding.")
        return
    bar.close()


COMMANDS: Final = {"remember": remember, "search": search, "tunnels": tunnels}
GROUPS: Final = {"kg": kg_app, "diary": diary_app, "memory": memory_app}
