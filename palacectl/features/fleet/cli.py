"""The fleet feature's commands: the palace's membership and its daemons.

Owns: init, invite, join (with reading an invite code safely and following the catch-up), revoke,
doctor, who, and the ``peers`` group (list, add, remove). Thin commands over
``cli.common.call_daemon``; ``join --wait`` polls on one connection of its own. The root registers
what ``COMMANDS`` and ``GROUPS`` name.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Final, Optional

import typer

from ... import output
from ...cli.common import JsonOpt, UsageProblem, call_daemon, current_home
from ...client import Client
from ...output import agent_label, emit, note, write_stdout

__all__ = ["COMMANDS", "GROUPS", "doctor", "init", "invite", "join", "peers_app", "revoke", "who"]

peers_app = typer.Typer(help="See and manage the other daemons of the palace.", invoke_without_command=True)


DaemonNameOpt = Annotated[Optional[str], typer.Option(
    "--daemon-name", help="This daemon's name in the palace (default: the host name; on join, made distinct when "
                          "another daemon bears it).")]


def init(
    palace_name: Annotated[Optional[str], typer.Option(
        "--palace-name", help="A name for the palace (default: the host name).")] = None,
    daemon_name: DaemonNameOpt = None,
    name: Annotated[Optional[str], typer.Option("--name", hidden=True)] = None,
    json_: JsonOpt = False,
) -> None:
    """Create a new palace with this daemon as its first member."""
    if name is not None:  # issue 47: it named the palace here and the daemon on join
        raise UsageProblem("--name is now two options: --palace-name NAME for the palace, --daemon-name NAME for "
                           "this daemon")
    result = call_daemon("init", palace_name=palace_name, daemon_name=daemon_name)
    emit(result, json_, f"Created palace {result['palace_id']} ({result['palace_name']})\n"
                        f"  this daemon: {result['peer_id']} ({result['name']}, {result['role']})\n"
                        f"  listening on {', '.join(result['listen']) or '-'}\n"
                        "Next: `palacectl invite` here, then `palacectl join CODE` on each other machine.")


def _parse_ttl(text: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    value, unit = text.strip()[:-1], text.strip()[-1:].lower()
    if unit.isdigit():
        value, unit = text.strip(), "s"
    if unit not in units or not value.isdigit() or int(value) == 0:
        raise UsageProblem(f"--ttl {text!r}: use a number with s, m, h or d, e.g. 24h or 7d")
    return int(value) * units[unit]


def invite(
    role: Annotated[str, typer.Option(help="member (reads and writes) or observer (reads only).")] = "member",
    ttl: Annotated[str, typer.Option(help="How long the invite stays valid: e.g. 30m, 24h, 7d.")] = "24h",
    address: Annotated[Optional[str], typer.Option(
        help="HOST:PORT where joiners reach this daemon (default: this machine's LAN address).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Print a one-line, single-use invite code for another machine (`palacectl join CODE` there)."""
    if role not in ("member", "observer"):
        raise UsageProblem("--role must be member or observer")
    result = call_daemon("invite", role=role, ttl_s=_parse_ttl(ttl), address=address)
    if not emit(result, json_, result["code"]):
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
        assert code is not None  # exactly one of them, checked above
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


