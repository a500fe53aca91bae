"""The benchmark figures the docs quote, rendered from saved results.

Owns: the results files, ``benchmarks/results/NAME.json`` — the ``--json`` output of one
benchmark, one or more runs, each with a label and where its figures come from (``source``: the
whole output, or the figures the docs quoted from a run whose output was not kept) — and one
renderer per table or sentence the docs hold between generated markers (``palacectl.reference``:
``<!-- generated:bench-… -->``). The figures are read in the benchmark's own keys, so a renamed
key fails here, not silently in prose.

``python benchmarks/render_tables.py`` writes every part into README.md and docs/ (``--check``:
changes nothing, exit 1 naming each stale part; ``tests/test_docs_generated.py`` runs the same
comparison). To publish new figures: run the benchmark with ``--json``, put its output in the
results file as a run of its own (keep or drop the older runs), and run that command.

Pure: reads the results files and writes nothing; runs no benchmark (the targets are each
module's ``TARGETS``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = ["REGENERATE", "RENDERERS", "RESULTS", "load"]

#: where the results files are (beside this package, in the checkout)
RESULTS: Final = Path(__file__).resolve().parent.parent / "results"
#: the command that rewrites this module's parts (named by the markers and by the staleness test)
REGENERATE: Final = "python benchmarks/render_tables.py"

Result = dict[str, Any]


def load(name: str) -> dict[str, Any]:
    """The results file ``name`` (``benchmarks/results/NAME.json``)."""
    doc: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
    return doc


# -- numbers as the docs write them -----------------------------------------------------------


def _number(value: Any, decimals: int) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value  # a figure in words ("never")
    text = f"{abs(value):,.{decimals}f}"
    return f"−{text}" if value < 0 and float(text.replace(",", "")) != 0 else text


def fixed(decimals: int) -> Callable[[Any], str]:
    """A number with ``decimals`` decimals and thousands separated (a negative one with a minus)."""
    return lambda value: _number(value, decimals)


def short(value: Any) -> str:
    """Two significant digits below 10, whole numbers above (``0.27``, ``1.9``, ``76``, ``3,844``);
    a whole number as such (``5``)."""
    if isinstance(value, float):
        return _number(value, 0 if abs(value) >= 10 else 1 if abs(value) >= 1 else 2)
    return _number(value, 0)


def whole_or(decimals: int) -> Callable[[Any], str]:
    """A whole number as such (``121``), any other with ``decimals`` below 10 and one above."""
    def fmt(value: Any) -> str:
        if isinstance(value, int) and not isinstance(value, bool):
            return _number(value, 0)
        if isinstance(value, float):
            return _number(value, decimals if abs(value) < 10 else 1)
        return _number(value, 0)
    return fmt


def pair(a: str, b: str, fmt: Callable[[Any], str], unit: str = "") -> Callable[[Result], str]:
    """``p50 / p99 unit`` from two keys of a run's result."""
    def cell(result: Result) -> str:
        left, right = result.get(a), result.get(b)
        if left is None and right is None:
            return "—"
        return f"{fmt(left)} / {fmt(right)}{unit}"
    return cell


def one(key: str, fmt: Callable[[Any], str], unit: str = "") -> Callable[[Result], str]:
    def cell(result: Result) -> str:
        value = result.get(key)
        return "—" if value is None else f"{fmt(value)}{unit if not isinstance(value, str) else ''}"
    return cell


# -- targets -----------------------------------------------------------------------------------


def _meets(value: float, op: str, bound: float) -> bool:
    return value >= bound if op == ">=" else value <= bound


def _bound(op: str, bound: float) -> str:
    return f"{'≥' if op == '>=' else '≤'} {bound:,g}"


def _verdict(runs: Sequence[dict[str, Any]], key: str, op: str, bound: float) -> str:
    measured = [(run["label"], run["result"][key]) for run in runs
                if isinstance(run["result"].get(key), (int, float))]
    met = [label for label, value in measured if _meets(value, op, bound)]
    if len(met) == len(measured):
        return "met"
    if not met:
        return "not met"
    if len(met) == 1:
        return f"met in {met[0]} only"
    return f"met in {len(met)} runs of {len(measured)}"


