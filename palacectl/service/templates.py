"""The service templates and their rendering: a systemd user unit and a launchd LaunchAgent plist.

Owns: loading the templates shipped in ``palacectl/data/service/`` (their readable twins are
``systemd/palaced.service`` and ``launchd/dev.palace.palaced.plist`` at the top of the repository;
a test keeps each pair identical), dropping their template-only notes, and filling in the palaced
command, the home and the log folder, escaped for each format. A path either format cannot carry
safely is refused with one error line. Pure apart from reading the packaged template.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ..output import fail
from .host import LAUNCHD_LABEL, SYSTEMD_UNIT, Platform

__all__ = ["load_template", "render_launchd_plist", "render_systemd_unit"]

_TEMPLATE_NAMES: Final[dict[Platform, str]] = {"systemd": SYSTEMD_UNIT, "launchd": f"{LAUNCHD_LABEL}.plist"}
# Template-only notes, dropped at render time: "#:" lines (systemd), one "<!--: ... -->" block (plist).
_PLIST_NOTE: Final = re.compile(r"<!--:.*?-->\n", re.DOTALL)
# A word systemd reads literally without quotes (the rest is double-quoted).
_SYSTEMD_PLAIN_WORD: Final = re.compile(r"[A-Za-z0-9_./:@+,=~-]+")
# The filesystem-sandbox lines of the unit template: options commented out with no space ("#Key=").
_SANDBOX_LINE: Final = re.compile(r"^#(?=[A-Z][A-Za-z]+=)", re.MULTILINE)


def load_template(platform: Platform) -> str:
    """The packaged template, exactly as shipped."""
    from importlib import resources

    try:
        template = resources.files("palacectl") / "data" / "service" / _TEMPLATE_NAMES[platform]
        return template.read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"the {platform} template is missing from this palacectl installation: {exc.strerror or exc}")


def _check_path(value: str, what: str, *, systemd: bool) -> None:
    """Refuse what a service file cannot carry: control characters anywhere; in a systemd unit
    also $ (expanded in ExecStart only, so no one escape fits every line), quotes and backslashes."""
    forbidden = '$"\\' if systemd else ""
    bad = sorted({c for c in value if ord(c) < 32 or ord(c) == 127 or c in forbidden})
    if bad:
        fail(f"{what} {value!r} contains {', '.join(repr(c) for c in bad)}, which a "
             f"{'systemd unit' if systemd else 'launchd plist'} cannot carry safely; use another path")


def _systemd_word(value: str) -> str:
    """One argument as systemd reads it: % doubled (specifiers), double quotes around anything
    beyond plain path characters (spaces, quotes, ;)."""
    escaped = value.replace("%", "%%")
    return escaped if _SYSTEMD_PLAIN_WORD.fullmatch(value) else f'"{escaped}"'


def render_systemd_unit(palaced: Sequence[str], home: Path, *, filesystem_sandbox: bool = True) -> str:
    """The user unit for this palaced and home (template notes dropped, placeholders filled; the
    filesystem-sandbox lines on unless ``filesystem_sandbox`` is False)."""
    for word in palaced:
        _check_path(word, "the palaced command word", systemd=True)
    _check_path(str(home), "the palace home", systemd=True)
    values = {"@PALACED@": " ".join(_systemd_word(w) for w in palaced), "@HOME@": _systemd_word(str(home))}
    text = "".join(line for line in load_template("systemd").splitlines(keepends=True) if not line.startswith("#:"))
    if filesystem_sandbox:
        text = _SANDBOX_LINE.sub("", text)
    return re.sub("|".join(map(re.escape, values)), lambda m: values[m.group(0)], text)


def render_launchd_plist(palaced: Sequence[str], home: Path, log_dir: Path) -> str:
    """The LaunchAgent plist for this palaced, home and log folder (``@PALACED@`` becomes one
    ``<string>`` per word of the command)."""
    from xml.sax.saxutils import escape

    for word in palaced:
        _check_path(word, "the palaced command word", systemd=False)
    _check_path(str(home), "the palace home", systemd=False)
    _check_path(str(log_dir), "the log folder", systemd=False)
    words = "</string>\n\t\t<string>".join(escape(w) for w in palaced)
    values = {
        "<string>@PALACED@</string>": f"<string>{words}</string>",
        "@HOME@": escape(str(home)),
        "@LOGS@": escape(str(log_dir)),
    }
    text = _PLIST_NOTE.sub("", load_template("launchd"), count=1)
    return re.sub("|".join(map(re.escape, values)), lambda m: values[m.group(0)], text)
