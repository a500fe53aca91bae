"""palacectl's commands on the daemon itself: ``status`` (its health) and ``digest`` (its log's).

Owns: the two commands over the core's operations of the same names. Thin commands over
``common.call_daemon``; registered on the root app by ``cli.root``; imports ``cli.common`` only.
"""

from __future__ import annotations

from typing import Any

from palace_proto.text import printable

from .. import output
from ..output import EXIT_OK, emit, write_stdout
from .common import JsonOpt, call_daemon

__all__ = ["digest", "status"]


def status(json_: JsonOpt = False) -> int:
    """Show the daemon and its health; exits 1 when something needs attention (a health check)."""
    result = call_daemon("status")
    health = result.get("health") or {"ok": True, "problems": [], "notes": []}
    if emit(result, json_):
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
    notify = result.get("notify")
    if notify:
        error = notify.get("last_error")
        write_stdout(f"  notify       {len(notify['channels'])} channel(s), {notify['sent']} sent, {notify['failed']} failed, "
                     f"{notify['dropped']} dropped, {notify['pending']} waiting"
                     + (f"; last error: {printable(error['channel'])}: {printable(error['message'], 200)}" if error else "")
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


def digest(json_: JsonOpt = False) -> None:
    """Per origin (origin_seq, head hash), and one digest of it all: equal digests, equal logs."""
    result = call_daemon("digest")
    if emit(result, json_):
        return
    output.table_header("ORIGIN", "EVENTS", "HEAD HASH")
    for o in result["origins"]:
        write_stdout(f"{o['origin']}\t{o['origin_seq']}\t{o['head_hash']}\n")
    write_stdout(f"digest\t{result['events']}\t{result['digest']}\n")