@dataclass(frozen=True)
class Row:
    """One figure of a table: its label, its cell from one run's result, and the keys judged
    against the benchmark's targets (each with a short name, for a row of two figures)."""

    label: str
    cell: Callable[[Result], str]
    judged: tuple[tuple[str, str], ...] = ()
    unit: str = ""
    #: the target column's words when nothing is judged (or before the verdict)
    note: str = ""
    #: what the verdict is about, said instead of the bounds ("model loaded once": met)
    words: str = ""


def _target(row: Row, runs: Sequence[dict[str, Any]], targets: dict[str, tuple[str, float]]) -> str:
    judged = [(key, name) for key, name in row.judged if key in targets]
    if not judged:
        return row.note
    verdicts = [(name, _verdict(runs, key, *targets[key])) for key, name in judged]
    alike = len({v for _, v in verdicts}) == 1
    said = verdicts[0][1] if alike else ", ".join(f"{name} {verdict}" for name, verdict in verdicts)
    if row.words:
        return f"{row.words}: {said}"
    bounds = " / ".join(_bound(*targets[key]) for key, _ in judged) + row.unit
    return f"{row.note}{bounds} — {said}"


def markdown(head: Sequence[str], rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset()) -> str:
    """A Markdown table as the docs write them (no padding; ``right``: columns aligned right)."""
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join("---:" if k in right else "---" for k in range(len(head))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def runs_table(name: str, rows: Sequence[Row], targets: dict[str, tuple[str, float]] | None = None,
               *, first: str = "figure", target: str = "target", judge_last: bool = False) -> str:
    """A figure per row, a run per column (the results file's ``name``), and the target, judged
    on every run (``judge_last``: on the last, the code of today, the others being before)."""
    runs = load(name)["runs"]
    judged = runs[-1:] if judge_last else runs
    head = [first, *(run["label"] for run in runs)]
    with_target = targets is not None or any(row.note for row in rows)
    if with_target:
        head.append(target)
    body = []
    for row in rows:
        cells = [row.label, *(row.cell(run["result"]) for run in runs)]
        if with_target:
            cells.append(_target(row, judged, targets or {}))
        body.append(cells)
    return markdown(head, body)


# -- the tables ----------------------------------------------------------------------------------


def bench_one_daemon() -> str:
    from .one_daemon import TARGETS

    ms2, rate = fixed(2), fixed(0)
    return runs_table("bench", [
        Row("durable appends/s, 1 client, sequential", one("append_1_client_per_s", rate),
            (("append_1_client_per_s", ""),)),
        Row("durable appends/s, 16 concurrent clients (group commit)", one("append_16_clients_per_s", rate),
            (("append_16_clients_per_s", ""),)),
        Row("append → watcher wake p50 / p99, from sending the append (fsync included)",
            pair("wake_p50_ms", "wake_p99_ms", ms2, unit=" ms"), (("wake_p50_ms", "p50"), ("wake_p99_ms", "p99")),
            " ms"),
        Row("watcher woken relative to the writer's ack, p50", one("wake_minus_ack_p50_ms", ms2, " ms"),
            note="(the watcher hears first)"),
        Row("`list --to-agent X --limit 50` on 1,000,000 events, p50 / p99 (API round trip)",
            pair("list_p50_ms", "list_p99_ms", ms2, unit=" ms"), (("list_p50_ms", "p50"),), " ms", "p50 "),
        Row("`palacectl list --to-agent X --limit 50 --json` as a whole process, p50",
            one("cli_list_process_ms", rate, " ms"), (("cli_list_process_ms", ""),), " ms"),
        Row("daemon RSS with 100 connected watchers (fresh / after the 1 M fill)",
            pair("rss_100_watchers_mb", "rss_after_fill_100_watchers_mb", rate, unit=" MB"),
            (("rss_100_watchers_mb", ""),), " MB"),
    ], TARGETS)


#: ``bench cli``'s commands as the table names them
_CLI_LABELS: Final = {
    "python -c pass (the floor)": "`python -c pass` (the floor)", "list": "`list --limit 1 --json`",
    "append": "`append …`", "ack": "`ack ID --status claimed`", "wait": "`wait` (a match already there)",
    "inbox": "`inbox --agent ID`", "task ready": "`task ready`", "task claim": "`task claim`",
    "status (full command line)": "`status` (through typer, for comparison)",
}


def bench_cli() -> str:
    from .cli import TARGET_MS

    runs = load("cli")["runs"]
    ms1 = fixed(1)
    rows = []
    for command in runs[0]["result"]["commands"]:
        loop = not command.startswith(("python", "status"))
        cells = [f"{ms1(f['p50_ms'])} / {ms1(f['p90_ms'])}" if (f := run["result"]["commands"].get(command)) else "—"
                 for run in runs]
        rows.append([_CLI_LABELS.get(command, f"`{command}`"), *cells, f"≤ {TARGET_MS} p50" if loop else ""])
    return markdown(["command", *(run["label"] for run in runs), "target"], rows)


def _loop_p50s() -> list[float]:
    return [f["p50_ms"] for run in load("cli")["runs"] for command, f in run["result"]["commands"].items()
            if not command.startswith(("python", "status"))]


def bench_cli_loop() -> str:
    """How long one loop command takes as a process, at the median: ``49–56 ms``."""
    p50s = _loop_p50s()
    return f"{min(p50s):.0f}–{max(p50s):.0f} ms"


def bench_cli_full() -> str:
    """How long a command through the full command line takes (``status``), at the median."""
    p50s = [run["result"]["commands"]["status (full command line)"]["p50_ms"] for run in load("cli")["runs"]]
    return _span(p50s, 0, " ms")


def _span(values: Sequence[float], decimals: int, unit: str) -> str:
    low, high = f"{min(values):,.{decimals}f}", f"{max(values):,.{decimals}f}"
    return f"{low}{unit}" if low == high else f"{low}–{high}{unit}"


def bench_mcp() -> str:
    from .mcp import COLD_TARGET_MS, WARM_TARGET_MS

    targets = {"warm_ready_p50_ms": ("<=", float(WARM_TARGET_MS)), "first_ready_ms": ("<=", float(COLD_TARGET_MS))}
    ms1 = fixed(1)
    return runs_table("mcp", [
        Row("tools listed after the process starts, warm, p50 / p90",
            pair("warm_ready_p50_ms", "warm_ready_p90_ms", ms1, unit=" ms"), (("warm_ready_p50_ms", "p50"),), " ms",
            "p50 "),
        Row("`initialize` answered, warm, p50", one("warm_initialize_p50_ms", ms1, " ms")),
        Row("tools listed, the first start of the run", one("first_ready_ms", ms1, " ms"), (("first_ready_ms", ""),),
            " ms"),
    ], targets)


def bench_mcp_summary() -> str:
    """The MCP start-up in a sentence (the README's)."""
    runs = [run["result"] for run in load("mcp")["runs"]]
    warm = runs[0]["runs"] - 1
    return (f"tools listed {_span([r['warm_ready_p50_ms'] for r in runs], 0, ' ms')} after the process starts "
            f"(p50 of {warm} warm starts, {len(runs)} runs; p90 {_span([r['warm_ready_p90_ms'] for r in runs], 0, ' ms')}; "
            f"first start {_span([r['first_ready_ms'] for r in runs], 0, ' ms')})")


def bench_replication() -> str:
    from .replication import TARGETS

    ms2, s2 = fixed(2), fixed(2)
    return runs_table("replication", [
        Row("cross-peer wake: append on A → watcher on B, p50 / p99 (A's fsync included)",
            pair("wake_p50_ms", "wake_p99_ms", ms2, unit=" ms"), (("wake_p50_ms", "p50"), ("wake_p99_ms", "p99")),
            " ms"),
        Row("cold catch-up: a fresh daemon joins a palace holding 100,000 events, until identical digests",
            one("catch_up_s", s2, " s"), (("catch_up_s", ""),), " s"),
        Row("heal: a peer restarted 5,000 events behind, from process start to identical digests",
            one("heal_s", s2, " s"), (("heal_s", ""),), " s"),
        Row("sustained: 16 clients appending on A for 10 s, replicated to B end to end",
            one("throughput_replicated_per_s", fixed(0), " /s"), note="(B keeps up)"),
    ], TARGETS)


def bench_mesh() -> str:
    def lacked(result: Result) -> str:
        two, five = result.get("heal_2_daemons_sent_per_lacked"), result.get("heal_5_daemons_sent_per_lacked")
        return "—" if two is None and five is None else f"{fixed(2)(two)} / {fixed(2)(five)}"

    return runs_table("mesh", [
        Row("heal, 2 daemons each 10,000 events behind the other", one("heal_2_daemons_s", fixed(2), " s")),
        Row("heal, 5 daemons each 10,000 events behind the others", one("heal_5_daemons_s", fixed(1), " s")),
        Row("events the links carried per event a daemon lacked (2 / 5 daemons)", lacked),
        Row("links each event crossed, 10-daemon mesh (9 needed)", one("mesh_10_sends_per_event", fixed(1))),
        Row("links each event crossed, 20-daemon mesh (19 needed)", one("mesh_20_sends_per_event", fixed(1))),
        Row("idle traffic of the whole mesh, 10 daemons", one("mesh_10_idle_mb_per_min", short, " MB/min")),
        Row("idle traffic of the whole mesh, 20 daemons", one("mesh_20_idle_mb_per_min", short, " MB/min")),
    ])


def bench_mesh_scale() -> str:
    runs = load("mesh-scale")["runs"]

    def at(*keys: str) -> Callable[[Callable[..., str]], Callable[[Result], str]]:
        """A cell from this run's ``scale_N_KEY`` figures, in order."""
        def cell(fmt: Callable[..., str]) -> Callable[[Result], str]:
            return lambda result: fmt(*(result[f"scale_{result['daemons']}_{key}"] for key in keys))
        return cell

    rows: list[tuple[str, Callable[[Result], str], str]] = [
        ("links per daemon once settled: max / mean (kept by the views: max)",
         at("links_max", "links_mean", "active_max")(lambda most, mean, kept: f"{most} / {mean:.1f} ({kept})"), "≤ 8"),
        ("the last daemon held the last event, after it was written",
         at("to_last_daemon_s")(lambda s: f"{s:.2f} s"), "(reported)"),
        ("copies received per daemon and event", at("copies_per_daemon")(lambda n: f"{n:.2f}"), "≤ 1.5"),
        ("on the wire per event per daemon", at("bytes_per_event_per_daemon")(lambda b: f"{b / 1000:.2f} KB"),
         "< 2 KB"),
        ("`append --replicated N-1`: confirmed, in",
         at("replicated_all_count", "replicated_all_s")(lambda n, s: f"{n} in {s:.2f} s"), "(kept)"),
        ("idle traffic per daemon", at("idle_kb_per_min_per_daemon")(lambda kb: f"{kb:.1f} KB/min"),
         "≤ 52 KB/min (the full mesh of 10 before)"),
        ("partition of two halves for 60 s, writers on both: identical digests after the heal",
         at("partition_heal_s")(lambda s: f"{s:.1f} s"), "converges"),
        ("10 daemons (8 of 10) leave and rejoin: identical digests after they started",
         at("rejoin_s")(lambda s: f"{s:.1f} s"), "nothing lost"),
    ]
    return markdown(["figure", *(run["label"] for run in runs), f"target at {runs[-1]['result']['daemons']}"],
                    [[label, *(cell(run["result"]) for run in runs), target] for label, cell, target in rows])


def bench_memory_eval() -> str:
    (run,) = load("memory-eval")["runs"]
    result = run["result"]
    names = {"keyword": "keyword only (FTS5 bm25)",
             "vector": "vector only (all-MiniLM-L6-v2 int8, exact inner product)", "hybrid": "**hybrid**"}
    rows = []
    for mode, label in names.items():
        main = [f"{result[f'eval_{mode}_{k}']:.3f}" for k in ("recall_at_1", "recall_at_5", "mrr_at_5")]
        if mode == "hybrid":
            main = [f"**{cell}**" for cell in main]
        kinds = " / ".join(f"{result[f'eval_{mode}_recall_at_5_{k}']:.2f}" for k in ("meaning", "exact", "mixed"))
        rows.append([label, *main, kinds])
    return markdown(["ranking", "recall@1", "recall@5", "MRR@5", "recall@5 meaning / exact / mixed"], rows)


def _memory_rows(drawers: str, peer: bool) -> list[Row]:
    ms1, index = fixed(1), whole_or(2)
    rows = [
        Row("index search p50 / p99 (query embedding apart)",
            pair("search_index_p50_ms", "search_index_p99_ms", index, unit=" ms"),
            (("search_index_p50_ms", ""),), " ms", "p50 "),
        Row("query embedding p50", one("search_embed_p50_ms", ms1, " ms")),
        Row("whole `search` request p50 / p99",
            pair("search_total_p50_ms", "search_total_p99_ms", whole_or(1), unit=" ms")),
        Row("embedding throughput, in the background worker" if peer else
            "embedding throughput while the drawers were being filed",
            one("embedding_drawers_per_s", fixed(0), " drawers/s")),
        Row("durable appends/s, 1 client: idle / while the worker embeds",
            pair("append_idle_per_s", "append_while_embedding_per_s", fixed(0)), note="unaffected" if peer else ""),
    ]
    if peer:
        rows.append(Row(f"a fresh peer receives and indexes {drawers} drawers", one("fresh_peer_index_s", ms1, " s")))
    rows.append(Row("daemon RSS with the model loaded", one("rss_with_model_mb", fixed(0), " MB"),
                    (("model_loads", ""),), words="model loaded once"))
    return rows


def bench_memory() -> str:
    from .memory import TARGETS

    return runs_table("memory", _memory_rows("10,043", True), TARGETS, first="figure (10,000 drawers, two runs)")


def bench_memory_100k() -> str:
    from .memory import TARGETS

    return runs_table("memory-100k", _memory_rows("100,043", False), TARGETS, first="figure (100,000 drawers)",
                      judge_last=True)


#: the dashboard's routes as the table names them (``bench ui``'s keys)
_UI_ROUTES: Final = {
    "now": "Now (`/api/now`: status, the roster with each agent's last event, the newest 500 tasks and the older "
           "unfinished ones, leases, who, messages to people)",
    "timeline": "Timeline, newest 50",
    "timeline_deep_page": "Timeline, 50 from the middle of the log (through the `before` cursor)",
    "timeline_filtered": "Timeline, filtered (to an agent, one type)",
    "timeline_text": "Timeline, text search",
    "event_with_proof": "An event with its signature checked by the dashboard",
    "tasks": "Task board (the newest 500 tasks and the older unfinished ones)",
    "task": "A task with its thread and dependency graph",
    "fleet": "Fleet",
    "leases": "Leases",
}


def bench_ui() -> str:
    (run,) = load("ui")["runs"]
    result = run["result"]
    rows = [[label, f"{result[f'{key}_p50_ms']:.1f} ms", f"{result[f'{key}_p99_ms']:.1f} ms"]
            for key, label in _UI_ROUTES.items()]
    rows.append(["append → its frame on `/logstream/stream`", f"{result['live_frame_p50_ms']:.2f} ms",
                 f"{result['live_frame_p99_ms']:.2f} ms"])
    return markdown(["route (what the page asks for)", "p50", "p99"], rows)


#: ``bench usage``'s ways of asking, as the table names them
_USAGE_WAYS: Final = {
    "worker_by_agent_with_budgets": "a worker, before each look at the queue (by agent, its daily and the palace's "
                                    "monthly budget)",
    "launch_by_task_with_task_budget": "a run, before it starts (by task, a task budget: every task's total judged)",
    "page_by_task_all": "the Usage page, by task, ever",
    "page_by_agent_today": "the Usage page, by agent, since today",
    "by_day": "by day, ever",
}


def bench_usage() -> str:
    runs = load("usage")["runs"]
    rows = []
    for way, label in _USAGE_WAYS.items():
        figures = [run["result"]["usage"][way] for run in runs]
        rows.append([label, f"{figures[-1]['groups']:,}",
                     *(f"{short(f['p50_ms'])} / {short(f['p99_ms'])} ms" for f in figures)])
    return markdown(["`usage` asked as", "groups", *(f"{run['label']}, p50 / p99" for run in runs)], rows)


def bench_integrate() -> str:
    from .integrate import TARGETS

    return runs_table("integrate", [
        Row("patches landed per minute, 200 delivered at once", one("patches_per_minute", fixed(0)),
            (("patches_per_minute", ""),)),
        Row("`patch_submit` → the branch moved, one at a time, p50 / p99",
            pair("patch_to_branch_p50_s", "patch_to_branch_p99_s", fixed(2), unit=" s"),
            (("patch_to_branch_p50_s", ""),), " s", "p50 "),
    ], TARGETS)


def _js_value(value: float, unit: str) -> str:
    return f"{value:,.0f}" if unit == "appends/s" else f"{value:.2f}"


def _js_cell(figures: Sequence[dict[str, Any]], key: str) -> str:
    """One column of a figure over a group's runs: ``1,372 / 1,412``, ``0.71 / 0.69 ms``, ``0.86× / 0.85×``."""
    if any(f.get(key) is None for f in figures):
        return "—"
    values: list[float] = [f[key] for f in figures]
    unit = figures[0]["unit"]
    if key in ("advantage", "of_floor"):
        return " / ".join(f"{v:.2f}×" for v in values)
    return " / ".join(_js_value(v, unit) for v in values) + (" ms" if unit == "ms" else "")


def _js_verdict(met: Sequence[bool]) -> str:
    if all(met):
        return "met"
    if not any(met):
        return "not met"
    return "met in one run" if sum(met) == 1 else f"met in {sum(met)} runs of {len(met)}"


def vs_jetstream(name: str) -> str:
    """A comparison with NATS JetStream (``benchmarks/vs_jetstream.py --json``): per figure, palace,
    JetStream, palace's advantage and, where the floor ran, the floor and palace / floor, each cell
    the runs of a group side by side; the target judged on the last group's runs."""
    runs = load(name)["runs"]
    groups: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault(run.get("group", ""), []).append(run["result"]["figures"])
    columns: list[tuple[str, str, str]] = []  # (group, key, header)
    for group, figure_runs in groups.items():
        prefix = f"{group}: " if group else ""
        columns += [(group, "palace", f"{prefix}palace"), (group, "jetstream", "JetStream"),
                    (group, "advantage", "advantage")]
        if any("floor" in f for figures in figure_runs for f in figures.values()):
            columns += [(group, "floor", "the floor"), (group, "of_floor", "palace / floor")]
    last = list(groups.values())[-1]
    rows = []
    for key, first in runs[-1]["result"]["figures"].items():
        cells = [_js_cell([figures[key] for figures in groups[group]], column) for group, column, _ in columns]
        met = [figures[key]["advantage"] >= figures[key]["target"] for figures in last]
        rows.append([first["label"], *cells, f"≥ {first['target']:g}× — {_js_verdict(met)}"])
    return markdown(["figure", *(header for _, _, header in columns), "target"], rows,
                    frozenset(range(1, len(columns) + 1)))


#: every part this module writes, by its marker's name
RENDERERS: Final[dict[str, Callable[[], str]]] = {
    "bench-one-daemon": bench_one_daemon, "bench-cli": bench_cli, "bench-cli-loop": bench_cli_loop,
    "bench-cli-full": bench_cli_full, "bench-mcp": bench_mcp, "bench-mcp-summary": bench_mcp_summary,
    "bench-replication": bench_replication, "bench-mesh": bench_mesh, "bench-mesh-scale": bench_mesh_scale,
    "bench-memory-eval": bench_memory_eval, "bench-memory": bench_memory, "bench-memory-100k": bench_memory_100k,
    "bench-ui": bench_ui, "bench-usage": bench_usage, "bench-integrate": bench_integrate,
    **{f"bench-{name}": functools.partial(vs_jetstream, name) for name in (
        "vs-jetstream-first", "vs-jetstream-floor", "vs-jetstream-second", "vs-jetstream-third")},
}
