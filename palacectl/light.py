"""MemPalace's light tool surface on palace: three tools that take a command string or fields.

Owns: reading a call to ``palace_query`` (reads), ``palace_exec`` (writes) or
``palace_coordinate`` (the log, and whatever the features add) — MemPalace 3.10's
``mempalace-light-mcp`` surface — into the ``mempalace_*`` tool of palace that does the work, with
that tool's arguments (``LightCall``); or a ``LightError`` saying why it cannot. The core reads the
log's verbs (``EVENT …``, ``INBOX``) and the shape every call shares; each feature declares its
own (``Feature.light``: its first words, its verbs (``Verb``), front tools it reads whole, the fields and
words these add to the tools' schemas and descriptions), put together in ``Tables``. Pure: stdlib
and ``palace_proto`` only (an append's fields: ``palacectl.event_options``), no IO; ``mcp_adapter`` routes
the call (``mcp_server.Route``), so the routed tool's checks,
identity rules, read-only gates and result shapes are exactly the full tool's.

Theory of operation
-------------------
A light call is either a command string (``EVENT LIST to: bob LIMIT 5``), in ``query``
(``palace_query``) or ``command`` (the other two; a lone ``input``/``dsl``/``pql``/... key is read
the same way), or structured fields (``{"action": "event_list", "to": "bob"}``), or both: the
fields beside a command are merged into it (the command wins in query and exec, the fields win in
coordinate: MemPalace's rule). A command is split into tokens: whitespace separates, ``"…"`` and
``'…'`` quote (with ``\\n``, ``\\t``, ``\\"`` escapes), ``->`` and ``=>`` stand alone, and pairs are
written ``key:value``, ``key: value`` or ``KEY value`` (an upper-case keyword). Unquoted values are
typed: true/false/null, numbers, JSON objects and lists.

A coordinate command's first word picks its reader (the core's or a feature's ``WORDS``); a call of
fields alone names its verb in ``action`` (a ``Verb``'s ``actions``), or one is inferred from the
keys it gives (the core's verbs first, then the features' in their order; none: a listing). Then every verb's
renames apply (``from``, and the short names of ``event_options.SHORT_NAMES``), its own, and its required fields are
checked. On ``EVENT LIST``/``INBOX``/``EVENT WAIT``, ``from:`` is the author filter (``writer``);
elsewhere it is the caller (``from_agent``), as in MemPalace 3.11. ``INBOX`` lists newest first
(without a cursor) with previews. A verb whose MemPalace tool palace does not offer is a
``LightError`` naming palace's way instead (docs/mempalace.md lists them).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .event_options import APPEND_FIELDS, JSON_TYPES, SHORT_NAMES
from .feature import load

if TYPE_CHECKING:
    from .feature import Features

__all__ = [
    "COMMAND_KEYS", "CORE_VERBS", "LIGHT_TOOLS", "LightCall", "LightError", "Quoted", "Reader", "Tables", "Verb",
    "pairs", "read_light_call", "rename", "require", "tables", "tokenize", "typed",
]

#: the three tools, and the word MemPalace uses for each in its parse errors
LIGHT_TOOLS: Final = {"palace_query": "query", "palace_exec": "exec", "palace_coordinate": "coordinate"}
#: keys that may hold the command string (MemPalace's wrapper keys)
COMMAND_KEYS: Final = ("command", "query", "input", "dsl", "pql", "expression", "text", "prompt", "raw")
# Why 20,000 characters: a command carries at most a message or a small patch inline; a bigger one
# goes through the full tools (mempalace_patch_submit takes up to the artifact limit).
MAX_COMMAND_CHARS: Final = 20_000
_DATE_RE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}([T ].*)?$")
# Keywords that take the next token as their value even when that token is upper case.
_KEYS: Final = frozenset("""STREAM ROOM TOPIC TYPE STATUS FROM TO LIMIT SINCE BEFORE CORRELATION ORDER PROJECT GOAL
    BRANCH BASE DONE CONTENT KIND TIMEOUT AGENT TO_AGENT FROM_AGENT CORRELATION_ID SINCE_EVENT_ID BEFORE_EVENT_ID
    BASE_COMMIT TIMEOUT_MS CREATED_BY EVENT_ID ARTIFACT_ID ID BY DIFF EVENT_TYPE SINCE_ID BEFORE_ID SINCE_CREATED_AT
    WING BODY WRITER NAME AGENDA OUTCOME ROOM_ID METADATA""".split())
_BARE_FLAGS: Final = frozenset({"APPLY", "COMMIT", "PREVIEW", "DRY_RUN"})
_DESC_WORDS: Final = frozenset({"desc", "latest", "recent", "tail"})
_ASC_WORDS: Final = frozenset({"asc", "head", "oldest", "from_start"})
_ORDER_FLAGS: Final = frozenset(w.upper() for w in _DESC_WORDS | _ASC_WORDS)

class LightError(ValueError):
    """A light call palace cannot read: the message is MemPalace's where it has one."""


