"""The service templates and their rendering: a systemd user unit and a launchd LaunchAgent plist,
for palaced, for a worker (``palacectl worker``, one per agent) and for an integrator
(``palacectl integrate``, one per agent).

Owns: loading the templates shipped in ``palacectl/data/service/`` (their readable twins are
``systemd/palaced.service``, ``systemd/palace-worker.service``, ``systemd/palace-integrate.service``,
``launchd/dev.palace.palaced.plist``, ``launchd/dev.palace.worker.plist`` and
``launchd/dev.palace.integrate.plist`` at the top of the repository; a test keeps each pair
identical), dropping their template-only notes, and filling in the command, the home, the log
folder and (for a worker) its options, workspace and PATH, escaped for each format. A value either
format cannot carry safely is refused with one error line. Pure apart from reading the packaged
template.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal

from ..output import fail
from . import host
from .host import LAUNCHD_LABEL, SYSTEMD_UNIT, Platform

__all__ = ["load_template", "render_launchd_plist", "render_systemd_unit", "render_worker_plist",
           "render_worker_unit"]

Template = Literal["palaced", "worker", "integrate"]
_TEMPLATE_NAMES: Final[dict[tuple[Platform, Template], str]] = {
    ("systemd", "palaced"): SYSTEMD_UNIT, ("launchd", "palaced"): f"{LAUNCHD_LABEL}.plist",
    ("systemd", "worker"): "palace-worker.service", ("launchd", "worker"): "dev.palace.worker.plist",
    ("systemd", "integrate"): "palace-integrate.service", ("launchd", "integrate"): "dev.palace.integrate.plist",
}
# Template-only notes, dropped at render time: "#:" lines (systemd), one "<!--: ... -->" block (plist).
_PLIST_NOTE: Final = re.compile(r"<!--:.*?-->\n", re.DOTALL)
# A word systemd reads literally without quotes (the rest is double-quoted).
_SYSTEMD_PLAIN_WORD: Final = re.compile(r"[A-Za-z0-9_./:@+,=~-]+")
# The filesystem-sandbox lines of the unit template: options commented out with no space ("#Key=").
_SANDBOX_LINE: Final = re.compile(r"^#(?=[A-Z][A-Za-z]+=)", re.MULTILINE)


def load_template(platform: Platform, which: Template = "palaced") -> str:
    """The packaged template, exactly as shipped."""
    from importlib import resources

    try:
        template = resources.files("palacectl") / "data" / "service" / _TEMPLATE_NAMES[platform, which]
        return template.read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"the {platform} template is missing from this palacectl installation: {exc.strerror or exc}")


def _check_path(value: str, what: str, *, systemd: bool, fix: str = "use another path") -> None:
    """Refuse what a service file cannot carry: control characters anywhere; in a systemd unit
    also $ (expanded in ExecStart only, so no one escape fits every line), quotes and backslashes."""
    forbidden = '$"\\' if systemd else ""
    bad = sorted({c for c in value if ord(c) < 32 or ord(c) == 127 or c in forbidden})
    if bad:
        fail(f"{what} {value!r} contains {', '.join(repr(c) for c in bad)}, which a "
             f"{'systemd unit' if systemd else 'launchd plist'} cannot carry safely; {fix}")


def _check_worker(palacectl: Sequence[str], home: Path, args: Sequence[str], workspace: Path, path_env: str,
                  *, systemd: bool) -> None:
    """``_check_path`` on every value a worker's file carries, each named in the message."""
    for word in palacectl:
        _check_path(word, "the palacectl command word", systemd=systemd)
    _check_path(str(home), "the palace home", systemd=systemd)
    for flag, value in zip(args[::2], args[1::2], strict=False):  # the worker's options: "--flag value" pairs
        _check_path(value, f"the {flag} value", systemd=systemd, fix="choose another")
    _check_path(str(workspace), "the workspace", systemd=systemd)
    _check_path(path_env, "your PATH", systemd=systemd, fix="remove that folder from PATH, then rerun install")


def _unit_without_notes(template: str) -> str:
    """A unit template without its "#:" lines."""
    return "".join(line for line in template.splitlines(keepends=True) if not line.startswith("#:"))