def join(
    code: Annotated[Optional[str], typer.Argument(
        help="The invite code printed by `palacectl invite`, or - to read it from stdin (keeps it out of `ps` "
             "and shell history).")] = None,
    code_file: Annotated[Optional[Path], typer.Option(
        "--code-file", help="Read the invite code from this file (mode 600: the code is a secret).")] = None,
    daemon_name: DaemonNameOpt = None,
    # Before issue 47 the daemon's name; on join it can mean nothing else, so it still works.
    name: Annotated[Optional[str], typer.Option("--name", hidden=True)] = None,
    address: Annotated[Optional[str], typer.Option(
        help="Reach the inviter at this HOST:PORT instead of the one in the code.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Return only once caught up with the palace's log.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Join a palace with an invite code: this daemon gets its certificate and starts replicating.

    Pass the code as `-` (one line on stdin) or with --code-file to keep it out of `ps` and shell history.
    """
    code = _invite_code(code, code_file)
    if not code:
        raise UsageProblem("the invite code is empty; pass the code printed by `palacectl invite`")
    if name is not None and daemon_name is not None:
        raise UsageProblem("pass --daemon-name NAME only (--name is its old spelling)")
    result = call_daemon("join", code=code, daemon_name=daemon_name or name, address=address)
    if not json_:
        write_stdout(f"Joined palace {result['palace_id']} ({result['palace_name']}) as {result['role']}\n"
                     f"  this daemon: {result['peer_id']} ({result['name']})\n"
                     f"  listening on {', '.join(result['listen']) or '-'}\n")
        if result.get("renamed_from"):
            note(f"This daemon is named {result['name']}: another daemon of the palace is named "
                 f"{result['renamed_from']} already.")
    # A bar on a terminal; without one, --wait prints its own plain lines (see _follow_catch_up).
    bar = output.ProgressBar("catching up", enabled=sys.stderr.isatty() and not json_)
    if wait or bar.enabled:
        result["events"] = _follow_catch_up(bar, plain=wait and not bar.enabled and not json_)
    elif not json_:
        write_stdout("Catching up in the background; `palacectl peers` shows how far.\n")
    emit(result, json_)


def _follow_catch_up(bar: output.ProgressBar, *, plain: bool) -> int | None:
    """Until the peers we hear from hold nothing we lack: a bar on a terminal, a line every 5 s
    with ``plain``. Ctrl-C stops watching only (the daemon goes on). Returns our event count."""
    import time

    last_line = 0.0
    try:
        with Client(current_home()) as client:
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


def revoke(
    peer_id: Annotated[str, typer.Argument(help="The peer id (see `palacectl peers`).")],
    json_: JsonOpt = False,
) -> None:
    """Revoke a daemon: a signed revocation that replicates; peers refuse it from then on."""
    result = call_daemon("revoke", peer_id=peer_id)
    emit(result, json_, f"Revoked {result['revoked']} ({result['name']}); the revocation replicates to every peer.")


def doctor(json_: JsonOpt = False) -> None:
    """Check why a peer might be invisible, and say what to do (exit 1 if a check fails)."""
    result = call_daemon("doctor")
    if not emit(result, json_):
        marks = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}
        for c in result["checks"]:
            write_stdout(f"{marks[c['status']]}  {c['check']}: {c['detail']}\n")
    if not result["ok"]:
        raise typer.Exit(1)


def who(json_: JsonOpt = False) -> None:
    """Watchers connected anywhere in the palace right now (what daemons see, not what agents claim);
    a worker shows the tasks it runs; and the grants in force (what runs may do without asking)."""
    result = call_daemon("who")
    result["grants"] = call_daemon("grants")["grants"]
    if emit(result, json_):
        return
    if not result["watchers"]:
        note("No watchers connected.")
    else:
        output.table_header("AGENT", "DAEMON", "SINCE", "WATCHING")
    for w in result["watchers"]:
        daemon = w.get("daemon") or {}
        where = "here" if w.get("local") else (daemon.get("label") or daemon.get("name")
                                                  or (daemon.get("peer_id") or "?")[:7])
        if not w.get("local") and w.get("daemon_silent"):
            where += f" (silent since {w['daemon_last_heard']})"
        worker = w.get("worker")
        doing = w["filters"]
        if worker:  # a `palacectl worker`: what it runs, not what it watches
            tasks = ", ".join(worker["tasks"]) or "idle"
            doing = f"worker ({worker['runner']}, {len(worker['tasks'])}/{worker['concurrency']}): {tasks}"
            if worker.get("held"):
                doing += f"; {worker['held']}"
            if worker.get("permissions"):
                doing += f"; runs may: {worker['permissions']}"
        write_stdout(f"{agent_label(w['agent']) or '-'}\t{where}\t{w['since']}\t{doing}\n")
    if result["grants"]:  # a person's allows widened past one call (`palacectl grant list`, `grant revoke`)
        write_stdout(f"\ngrants in force ({len(result['grants'])}): requests of exactly these shapes run unasked\n")
    for g in result["grants"]:
        over = g.get(g["scope"]) if g["scope"] in ("task", "agent", "project") else None
        shape = " ".join(str(g["shape"]).split())[:120]
        write_stdout(f"{g['answer_id']}\t{shape}\tfor {g['scope']} {over or ''}\tby {g['by']}\tuntil {g['until']}\n")


@peers_app.callback()
def peers(ctx: typer.Context, json_: JsonOpt = False) -> None:
    """Every known peer: id, name, role, addresses, state, last contact and error, vectors, forks."""
    if ctx.invoked_subcommand is not None:
        return
    result = call_daemon("peers")
    if emit(result, json_):
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
    result = call_daemon("peers_add", address=address)
    emit(result, json_, f"Added static peer {result['added']}")


@peers_app.command("remove")
def peers_remove(
    address: Annotated[str, typer.Argument(help="HOST:PORT as added.")],
    json_: JsonOpt = False,
) -> None:
    """Stop dialling a static peer."""
    result = call_daemon("peers_remove", address=address)
    emit(result, json_, f"Removed static peer {result['removed']}")


COMMANDS: Final = {"init": init, "invite": invite, "join": join, "revoke": revoke, "doctor": doctor, "who": who}
GROUPS: Final = {"peers": peers_app}