@dataclasses.dataclass(frozen=True)
class LightCall:
    """The full tool a light call runs, with its arguments (unknown ones are the router's to drop)."""

    tool: str
    arguments: dict[str, Any]


class Quoted(str):
    """A token written in quotes: content, never a keyword."""


def tokenize(text: str) -> list[str]:
    """``text`` as tokens (see the module docstring); quoted ones are ``Quoted``."""
    tokens: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "\"'":
            out: list[str] = []
            i += 1
            while i < n and text[i] != ch:
                if text[i] == "\\" and i + 1 < n:
                    nxt = text[i + 1]
                    out.append({"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt if nxt in "\"'\\" else "\\" + nxt))
                    i += 2
                    continue
                out.append(text[i])
                i += 1
            i += 1  # the closing quote (an unclosed one ends at the end)
            tokens.append(Quoted("".join(out)))
        elif text.startswith(("->", "=>"), i):
            tokens.append(text[i:i + 2])
            i += 2
        elif ch == ":" and (i + 1 == n or text[i + 1].isspace()):
            tokens.append(":")
            i += 1
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in "\"'" and not text.startswith(("->", "=>"), i):
                if text[i] == ":" and (i + 1 == n or text[i + 1].isspace()):
                    break
                i += 1
            tokens.append(text[start:i])
    return tokens


def typed(token: str) -> Any:
    """An unquoted value typed (true/false/null, a number, JSON); a quoted one as written."""
    if isinstance(token, Quoted):
        return str(token)
    lower = token.lower()
    if lower in ("true", "false"):
        return lower == "true"
    if lower in ("null", "none"):
        return None
    try:
        return float(token) if "." in token else int(token)
    except ValueError:
        pass
    if token[:1] + token[-1:] in ("{}", "[]"):
        try:
            return json.loads(token)
        except ValueError:
            pass
    return token


