"""palacectl's ``bench`` group: measure palace on this machine with temporary daemons.

Owns: the ``bench`` command (one daemon: appends, wake, list, RSS) and its ``memory``,
``replication``, ``mesh`` (a fleet in a full mesh, or a palace of N daemons in namespaces),
``leases`` (lease costs, honest and hostile),
``usage`` (what a ``usage`` call costs with many reports), ``mcp`` (how soon the MCP server answers),
``integrate`` (an integrator landing patches with a trivial check)
and ``ui`` (the dashboard on a big palace) sub-commands, each a front for a module of ``palace_bench``
(benchmarks/palace_bench: a package of its own, imported only when the command runs, so no other command pays for
it; nothing outside their temporary homes is touched). Registered on the root app by ``cli.root``; imports
``cli.common`` only.
"""

from __future__ import annotations

import subprocess
from typing import Annotated, Optional

import typer

from ..output import emit, fail
from .common import JsonOpt, UsageProblem

__all__ = ["bench_app"]

bench_app = typer.Typer(help="Measure palace on this machine (temporary daemons; nothing else touched).",
                        invoke_without_command=True)


@bench_app.callback()
def bench(
    ctx: typer.Context,
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs (for a smoke test, not for figures).")] = False,
    json_: JsonOpt = False,
) -> None:
    """Measure a temporary daemon: append throughput, wake latency, list latency, RSS.

    `palacectl bench replication` measures a fleet of local daemons instead."""
    if ctx.invoked_subcommand is not None:
        return
    from palace_bench.one_daemon import run_bench

    result = run_bench(quick=quick, progress=not json_)
    emit(result, json_)


@bench_app.command("memory")
def bench_memory(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs (for a smoke test, not for figures).")] = False,
    drawers: Annotated[Optional[int], typer.Option("--drawers", help="How many drawers to file (default 10,000).")] = None,
    peer: Annotated[bool, typer.Option("--peer/--no-peer", help="Also time a fresh peer indexing them all.")] = True,
    json_: JsonOpt = False,
) -> None:
    """Measure the shared memory: retrieval evaluation, embedding, search latency, a fresh peer."""
    from palace_bench.memory import run_memory_bench

    if drawers is not None and drawers < 1:
        raise UsageProblem("--drawers must be a positive number")
    result = run_memory_bench(quick=quick, progress=not json_, drawers=drawers, peer=peer)
    emit(result, json_)


@bench_app.command("replication")
def bench_replication(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs (for a smoke test, not for figures).")] = False,
    json_: JsonOpt = False,
) -> None:
    """Measure replication between local daemons: cross-peer wake, 100k catch-up, throughput, heal."""
    from palace_bench.replication import run_replication_bench

    result = run_replication_bench(quick=quick, progress=not json_)
    emit(result, json_)


@bench_app.command("mesh")
def bench_mesh(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs (for a smoke test, not for figures).")] = False,
    daemons: Annotated[Optional[int], typer.Option(
        "--daemons", min=3, max=200,
        help="Measure one palace of this many daemons (links, spread, idle traffic, partition, leave and "
             "rejoin) instead of the standard runs.")] = None,
    topology: Annotated[str, typer.Option(
        "--topology", help="With --daemons: 'invite' (joined through one invite; the partial views choose the "
                           "links) or 'pairwise' (every pair linked with peers add: a full mesh).")] = "invite",
    namespaces: Annotated[bool, typer.Option(
        "--namespaces/--no-namespaces",
        help="With --daemons: each daemon in a network namespace of its own, on its own subnet (needs root; "
             "without it, loopback).")] = True,
    json_: JsonOpt = False,
) -> None:
    """Measure a fleet: healing from 10,000 events behind each way and what links carry; or, with
    --daemons N, a palace of N daemons, each a machine of its own."""
    if daemons is None:
        from palace_bench.mesh import run_mesh_bench

        emit(run_mesh_bench(quick=quick, progress=not json_), json_)
        return
    if topology not in ("invite", "pairwise"):
        raise UsageProblem(f"--topology must be 'invite' or 'pairwise', not {topology!r}")
    from palace_bench.mesh_scale import run_scale_bench

    try:
        result = run_scale_bench(daemons=daemons, topology=topology, namespaces=namespaces, progress=not json_,
                                 events=10 if quick else 100, idle_s=5.0 if quick else 60.0,
                                 partition_s=10.0 if quick else 60.0, leave=2 if quick else 10,
                                 settle_s=10.0 if quick else 30.0)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        # A daemon that would not start, a palace that did not converge, a namespace not made:
        # the run says which (its daemons' last log lines are on stderr) and stops.
        fail(f"bench mesh --daemons {daemons} stopped: {exc}".splitlines()[0])
    emit(result, json_)


