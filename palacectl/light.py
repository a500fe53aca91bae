"""MemPalace's light tool surface on palace: three tools that take a command string or fields.

Owns: reading a call to ``palace_query`` (reads), ``palace_exec`` (memory writes) or
``palace_coordinate`` (the log, tasks, artifacts, patches, peers, rooms) — MemPalace 3.10's
``mempalace-light-mcp`` surface — into the ``mempalace_*`` tool of palace that does the work, with
that tool's arguments (``LightCall``); or a ``LightError`` saying why it cannot. Pure: stdlib
only, no IO; ``mcp_adapter`` routes the call (``mcp_server.Route``), so the routed tool's checks,
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

On ``EVENT LIST``/``INBOX``/``EVENT WAIT``, ``from:`` is the author filter (``writer``); elsewhere it
is the caller (``from_agent``), as in MemPalace 3.11. ``INBOX`` lists newest first (without a
cursor) with previews. Verbs whose MemPalace tool palace does not offer (``TAXONOMY``, ``DRAWERS``,
``KG SUPERSEDE``, ``MINE``...) are a ``LightError`` naming palace's way instead
(docs/mempalace.md lists them).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["COMMAND_KEYS", "LIGHT_TOOLS", "LightCall", "LightError", "read_light_call"]

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

# MemPalace verbs palace has no tool for, and what to use instead.
_NOT_OFFERED: Final = {
    "STATUS": "palace has no status tool: use mempalace_session_start (or `palacectl status`)",
    "INFO": "palace has no status tool: use mempalace_session_start (or `palacectl status`)",
    "FILED": "palace has no filed-away tool: use FIND … SINCE <date>",
    "SETTINGS": "palace has no hook settings tool: `palacectl rules --harness NAME --hooks` installs hooks",
    "AAAK": "palace has no AAAK dialect: drawers are verbatim text",
    "TAXONOMY": "palace has no taxonomy tool: use mempalace_list_agents, or FIND … IN wing/room",
    "WINGS": "palace has no wing listing: use mempalace_list_agents (an agent is a wing)",
    "ROOMS": "palace has no memory room listing: use FIND … IN wing/room (ROOM OPEN… is palace_coordinate's)",
    "DRAWER": "palace has no drawer-by-id tool: use FIND with the drawer's words",
    "DRAWERS": "palace has no drawer listing: use FIND … IN wing/room",
    "CHECK": "palace files the same content in one wing and room as one drawer: no duplicate check is needed",
    "TRAVERSE": "palace has no graph traversal: use KG <entity> and TUNNELS",
    "FOLLOW": "palace has no tunnel following: use TUNNELS BETWEEN a AND b",
    "HALLWAYS": "palace has no hallways",
    "GRAPH": "palace has no graph statistics",
    "UPDATE": "palace's drawers are verbatim and content-addressed: ADD the new text",
    "DELETE": "palace's log and drawers are append-only: nothing is deleted",
    "TUNNEL": "palace derives tunnels from rooms two wings share: nothing to create",
    "CREATE": "palace derives tunnels from rooms two wings share: nothing to create",
    "MINE": "palace has no miner: file drawers with ADD",
    "SYNC": "palace replicates by itself: nothing to sync",
    "RECONNECT": "palace's adapter reconnects by itself",
    "CHECKPOINT": "palace has no checkpoint: ADD drawers and DIARY WRITE",
    "KG SUPERSEDE": "palace has no supersede: KG INVALIDATE the old fact, then KG ADD the new one",
    "KG STATS": "palace has no KG statistics: use KG <entity>",
    "KG TIMELINE": "palace has no KG timeline: use KG <entity> (it lists historical facts)",
}


class LightError(ValueError):
    """A light call palace cannot read: the message is MemPalace's where it has one."""


@dataclasses.dataclass(frozen=True)
class LightCall:
    """The full tool a light call runs, with its arguments (unknown ones are the router's to drop)."""

    tool: str
    arguments: dict[str, Any]


class _Quoted(str):
    """A token written in quotes: content, never a keyword."""


def tokenize(text: str) -> list[str]:
    """``text`` as tokens (see the module docstring); quoted ones are ``_Quoted``."""
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
            tokens.append(_Quoted("".join(out)))
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


def _value(token: str) -> Any:
    """An unquoted value typed (true/false/null, a number, JSON); a quoted one as written."""
    if isinstance(token, _Quoted):
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


