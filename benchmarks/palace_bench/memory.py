"""``palacectl bench memory``: retrieval quality and speed of the shared memory.

Owns: the memory figures the README reports (issue 5). Against temporary daemons (mDNS off,
loopback only), through the real API, with the real offline model:

* **retrieval evaluation** — the project's own drawers and questions (``data/memory_eval.json``:
  questions that share no words with their answer, questions that hinge on an identifier, and
  mixed ones); recall@5 and MRR@5 for keyword-only, vector-only and hybrid search;
* embedding throughput (drawers/s, in the daemon's background worker);
* durable appends/s from one client while the worker embeds, against the same daemon idle;
* search latency p50/p99 with N drawers, the query's embedding apart from the index search;
* a fresh peer joining a palace that holds N drawers: until it has received and indexed them all;
* the daemon's RSS with the model loaded, and how many times it loaded the model (must be 1).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any, Final

from .daemon import BenchDaemon, BenchPalace
from .figures import judge, narrator, percentile
from .replication import POLL_S, Say

__all__ = ["run_memory_bench"]

TARGETS: Final = {
    "search_index_p50_ms": ("<=", 20.0),
    "model_loads": ("<=", 1),
}
WORDS: Final = ("replica log peer event drawer decision deploy release test suite network port watcher agent "
                "memory fact diary wing room search vector keyword index model embed sqlite wal fsync commit "
                "backup restore invite revoke observer fork catch up latency cluster budget printer garden").split()


def _load_eval() -> dict[str, Any]:
    return json.loads((resources.files("palace_bench") / "data" / "memory_eval.json").read_text(encoding="utf-8"))


def _wait_indexed(daemon: BenchDaemon, count: int, timeout_s: float = 3600) -> float:
    started = time.perf_counter()
    deadline = time.monotonic() + timeout_s
    while True:
        embedding = daemon.call("status")["memory"]["embedding"] or {}
        # Settled, too: not rebuilding or saving the index (searches meanwhile measure the rebuild).
        if embedding.get("indexed", 0) >= count and not embedding.get("pending") and not embedding.get("maintenance"):
            return time.perf_counter() - started
        if embedding.get("error"):
            raise RuntimeError(f"the embedding worker failed: {embedding['error']}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {embedding.get('indexed')} of {count} drawers indexed after {timeout_s:.0f} s")
        time.sleep(POLL_S * 5)


def _evaluate(daemon: BenchDaemon, data: dict[str, Any]) -> dict[str, Any]:
    ids = {}
    for name, text in data["drawers"].items():
        ids[name] = daemon.call("memory_add", wing="wing_eval", room="notes", content=text, added_by="bench")["drawer_id"]
    _wait_indexed(daemon, len(ids))
    out: dict[str, Any] = {}
    for mode in ("keyword", "vector", "hybrid"):
        ranks = []
        for query in data["queries"]:
            hits = daemon.call("search", query=query["q"], limit=5, mode=mode, wing="wing_eval")["results"]
            found = [h["drawer_id"] for h in hits]
            ranks.append(found.index(ids[query["answer"]]) + 1 if ids[query["answer"]] in found else None)
        out[f"eval_{mode}_recall_at_5"] = round(sum(r is not None for r in ranks) / len(ranks), 3)
        out[f"eval_{mode}_recall_at_1"] = round(sum(r == 1 for r in ranks) / len(ranks), 3)
        out[f"eval_{mode}_mrr_at_5"] = round(sum(1 / r for r in ranks if r) / len(ranks), 3)
        for kind in ("meaning", "exact", "mixed"):
            picked = [r for r, q in zip(ranks, data["queries"], strict=True) if q["kind"] == kind]
            out[f"eval_{mode}_recall_at_5_{kind}"] = round(sum(r is not None for r in picked) / len(picked), 3)
    out["eval_queries"] = len(data["queries"])
    out["eval_drawers"] = len(data["drawers"])
    return out


def _sentence(rng: random.Random, i: int) -> str:
    return f"Note {i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 24))) + "."


def _file_drawers(daemon: BenchDaemon, count: int, start: int) -> float:
    rng = random.Random(start)
    started = time.perf_counter()
    from palacectl.client import Client

    with Client(daemon.home, client_name="palacectl-bench") as client:
        sent = answered = 0
        while answered < count:
            while sent < count and sent - answered < 16:
                client.send("memory_add", wing=f"wing_{(start + sent) % 7}", room=f"room_{(start + sent) % 11}",
                            content=_sentence(rng, start + sent), added_by="bench")
                sent += 1
            reply = client.receive()
            if not reply.get("ok"):
                raise RuntimeError(f"memory_add failed: {reply.get('error')}")
            answered += 1
    return time.perf_counter() - started


def _appends_per_s(daemon: BenchDaemon, count: int) -> float:
    from palacectl.client import Client

    with Client(daemon.home, client_name="palacectl-bench") as client:
        started = time.perf_counter()
        for i in range(count):
            client.call("append", type="note", stream="bench", room="r", from_agent="bench", body=f"append {i}")
        return count / (time.perf_counter() - started)


def _search_latency(daemon: BenchDaemon, samples: int) -> dict[str, float]:
    rng = random.Random(7)
    embed, index, total = [], [], []
    for _ in range(samples):
        query = " ".join(rng.choice(WORDS) for _ in range(4))
        started = time.perf_counter()
        result = daemon.call("search", query=query, limit=5)
        total.append((time.perf_counter() - started) * 1000)
        embed.append(result["timings_ms"]["embed_ms"])
        index.append(result["timings_ms"]["index_ms"])
    return {"search_total_p50_ms": percentile(total, 50), "search_total_p99_ms": percentile(total, 99),
            "search_embed_p50_ms": percentile(embed, 50), "search_index_p50_ms": percentile(index, 50),
            "search_index_p99_ms": percentile(index, 99)}


def run_memory_bench(*, quick: bool = False, progress: bool = True, drawers: int | None = None,
                     peer: bool = True) -> dict[str, Any]:
    say: Say = narrator(progress)
    drawers = drawers or (300 if quick else 10_000)
    results: dict[str, Any] = {"quick": quick, "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    # A short directory: the Unix socket paths must stay under ~107 bytes.
    palace = BenchPalace(Path(tempfile.mkdtemp(prefix="palmem", dir="/tmp")), "bench-memory")
    show_logs = False
    try:
        palace.found()
        a = palace.a
        say(f"palace bench memory: temporary daemons on loopback under {palace.root}")
        results.update(_evaluate(a, _load_eval()))
        for mode in ("keyword", "vector", "hybrid"):
            say(f"  retrieval eval ({results['eval_queries']} questions, {results['eval_drawers']} drawers), {mode:7s}: "
                f"recall@1 {results[f'eval_{mode}_recall_at_1']:.3f}, recall@5 {results[f'eval_{mode}_recall_at_5']:.3f}, "
                f"MRR@5 {results[f'eval_{mode}_mrr_at_5']:.3f} "
                f"(meaning {results[f'eval_{mode}_recall_at_5_meaning']:.2f}, exact "
                f"{results[f'eval_{mode}_recall_at_5_exact']:.2f}, mixed {results[f'eval_{mode}_recall_at_5_mixed']:.2f})")
        idle = _appends_per_s(a, 300 if quick else 1000)
        filing_s = _file_drawers(a, drawers, 0)
        busy = _appends_per_s(a, 300 if quick else 1000)  # the worker is embedding the drawers meanwhile
        results["append_idle_per_s"], results["append_while_embedding_per_s"] = idle, busy
        index_s = _wait_indexed(a, drawers + results["eval_drawers"])
        results["filed_drawers"] = drawers
        results["filing_drawers_per_s"] = drawers / filing_s
        results["embedding_drawers_per_s"] = drawers / (filing_s + index_s)
        say(f"  filed {drawers:,} drawers at {results['filing_drawers_per_s']:,.0f}/s; embedded at "
            f"{results['embedding_drawers_per_s']:,.0f} drawers/s in the background")
        say(f"  durable appends/s, 1 client: {idle:,.0f} idle, {busy:,.0f} while the worker embeds")
        results.update(_search_latency(a, 50 if quick else 300))
        say(f"  search at {drawers + results['eval_drawers']:,} drawers: total p50 {results['search_total_p50_ms']:.1f} ms "
            f"/ p99 {results['search_total_p99_ms']:.1f} ms; query embedding p50 {results['search_embed_p50_ms']:.1f} ms; "
            f"index search p50 {results['search_index_p50_ms']:.2f} ms / p99 {results['search_index_p99_ms']:.2f} ms")
        status = a.call("status")["memory"]["embedding"]
        results["index_kind"] = status["index"]
        if status.get("last_index_build"):
            results["index_build_s"] = status["last_index_build"]["seconds"]
            say(f"  vector index: {status['index']}, last built over {status['last_index_build']['drawers']:,} drawers "
                f"in {status['last_index_build']['seconds']:.1f} s (in the background)")
        results["model_loads"] = status["model_loads"]
        results["rss_with_model_mb"] = a.rss_mb()
        say(f"  daemon RSS with the model loaded: {results['rss_with_model_mb']:.0f} MB (model loaded "
            f"{results['model_loads']} time(s))")
        if not peer:
            return judge(results, TARGETS, say if progress else None)
        palace.b.start()
        joined = palace.join(palace.b)
        total = drawers + results["eval_drawers"]
        deadline = time.monotonic() + 3600
        while True:
            embedding = palace.b.call("status")["memory"]["embedding"] or {}
            if embedding.get("indexed", 0) >= total and not embedding.get("pending"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the fresh peer did not index the drawers within an hour")
            time.sleep(POLL_S * 5)
        results["fresh_peer_index_s"] = time.perf_counter() - joined
        say(f"  a fresh peer received and indexed {total:,} drawers in {results['fresh_peer_index_s']:.1f} s")
    except Exception:
        show_logs = progress
        raise
    finally:
        palace.close(show_logs=show_logs)
        shutil.rmtree(palace.root, ignore_errors=True)
    return judge(results, TARGETS, say if progress else None)
