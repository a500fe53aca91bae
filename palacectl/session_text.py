"""The session-start block as text: what ``palacectl session start`` prints and a harness hook
puts into an agent's context (and what the MCP tool carries next to its JSON).

Owns: ``render_session``, the daemon's ``session_start`` reply as plain Markdown-ish text, one
line per item, each section capped by the daemon and saying how many it left out. Pure.
"""

from __future__ import annotations

from typing import Any

from .output import agent_label

__all__ = ["render_session"]


def _more(section: dict[str, Any], noun: str) -> str:
    return f"  … and {section['more']} more {noun}\n" if section.get("more") else ""


def render_session(s: dict[str, Any]) -> str:
    """The session block: plain Markdown-ish text, one line per item, every section capped."""
    agent = s["agent"]
    ident = s["identity"]
    where = ("belongs to this daemon" if ident["here"] else f"belongs to {ident['elsewhere']}" if ident["elsewhere"]
             else "was retired" if ident["retired"]
             else "is not registered yet (your first write registers it here)" if ident.get("registers", True)
             # A daemon in no palace registers nobody; said so, or the line repeats after every write.
             else "is not registered: this daemon is in no palace yet, so ids register at their first write "
                  "after `palacectl init` (or `join`), to this daemon")
    lines = [f"# palace session for {agent} ({s['now'][:19]}Z)\n", f"Identity: {agent} {where}.\n"]
    inbox = s["inbox"]
    unread = f"{inbox['unread']}{'+' if inbox['unread_capped'] else ''}"
    lines.append(f"\n## Inbox: {unread} unread (cursor {inbox['cursor']['read_event_id'] or 'at the start'})\n")
    for e in inbox["items"]:
        flag = f" !! {e['impersonation']}" if e.get("impersonation") else ""
        lines.append(f"- {e['id']} {e['type']} from {agent_label(e['from_agent'])}"
                     f"{' [' + e['status'] + ']' if e.get('status') else ''}"
                     f"{' ' + e['correlation_id'] if e.get('correlation_id') else ''}: {e['body']}{flag}\n")
    lines.append(_more(inbox, "unread"))
    for key, title in (("stalled", "Stalled"), ("open_loops", "Open loops")):
        section = s[key]
        if section["items"] or section["more"]:
            lines.append(f"\n## {title}\n")
            for t in section["items"]:
                lines.append(f"- {t['correlation_id']} ({t['role']}, {t['state']}"
                             f"{', claimed by ' + t['claimed_by'] if t['claimed_by'] and t['role'] != 'claimant' else ''}"
                             f"): {t['goal']}\n")
            lines.append(_more(section, "tasks"))
    if s["leases"]["items"] or s["lost_leases"]["items"]:
        lines.append("\n## Leases\n")
        for lease in s["leases"]["items"]:
            lines.append(f"- {lease['id']} {', '.join(lease['patterns'])} ({lease['mode']}, {lease['project']}) "
                         f"until {lease['expires_at'][:19]}Z\n")
        for lease in s["lost_leases"]["items"]:
            lines.append(f"- LOST {lease['id']} {', '.join(lease['patterns'])} ({lease['end']}; "
                         f"{lease['holder_now'] or 'another agent'} holds it now): stop editing those paths\n")
    rooms = s.get("rooms") or []  # (a daemon before rooms sends none)
    if rooms:
        lines.append("\n## Your open rooms\n")
        for room in rooms:
            lines.append(f"- {room['room_id']} ({room['project']}): {room['unread']} unread; "
                         f"`palacectl room read {room['room_id']} --agent {agent}`\n")
    if s["diary"]["items"]:
        lines.append(f"\n## Your diary (last {len(s['diary']['items'])} of {s['diary']['total']})\n")
        for entry in s["diary"]["items"]:
            lines.append(f"- {entry['date']}{' ' + entry['topic'] if entry['topic'] else ''}: {entry['content']}\n")
    watching = s["watching"]
    lines.append("\n## Watching now\n")
    if watching["items"]:
        lines.append("- " + ", ".join(f"{agent_label(w['agent'])} ({w['on']}{', worker' if w['worker'] else ''})"
                                      for w in watching["items"])
                     + (f", and {watching['more']} more" if watching["more"] else "") + "\n")
    else:
        lines.append("- nobody\n")
    if not s["you_are_watching"]:
        lines.append(f"- you ({agent}) are not watching here\n")
    lines.append(f"\n{s['next']}\n")
    return "".join(lines)
