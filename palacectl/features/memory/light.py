"""The memory feature's light verbs: ``palace_query`` and ``palace_exec`` read whole.

Owns: reading a call to ``palace_query`` (``FIND words [IN wing/room] …``, ``KG entity [AS OF d]``,
``DIARY agent [LAST n]``, ``TUNNELS [BETWEEN a AND b]``, or fields with a ``target``) into
``mempalace_search``, ``mempalace_kg_query``, ``mempalace_diary_read`` or
``mempalace_find_tunnels``, and a call to ``palace_exec`` (``ADD IN wing/room "text"``, ``KG ADD
s -> p -> o``, ``KG INVALIDATE …``, ``DIARY WRITE agent text``, or fields with an ``action``) into
``mempalace_add_drawer``, ``mempalace_kg_add``, ``mempalace_kg_invalidate`` or
``mempalace_diary_write``; the MemPalace verbs palace has no tool for, each refused naming palace's
way instead; and the two tools' descriptions, fields, and the commands and actions each takes
(``palacectl.light.Tables`` reads ``READERS``, ``DESCRIPTIONS``, ``FIELDS``, ``COMMANDS`` and
``ACTIONS``). Pure: stdlib and the light core only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...light import LightCall, LightError, Quoted, pairs, rename, tokenize, typed

__all__ = ["ACTIONS", "COMMANDS", "DESCRIPTIONS", "FIELDS", "READERS"]

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


# The actions (or targets) a call of fields names, by the tool each runs.
_SEARCH: Final = ("search", "find")
_KG_QUERY: Final = ("kg", "kg_query")
_DIARY_READ: Final = ("diary", "diary_read")
_TUNNELS: Final = ("tunnels", "list_tunnels", "find_tunnels")
_ADD: Final = ("add", "add_drawer", "create_drawer")
_KG_ADD: Final = ("kg_add", "add_fact", "add_triple")
_KG_INVALIDATE: Final = ("kg_invalidate", "invalidate")
_DIARY_WRITE: Final = ("diary_write", "diary")


def _place(loc: Any, args: dict[str, Any]) -> None:
    """``wing/room`` (or a wing alone) into ``args``."""
    wing, _, room = str(loc).partition("/")
    args["wing"] = wing
    if room:
        args["room"] = room


# -- palace_query -----------------------------------------------------------------------------------


def _read_query(command: str | None, fields: dict[str, Any]) -> LightCall:
    if command is None and not fields:
        raise LightError(f"STATUS (an empty query): {_NOT_OFFERED['STATUS']}")
    args: dict[str, Any]
    if command is None:
        args = dict(fields)
        target = str(args.pop("target", None) or args.pop("action", None) or _infer_query_target(args)).lower()
        if target in _SEARCH:
            rename(args, "content", "query")
            rename(args, "text", "query")
            return LightCall("mempalace_search", args)
        if target in _KG_QUERY:
            return LightCall("mempalace_kg_query", args)
        if target in _DIARY_READ:
            rename(args, "agent", "agent_name")
            return LightCall("mempalace_diary_read", args)
        if target in _TUNNELS:
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
        args = {"agent_name": str(tokens[1])}
        i = 2
        while i < len(tokens):
            word = tokens[i].upper()
            if word in ("LAST", "LIMIT") and i + 1 < len(tokens):
                args["last_n"] = typed(tokens[i + 1])
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
        word = "" if isinstance(tok, Quoted) else tok.upper()
        if word in ("IN", "LIMIT", "SINCE", "BEFORE", "STRATEGY") and i + 1 < len(tokens):
            value = tokens[i + 1]
            if word == "IN":
                _place(value, args)
            elif word == "LIMIT":
                args["limit"] = typed(value)
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
        if action in _ADD:
            rename(args, "document", "content")
            rename(args, "text", "content")
            return LightCall("mempalace_add_drawer", args)
        if action in _KG_ADD:
            rename(args, "obj", "object")
            return LightCall("mempalace_kg_add", args)
        if action in _KG_INVALIDATE:
            rename(args, "valid_to", "ended")
            rename(args, "obj", "object")
            return LightCall("mempalace_kg_invalidate", args)
        if action in _DIARY_WRITE:
            rename(args, "agent", "agent_name")
            rename(args, "content", "entry")
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
        word = "" if isinstance(tok, Quoted) else tok.upper()
        if word in ("IN", "SOURCE", "ADDED_BY") and i + 1 < len(tokens):
            if word == "IN":
                _place(tokens[i + 1], args)
            else:
                args["source_file" if word == "SOURCE" else "added_by"] = str(tokens[i + 1])
            i += 2
        elif word and ":" in tok and not tok.startswith(("http://", "https://")):
            key, value = tok.split(":", 1)
            args[key.lower()] = typed(value)
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
    arrows = [i for i, t in enumerate(tokens) if t == "->" and not isinstance(t, Quoted)]
    if len(arrows) >= 2:
        subject = " ".join(tokens[:arrows[0]])
        predicate = " ".join(tokens[arrows[0] + 1:arrows[1]])
        rest = tokens[arrows[1] + 1:]
    elif len(tokens) >= 3:
        subject, predicate, rest = str(tokens[0]), str(tokens[1]), tokens[2:]
    else:
        raise LightError(f"{verb} requires 'subject -> predicate -> object' or 'subject predicate object'")
    flags = ({"FROM", "TO", "VALID_FROM", "VALID_TO", "DRAWER", "CLOSET"} if verb == "KG ADD"
             else {"ENDED", "AT", "DATE"})
    obj: list[str] = []
    for i, tok in enumerate(rest):
        head = tok.split(":", 1)[0].upper() if not isinstance(tok, Quoted) else ""
        if head in flags:
            given = pairs(rest[i:])
            break
        obj.append(str(tok))
    else:
        given = {}
    args: dict[str, Any] = {"subject": subject, "predicate": predicate, "object": " ".join(obj)}
    if verb == "KG ADD":
        for key, name in (("from", "valid_from"), ("valid_from", "valid_from"), ("to", "valid_to"),
                          ("valid_to", "valid_to"), ("drawer", "source_drawer_id")):
            if key in given:
                args[name] = str(given[key])
    else:
        for key in ("ended", "at", "date"):
            if key in given:
                args["ended"] = str(given[key])
    return args


def _diary_write(tokens: list[str]) -> dict[str, Any]:
    """``[WRITE|ADD] agent text… [TOPIC t]``."""
    if tokens and not isinstance(tokens[0], Quoted) and tokens[0].upper() in ("WRITE", "ADD"):
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
        word = "" if isinstance(tok, Quoted) else tok.upper()
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


READERS: Final = {"palace_query": _read_query, "palace_exec": _read_exec}
#: the first words of the commands each reads (a verb both read stays with the one called: DIARY, KG)
COMMANDS: Final = {
    "palace_query": ("FIND", "SEARCH", "KG", "DIARY", "TUNNELS"),
    "palace_exec": ("ADD", "KG ADD", "KG INVALIDATE", "KG DELETE", "KG SUPERSEDE", "DIARY", "DIARY WRITE",
                    "DIARY ADD"),
}
#: the actions (or targets) of a call of fields each reads
ACTIONS: Final = {"palace_query": (*_SEARCH, *_KG_QUERY, *_DIARY_READ, *_TUNNELS),
                  "palace_exec": (*_ADD, *_KG_ADD, *_KG_INVALIDATE, *_DIARY_WRITE)}
DESCRIPTIONS: Final = {
    "palace_query": ("Read the palace: 'FIND words [IN wing/room] [LIMIT n] [SINCE d]', 'KG entity [AS OF d]', "
                     "'DIARY agent [LAST n]', 'TUNNELS [BETWEEN a AND b]'; or fields (target: "
                     "search|kg_query|diary|tunnels)."),
    "palace_exec": ("Write memory: 'ADD IN wing/room \"verbatim text\"', 'KG ADD s -> p -> o [FROM d]', "
                    "'KG INVALIDATE s -> p -> o [ENDED d]', 'DIARY WRITE agent text [TOPIC t]'; or fields (action)."),
}
FIELDS: Final = {
    "palace_query": {"target": "string", "wing": "string", "room": "string", "limit": "integer", "since": "string",
                     "before": "string", "entity": "string", "as_of": "string", "agent_name": "string",
                     "last_n": "integer"},
    "palace_exec": {"action": "string", "wing": "string", "room": "string", "content": "string",
                    "source_file": "string", "subject": "string", "predicate": "string", "object": "string",
                    "valid_from": "string", "ended": "string", "agent_name": "string", "entry": "string",
                    "topic": "string"},
}
