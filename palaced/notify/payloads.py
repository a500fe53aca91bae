"""One message to a person, and its shape for each channel.

Owns: ``Message`` (a title and a few lines for one or several things, grouped), ``render`` (things
→ message), and the bytes each channel sends: the JSON of a generic webhook, of a Slack incoming
webhook (``text``, mrkdwn escaped, no unfurling), of a Discord webhook (``content`` ≤ 2,000
characters, markdown escaped, no mentions parsed, no embeds), of an ntfy topic (JSON published to
the server's root with ``topic``, plain text); the mail (``EmailMessage``); the desktop command line
(``notify-send`` or ``osascript``, the text passed as arguments, never inside a script, and
escaped where the desktop reads markup).

Nothing here carries more than a thing's preview: never a whole body, never an artifact. What a
thing says comes from agents and members, not from palace: a channel that formats text (Discord's
markdown, Slack's mrkdwn, a notification server's markup) is sent it escaped, so that a member's
``[text](url)`` reads as those characters, never as a link hiding where it goes (issue 43).
Pure: stdlib only; no trio, no clock (``now`` is an argument where it matters).
"""

from __future__ import annotations

import dataclasses
import email.utils
import re
from collections.abc import Sequence
from email.message import EmailMessage
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from .triggers import Thing

__all__ = ["Message", "desktop_argv", "discord_escape", "email_message", "ntfy_target", "probe_message", "render",
           "webhook_body"]

# Why 10: a grouped message is read on a phone's lock screen; beyond ten lines say "and N more".
MAX_LISTED: Final = 10
# Why 2,000: Discord refuses a message whose content is longer.
DISCORD_MAX_CHARS: Final = 2000
# Why 240: a desktop notification shows two or three lines; the rest is cut by the shell anyway.
DESKTOP_MAX_CHARS: Final = 240
# Discord's SUPPRESS_EMBEDS message flag: a link in a preview is shown, never unfurled into a card
# (Discord would fetch a URL a member chose, and show what it serves).
DISCORD_SUPPRESS_EMBEDS: Final = 1 << 2
# Discord markdown: a backslash before punctuation shows the punctuation itself. Everywhere: what
# styles, hides or links text (``*_~`|``, ``[]()`` of a masked link, ``<>`` of a mention, a custom
# emoji or a timestamp) and the backslash itself; ``#``, ``-``, ``+`` and ``1.`` only start a
# heading, subtext or a list at the start of a line.
_DISCORD_SPECIAL: Final = re.compile(r"[\\*_~`|\[\]()<>]")
_DISCORD_LINE_START: Final = re.compile(r"^([ \t]*)([#+-]|\d+\.)", re.MULTILINE)
# A bare URL, left unescaped: as Discord's autolink finds one (simple-markdown's rule), but never
# holding a character that could open or close a masked link, a mention, code or a spoiler (those
# are escaped even there: a URL holding one is rare, and merely shown as text where it stops).
_DISCORD_URL: Final = re.compile(r"https?://[^\s<>\[\]()`|]+[^\s<>\[\]()`|.,:;\"']")
# ``@everyone`` and ``@here`` would ping a channel but for ``allowed_mentions``; a zero-width space
# keeps them from reading as one too.
_DISCORD_MASS_MENTION: Final = re.compile(r"@(everyone|here)\b")


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """What one person is told at once, through every channel of theirs."""

    person: str
    title: str
    text: str
    things: tuple[Thing, ...]
    #: things dropped for this person before they could be sent (the queue's bound)
    dropped: int = 0
    palace: str | None = None
    daemon: str | None = None
    test: bool = False

    @property
    def urgent(self) -> bool:
        return any(thing.kind == "question" for thing in self.things)

    def to_wire(self) -> dict[str, Any]:
        """The generic webhook's JSON."""
        return {"palace": self.palace, "daemon": self.daemon, "person": self.person, "title": self.title,
                "text": self.text, "count": len(self.things), "dropped": self.dropped, "test": self.test,
                "things": [thing.to_wire() for thing in self.things]}


def _line(thing: Thing) -> str:
    return f"{thing.title}: {thing.preview}" if thing.preview else thing.title


def render(person: str, things: Sequence[Thing], *, dropped: int = 0, palace: str | None = None,
           daemon: str | None = None) -> Message:
    """One thing: its title, preview and what to run. Several: a count, then a line each (at most
    ``MAX_LISTED``; the rest counted)."""
    things = tuple(things)
    if len(things) == 1:
        thing = things[0]
        lines = [thing.preview] if thing.preview else []
        if thing.hint:
            lines.append(f"→ {thing.hint}")
        title = thing.title
    else:
        title = f"{len(things)} things need you"
        lines = [f"• {_line(thing)}" for thing in things[:MAX_LISTED]]
        if len(things) > MAX_LISTED:
            lines.append(f"… and {len(things) - MAX_LISTED} more (`palacectl inbox --agent {person}`)")
    if dropped:
        lines.append(f"({dropped} older thing(s) were dropped: too many waiting)")
    where = f"palace {palace}" if palace else "palace"
    return Message(person=person, title=f"{where}: {title}", text="\n".join(lines), things=things, dropped=dropped,
                   palace=palace, daemon=daemon)