def pairs(tokens: list[str], bare: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``key:value`` / ``key: value`` / ``key : value`` / ``KEY value`` pairs, and bare upper-case
    flags (true). Keys are lower-cased."""
    flags = _BARE_FLAGS | bare
    out: dict[str, Any] = {}
    i, n = 0, len(tokens)
    while i < n:
        tok = tokens[i]
        quoted = isinstance(tok, Quoted)
        if not tok or tok == ":":
            i += 1
        elif not quoted and tok.endswith(":") and i + 1 < n:
            out[tok[:-1].strip().lower()] = typed(tokens[i + 1])
            i += 2
        elif not quoted and ":" in tok and not tok.startswith(("http://", "https://")):
            key, value = tok.split(":", 1)
            if key.strip():
                out[key.strip().lower()] = typed(value)
            i += 1
        elif not quoted and i + 2 < n and tokens[i + 1] == ":":
            out[tok.lower()] = typed(tokens[i + 2])
            i += 3
        elif (not quoted and tok.isupper() and tok not in flags and i + 1 < n and tokens[i + 1] != ":"
              and (isinstance(tokens[i + 1], Quoted) or tok in _KEYS or tokens[i + 1].upper() not in flags)):
            out[tok.lower()] = typed(tokens[i + 1])
            i += 2
        elif not quoted and tok.isupper() and tok not in ("->", "=>"):
            out[tok.lower()] = True
            i += 1
        else:
            i += 1
    return out


def rename(args: dict[str, Any], old: str, new: str) -> None:
    """``old`` becomes ``new`` unless ``new`` is given already (then ``old`` is dropped)."""
    if old in args:
        value = args.pop(old)
        args.setdefault(new, value)


def require(args: Mapping[str, Any], verb: str, fields: tuple[str, ...]) -> None:
    for field in fields:
        if args.get(field) in (None, ""):
            raise LightError(f"{verb} missing required field: '{field}'")


def _command_of(arguments: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """(the command string, the other fields). A command is the first wrapper key holding a
    non-empty string; a JSON object in it is read as fields."""
    # A blank command is no command (MemPalace reads an empty query as STATUS).
    fields = {k: v for k, v in arguments.items() if not (k in COMMAND_KEYS and isinstance(v, str) and not v.strip())}
    for key in COMMAND_KEYS:
        value = fields.get(key)
        if isinstance(value, str) and value.strip():
            del fields[key]
            text = value.strip()
            if len(text) > MAX_COMMAND_CHARS:
                raise LightError(f"the command is {len(text):,} characters; at most {MAX_COMMAND_CHARS:,} (send big "
                                 "content through the full tools)")
            if text.startswith("{"):
                try:
                    decoded = json.loads(text)
                except ValueError:
                    decoded = None
                if isinstance(decoded, dict):
                    return None, {**decoded, **fields}
            return text, fields
    return None, fields


# -- palace_coordinate ----------------------------------------------------------------------------


class Verb(NamedTuple):
    """One thing ``palace_coordinate`` does: the full tool ``mempalace_<name>``, and how a call to it
    is read (a feature's light module declares its own in ``VERBS``)."""

    name: str
    #: what a call's ``action`` (or ``target``) field may say to mean it
    actions: tuple[str, ...] = ()
    #: (a key a call may use, the tool's argument it is), in order, after the ones every verb has
    renames: tuple[tuple[str, str], ...] = ()
    #: the arguments it cannot run without (MemPalace's error names the first missing)
    required: tuple[str, ...] = ()
    #: a call with no action means this verb when its fields hold all the keys of one of these
    infer: tuple[frozenset[str], ...] = ()


#: the listing verbs: ``from:`` is their author filter (``writer``), their cursors are read
_LISTING: Final = frozenset({"event_list", "inbox", "event_wait"})
#: the core's verbs: the log (``inbox`` is ``event_list`` newest first, with previews)
CORE_VERBS: Final = (
    Verb("event_append", ("event", "append_event", "event_append", "emit"), (("event_type", "type"),),
         ("type", "stream", "room"), (frozenset({"event_type"}), frozenset({"stream", "room", "type"}))),
    Verb("event_list", ("events", "list_events", "event_list", "logstream")),
    Verb("inbox", ("inbox", "event_inbox")),
    Verb("event_wait", ("event_wait", "wait"), (("timeout", "timeout_ms"),)),
    Verb("event_ack", ("ack", "event_ack"), (("id", "event_id"),), ("event_id",)),
)
#: what the core's verbs add to ``palace_coordinate``'s description and its schema's fields
CORE_USAGE: Final = ("'INBOX'", "'EVENT LIST|WAIT to: from:(author) since_id: LIMIT n'",
                     "'EVENT APPEND type: stream: room: to: body:'", "'EVENT ACK id: status:'")
#: the fields a call of the core's verbs may give, by JSON type: an append's (``event_options``) and
#: a listing's
CORE_FIELDS: Final = {
    "action": "string", **{f.option: JSON_TYPES[f.wire] for f in APPEND_FIELDS if f.option}, "writer": "string",
    "since_event_id": "string", "before_event_id": "string", "since_created_at": "string", "order": "string",
    "limit": "integer", "preview": "boolean", "timeout_ms": "number", "event_id": "string",
}


def _event_words(tokens: list[str]) -> tuple[str, dict[str, Any]] | None:
    """The core's words: ``EVENT APPEND|LIST|FIND|WAIT|ACK|INBOX``, ``INBOX``, ``EVENTS``, ``LOGSTREAM``."""
    first = tokens[0].upper()
    second = tokens[1].upper() if len(tokens) > 1 else ""
    rest = tokens[2:]
    if first == "INBOX" or (first == "EVENT" and second == "INBOX"):
        return "inbox", pairs(tokens[1:] if first == "INBOX" else rest, _ORDER_FLAGS)
    if first in ("LOGSTREAM", "EVENTS"):
        return "event_list", pairs(tokens[1:], _ORDER_FLAGS)
    if second in ("APPEND", "EMIT", "POST"):
        return "event_append", pairs(rest)
    if second in ("LIST", "FIND"):
        return "event_list", pairs(rest, _ORDER_FLAGS)
    if second == "WAIT":
        return "event_wait", pairs(rest)
    if second == "ACK":
        return "event_ack", pairs(rest)
    return None


CORE_WORDS: Final[dict[str, Callable[[list[str]], tuple[str, dict[str, Any]] | None]]] = {
    "EVENT": _event_words, "INBOX": _event_words, "LOGSTREAM": _event_words, "EVENTS": _event_words,
}


def _read_coordinate(tables: Tables, command: str | None, fields: dict[str, Any]) -> LightCall:
    if command is not None:
        tokens = tokenize(command)
        args: dict[str, Any]
        if not tokens:
            verb, args = "event_list", {}
        else:
            reader = tables.words.get(tokens[0].upper())
            found = reader(tokens) if reader is not None else None
            if found is None:
                raise LightError(f"Unrecognized palace_coordinate command: '{tokens[0].upper()}'")
            verb, args = found
        # Fields beside a command win in coordinate (MemPalace's rule); `from` and `to` keep their
        # meaning for the verb (below).
        for key, value in fields.items():
            if key not in ("action", "target"):
                args[key] = value
    else:
        args = dict(fields)
        action = str(args.pop("action", None) or args.pop("target", None) or tables.infer(args)).lower()
        found_verb = tables.actions.get(action)
        if found_verb is None:
            raise LightError(f"Unknown palace_coordinate action: '{action}'")
        verb = found_verb
    listing = verb in _LISTING
    if listing:
        # MemPalace 3.11: on a list or a wait, `from` filters by author; from_agent is the caller.
        rename(args, "from", "writer")
    else:
        rename(args, "from", "from_agent")
    for short, name in SHORT_NAMES.items():
        rename(args, short, name)
    spec = tables.verbs[verb]
    for old, new in spec.renames:
        rename(args, old, new)
    if listing:
        _cursors(args, verb)
    if verb == "inbox":
        verb = "event_list"
        if "order" not in args and not args.get("since_event_id"):
            args["order"] = "desc"
        args.setdefault("preview", True)
    if verb == "event_list":
        _order(args)
    if "preview" in args:
        args["preview"] = bool(args["preview"])
    require(args, spec.name.replace("_", " ").upper(), spec.required)
    return LightCall(f"mempalace_{verb}", args)


def _cursors(args: dict[str, Any], verb: str) -> None:
    """The cursor spellings of a list or a wait, as MemPalace reads them."""
    for flag in list(args):
        if flag in _DESC_WORDS | _ASC_WORDS and args[flag] is True:
            del args[flag]
            args.setdefault("order", "desc" if flag in _DESC_WORDS else "asc")
    rename(args, "since_id", "since_event_id")
    rename(args, "before_id", "before_event_id")
    if "since" in args and "since_event_id" not in args and "since_created_at" not in args:
        since = str(args.pop("since"))
        if since.startswith("evt_") or verb == "event_wait":
            args["since_event_id"] = since
        elif _DATE_RE.match(since):
            args["since_created_at"] = since
        else:
            raise LightError("EVENT LIST since: is ambiguous; use since_id:<event_id> or a YYYY-MM-DD timestamp")
    args.pop("since", None)
    if "before" in args and "before_event_id" not in args:
        before = str(args.pop("before"))
        if not before.startswith("evt_"):
            raise LightError("EVENT LIST before: is not a resume cursor; use before_id:<event_id>")
        args["before_event_id"] = before
    args.pop("before", None)


def _order(args: dict[str, Any]) -> None:
    order = args.get("order")
    if order is None:
        return
    word = str(order).strip().lower()
    word = "desc" if word in _DESC_WORDS else "asc" if word in _ASC_WORDS else word
    if word not in ("asc", "desc"):
        raise LightError(f"Invalid order '{word}'; must be 'asc' or 'desc'")
    args["order"] = word


# -- the features' verbs, and the entry point ------------------------------------------------------

#: a front tool's reader: (the command, the other fields) -> the call it runs
Reader = Callable[[str | None, dict[str, Any]], LightCall]


class Tables:
    """What the core and ``features`` read light calls with, put together once
    (``Features.memo``). A feature's light module (``Feature.light``) may hold:

    * ``WORDS``: a command's first word -> (its tokens) -> (verb, arguments), or None when the
      rest is none of its (``palace_coordinate``);
    * ``VERBS``: its verbs (``Verb``);
    * ``USAGE``: its words in ``palace_coordinate``'s description;
    * ``READERS``: a whole front tool it reads (``palace_query``, ``palace_exec``) -> its ``Reader``;
    * ``DESCRIPTIONS``: those tools' descriptions;
    * ``FIELDS``: a front tool -> the fields a call may give (name -> JSON type), for its schema;
    * ``COMMANDS``: a front tool it reads whole -> the first words (one or two, upper case) of the
      commands it takes; ``ACTIONS``: the same for the ``action`` (or ``target``) of a call of fields.
      The words of ``WORDS`` and the actions of ``VERBS`` are ``palace_coordinate``'s.

    What these say each tool takes lets a call to one tool of a command another takes be refused
    naming that tool (``taker``), instead of being read as something else (issue 47 §1.3:
    ``palace_query "INBOX to: me"`` searched for those words).

    Raises:
        ValueError: two (the core, or features) declare one first word, verb, action or reader.
    """

    def __init__(self, features: Features) -> None:
        self.words: dict[str, Callable[[list[str]], tuple[str, dict[str, Any]] | None]] = dict(CORE_WORDS)
        self.verbs: dict[str, Verb] = {verb.name: verb for verb in CORE_VERBS}
        self.readers: dict[str, Reader] = {}
        self.descriptions: dict[str, str] = {}
        self.usage: list[str] = list(CORE_USAGE)
        self.fields: dict[str, dict[str, str]] = {"palace_coordinate": dict(CORE_FIELDS)}
        #: a command's first words, or a call's action -> the front tools that take it
        self.commands: dict[str, set[str]] = {word: {"palace_coordinate"} for word in self.words}
        self.action_tools: dict[str, set[str]] = {}
        owner: dict[str, str] = {f"word {w}": "the core" for w in self.words} | {f"verb {v}": "the core"
                                                                               for v in self.verbs}
        inferred: list[tuple[str, tuple[frozenset[str], ...]]] = []

        def claim(what: str, who: str) -> None:
            if what in owner:
                raise ValueError(f"{owner[what]} and {who} both declare the light {what}")
            owner[what] = who

        for feature in features:
            if feature.light is None:
                continue
            module, who = load(feature.light), f"feature {feature.name}"
            for word, reader in getattr(module, "WORDS", {}).items():
                claim(f"word {word}", who)
                self.words[word] = reader
            for verb in getattr(module, "VERBS", ()):
                claim(f"verb {verb.name}", who)
                self.verbs[verb.name] = verb
                inferred.append((verb.name, verb.infer))
            for tool, reader in getattr(module, "READERS", {}).items():
                claim(f"reader {tool}", who)
                self.readers[tool] = reader
            self.descriptions.update(getattr(module, "DESCRIPTIONS", {}))
            self.usage.extend(getattr(module, "USAGE", ()))
            for tool, fields in getattr(module, "FIELDS", {}).items():
                for name, kind in fields.items():
                    self.fields.setdefault(tool, {}).setdefault(name, kind)
            for word in getattr(module, "WORDS", {}):
                self.commands.setdefault(word, set()).add("palace_coordinate")
            for tool, words in getattr(module, "COMMANDS", {}).items():
                for word in words:
                    self.commands.setdefault(word, set()).add(tool)
            for tool, names in getattr(module, "ACTIONS", {}).items():
                for name in names:
                    self.action_tools.setdefault(name, set()).add(tool)
        # The core's verbs are inferred first, then the features' in their order; a call that names
        # nothing lists.
        self._inferred = [*((verb.name, verb.infer) for verb in CORE_VERBS), *inferred]
        self.actions: dict[str, str] = {}
        for verb in self.verbs.values():
            for action in verb.actions:
                claim(f"action {action}", f"verb {verb.name}")
                self.actions[action] = verb.name
                self.action_tools.setdefault(action, set()).add("palace_coordinate")

    def __repr__(self) -> str:
        return f"<light.Tables words={len(self.words)} verbs={len(self.verbs)} readers={sorted(self.readers)}>"

    def taker(self, tool: str, command: str | None, fields: Mapping[str, Any]) -> tuple[str, str] | None:
        """(the words, the tool) when a call to ``tool`` is of a command or an action that another
        light tool takes and ``tool`` does not; else None. Only a verb written as the commands write
        them (unquoted, upper case) counts: ``palace_query`` reads any other words as words to find."""
        if command is not None:
            tokens = tokenize(command)[:2]
            words = []
            for token in tokens:
                if isinstance(token, Quoted) or not token.isupper():
                    break
                words.append(token)
            for n in (2, 1):
                said = " ".join(words[:n])
                if len(words) >= n and said in self.commands:
                    return _other(tool, said, self.commands[said])
            return None
        action = fields.get("action") or fields.get("target")
        if isinstance(action, str) and action.strip().lower() in self.action_tools:
            said = action.strip().lower()
            return _other(tool, said, self.action_tools[said])
        return None

    def infer(self, fields: Mapping[str, Any]) -> str:
        """The action a call with no ``action`` means, from the fields it gives."""
        keys = set(fields)
        for verb, keysets in self._inferred:
            if any(needed <= keys for needed in keysets):
                return verb
        return "event_list"

    def description(self, tool: str) -> str:
        """What a front tool's description says (``palace_coordinate``'s: every verb's words)."""
        if tool == "palace_coordinate":
            return f"Coordinate: {', '.join(self.usage)}."
        return self.descriptions.get(tool, f"{tool}: nothing here reads it.")

    def schema(self, tool: str) -> dict[str, Any]:
        """A front tool's input schema: its command string and the fields a call may give instead
        (any other key is accepted and routed or dropped, as MemPalace does)."""
        command = "query" if tool == "palace_query" else "command"
        properties: dict[str, Any] = {command: {"type": "string"}}
        properties.update({name: {"type": kind} for name, kind in self.fields.get(tool, {}).items()})
        return {"type": "object", "properties": properties}


def _other(tool: str, said: str, tools: set[str]) -> tuple[str, str] | None:
    """(``said``, the tool that takes it) unless ``tool`` takes it too (the first in MemPalace's order)."""
    if tool in tools:
        return None
    return said, min(tools, key=list(LIGHT_TOOLS).index)


def tables(features: Features | None = None) -> Tables:
    """The light tables of ``features`` (by default palacectl's, ``palacectl.features``)."""
    if features is None:
        from .features import features as registry

        features = registry()
    return features.memo("light", Tables)


def read_light_call(tool: str, arguments: Mapping[str, Any], features: Features | None = None) -> LightCall:
    """The full tool a call to light ``tool`` runs, with its arguments (read with ``features``'
    verbs: by default palacectl's).

    Raises:
        LightError: the call cannot be read (MemPalace's words where it has them), or names
            something palace does not offer (and what to use instead).
    """
    light = tables(features)
    command, fields = _command_of(arguments)
    taken = light.taker(tool, command, fields)
    if taken is not None:
        said, other = taken
        kind = "command" if command is not None else "action"
        key = "query" if other == "palace_query" else "command"
        how = f" with {key}: {json.dumps(command, ensure_ascii=False)[:200]}" if command else ""
        raise LightError(f"{said} is {other}'s {kind}, not {tool}'s: call {other}{how}")
    try:
        if tool == "palace_coordinate":
            return _read_coordinate(light, command, fields)
        reader = light.readers.get(tool)
        if reader is None:
            raise LightError(f"{tool}: nothing here reads it")
        return reader(command, fields)
    except (ValueError, TypeError, RecursionError) as exc:
        if isinstance(exc, LightError):
            raise
        raise LightError(f"cannot read the command: {exc}") from None
