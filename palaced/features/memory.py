"""Operations on the shared memory: file drawers, search, the knowledge graph, diaries, agents.

Owns: the local-API handlers for memory. Every write is a ``memory.*`` event appended to the log
(so it replicates, is signed, and can be redacted); the store updates the materialised views in
the same transaction, so a write is readable the moment it returns. Reads go to the views
(``store/memory_views.py``). Search is hybrid: keyword ranking (FTS5, bm25) and nearest vectors
(``memory_vectors.py``: the vector worker, this feature's service, kept in ``MemoryState``) combined
on one score (``hybrid_score``); while drawers await embedding, or when no model can load, keyword
ranking alone answers. The memory's part of ``status`` and what its health says are here too.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from palace_proto.errors import ApiError, NotFound, ValidationError
from palace_proto.memory import (
    DiaryEntry,
    Drawer,
    FactAdd,
    FactInvalidate,
    diary_entry_id,
    diary_wing,
    hybrid_score,
    validate_date,
)
from palace_proto.validation import AppendRequest, clean_optional, clean_required

from ..clock import utc_today
from ..feature import Feature
from ..handlers.context import Context
from ..handlers.session import cut
from ..store import WriteContext, append_event
from ..store import memory_views as views
from ..store.memory_views import MemoryReads
from .memory_embedding import FastEmbedder
from .memory_vectors import MemoryIndexer

__all__ = ["FEATURE", "OPS"]

DEFAULT_SEARCH_LIMIT: Final = 5
MAX_SEARCH_LIMIT: Final = 100
DEFAULT_DIARY_LAST: Final = 10
MAX_DIARY_LAST: Final = 100
MAX_QUERY_CHARS: Final = 250
SEARCH_MODES: Final = ("hybrid", "keyword", "vector")
# Why 50: each ranking contributes its top 50 to the fusion; far more than any limit asked for.
CANDIDATES: Final = 50
# Why 0.1: unrelated sentences score about -0.05 to 0.05 with all-MiniLM-L6-v2 (deps-notes:
# cat/revenue -0.01, cat/password 0.05; a paraphrase 0.3-0.6). Without a floor, vector search would
# return the k nearest drawers however unrelated they are.
DEFAULT_MIN_SIMILARITY: Final = 0.1


def _reads(ctx: Context) -> MemoryReads:
    """The memory's reads on the daemon's store (store/memory_views.py)."""
    return ctx.store.reads(MemoryReads)


class MemoryState:
    """What the memory keeps for the daemon's life (``ctx.state(MemoryState)``): its vector worker
    (None when embedding is off: ``[memory] embed = false``) and a running rebuild's progress."""

    def __init__(self, ctx: Context) -> None:
        config = ctx.config
        #: the vector worker, run as the feature's service (``_vector_worker``)
        self.indexer: MemoryIndexer | None = None
        if config.memory_embed:
            # Derived state, off the append path: the model loads in the worker's own thread.
            self.indexer = MemoryIndexer(ctx.store, ctx.bus, FastEmbedder(config.memory_model, config.home / "models",
                                                                          threads=2),
                                         config.home, exact_max=config.memory_exact_index_max)
        #: while ``memory rebuild`` runs: {"phase", "done", "total"} (updated by the writer thread)
        self.rebuild_progress: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"<MemoryState indexer={self.indexer!r}>"


def _vector_worker(ctx: Context) -> MemoryIndexer | None:
    return ctx.state(MemoryState).indexer


def _today() -> str:
    return utc_today()


def _bounded_int(args: Mapping[str, Any], field: str, default: int, maximum: int) -> int:
    value = args.get(field, default)
    if value is None:
        return default
    if type(value) is not int or value < 1:
        raise ValidationError(f"{field} must be a positive integer", field=field)
    return min(value, maximum)