def probe_message(person: str, channel: str, *, palace: str | None, daemon: str | None) -> Message:
    """What ``palacectl notify test`` sends."""
    where = f"palace {palace}" if palace else "palace"
    return Message(person=person, title=f"{where}: test notification",
                   text=f"This is a test of channel {channel!r} for {person}, sent by daemon {daemon or '-'}. "
                        "If you read this, it works.",
                   things=(), palace=palace, daemon=daemon, test=True)


def _entity_escape(text: str) -> str:
    """``&``, ``<`` and ``>`` as entities: what Slack's mrkdwn reads as a link (``<url|text>``) or a
    mention (``<!channel>``), and a notification server's body markup as a tag (``<a href>``)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def discord_escape(text: str) -> str:
    """``text`` as Discord shows it literally: no style, masked link, mention, heading or list. A
    bare URL is left whole (Discord shows it as it is, and a backslash in it would change where it
    goes: browsers read one as ``/``)."""
    pieces: list[str] = []
    start = 0
    for url in _DISCORD_URL.finditer(text):
        pieces += [_discord_plain(text[start:url.start()]), url.group()]
        start = url.end()
    pieces.append(_discord_plain(text[start:]))
    # After the rest: its backslashes must not be escaped again (and no URL starts a line with these).
    return _DISCORD_LINE_START.sub(
        lambda m: m.group(1) + (m.group(2)[:-1] + "\\." if m.group(2).endswith(".") else "\\" + m.group(2)),
        "".join(pieces))


def _discord_plain(text: str) -> str:
    return _DISCORD_MASS_MENTION.sub("@\u200b\\1", _DISCORD_SPECIAL.sub(lambda m: "\\" + m.group(), text))


def ntfy_target(url: str) -> tuple[str, str]:
    """An ntfy topic URL (``https://ntfy.sh/TOPIC``) as (the server's root to publish JSON to, the
    topic); a server under a path keeps it (``https://host/ntfy/TOPIC`` → ``https://host/ntfy/``)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    root, _, topic = path.rpartition("/")
    return urlunsplit((parts.scheme, parts.netloc, root + "/", parts.query, "")), topic


def webhook_body(fmt: str, message: Message, *, url: str = "") -> dict[str, Any]:
    """The JSON a webhook of ``fmt`` (generic, slack, discord, ntfy) is sent for ``message``."""
    if fmt == "slack":
        return {"text": f"*{_entity_escape(message.title)}*\n{_entity_escape(message.text)}".rstrip(),
                "unfurl_links": False, "unfurl_media": False}
    if fmt == "discord":
        content = f"**{discord_escape(message.title)}**\n{discord_escape(message.text)}".rstrip()
        if len(content) > DISCORD_MAX_CHARS:
            content = content[: DISCORD_MAX_CHARS - 1]
            if (len(content) - len(content.rstrip("\\"))) % 2:
                content = content[:-1]  # the cut took what a backslash escaped: it would escape the "…"
            content += "…"
        return {"content": content, "username": "palace", "allowed_mentions": {"parse": []},
                "flags": DISCORD_SUPPRESS_EMBEDS}
    if fmt == "ntfy":
        _, topic = ntfy_target(url)
        # Plain text: ntfy renders markdown only when asked to (said here, in case a server's
        # default ever changes).
        return {"topic": topic, "title": message.title, "message": message.text or message.title,
                "priority": 4 if message.urgent else 3, "tags": ["palace"] + (["question"] if message.urgent else []),
                "markdown": False}
    return message.to_wire()


def email_message(message: Message, sender: str, recipients: Sequence[str], *, now: float,
                  domain: str = "palace.local") -> EmailMessage:
    """The mail for ``message`` (plain text, UTF-8)."""
    mail = EmailMessage()
    mail["Subject"] = message.title.replace("\r", " ").replace("\n", " ")
    mail["From"] = sender
    mail["To"] = ", ".join(recipients)
    mail["Date"] = email.utils.formatdate(now, usegmt=True)
    mail["Message-ID"] = email.utils.make_msgid("palace", domain=domain)
    mail["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation replies to a daemon
    footer = f"\n\n-- \nSent by palaced {message.daemon or ''} for {message.person}.".rstrip()
    mail.set_content((message.text or message.title) + footer + "\n")
    return mail


def desktop_argv(platform: str, message: Message) -> list[str] | None:
    """The command that shows ``message`` on this desktop, or None where palace has none. The text
    is an argument (``--`` ends the options; AppleScript reads ``argv``), never part of a script."""
    text = message.text if len(message.text) <= DESKTOP_MAX_CHARS else message.text[: DESKTOP_MAX_CHARS - 1] + "…"
    if platform.startswith("linux") or "bsd" in platform:
        # The body may be read as markup (the desktop notification spec's ``body-markup``, which
        # GNOME, KDE, dunst and mako offer); the summary is always plain text.
        return ["notify-send", "--app-name=palace", "--urgency=" + ("critical" if message.urgent else "normal"),
                "--", message.title, _entity_escape(text)]
    if platform == "darwin":
        return ["osascript", "-e", "on run argv", "-e",
                "display notification (item 2 of argv) with title (item 1 of argv)", "-e", "end run",
                message.title, text]
    return None