@bench_app.command("leases")
def bench_leases(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs (for a smoke test, not for figures).")] = False,
    json_: JsonOpt = False,
) -> None:
    """Measure what leases cost a daemon: lease check with 1,000 active leases, and the worst leases allowed."""
    from palace_bench.leases import run_leases_bench

    result = run_leases_bench(quick=quick, progress=not json_)
    emit(result, json_)


@bench_app.command("usage")
def bench_usage(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs (for a smoke test, not for figures).")] = False,
    reports: Annotated[Optional[int], typer.Option("--reports", help="Usage reports to write (default 100,000).")] = None,
    calls: Annotated[Optional[int], typer.Option("--calls", help="Calls timed each way (default 40).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Measure what `usage` costs a daemon holding many usage reports: a worker's, a run's and the Usage page's calls."""
    from palace_bench.usage import run_usage_bench

    if reports is not None and reports < 1:
        raise UsageProblem("--reports must be a positive number")
    if calls is not None and calls < 1:
        raise UsageProblem("--calls must be a positive number")
    result = run_usage_bench(quick=quick, progress=not json_, reports=reports, calls=calls)
    emit(result, json_)


@bench_app.command("mcp")
def bench_mcp(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs (for a smoke test, not for figures).")] = False,
    json_: JsonOpt = False,
) -> None:
    """Measure how soon `palacectl mcp` answers a harness: initialize and tools/list, cold and warm."""
    from palace_bench.mcp import run_mcp_bench

    result = run_mcp_bench(quick=quick, progress=not json_)
    emit(result, json_)


@bench_app.command("cli")
def bench_cli(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs (for a smoke test, not for figures).")] = False,
    json_: JsonOpt = False,
) -> None:
    """Measure one step of an agent's loop through palacectl: list, append, ack, wait, inbox, task ready/claim."""
    from palace_bench.cli import run_cli_bench

    result = run_cli_bench(quick=quick, progress=not json_)
    emit(result, json_)


@bench_app.command("ui")
def bench_ui(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs (for a smoke test, not for figures).")] = False,
    events: Annotated[Optional[int], typer.Option(
        "--events", help="Fill the log to this many events (default 1,000,000).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Measure the dashboard on a big palace: each page's data over HTTP, and the live stream."""
    from palace_bench.ui import run_ui_bench

    if events is not None and events < 1000:
        raise UsageProblem("--events must be at least 1000")
    result = run_ui_bench(quick=quick, progress=not json_, events=events)
    emit(result, json_)


@bench_app.command("integrate")
def bench_integrate(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs (for a smoke test, not for figures).")] = False,
    patches: Annotated[Optional[int], typer.Option(
        "--patches", min=1, max=10_000, help="Patches delivered at once for the throughput (default 200).")] = None,
    samples: Annotated[Optional[int], typer.Option(
        "--samples", min=1, max=10_000, help="Patches delivered one at a time for the latency (default 50).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Measure an integrator with a trivial check: patches landed per minute, patch → branch latency."""
    from palace_bench.integrate import run_integrate_bench

    try:
        result = run_integrate_bench(quick=quick, patches=patches, samples=samples, progress=not json_)
    except RuntimeError as exc:
        fail(f"bench integrate: {exc}")
    emit(result, json_)


# Command groups in their own modules (memory, backup/restore, export/import, service); importing them registers
# their commands on `app`.