async def memory_add(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """File a drawer; the same content in the same wing and room returns the existing drawer."""
    ctx.require_writer()
    drawer = Drawer.from_wire(args, ctx.limits)
    existing = await _reads(ctx).drawer(drawer.id)
    if existing is not None:
        return {"drawer_id": drawer.id, "wing": drawer.wing, "room": drawer.room, "duplicate": True,
                "filed_at": existing["filed_at"]}
    req = AppendRequest.from_wire(drawer.event(), ctx.limits)
    event = await ctx.store.write(lambda w: append_event(w, req))
    return {"drawer_id": drawer.id, "wing": drawer.wing, "room": drawer.room, "duplicate": False,
            "filed_at": event["created_at"], "event_id": event["id"]}


async def search(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    raw = args.get("query")
    query = raw.strip() if isinstance(raw, str) else clean_required("query", raw)
    if not query:
        raise ValidationError("query must be a non-empty string", field="query")
    if len(query) > MAX_QUERY_CHARS:
        raise ValidationError(f"query must be at most {MAX_QUERY_CHARS} characters (keywords, not a document)",
                              field="query")
    limit = _bounded_int(args, "limit", DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT)
    filters = {"wing": clean_optional("wing", args.get("wing")), "room": clean_optional("room", args.get("room")),
               "since": validate_date("since", args.get("since")),
               "before": validate_date("before", args.get("before"))}
    started = time.perf_counter()
    mode = args.get("mode") or "hybrid"
    if mode not in SEARCH_MODES:
        raise ValidationError(f"mode must be one of {', '.join(SEARCH_MODES)}", field="mode")
    indexer = ctx.state(MemoryState).indexer
    if mode != "keyword" and (indexer is None or not indexer.available):
        if mode == "vector":
            raise ApiError("vector search is not available on this daemon (see `palacectl status`)",
                           code="invalid_argument")
        mode = "keyword"
    depth = max(CANDIDATES, limit * 4)
    keyword = [] if mode == "vector" else await _reads(ctx).keyword_search(query, limit=depth,
                                                                       **filters)
    if mode == "keyword":
        hits = keyword[:limit]
        return {"query": query, "results": hits, "count": len(hits), "mode": mode}
    assert indexer is not None
    timings: dict[str, float] = {}
    nearest = await indexer.search(query, depth * 2 if any(filters.values()) else depth, timings)
    drawers = await _reads(ctx).drawers_by_id([d for d, _ in nearest])
    cosine = dict(nearest)
    floor = args.get("min_similarity", DEFAULT_MIN_SIMILARITY)
    if not isinstance(floor, (int, float)) or isinstance(floor, bool) or not -1 <= floor <= 1:
        raise ValidationError("min_similarity must be a number from -1 to 1", field="min_similarity")
    vector = [d for d, _ in nearest if d in drawers and views.passes(drawers[d], **filters)][:depth]
    if mode == "vector":
        ranked = [(d, cosine[d]) for d in vector if cosine[d] >= floor]
    else:
        # Both signals on one scale (palace_proto.memory.hybrid_score); a drawer found by only one
        # ranking counts the other as zero. Every keyword match stays a candidate (a drawer not
        # embedded yet is found that way); vector-only candidates must clear the floor.
        bm25 = {h["drawer_id"]: h["score"] for h in keyword}
        candidates = dict.fromkeys([*bm25, *(d for d in vector if cosine[d] >= floor)])
        ranked = sorted(((d, hybrid_score(cosine.get(d), bm25.get(d))) for d in candidates), key=lambda p: -p[1])
    by_id = {h["drawer_id"]: h for h in keyword} | {d: drawers[d] for d in vector}
    # A drawer the worker has not embedded yet is found by its words alone: its score says
    # nothing of its meaning (0.000 for a common word), so the hit says it is pending.
    pending = indexer.not_embedded(d for d, _ in ranked[:limit] if d not in cosine)
    hits = []
    for drawer_id, score in ranked[:limit]:
        hit = dict(by_id[drawer_id])
        hit["score"] = round(score, 6)
        hit["similarity"] = round(cosine[drawer_id], 4) if drawer_id in cosine else None
        hit["embedded"] = drawer_id not in pending
        hits.append(hit)
    timings["total_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return {"query": query, "results": hits, "count": len(hits), "mode": mode,
            "pending_embeddings": indexer.pending, "timings_ms": timings}


async def drawer_get(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    drawer_id = clean_required("drawer_id", args.get("drawer_id"))
    drawer = await _reads(ctx).drawer(drawer_id)
    if drawer is None:
        raise NotFound(f"drawer {drawer_id!r} not found")
    return drawer


# -- knowledge graph -------------------------------------------------------------------------------


async def kg_add(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    fact = FactAdd.from_wire(args)
    req = AppendRequest.from_wire(fact.event(), ctx.limits)
    event = await ctx.store.write(lambda w: append_event(w, req))
    return {"triple_id": fact.id, "fact": fact.text, "event_id": event["id"]}


async def kg_invalidate(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    change = FactInvalidate.from_wire(args, _today())
    req = AppendRequest.from_wire(change.event(), ctx.limits)

    def job(w: WriteContext) -> dict[str, Any]:
        event = append_event(w, req)
        return {"event": event, "ended": views.facts_ended_by(w, event["id"])}

    result = await ctx.store.write(job)
    return {"fact": change.text, "ended": change.ended, "facts_ended": result["ended"],
            "event_id": result["event"]["id"]}


async def kg_query(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    entity = clean_required("entity", args.get("entity"))
    as_of = validate_date("as_of", args.get("as_of")) or _today()
    direction = args.get("direction") or "both"
    if direction not in ("outgoing", "incoming", "both"):
        raise ValidationError("direction must be 'outgoing', 'incoming' or 'both'", field="direction")
    result = await _reads(ctx).facts_about(entity, as_of, direction)
    if not result["count"]:
        result["candidates"] = await _reads(ctx).known_entities(entity)
    return result


# -- diaries, agents, tunnels ----------------------------------------------------------------------


async def diary_write(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    entry = DiaryEntry.from_wire(args, ctx.limits)
    req = AppendRequest.from_wire(entry.event(clean_optional("added_by", args.get("added_by")) or entry.agent),
                                  ctx.limits)
    event = await ctx.store.write(lambda w: append_event(w, req))
    return {"entry_id": diary_entry_id(event["id"]), "agent": entry.agent, "wing": entry.wing,
            "topic": entry.topic, "timestamp": event["created_at"], "event_id": event["id"]}


async def diary_read(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    agent = clean_required("agent_name", args.get("agent_name")).lower()
    wing = clean_optional("wing", args.get("wing")) or diary_wing(agent)
    last_n = _bounded_int(args, "last_n", DEFAULT_DIARY_LAST, MAX_DIARY_LAST)
    page = await _reads(ctx).diary_page(wing, last_n)
    return {"agent": agent, **page}


async def tunnels(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    wing_a = clean_optional("wing_a", args.get("wing_a"))
    wing_b = clean_optional("wing_b", args.get("wing_b"))
    found = await _reads(ctx).tunnels(wing_a, wing_b)
    return {"wing_a": wing_a, "wing_b": wing_b, "tunnels": found, "count": len(found)}


async def memory_rebuild(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Derive the views again from the log; with ``vectors``, also throw the vector index away
    (the worker re-embeds every drawer in the background). Progress shows in ``status``."""
    vectors = args.get("vectors", False)
    if not isinstance(vectors, bool):
        raise ValidationError("vectors must be true or false", field="vectors")
    started = time.monotonic()
    progress = {"phase": "views", "done": 0, "total": 0}

    def report(done: int, total: int) -> None:  # in the writer thread: plain assignments only
        progress["done"], progress["total"] = done, total

    state = ctx.state(MemoryState)
    state.rebuild_progress = progress
    try:
        counts = await ctx.store.write(lambda w: views.rebuild_views(w, report), heavy=True)
    finally:
        state.rebuild_progress = None
    reembedding = None
    if vectors and state.indexer is not None:
        reembedding = await state.indexer.reset()
    return {**counts, "seconds": round(time.monotonic() - started, 3), "vectors_reset": reembedding is not None,
            "embedding": reembedding}


OPS: Final = {
    "memory_add": memory_add,
    "search": search,
    "drawer_get": drawer_get,
    "kg_add": kg_add,
    "kg_invalidate": kg_invalidate,
    "kg_query": kg_query,
    "diary_write": diary_write,
    "diary_read": diary_read,
    "tunnels": tunnels,
    "memory_rebuild": memory_rebuild,
}


# -- the feature's declaration --------------------------------------------------------------------

# Why 3: the diary entries session start shows (the newest; the agent reads more with diary read).
DIARY_SHOWN: Final = 3


async def session_part(ctx: Context, agent: str) -> dict[str, Any]:
    """Session start's newest diary entries of the agent."""
    diary = await _reads(ctx).diary_page(diary_wing(agent.lower()), DIARY_SHOWN)
    entries = [{"date": e["date"], "topic": e["topic"], "content": cut(e["content"])} for e in diary["entries"]]
    return {"diary": {"items": entries, "total": diary["total"]}}


async def status_part(ctx: Context) -> dict[str, Any]:
    """``status``'s ``memory``: the drawers and facts held, the vector worker, a rebuild going on."""
    counts = await ctx.store.counts()
    state = ctx.state(MemoryState)
    return {"memory": {"drawers": counts["drawers"], "facts": counts["facts"],
                       "embedding": state.indexer.status() if state.indexer else None,
                       "rebuild": dict(state.rebuild_progress) if state.rebuild_progress else None}}


def health(status: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """What the memory's part of ``status`` needs attention for (problems), or is worth knowing (notes)."""
    problems: list[str] = []
    notes: list[str] = []
    embedding = status.get("memory", {}).get("embedding")
    if embedding and embedding.get("error"):
        problems.append(f"memory search fell back to keywords: {embedding['error']}")
    elif embedding and embedding.get("pending"):
        notes.append(f"{embedding['pending']:,} drawer(s) await embedding (found by keywords meanwhile)")
    if embedding and embedding.get("save_error"):
        notes.append(f"{embedding['save_error']}; retried by itself (search is unaffected)")
    return problems, notes


FEATURE: Final = Feature(name="memory", ops=OPS, session=session_part, services=(_vector_worker,),
                         redaction_related=views.related_memory_events_in, store=views.PART, status=status_part,
                         health=health)