def _fill(text: str, values: dict[str, str]) -> str:
    """Every placeholder of ``values`` replaced in one pass (a value is never searched again)."""
    return re.sub("|".join(map(re.escape, values)), lambda m: values[m.group(0)], text)


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
    text = _unit_without_notes(load_template("systemd", "palaced"))
    if filesystem_sandbox:
        text = _SANDBOX_LINE.sub("", text)
    return _fill(text, values)


def render_worker_unit(palacectl: Sequence[str], home: Path, args: Sequence[str], *, agent: str, workspace: Path,
                       path_env: str, command: Literal["worker", "integrate"] = "worker") -> str:
    """The user unit of one agent's worker: ``palacectl --home HOME worker ARGS`` run in
    ``workspace`` with ``path_env`` as its PATH (template notes dropped, placeholders filled).

    ``args`` are the worker's options (``--agent ID --runner NAME --workspace DIR ...``), each
    word escaped as ExecStart reads it; WorkingDirectory takes its path unquoted, to the end of
    the line, so there only % is escaped (a trailing space, which systemd would strip, is refused).
    """
    _check_worker(palacectl, home, args, workspace, path_env, systemd=True)
    if str(workspace) != str(workspace).rstrip():
        fail(f"the workspace {str(workspace)!r} ends with a space, which a systemd unit cannot carry safely; "
             "use another path")
    values = {
        "@AGENT@": agent.replace("%", "%%"),
        "@UNIT@": host.worker_service(agent, command).unit_stem,
        "@PALACECTL@": " ".join(_systemd_word(w) for w in palacectl),
        "@HOME@": _systemd_word(str(home)),
        "@ARGS@": " ".join(_systemd_word(w) for w in args),
        "@WORKSPACE@": str(workspace).replace("%", "%%"),
        "@PATH@": path_env.replace("%", "%%"),  # inside the template's double quotes
    }
    return _fill(_unit_without_notes(load_template("systemd", command)), values)


def _plist_strings(words: Sequence[str]) -> str:
    """Words as ``<string>`` elements, one a line, for a ``ProgramArguments`` array."""
    from xml.sax.saxutils import escape

    return "<string>" + "</string>\n\t\t<string>".join(escape(w) for w in words) + "</string>"


def render_launchd_plist(palaced: Sequence[str], home: Path, log_dir: Path) -> str:
    """The LaunchAgent plist for this palaced, home and log folder (``@PALACED@`` becomes one
    ``<string>`` per word of the command)."""
    from xml.sax.saxutils import escape

    for word in palaced:
        _check_path(word, "the palaced command word", systemd=False)
    _check_path(str(home), "the palace home", systemd=False)
    _check_path(str(log_dir), "the log folder", systemd=False)
    values = {
        "<string>@PALACED@</string>": _plist_strings(palaced),
        "@HOME@": escape(str(home)),
        "@LOGS@": escape(str(log_dir)),
    }
    return _fill(_PLIST_NOTE.sub("", load_template("launchd", "palaced"), count=1), values)


def render_worker_plist(palacectl: Sequence[str], home: Path, args: Sequence[str], *, agent: str, workspace: Path,
                        path_env: str, log_dir: Path, command: Literal["worker", "integrate"] = "worker") -> str:
    """The LaunchAgent plist of one agent's worker, or with ``command="integrate"`` its integrator
    (``@PALACECTL@`` and ``@ARGS@`` become one ``<string>`` per word; the log is
    ``<log_dir>/<command>-<slug>.log``)."""
    from xml.sax.saxutils import escape

    _check_worker(palacectl, home, args, workspace, path_env, systemd=False)
    _check_path(str(log_dir), "the log folder", systemd=False)
    values = {
        "<string>@PALACECTL@</string>": _plist_strings(palacectl),
        "<string>@ARGS@</string>": _plist_strings(args),
        "@LABEL@": host.worker_service(agent, command).label,
        "@SLUG@": host.worker_slug(agent),
        "@HOME@": escape(str(home)),
        "@WORKSPACE@": escape(str(workspace)),
        "@PATH@": escape(path_env),
        "@LOGS@": escape(str(log_dir)),
    }
    return _fill(_PLIST_NOTE.sub("", load_template("launchd", command), count=1), values)