def _pairs(tokens: list[str], bare: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``key:value`` / ``key: value`` / ``key : value`` / ``KEY value`` pairs, and bare upper-case
    flags (true). Keys are lower-cased."""
    flags = _BARE_FLAGS | bare
    out: dict[str, Any] = {}
    i, n = 0, len(tokens)
    while i < n:
        tok = tokens[i]
        quoted = isinstance(tok, _Quoted)
        if not tok or tok == ":":
            i += 1
        elif not quoted and tok.endswith(":") and i + 1 < n:
            out[tok[:-1].strip().lower()] = _value(tokens[i + 1])
            i += 2
        elif not quoted and ":" in tok and not tok.startswith(("http://", "https://")):
            key, value = tok.split(":", 1)
            if key.strip():
                out[key.strip().lower()] = _value(value)
            i += 1
        elif not quoted and i + 2 < n and tokens[i + 1] == ":":
            out[tok.lower()] = _value(tokens[i + 2])
            i += 3
        elif (not quoted and tok.isupper() and tok not in flags and i + 1 < n and tokens[i + 1] != ":"
              and (isinstance(tokens[i + 1], _Quoted) or tok in _KEYS or tokens[i + 1].upper() not in flags)):
            out[tok.lower()] = _value(tokens[i + 1])
            i += 2
        elif not quoted and tok.isupper() and tok not in ("->", "=>"):
            out[tok.lower()] = True
            i += 1
        else:
            i += 1
    return out


def _rename(args: dict[str, Any], old: str, new: str) -> None:
    """``old`` becomes ``new`` unless ``new`` is given already (then ``old`` is dropped)."""
    if old in args:
        value = args.pop(old)
        args.setdefault(new, value)


def _require(args: Mapping[str, Any], verb: str, fields: tuple[str, ...]) -> None:
    for field in fields:
        if args.get(field) in (None, ""):
            raise LightError(f"{verb} missing required field: '{field}'")


def _place(loc: Any, args: dict[str, Any]) -> None:
    """``wing/room`` (or a wing alone) into ``args``."""
    wing, _, room = str(loc).partition("/")
    args["wing"] = wing
    if room:
        args["room"] = room


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

_ACTION_TOOLS: Final = {
    "task": "task_create", "create_task": "task_create", "task_create": "task_create",
    "event": "event_append", "append_event": "event_append", "event_append": "event_append", "emit": "event_append",
    "events": "event_list", "list_events": "event_list", "event_list": "event_list", "logstream": "event_list",
    "inbox": "inbox", "event_inbox": "inbox", "event_wait": "event_wait", "wait": "event_wait",
    "ack": "event_ack", "event_ack": "event_ack", "artifact_put": "artifact_put", "artifact_get": "artifact_get",
    "patch_submit": "patch_submit", "mesh_peers": "peers", "peers": "peers",
    "room_open": "room_open", "room_read": "room_read", "room_say": "room_say", "room_close": "room_close",
}


def _coordinate_words(tokens: list[str]) -> tuple[str, dict[str, Any]]:
    """A coordinate command's verb (an ``_ACTION_TOOLS`` value) and its pairs."""
    first = tokens[0].upper()
    second = tokens[1].upper() if len(tokens) > 1 else ""
    rest = tokens[2:]
    if first in ("PEERS", "MESH", "MESH_PEERS"):
        return "peers", {}
    if first == "TASK" and second in ("CREATE", "REQUEST"):
        return "task_create", _pairs(rest)
    if first == "EVENT" and second in ("APPEND", "EMIT", "POST"):
        return "event_append", _pairs(rest)
    if first == "INBOX" or (first == "EVENT" and second == "INBOX"):
        return "inbox", _pairs(tokens[1:] if first == "INBOX" else rest, _ORDER_FLAGS)
    if first in ("LOGSTREAM", "EVENTS"):
        return "event_list", _pairs(tokens[1:], _ORDER_FLAGS)
    if first == "EVENT" and second in ("LIST", "FIND"):
        return "event_list", _pairs(rest, _ORDER_FLAGS)
    if first == "EVENT" and second == "WAIT":
        return "event_wait", _pairs(rest)
    if first == "EVENT" and second == "ACK":
        return "event_ack", _pairs(rest)
    if first == "ARTIFACT":
        if second in ("PUT", "ADD"):
            return "artifact_put", _pairs(rest)
        if second == "GET":
            if not rest:
                raise LightError("ARTIFACT GET requires artifact_id")
            return "artifact_get", {"artifact_id": str(rest[0])}
        if not second:
            raise LightError("ARTIFACT requires PUT or GET (or artifact_id)")
        return "artifact_get", {"artifact_id": str(tokens[1])}
    if first == "PATCH" and second in ("SUBMIT", "READY"):
        return "patch_submit", _pairs(rest)
    if first == "ROOM" and second in ("OPEN", "READ", "SAY", "CLOSE"):
        args = _pairs(rest)
        if second != "OPEN" and rest and not isinstance(rest[0], _Quoted) and str(rest[0]).startswith("room_"):
            args.setdefault("room_id", str(rest[0]))  # ROOM SAY room_x_1a2b3c4d body: "…"
        return f"room_{second.lower()}", args
    raise LightError(f"Unrecognized palace_coordinate command: '{first}'")


def _infer_coordinate_action(fields: Mapping[str, Any]) -> str:
    if "goal" in fields or "branch" in fields or "base_commit" in fields:
        return "task_create"
    if "event_type" in fields or {"stream", "room", "type"} <= set(fields):
        return "event_append"
    if "artifact_id" in fields:
        return "artifact_get"
    if {"kind", "content", "created_by"} <= set(fields):
        return "artifact_put"
    if "diff" in fields:
        return "patch_submit"
    if "peers" in fields or "mesh" in fields:
        return "peers"
    return "event_list"


def _read_coordinate(command: str | None, fields: dict[str, Any]) -> LightCall:
    if command is not None:
        tokens = tokenize(command)
        if not tokens:
            verb, args = "event_list", {}
        else:
            verb, args = _coordinate_words(tokens)
        # Fields beside a command win in coordinate (MemPalace's rule); `from` and `to` keep their
        # meaning for the verb (below).
        for key, value in fields.items():
            if key not in ("action", "target"):
                args[key] = value
    else:
        args = dict(fields)
        action = str(args.pop("action", None) or args.pop("target", None) or _infer_coordinate_action(args)).lower()
        verb = _ACTION_TOOLS.get(action)
        if verb is None:
            raise LightError(f"Unknown palace_coordinate action: '{action}'")
    listing = verb in ("event_list", "inbox", "event_wait")
    if listing:
        # MemPalace 3.11: on a list or a wait, `from` filters by author; from_agent is the caller.
        _rename(args, "from", "writer")
    else:
        _rename(args, "from", "from_agent")
    _rename(args, "to", "to_agent")
    _rename(args, "base", "base_commit")
    _rename(args, "correlation", "correlation_id")
    if verb == "event_ack":
        _rename(args, "id", "event_id")
    if verb == "event_append":
        _rename(args, "event_type", "type")
    if verb == "patch_submit":
        _rename(args, "diff", "content")
    if verb == "artifact_put":
        _rename(args, "by", "created_by")
    if verb == "event_wait":
        _rename(args, "timeout", "timeout_ms")
    if verb in ("room_read", "room_say", "room_close"):
        _rename(args, "id", "room_id")
        _rename(args, "room", "room_id")
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
    required = {"task_create": ("project", "to_agent", "goal", "branch", "base_commit", "done"),
                "event_append": ("type", "stream", "room"), "event_ack": ("event_id",),
                "artifact_put": ("kind", "content"), "patch_submit": ("content",),
                "room_open": ("project", "name"), "room_read": ("room_id",), "room_say": ("room_id", "body"),
                "room_close": ("room_id",)}.get(verb, ())
    _require(args, verb.replace("_", " ").upper(), required)
    return LightCall(f"mempalace_{verb}", args)


def _cursors(args: dict[str, Any], verb: str) -> None:
    """The cursor spellings of a list or a wait, as MemPalace reads them."""
    for flag in list(args):
        if flag in _DESC_WORDS | _ASC_WORDS and args[flag] is True:
            del args[flag]
            args.setdefault("order", "desc" if flag in _DESC_WORDS else "asc")
    _rename(args, "since_id", "since_event_id")
    _rename(args, "before_id", "before_event_id")
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


# -- palace_query -----------------------------------------------------------------------------------


def _read_query(command: str | None, fields: dict[str, Any]) -> LightCall:
    if command is None and not fields:
        raise LightError(f"STATUS (an empty query): {_NOT_OFFERED['STATUS']}")
    if command is None:
        args = dict(fields)
        target = str(args.pop("target", None) or args.pop("action", None) or _infer_query_target(args)).lower()
        if target in ("search", "find"):
            _rename(args, "content", "query")
            _rename(args, "text", "query")
            return LightCall("mempalace_search", args)
        if target in ("kg", "kg_query"):
            return LightCall("mempalace_kg_query", args)
        if target in ("diary", "diary_read"):
            _rename(args, "agent", "agent_name")
            return LightCall("mempalace_diary_read", args)
        if target in ("tunnels", "list_tunnels", "find_tunnels"):
            return LightCall("mempalace_find_tunnels", args)
        raise LightError(f"Unknown palace_query target: '{target}'" + _why_not(target.upper()))
    tokens = tokenize(command)
    first = tokens[0].upper() if tokens else "STATUS"
    second = tokens[1].upper() if len(tokens) > 1 else ""
    if first == "KG" and second in ("STATS", "TIMELINE"):
        raise LightError(f"KG {second}: {_NOT_OFFERED['KG ' + second]}")
    if first in _NOT_OFFERED and not (first == "CHECK" and second not in ("DUP", "DUPLICATE")):
        raise LightError(f"{first}: {_NOT_OFFERED[first]}")
    if first == "KG":
        return LightCall("mempalace_kg_query", {**_kg_query(tokens[1:]), **_without(fields, ("target", "action"))})
    if first == "DIARY":
        if len(tokens) < 2:
            raise LightError("DIARY requires agent_name (e.g. 'DIARY antigravity')")
        args: dict[str, Any] = {"agent_name": str(tokens[1])}
        i = 2
        while i < len(tokens):
            word = tokens[i].upper()
            if word in ("LAST", "LIMIT") and i + 1 < len(tokens):
                args["last_n"] = _value(tokens[i + 1])
                i += 2
            else:
                i += 1
        return LightCall("mempalace_diary_read", {**args, **_without(fields, ("target", "action"))})
    if first == "TUNNELS":
        args = {}
        if second == "BETWEEN" and len(tokens) >= 5 and tokens[3].upper() == "AND":
            args = {"wing_a": str(tokens[2]), "wing_b": str(tokens[4])}
        elif second == "IN" and len(tokens) >= 3:
            args = {"wing_a": str(tokens[2])}
        elif second:
            args = {"wing_a": str(tokens[1])}
        return LightCall("mempalace_find_tunnels", args)
    return LightCall("mempalace_search", {**_search(tokens), **_without(fields, ("target", "action"))})


def _infer_query_target(fields: Mapping[str, Any]) -> str:
    if "query" in fields or "content" in fields or "text" in fields:
        return "search"
    if "entity" in fields:
        return "kg_query"
    if "tunnels" in fields:
        return "tunnels"
    return "search"


def _kg_query(tokens: list[str]) -> dict[str, Any]:
    """``<entity words> [AS OF d] [DIRECTION dir]``."""
    entity: list[str] = []
    args: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        word = tokens[i].upper()
        if word == "AS" and i + 2 < len(tokens) and tokens[i + 1].upper() == "OF":
            args["as_of"] = str(tokens[i + 2])
            i += 3
        elif word == "AS_OF" and i + 1 < len(tokens):
            args["as_of"] = str(tokens[i + 1])
            i += 2
        elif word == "DIRECTION" and i + 1 < len(tokens):
            args["direction"] = str(tokens[i + 1]).lower()
            i += 2
        elif not args:
            entity.append(str(tokens[i]))
            i += 1
        else:
            i += 1
    if not entity:
        raise LightError("KG query requires an entity name (e.g. 'KG Max')")
    return {"entity": " ".join(entity), **args}


def _search(tokens: list[str]) -> dict[str, Any]:
    """``[FIND|SEARCH] words [IN wing/room] [LIMIT n] [SINCE d] [BEFORE d] [STRATEGY s]``."""
    if tokens and tokens[0].upper() in ("FIND", "SEARCH"):
        tokens = tokens[1:]
    words: list[str] = []
    args: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        word = "" if isinstance(tok, _Quoted) else tok.upper()
        if word in ("IN", "LIMIT", "SINCE", "BEFORE", "STRATEGY") and i + 1 < len(tokens):
            value = tokens[i + 1]
            if word == "IN":
                _place(value, args)
            elif word == "LIMIT":
                args["limit"] = _value(value)
            elif word != "STRATEGY":  # palace always ranks by meaning and words together
                args[word.lower()] = str(value)
            i += 2
        else:
            words.append(str(tok))
            i += 1
    if not words:
        raise LightError("FIND requires words to search for (e.g. 'FIND \"auth token\" IN backend/auth')")
    return {"query": " ".join(words), **args}


def _without(fields: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k not in keys}


def _why_not(verb: str) -> str:
    return f" ({_NOT_OFFERED[verb]})" if verb in _NOT_OFFERED else ""


# -- palace_exec ------------------------------------------------------------------------------------


def _read_exec(command: str | None, fields: dict[str, Any]) -> LightCall:
    if command is None:
        args = dict(fields)
        action = str(args.pop("action", None) or args.pop("target", None) or _infer_exec_action(args)).lower()
        if action in ("add", "add_drawer", "create_drawer"):
            _rename(args, "document", "content")
            _rename(args, "text", "content")
            return LightCall("mempalace_add_drawer", args)
        if action in ("kg_add", "add_fact", "add_triple"):
            _rename(args, "obj", "object")
            return LightCall("mempalace_kg_add", args)
        if action in ("kg_invalidate", "invalidate"):
            _rename(args, "valid_to", "ended")
            _rename(args, "obj", "object")
            return LightCall("mempalace_kg_invalidate", args)
        if action in ("diary_write", "diary"):
            _rename(args, "agent", "agent_name")
            _rename(args, "content", "entry")
            return LightCall("mempalace_diary_write", args)
        raise LightError(f"Unknown palace_exec action: '{action}'" + _why_not(action.upper().split("_")[0]))
    tokens = tokenize(command)
    if not tokens:
        raise LightError("Empty exec command")
    first = tokens[0].upper()
    second = tokens[1].upper() if len(tokens) > 1 else ""
    extra = _without(fields, ("target", "action"))
    if first == "KG" and second == "SUPERSEDE":
        raise LightError(f"KG SUPERSEDE: {_NOT_OFFERED['KG SUPERSEDE']}")
    if first == "KG" and second == "ADD":
        return LightCall("mempalace_kg_add", {**_triple(tokens[2:], "KG ADD"), **extra})
    if first == "KG" and second in ("INVALIDATE", "DELETE"):
        return LightCall("mempalace_kg_invalidate", {**_triple(tokens[2:], "KG INVALIDATE"), **extra})
    if first == "KG":
        raise LightError("KG requires ADD, INVALIDATE, or SUPERSEDE")
    if first == "ADD":
        return LightCall("mempalace_add_drawer", {**extra, **_add(tokens[1:])})
    if first == "DIARY":
        return LightCall("mempalace_diary_write", {**extra, **_diary_write(tokens[1:])})
    if first in _NOT_OFFERED:
        raise LightError(f"{first}: {_NOT_OFFERED[first]}")
    raise LightError(f"Unrecognized palace_exec command: '{first}'")


def _infer_exec_action(fields: Mapping[str, Any]) -> str:
    if "agent_name" in fields and ("entry" in fields or "content" in fields):
        return "diary_write"
    if "content" in fields or "document" in fields:
        return "add_drawer"
    if "subject" in fields and "predicate" in fields and ("object" in fields or "obj" in fields):
        return "kg_add"
    return "add_drawer"


def _add(tokens: list[str]) -> dict[str, Any]:
    """``[IN wing/room] "verbatim content" [SOURCE file] [ADDED_BY agent]``."""
    args: dict[str, Any] = {}
    content: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        word = "" if isinstance(tok, _Quoted) else tok.upper()
        if word in ("IN", "SOURCE", "ADDED_BY") and i + 1 < len(tokens):
            if word == "IN":
                _place(tokens[i + 1], args)
            else:
                args["source_file" if word == "SOURCE" else "added_by"] = str(tokens[i + 1])
            i += 2
        elif word and ":" in tok and not tok.startswith(("http://", "https://")):
            key, value = tok.split(":", 1)
            args[key.lower()] = _value(value)
            i += 1
        else:
            content.append(str(tok))
            i += 1
    if content and "content" not in args:
        args["content"] = " ".join(content)
    if not args.get("content"):
        raise LightError("ADD requires content to store")
    if not args.get("wing") or not args.get("room"):
        raise LightError("ADD requires wing and room (e.g. 'ADD IN backend/auth \"content\"')")
    return args


def _triple(tokens: list[str], verb: str) -> dict[str, Any]:
    """``subject -> predicate -> object [flags]`` (or three bare tokens), with KG ADD's
    ``FROM``/``VALID_FROM``/``TO``/``VALID_TO``/``DRAWER`` and KG INVALIDATE's ``ENDED``/``AT``."""
    arrows = [i for i, t in enumerate(tokens) if t == "->" and not isinstance(t, _Quoted)]
    if len(arrows) >= 2:
        subject = " ".join(tokens[:arrows[0]])
        predicate = " ".join(tokens[arrows[0] + 1:arrows[1]])
        rest = tokens[arrows[1] + 1:]
    elif len(tokens) >= 3:
        subject, predicate, rest = str(tokens[0]), str(tokens[1]), tokens[2:]
    else:
        raise LightError(f"{verb} requires 'subject -> predicate -> object' or 'subject predicate object'")
    flags = {"FROM", "TO", "VALID_FROM", "VALID_TO", "DRAWER", "CLOSET"} if verb == "KG ADD" else {"ENDED", "AT", "DATE"}
    obj: list[str] = []
    for i, tok in enumerate(rest):
        head = tok.split(":", 1)[0].upper() if not isinstance(tok, _Quoted) else ""
        if head in flags:
            pairs = _pairs(rest[i:])
            break
        obj.append(str(tok))
    else:
        pairs = {}
    args: dict[str, Any] = {"subject": subject, "predicate": predicate, "object": " ".join(obj)}
    if verb == "KG ADD":
        for key, name in (("from", "valid_from"), ("valid_from", "valid_from"), ("to", "valid_to"),
                          ("valid_to", "valid_to"), ("drawer", "source_drawer_id")):
            if key in pairs:
                args[name] = str(pairs[key])
    else:
        for key in ("ended", "at", "date"):
            if key in pairs:
                args["ended"] = str(pairs[key])
    return args


def _diary_write(tokens: list[str]) -> dict[str, Any]:
    """``[WRITE|ADD] agent text… [TOPIC t]``."""
    if tokens and not isinstance(tokens[0], _Quoted) and tokens[0].upper() in ("WRITE", "ADD"):
        tokens = tokens[1:]
    if not tokens:
        raise LightError("DIARY requires agent_name")
    agent = str(tokens[0])
    rest = tokens[1:]
    if agent.upper() == "AGENT" and rest:
        agent, rest = str(rest[0]), rest[1:]
    elif agent.lower().startswith("agent:"):
        agent = agent.split(":", 1)[1]
    args: dict[str, Any] = {"agent_name": agent.strip("'\"")}
    entry: list[str] = []
    i = 0
    while i < len(rest):
        tok = rest[i]
        word = "" if isinstance(tok, _Quoted) else tok.upper()
        if word == "TOPIC" and i + 1 < len(rest):
            args["topic"] = str(rest[i + 1])
            i += 2
        elif word and tok.lower().startswith("topic:"):
            args["topic"] = tok.split(":", 1)[1]
            i += 1
        else:
            entry.append(str(tok))
            i += 1
    args["entry"] = " ".join(entry)
    if not args["entry"]:
        raise LightError("DIARY WRITE requires the entry's text")
    return args


# -- the entry point --------------------------------------------------------------------------------

_READERS: Final = {"palace_query": _read_query, "palace_exec": _read_exec, "palace_coordinate": _read_coordinate}


def read_light_call(tool: str, arguments: Mapping[str, Any]) -> LightCall:
    """The full tool a call to light ``tool`` runs, with its arguments.

    Raises:
        LightError: the call cannot be read (MemPalace's words where it has them), or names
            something palace does not offer (and what to use instead).
    """
    command, fields = _command_of(arguments)
    try:
        return _READERS[tool](command, fields)
    except (ValueError, TypeError, RecursionError) as exc:
        if isinstance(exc, LightError):
            raise
        raise LightError(f"cannot read the command: {exc}") from None
